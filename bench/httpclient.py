"""What one ``tools/call`` over streamable HTTP costs the *client*: the gateway's side of an
HTTP downstream.

    python -m bench.httpclient [--calls 1000] [--rounds 5]

With an HTTP downstream, the gateway is that server's client, and the full run shows the
gateway spending far more CPU per call than with a stdio downstream. This measures where
the client's cost lies, in one process against one demo server (``demo-server --transport
http``, a handshake-era session), the clients side by side, interleaved round by round:

- ``sdk``: the mcp SDK's ``ClientSession`` over ``streamable_http_client``;
- ``gateway-sdk`` and ``gateway``: the gateway's own connection (``Link`` over its HTTP
  transport), a call made through the SDK's session (``PREFIXGATE_FAST_PATH=0``) and posted
  beside it (gateway/downstream/httpcalls.py, the default);
- ``httpx``: the same HTTP client library the SDK uses (``httpx2``, the SDK's defaults), one
  ``post`` a call, the body read whole: the library's own cost without the SDK's layers;
- ``raw``: one keep-alive HTTP/1.1 connection on asyncio streams, the request written in
  one piece, the chunked answer read back: the floor for a Python client.

Reported per client: median wall time per call and CPU per call (this process's user +
system time, ``time.process_time``, over each round's calls: every client runs here, one
at a time), and both as ratios to ``raw`` per round. Not part of ``bench.run``: a
measurement that tells which client the gateway should use toward HTTP downstreams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit

from bench.common import PYTHON, demo_args, http_client, ratio_summary, rotated, url_process

VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
Call = Callable[[int], Awaitable[bytes]]


def _initialize_body() -> bytes:
    params = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    return json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode()


def _call_body(ident: int) -> bytes:
    params = {"name": "echo", "arguments": {"text": "hi"}}
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}).encode()


async def sdk_client(url: str, stack: AsyncExitStack) -> Call:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(http_client())
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()

    async def call(_: int) -> bytes:
        result = await session.call_tool("echo", {"text": "hi"})
        return str(result.content[0].text).encode()  # type: ignore[union-attr]

    return call


async def httpx_client(url: str, stack: AsyncExitStack) -> Call:
    http = await stack.enter_async_context(http_client())
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    opened = await http.post(url, headers=headers, content=_initialize_body())
    headers |= {"mcp-protocol-version": VERSION, "mcp-session-id": opened.headers["mcp-session-id"]}
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(ident: int) -> bytes:
        answer: bytes = (await http.post(url, headers=headers, content=_call_body(ident))).content
        return answer

    return call


class RawConnection:
    """One HTTP/1.1 keep-alive connection: a request written whole, a chunked or sized answer
    read back; reopened when the server has closed it while idle (uvicorn does after 5 s)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path, self.netloc = parts.hostname or "", parts.port or 80, parts.path, parts.netloc
        self.extra = ""

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        self.writer.close()

    async def post(self, body: bytes) -> tuple[dict[str, str], bytes]:
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.netloc}\r\nAccept: {ACCEPT}\r\n"
            f"Content-Type: application/json\r\n{self.extra}Content-Length: {len(body)}\r\n\r\n"
        )
        request = head.encode() + body
        try:
            self.writer.write(request)
            status = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):  # the server closed an idle connection
            self.close()
            await self.open()
            self.writer.write(request)
            status = await self.reader.readuntil(b"\r\n\r\n")
        lines = status.decode("latin-1").split("\r\n")[1:]
        headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines if line)}
        if "content-length" in headers:
            return headers, await self.reader.readexactly(int(headers["content-length"]))
        data = bytearray()
        while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
            data += (await self.reader.readexactly(size + 2))[:-2]
        await self.reader.readexactly(2)
        return headers, bytes(data)


