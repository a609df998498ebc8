"""A near-zero-work HTTP-to-stdio relay: the floor of any HTTP gateway in front of a stdio server.

    python -m bench.httprelay COMMAND [ARG ...]

Starts COMMAND and serves its stdio over streamable HTTP on a free loopback port (the URL
is printed first on stdout), with the same HTTP stack as the other contenders (uvicorn
under ``anyio.run``, on ``prefixgate serve``'s event loop, ``TCP_NODELAY`` on): each
POSTed JSON-RPC message is written to the child as one line unchanged, and the child's
answer line with the same ``id`` is the response body (``application/json``); a
notification gets 202, anything but POST 405. Its only work is reading each message's
``id`` (requests and answers): no checks, no sessions, no events. The HTTP benchmark runs
it in front of the demo server beside prefixgate for 2026-07-28 clients, whose requests
stand alone: relay/direct is what an HTTP process hop with an ordinary SDK stdio server
behind it costs on this machine, which no such gateway avoids; prefixgate/relay is
prefixgate's own share.

A bench tool, not a gateway: one client, whose request ids are unique while in flight.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import anyio

from gateway.commands.eventloop import backend_options
from gateway.lines import LineSplitter, Overlong
from gateway.upstream.coalesce import send_whole

_JSON = [(b"content-type", b"application/json")]


class _Lines(asyncio.Protocol):
    """The child's stdout: each answer line settles the request waiting for its id."""

    def __init__(self, waiting: dict[str, asyncio.Future[bytes]]) -> None:
        self.waiting = waiting
        self.lines = LineSplitter()  # the gateway's own splitter: linear however a line is cut

    def data_received(self, data: bytes) -> None:
        for line in self.lines.feed(data):
            if isinstance(line, Overlong):  # (no limit is set: never)
                continue
            try:
                key = json.dumps(json.loads(line).get("id"))
            except (ValueError, AttributeError):
                continue
            future = self.waiting.pop(key, None)
            if future is not None and not future.done():
                future.set_result(bytes(line))


class Relay:
    """The ASGI app: POST a message, get the child's answer to it."""

    def __init__(self, to_child: Any) -> None:
        self.to_child = to_child
        self.waiting: dict[str, asyncio.Future[bytes]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await send_whole(send, 405, [], b"")
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            request_id = json.loads(body).get("id")
        except (ValueError, AttributeError):
            await send_whole(send, 400, [], b"")
            return
        if request_id is None:
            self.to_child.write(body + b"\n")
            await send_whole(send, 202, [], b"")
            return
        key = json.dumps(request_id)
        if key in self.waiting:
            await send_whole(send, 409, [], b"")
            return
        future = self.waiting[key] = asyncio.get_running_loop().create_future()
        self.to_child.write(body + b"\n")
        try:
            line = await future
        finally:
            self.waiting.pop(key, None)
        await send_whole(send, 200, _JSON, line)


async def serve(argv: list[str]) -> None:
    import uvicorn

    from gateway.upstream.listen import listening_socket

    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    loop = asyncio.get_running_loop()
    to_child, _ = await loop.connect_write_pipe(asyncio.Protocol, child.stdin)
    app = Relay(to_child)
    await loop.connect_read_pipe(lambda: _Lines(app.waiting), child.stdout)
    sock = listening_socket("127.0.0.1", 0)
    sys.stdout.write(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp\n")
    sys.stdout.flush()
    try:
        await uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).serve(sockets=[sock])
    finally:
        child.terminate()
        child.wait(timeout=5)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.httprelay COMMAND [ARG ...]", file=sys.stderr)
        return 2
    anyio.run(serve, argv, backend_options=backend_options())  # serve's loop (uvloop where installed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
