"""Plain-HTTP requests on pooled keep-alive connections, answered as ``httpx2.Response`` objects.

httpx (httpcore and h11 beneath it) costs about 1.6 ms of CPU a request here, against about
0.3 ms for a request written whole on a kept-alive asyncio connection and its answer read
back (``python -m bench.httpclient``). Toward a server at an ``http://`` URL with no auth
and no proxy, the gateway's calls (``httpcalls.py``) are posted this way. The answer comes
back as an ``httpx2.Response`` over this connection's body, so whatever reads it (the
status and content-type checks, the event-stream parser) is the same code as for httpx's;
anything unusual goes back to httpx (a redirect, a header value httpx would refuse).

A connection goes back to the pool once its answer has been read to the end; one closed
before that is read on for a moment, as ``reuse.py`` does for httpx's (a server ends a
call's event stream right after the answer), else closed. That moment is spent in a task
of the pool's own, after the call's answer went on (about 70 µs a call toward an SDK
server answering in an event stream, on the call's path when it was awaited there).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

import anyio
import httpx2

CONNECT_SECONDS = 30.0
"""As the HTTP client's connect timeout (transports.py)."""
DRAIN_SECONDS = 0.05
DRAIN_BYTES = 64 << 10
MAX_HEAD = 64 << 10
"""Bytes of a response's status line and headers at most."""
MAX_CONNECTIONS = 100
"""Connections open at once per server, as httpx's default limit; a call past it waits."""
MAX_IDLE = 20
"""Idle connections kept per server (httpx's default)."""
IDLE_SECONDS = 4.0
"""An idle connection is not used again after this long: a server closes one after its
keep-alive timeout (uvicorn's and Node's: 5 s; httpx keeps one as long), and a request sent
as it does fails (a call lost to a race the server's timer wins)."""
_CHUNK = 64 << 10
_FORBIDDEN = frozenset("\r\n\0")


class Unsendable(ValueError):
    """A header httpx would refuse or encode differently: the request goes through httpx."""


class _Connection:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        """The event loop's time when it was last given back (``Pool._done``)."""

    @property
    def usable(self) -> bool:
        """Still open both ways (a server closes an idle connection after its keep-alive timeout)."""
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Keep-alive connections to one ``http://`` endpoint; ``post`` sends one request on one."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parsed = httpx2.URL(url)
        self.url = parsed
        self._host = parsed.host
        self._port = parsed.port or 80
        self._target = parsed.raw_path.decode("ascii")
        self._host_header = parsed.netloc.decode("ascii")
        self._headers = {k.lower(): v for k, v in headers.items()}
        """The connection's own headers (the config's ``headers``), under each request's."""
        self._idle: list[_Connection] = []
        self._closed = False
        self._draining: set[asyncio.Task[None]] = set()
        """Bodies read on after their answer (``_Body.aclose``): cancelled when the pool closes."""
        self._slots = anyio.Semaphore(MAX_CONNECTIONS)
        """One per request from its ``post`` to its body's ``aclose``."""

    async def post(self, body: bytes, headers: Mapping[str, str]) -> httpx2.Response:
        """The response to one POST, its body still to be read (``aclose`` it)."""
        head = self._head(body, headers)
        await self._slots.acquire()
        conn: _Connection | None = None
        try:
            conn = await self._connection()
            conn.writer.write(head + body)
            await conn.writer.drain()
            status, response_headers, keep_alive = await _read_head(conn.reader)
            stream = _Body(self, conn, _framing(status, response_headers), keep_alive)
        except BaseException:
            self._done(conn, keep=False)
            raise
        request = httpx2.Request("POST", self.url)
        return httpx2.Response(status, headers=response_headers, stream=stream, request=request)

    def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        for task in self._draining:
            task.cancel()  # its connection is closed as it ends

    def _drain_later(self, body: _Body, conn: _Connection) -> None:
        task = asyncio.get_running_loop().create_task(body.drain(conn))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    def _head(self, body: bytes, headers: Mapping[str, str]) -> bytes:
        merged = dict(self._headers)
        merged.update((k.lower(), v) for k, v in headers.items())
        merged["content-length"] = str(len(body))
        lines = [f"POST {self._target} HTTP/1.1", f"host: {self._host_header}"]
        for name, value in merged.items():
            if name == "host" or _FORBIDDEN.intersection(name + value) or value != value.strip():
                raise Unsendable(name)
            lines.append(f"{name}: {value}")
        try:
            return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
        except UnicodeEncodeError:
            raise Unsendable("a header that is not ASCII") from None

    async def _connection(self) -> _Connection:
        fresh = asyncio.get_running_loop().time() - IDLE_SECONDS
        while self._idle:  # (the latest given back first: one past its time, and all under it, closed)
            conn = self._idle.pop()
            if conn.usable and conn.idle_since > fresh:
                return conn
            conn.close()
        with anyio.fail_after(CONNECT_SECONDS):
            reader, writer = await asyncio.open_connection(self._host, self._port, limit=MAX_HEAD)
        return _Connection(reader, writer)

    def _done(self, conn: _Connection | None, *, keep: bool) -> None:
        """A request's connection back: kept for the next while it may be, else closed."""
        self._slots.release()
        if conn is None:
            return
        if keep and not self._closed and len(self._idle) < MAX_IDLE and conn.usable:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.append(conn)
        else:
            conn.close()