async def raw_client(url: str, stack: AsyncExitStack) -> Call:
    conn = RawConnection(url)
    await conn.open()
    stack.callback(conn.close)
    opened, _ = await conn.post(_initialize_body())
    conn.extra = f"mcp-protocol-version: {VERSION}\r\nmcp-session-id: {opened['mcp-session-id']}\r\n"
    await conn.post(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    async def call(ident: int) -> bytes:
        return (await conn.post(_call_body(ident)))[1]

    return call


def gateway_client(raw_calls: bool) -> Callable[[str, AsyncExitStack], Awaitable[Call]]:
    """The gateway's own connection to an HTTP server (``Link`` over its streamable-HTTP
    transport), a call as ``Downstream.request`` makes it: posted beside the SDK's session
    (gateway/downstream/httpcalls.py), or, ``raw_calls`` off, through it."""

    async def make(url: str, stack: AsyncExitStack) -> Call:
        import logging

        from gateway.config import ServerConfig
        from gateway.downstream.inbox import Inbox
        from gateway.downstream.link import Link
        from gateway.downstream.transports import transport_for

        async def no_auth() -> None:
            return None

        async def nobody(method: str, params: dict[str, Any], caller: object | None) -> dict[str, Any]:
            raise RuntimeError(f"the benchmark's server asked for {method}")

        async def no_delivery(method: str, params: dict[str, Any], caller: object | None) -> None:
            return None

        config = ServerConfig(id="d", transport="http", url=url)
        transport = transport_for(config, on_stderr=lambda line: None, auth=no_auth)
        log = logging.getLogger("bench")
        link = Link("d", transport, Inbox("d", no_delivery), nobody, log, raw_calls=raw_calls)
        await link.open(stack, "legacy", http=True)
        params = {"name": "echo", "arguments": {"text": "hi"}}

        async def call(_: int) -> bytes:
            result = await link.request("tools/call", params, timeout=60)
            return json.dumps(result).encode()

        return call

    return make


CLIENTS = {
    "sdk": sdk_client,
    "gateway-sdk": gateway_client(False),
    "gateway": gateway_client(True),
    "httpx": httpx_client,
    "raw": raw_client,
}


def _median_ratio(tops: list[float], bottoms: list[float]) -> float | None:
    """The median of the per-round ratios (``ratio_summary``: a round too short to have used
    any time is left out; None when none is left)."""
    median = ratio_summary(tops, bottoms).get("median")
    return median if isinstance(median, float) else None


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


async def measure(url: str, calls: int, rounds: int) -> dict[str, Any]:
    walls: dict[str, list[float]] = {name: [] for name in CLIENTS}
    cpu: dict[str, list[float]] = {name: [] for name in CLIENTS}
    async with AsyncExitStack() as stack:
        clients = {name: await make(url, stack) for name, make in CLIENTS.items()}
        ident = 1
        for call in clients.values():  # warm-up: lazy imports, validators, the first connection
            for _ in range(50):
                ident += 1
                await call(ident)
        for r in range(rounds):
            for name in rotated(list(CLIENTS), r):
                call, times = clients[name], []
                before = time.process_time()
                for _ in range(calls):
                    ident += 1
                    started = time.perf_counter()
                    answer = await call(ident)
                    times.append(time.perf_counter() - started)
                    if b"hi" not in answer:
                        raise RuntimeError(f"{name}: unexpected answer {answer!r}"[:300])
                cpu[name].append((time.process_time() - before) / calls)
                walls[name].append(statistics.median(times))
    return {
        name: {
            "wall_per_call_s": statistics.median(walls[name]),
            "cpu_per_call_s": statistics.median(cpu[name]),
            "wall_ratio_to_raw": _median_ratio(walls[name], walls["raw"]),
            "cpu_ratio_to_raw": _median_ratio(cpu[name], cpu["raw"]),
        }
        for name in CLIENTS
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.httpclient", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=1000, help="calls a client makes each round (default 1000)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each client once a round (default 5)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    with url_process([PYTHON, *demo_args("--tools", 3, "--name", "d", "--transport", "http")]) as (url, _):
        results = asyncio.run(measure(url, args.calls, args.rounds))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("| client | wall per call | CPU per call | wall / raw | CPU / raw |\n| --- | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        print(
            f"| {name} | {r['wall_per_call_s'] * 1e3:.2f} ms | {r['cpu_per_call_s'] * 1e6:.0f} µs "
            f"| {_times(r['wall_ratio_to_raw'])} | {_times(r['cpu_ratio_to_raw'])} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
