"""uvicorn's HTTP/1.1 protocol with each response's head sent in the same segment as its body.

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start``, then the body on ``http.response.body``: two ``send`` calls, and
with ``TCP_NODELAY`` (gateway/upstream/listen.py) two segments, so the client wakes up
twice for every answer, once to read a head it cannot use yet. Here the head is held back
until the next write on the connection (the body, or the event stream's first event),
which in the gateway comes in the same task step, and both go out in one ``send``. A
head followed by nothing yet goes out on the loop's next turn, so nothing waits on it.
The protocol is uvicorn's for the parser ``serve`` reads with (gateway/upstream/heads.py).
A body the gateway has whole goes out with its length (``send_whole``), not chunked, whose
end would be a segment of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import Send

from gateway.upstream.linger import linger

_HEAD = b"HTTP/1.1 "
"""How h11 begins a response head (the only writes held back)."""


class _Coalescing:
    """A socket transport whose response heads wait for the write after them (see the module
    docstring), and whose ``close`` lingers while ``unread`` says the client may still be
    sending (gateway/upstream/linger.py)."""

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop, unread: Callable[[], bool]) -> None:
        self._inner = inner
        self._loop = loop
        self._unread = unread
        self._held: bytes | None = None
        self._flush_soon: asyncio.Handle | None = None
        self._lingering = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if self._flush_soon is not None:
                self._flush_soon.cancel()
                self._flush_soon = None
            self._inner.write(held + bytes(data))
        elif bytes(data[: len(_HEAD)]) == _HEAD:
            self._held = bytes(data)
            self._flush_soon = self._loop.call_soon(self.flush)
        else:
            self._inner.write(data)

    def flush(self) -> None:
        """Send a held head now."""
        self._flush_soon = None
        if self._held is not None:
            held, self._held = self._held, None
            self._inner.write(held)

    def close(self) -> None:
        self.flush()
        if self._lingering:
            return
        if self._unread():
            self._lingering = True
            linger(self._inner)
        else:
            self._inner.close()

    def is_closing(self) -> bool:
        return self._lingering or self._inner.is_closing()

    def write_eof(self) -> None:
        self.flush()
        self._inner.write_eof()

    def abort(self) -> None:
        if self._flush_soon is not None:
            self._flush_soon.cancel()
        self._held = None
        self._inner.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def coalescing_protocol(parser: str) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class for ``parser`` (``heads.protocol_class``), writing through ``_Coalescing``."""
    from gateway.upstream.heads import protocol_class

    class Coalescing(protocol_class(parser)):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(_Coalescing(transport, asyncio.get_running_loop(), self.unread))

    return Coalescing


async def send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, head: bool = False
) -> None:
    """An ASGI response whose body is known: ``headers`` and then its length (the order
    Starlette's ``Response`` writes them in), so it is one write. ``head``: a HEAD request's
    answer (the length of the body it would have)."""
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [*headers, length]})
    await send({"type": "http.response.body", "body": b"" if head else body})
