"""A client that stops reading holds up no one but itself (gateway/engine/outbox.py).

Alice, over HTTP on a raw socket with a tiny receive buffer, calls a tool whose server then
sends thousands of log lines on her call's stream, and never reads a byte of the answer.
Her stream fills. Before, the task that hands that server's notifications to clients (one
per server, shared by every principal) waited on her stream for good: every later call of
Bob's to the server waited the inbox's settle time, and a change the server announced never
reached anyone. Now the gateway queues what it tells each client, and Alice's queue alone
waits: the server's next ``tools/list_changed`` reaches Bob, in either era, and his calls
go on.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.helpers import ERAS, http_gateway, sdk_client, text, wait_for, write_config
from tests.test_hardening_wire import rogue
from tests.test_principals import tokens_file

pytestmark = pytest.mark.anyio

FLOOD = {"n": 1000, "size": 32 << 10}
"""Log lines: 32 MB, far more than the socket buffers between Alice and the gateway hold (a few
MB), and more lines than her queue holds past that (``outbox.LIMIT``). The server sends the
list change after all of them: before, the server's task was stuck on Alice's stream by then."""


class RawClient:
    """HTTP/1.1 POSTs of JSON-RPC messages on sockets whose receive buffer is tiny."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port or 80, parts.path
        self.token = token
        self.sockets: list[socket.socket] = []

    def post(self, message: dict[str, Any], headers: dict[str, str]) -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((self.host, self.port))
        self.sockets.append(sock)
        body = json.dumps(message).encode()
        head = {
            "Host": f"{self.host}:{self.port}",
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(body)),
            **headers,
        }
        lines = [f"POST {self.path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
        sock.sendall("\r\n".join(lines).encode() + body)
        return sock

    @staticmethod
    def head(sock: socket.socket) -> dict[str, str]:
        """The response's status line and headers (what follows them is left unread)."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(1)
            assert chunk, data
            data += chunk
        status, *fields = data.decode("latin-1").split("\r\n")[:-2]
        assert " 200 " in status or " 202 " in status, status
        return {k.lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@contextmanager
def flooding(url: str, token: str, era: str, flood: dict[str, int] = FLOOD) -> Iterator[RawClient]:
    """A client of ``era`` that calls ``rogue__flood_logs`` and never reads the answer."""
    raw = RawClient(url, token)
    call: dict[str, Any] = {"name": "rogue__flood_logs", "arguments": flood}
    try:
        if era == "legacy":
            version = {"MCP-Protocol-Version": "2025-11-25"}
            info = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
            opened = raw.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": info}, {})
            session = {**version, "Mcp-Session-Id": raw.head(opened)["mcp-session-id"]}
            raw.head(raw.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session))
            raw.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, session)
        else:
            meta = {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/logLevel": "debug",  # (a 2026-07-28 call's logs are opted into)
            }
            headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": call["name"]}
            raw.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**call, "_meta": meta}}, headers)
        yield raw
    finally:
        raw.close()


@pytest.mark.parametrize("bob_era", ERAS)
@pytest.mark.parametrize("alice_era", ERAS)
async def test_a_client_that_stops_reading_holds_up_no_one_else(tmp_path: Path, alice_era: str, bob_era: str) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, log):
            bob = {"Authorization": "Bearer token-of-bob"}
            async with sdk_client(url, bob_era, headers=bob) as client:
                with flooding(url, "token-of-alice", alice_era):
                    await wait_for(lambda: "flooded: sent 1000 log notifications" in log.read_text())
                    added = text(await client.call_tool("rogue__add_tool", {}))  # (its change follows the flood)

                    async def listed() -> bool:
                        return f"rogue__{added}" in {tool.name for tool in (await client.list_tools()).tools}

                    await wait_for(listed)
                    assert text(await client.call_tool("rogue__ok", {})) == "ok"
                    assert "is not reading: its notifications are dropped" in log.read_text()


def _drained(sock: socket.socket) -> bytes:
    """What ``sock`` is sent until its connection ends (a reset counts as an end), read 16 KiB at
    a time; an answer complete on a connection kept alive ends it too."""
    sock.settimeout(60)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):  # (a chunked answer's end: the event stream's last event sent)
        try:
            chunk = sock.recv(16384)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


WRITE_TIMEOUT = {"PREFIXGATE_HTTP_WRITE_TIMEOUT": "3"}


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_that_reads_nothing_of_its_answer_is_cut(tmp_path: Path, era: str) -> None:
    """A client that stops reading its answer (its receive window full) held the task writing
    it, and its connection, for ever, waiting in uvicorn's drain (as uvicorn does serving the
    SDK directly). Past the write timeout with nothing taken, its connection is cut: the call's
    stream never ends with the answer it would have read."""
    config = write_config(tmp_path, {"rogue": rogue()})
    with tokens_file(tmp_path, "token-of-alice") as tokens:
        with http_gateway(config, "--token-file", str(tokens), env=WRITE_TIMEOUT) as (url, log):
            with flooding(url, "token-of-alice", era) as alice:
                await wait_for(lambda: "flooded: sent 1000 log notifications" in log.read_text())
                await wait_for(lambda: "a client read nothing of its answer for 3 s: connection cut" in log.read_text())
                assert b"sent 1000 log notifications" not in _drained(alice.sockets[-1])
            async with sdk_client(url, era, headers={"Authorization": "Bearer token-of-alice"}) as client:
                assert text(await client.call_tool("rogue__ok", {})) == "ok"  # (the client's next connection is served)
    assert "0 requests in flight may finish" in log.read_text()  # (at the stop: the cut call's task ended)


SHORT_WRITE_TIMEOUT = {"PREFIXGATE_HTTP_WRITE_TIMEOUT": "1"}


def _read_slowly(sock: socket.socket, until: Callable[[], bool]) -> bytes:
    """What ``sock`` is sent, read 4 KiB every 0.1 s (40 KiB/s) until ``until()`` says so (or
    its connection ends)."""
    sock.settimeout(60)
    data = b""
    while not until():
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        time.sleep(0.1)
    return data


@pytest.mark.parametrize("era", ERAS)
async def test_a_slow_client_that_reads_is_not_cut(tmp_path: Path, era: str) -> None:
    """A client reading its answer slowly, a little at a time, is never cut: the write timeout
    counts from the last byte its connection took, not from the start of the answer, and what
    the kernel holds counts (its send buffer, megabytes, frees room for the gateway's writes
    only after a third of it is read, a long wait at this pace)."""
    # (4.6 MB: more than the kernel holds of it (about 3 MB in a send buffer of tcp_wmem's 4 MB
    # at most, the client's 4 KiB aside) and the transport's 64 KiB: writing pauses, for
    # longer than the timeout of 1 s at 40 KiB/s (about 1 MB must go before it resumes))
    flood = {"n": 140, "size": 32 << 10}
    config = write_config(tmp_path, {"rogue": rogue()})
    with tokens_file(tmp_path, "token-of-alice") as tokens:
        with http_gateway(config, "--token-file", str(tokens), env=SHORT_WRITE_TIMEOUT) as (url, log):
            with flooding(url, "token-of-alice", era, flood) as alice:
                sock = alice.sockets[-1]
                flooded: list[float] = []

                def read_enough() -> bool:  # (slowly until 2 s, twice the timeout, after all was sent)
                    if not flooded and "flooded: sent 140 log notifications" in log.read_text():
                        flooded.append(time.monotonic())
                    return bool(flooded) and time.monotonic() - flooded[0] > 2

                answer = _read_slowly(sock, read_enough)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # (the rest quickly)
                answer += _drained(sock)
            assert b"sent 140 log notifications" in answer
            assert "connection cut" not in log.read_text()
