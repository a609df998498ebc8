"""Issue 25: an HTTP response's head leaves ``serve --http`` in one segment with its body.

uvicorn writes the head and the body separately; with ``TCP_NODELAY`` each write is its own
segment, and the client wakes once for a head it cannot use. ``gateway/upstream/coalesce.py``
holds the head for the write after it. Counted here from Linux's ``TCP_INFO``
(``tcpi_data_segs_out`` of the gateway's side of a real connection, ``tcpi_data_segs_in``
of a raw client's): the SDK ``Client`` in 2026-07-28 mode, and a raw client in both eras (the
SDK's handshake-era client leaves each call's event stream before its end, so its
connection closes and cannot be counted; tests/test_http_calls.py runs that client through
this protocol). The time it saves is the bench's to measure. The transport wrapper's rules
are checked on their own too.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.upstream.coalesce import _Coalescing
from tests.helpers import GATEWAY, demo, sdk_client, text, url_process, write_config
from tests.test_nodelay import _their_socket

_DATA_SEGS_IN, _DATA_SEGS_OUT = 152, 156
"""Offsets of ``tcpi_data_segs_in`` / ``tcpi_data_segs_out`` in Linux's ``struct tcp_info``."""
CALLS = 12


def _segments(sock: socket.socket, offset: int) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    assert len(info) >= offset + 4, "this kernel's TCP_INFO has no data segment counts"
    return int(struct.unpack_from("I", info, offset)[0])


def _accepted(pid: int, port: int) -> list[socket.socket]:
    """Every connection ``pid`` accepted on ``port`` (its side of it)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":  # established, to our port
            inodes.add(f"socket:[{fields[9]}]")
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                found.append(_their_socket(pid, int(fd)))
        except OSError:
            continue  # closed meanwhile
    return found


@contextmanager
def _gateway(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``serve --http`` in front of a demo server: its URL and its process."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    with (tmp_path / "stderr.log").open("w") as errlog, url_process(command, stderr=errlog) as served:
        yield served


@pytest.mark.real_processes  # reads the gateway's own sockets in /proc
def test_the_sdk_client_gets_each_2026_07_28_answer_in_one_segment(tmp_path: Path) -> None:
    """``CALLS`` sequential ``tools/call``s of the real SDK ``Client`` (mode auto) on its kept-alive
    connection: each JSON answer is one data segment from the gateway (uvicorn alone: two)."""
    with _gateway(tmp_path) as (url, proc):
        port = _port(url)

        async def calls() -> int:
            async with sdk_client(url, "auto") as client:
                assert text(await client.call_tool("d__echo", {"text": "warm"})) == "warm"
                before = _sent(proc.pid, port)
                for n in range(CALLS):
                    assert text(await client.call_tool("d__echo", {"text": f"call {n}"})) == f"call {n}"
                return _sent(proc.pid, port) - before

        assert anyio.run(calls) == CALLS


def _port(url: str) -> int:
    return int(url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def _sent(pid: int, port: int) -> int:
    """Data segments the gateway has sent on all its connections on ``port`` so far."""
    sockets = _accepted(pid, port)
    try:
        return sum(_segments(s, _DATA_SEGS_OUT) for s in sockets)
    finally:
        for s in sockets:
            s.close()


class _Raw:
    """One kept-alive connection to ``/mcp`` and ``/healthz``, requests written by hand."""

    def __init__(self, url: str) -> None:
        self.host = url.split("//", 1)[1].split("/", 1)[0]
        self.sock = socket.create_connection(("127.0.0.1", _port(url)), timeout=30)
        self.session: str | None = None

    def exchange(self, request: bytes) -> tuple[bytes, bytes, int]:
        """Send one request; its whole answer (head, body) and the data segments it came in."""
        before = _segments(self.sock, _DATA_SEGS_IN)
        self.sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        lengths = [int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:")]
        if lengths:
            while len(body) < lengths[0]:
                body += self._recv()
        else:  # chunked: up to the last chunk
            assert b"transfer-encoding: chunked" in lines, head
            while not body.endswith(b"0\r\n\r\n"):
                body += self._recv()
        return head, body, _segments(self.sock, _DATA_SEGS_IN) - before

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        assert chunk, "the gateway closed the connection"
        return chunk

    def post(self, message: dict[str, Any], version: str) -> tuple[bytes, bytes, int]:
        body = json.dumps(message).encode()
        headers = [
            "POST /mcp HTTP/1.1",
            f"Host: {self.host}",
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
            f"MCP-Protocol-Version: {version}",
            f"Content-Length: {len(body)}",
        ]
        if version == MODERN:
            headers += [f"Mcp-Method: {message['method']}", f"Mcp-Name: {message['params']['name']}"]
        if self.session is not None:
            headers.append(f"Mcp-Session-Id: {self.session}")
        head, answer, segments = self.exchange(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"mcp-session-id:"):
                self.session = line.split(b":", 1)[1].strip().decode()
        return head, answer, segments


MODERN = "2026-07-28"


def _call(request_id: int, text: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "d__echo", "arguments": {"text": text}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def test_a_raw_client_receives_each_answer_in_one_segment(tmp_path: Path) -> None:
    """A health probe and a 2026-07-28 ``tools/call`` on one kept-alive connection: each
    answer arrives as one data segment (``tcpi_data_segs_in`` of the client's socket)."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }
    with _gateway(tmp_path) as (url, _proc):
        raw = _Raw(url)
        head, body, segments = raw.exchange(f"GET /healthz HTTP/1.1\r\nHost: {raw.host}\r\n\r\n".encode())
        assert (head.split(b"\r\n")[0], body, segments) == (b"HTTP/1.1 200 OK", b"ok\n", 1), head
        for n in range(3):
            head, body, segments = raw.post(_call(n, f"one segment {n}", envelope), MODERN)
            assert head.startswith(b"HTTP/1.1 200 ") and f"one segment {n}".encode() in body, (head, body)
            assert segments == 1, (head, body)


def test_a_handshake_era_answer_is_one_segment_and_an_event_streams_head_goes_with_its_first_event(
    tmp_path: Path,
) -> None:
    """In a 2025-11-25 session: a call answered at once is one JSON body in one segment; a call
    that reports progress gets an event stream whose head goes out with its priming event:
    head and priming, two progress events, the result and the stream's end are at most five
    segments, where uvicorn's h11 protocol alone sends six (with httptools the result and
    the end share one)."""
    with _gateway(tmp_path) as (url, _proc):
        raw = _Raw(url)
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        raw.post(init, "2025-11-25")
        assert raw.session is not None
        head, _, _ = raw.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, "2025-11-25")
        assert head.startswith(b"HTTP/1.1 202 "), head
        raw.post({"jsonrpc": "2.0", "id": "l", "method": "tools/list"}, "2025-11-25")  # the SDK's, as sessions begin
        for n in range(1, 4):
            head, body, segments = raw.post(_call(n, f"json {n}"), "2025-11-25")
            assert b"content-type: application/json" in head.lower() and f"json {n}".encode() in body, (head, body)
            assert segments == 1, (head, body)
        progress = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "d__slow", "arguments": {"seconds": 0.2, "steps": 2}, "_meta": {"progressToken": "p"}},
        }
        head, body, segments = raw.post(progress, "2025-11-25")
        assert b"text/event-stream" in head.lower() and body.count(b"notifications/progress") == 2, (head, body)
        assert segments <= 5, (head, body)