class _Body(httpx2.AsyncByteStream):
    """A response body read off its connection: sized, chunked, or to the connection's end."""

    def __init__(self, pool: Pool, conn: _Connection, size: int | None, keep_alive: bool) -> None:
        self.pool = pool
        self.conn: _Connection | None = conn
        self.size = size
        """Content-Length; -1: chunked; None: until the server closes the connection."""
        self.keep_alive = keep_alive and size is not None
        self._chunks: AsyncIterator[bytes] | None = None
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.conn is None:
            raise httpx2.StreamClosed()
        self._chunks = self._read(self.conn.reader)
        async for chunk in self._chunks:
            yield chunk

    async def _read(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        try:
            if self.size is None:
                while chunk := await reader.read(_CHUNK):
                    yield chunk
            elif self.size >= 0:
                async for chunk in _sized(reader, self.size):
                    yield chunk
            else:
                while size := _chunk_size(await reader.readuntil(b"\r\n")):
                    async for chunk in _sized(reader, size):
                        yield chunk
                    if await reader.readexactly(2) != b"\r\n":
                        raise httpx2.RemoteProtocolError("a chunk did not end with CRLF")
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            raise httpx2.ReadError(f"reading the response: {exc!r}") from None
        self._ended = True

    async def aclose(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        # Read on behind the answer, unless the call is being cancelled: then closing the
        # stream is how the server hears of it (at 2026-07-28, the only way), at once.
        if not self._ended and self.keep_alive and not self.pool._closed and not _cancelling():  # noqa: SLF001
            self.pool._drain_later(self, conn)  # noqa: SLF001 - the pool's own body
            return
        self.pool._done(conn, keep=self._ended and self.keep_alive)  # noqa: SLF001

    async def drain(self, conn: _Connection) -> None:
        """Read the rest of the body for a moment: its connection is kept if it ends in time."""
        try:
            read = 0
            with anyio.move_on_after(DRAIN_SECONDS), contextlib.suppress(httpx2.HTTPError, OSError):
                chunks = self._chunks if self._chunks is not None else self._read(conn.reader)
                async for chunk in chunks:
                    read += len(chunk)
                    if read > DRAIN_BYTES:
                        break
        finally:
            self.pool._done(conn, keep=self._ended)  # noqa: SLF001 - the pool's own body


def _cancelling() -> bool:
    """Whether the current task is unwinding a cancellation (anyio's scopes and plain tasks alike)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, list[tuple[str, str]], bool]:
    """The status and headers of the next final (not 1xx) response, and whether its
    connection stays open after it (HTTP/1.1 without ``Connection: close``)."""
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.") from exc
        except asyncio.LimitOverrunError as exc:
            raise httpx2.RemoteProtocolError("the response's head is too long") from exc
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit():
            raise httpx2.RemoteProtocolError(f"not an HTTP/1.x response: {status_line[:80]!r}")
        status = int(code)
        headers = [(name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in lines if line)]
        if not 100 <= status < 200:
            connection = (_value(headers, "connection") or "").lower()
            return status, headers, version == "HTTP/1.1" and "close" not in connection


def _value(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _framing(status: int, headers: list[tuple[str, str]]) -> int | None:
    """Content-Length, -1 for a chunked body, None for one that ends with the connection."""
    if status in (204, 304):
        return 0
    encoding = _value(headers, "transfer-encoding")
    if encoding is not None and encoding.lower().endswith("chunked"):
        return -1
    length = _value(headers, "content-length")
    if length is not None:
        if not length.isdigit():
            raise httpx2.RemoteProtocolError(f"bad Content-Length {length[:40]!r}")
        return int(length)
    return None


async def _sized(reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
    """``size`` bytes, as they arrive."""
    while size:
        chunk = await reader.read(min(size, _CHUNK))
        if not chunk:
            raise httpx2.RemoteProtocolError("the server closed the connection mid-body")
        size -= len(chunk)
        yield chunk


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    try:
        return int(text, 16)
    except ValueError:
        raise httpx2.RemoteProtocolError(f"bad chunk size {line[:40]!r}") from None