class _Recording:
    """A transport that records what is written to it (the wrapper's rules, alone)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


HEAD = b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\n"


def test_the_head_waits_for_the_write_after_it_and_no_longer() -> None:
    async def main() -> None:
        inner = _Recording()
        wrapped = _Coalescing(inner, asyncio.get_running_loop(), lambda: False)  # type: ignore[arg-type]
        wrapped.write(HEAD)
        assert inner.writes == []
        wrapped.write(b"ok")
        assert inner.writes == [HEAD + b"ok"]  # one write, head first
        wrapped.write(b"more")  # not a head: straight through
        assert inner.writes[-1] == b"more"

        wrapped.write(HEAD)  # a head with nothing after it goes out on the loop's next turn
        await asyncio.sleep(0)
        assert inner.writes[-1] == HEAD
        wrapped.write(b"ok")
        assert inner.writes[-1] == b"ok"

        wrapped.write(HEAD)  # closing sends what is held first
        wrapped.close()
        assert inner.writes[-1] == HEAD and inner.closed
        assert wrapped.get_extra_info("peername") == ("127.0.0.1", 1)  # everything else is the inner transport's

        aborted = _Recording()
        wrapped = _Coalescing(aborted, asyncio.get_running_loop(), lambda: False)  # type: ignore[arg-type]
        wrapped.write(HEAD)
        wrapped.abort()  # an abort drops what is unsent, as the transport's own buffer
        await asyncio.sleep(0)
        assert aborted.writes == [] and aborted.aborted

    asyncio.run(main())
