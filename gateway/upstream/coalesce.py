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
import fcntl
import logging
import struct
import termios
from collections.abc import Callable
from typing import Any

from starlette.types import Send

from gateway.config import env_number
from gateway.upstream.linger import linger

log = logging.getLogger("prefixgate.http")

_HEAD = b"HTTP/1.1 "
"""How h11 begins a response head (the only writes held back)."""


class _Coalescing:
    """A socket transport whose response heads wait for the write after them (see the module
    docstring), and whose ``close`` lingers while ``unread`` says the client may still be
    sending (gateway/upstream/linger.py)."""

    def __init__(
        self,
        inner: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        unread: Callable[[], bool],
        answered_early: Callable[[], bool] = lambda: False,
    ) -> None:
        self._inner = inner
        self._loop = loop
        self._unread = unread
        self._answered_early = answered_early
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
            self._held = _closing(bytes(data)) if self._answered_early() else bytes(data)
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


WRITE_TIMEOUT = env_number("PREFIXGATE_HTTP_WRITE_TIMEOUT", 60.0)
"""Seconds a connection's answer may wait, its client reading none of it, before the connection
is cut: nginx's ``send_timeout`` (the environment variable exists for tests)."""


class StalledWrites:
    """On a uvicorn HTTP/1.1 protocol: a connection whose client stops reading is cut once
    ``WRITE_TIMEOUT`` seconds pass with nothing of its answer taken.

    Its answer, or its event stream, fills the socket's buffers and the transport's, and the
    task writing it (a call, a session's stream, a client's queue of notices) waited in
    uvicorn's ``drain`` for ever, holding its connection and whatever it had not sent. Only a
    client reading nothing at all is cut: the wait is measured from the last byte the
    transport could hand on, so a slow reader, which takes some every so often, is never
    cut; its calls see their client gone (cancelled, their servers told, as when it closes)."""

    transport: Any
    _stall: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        self._watch(self._unsent())

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().resume_writing()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _unsent(self) -> int:
        """What the connection's client has not taken yet: the transport's buffer, and what the
        kernel holds of the socket's (``SIOCOUTQ``, Linux; elsewhere taken as nothing). The
        kernel's send buffer grows to megabytes (``tcp_wmem``), and the transport's writes
        resume only once about a third of it is free: a slow reader's progress shows there
        first, long before the transport takes any of its own buffer."""
        return int(self.transport.get_write_buffer_size()) + _queued(self.transport.get_extra_info("socket"))

    def _watch(self, unsent: int) -> None:
        if self._stall is not None:
            self._stall.cancel()
        self._stall = asyncio.get_running_loop().call_later(WRITE_TIMEOUT, self._stalled, unsent)

    def _stalled(self, unsent: int) -> None:
        self._stall = None
        if self.transport.is_closing() and not self.transport.get_write_buffer_size():
            return
        now = self._unsent()
        if now < unsent:  # (its client took some: a slow reader)
            self._watch(now)
            return
        log.info("a client read nothing of its answer for %g s: connection cut", WRITE_TIMEOUT)
        self.transport.abort()


def _queued(sock: Any) -> int:
    """The bytes of ``sock``'s output the kernel holds, not yet acknowledged by the other end
    (0 where it cannot say: no socket, a closed one, not Linux)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(4)))[0])
    except (AttributeError, OSError, ValueError):
        return 0


def _closing(head: bytes) -> bytes:
    """``head`` saying ``connection: close`` (an answer given before its request's body is all
    in: its connection closes once it is out, gateway/upstream/heads.py), unless it says so."""
    end = head.find(b"\r\n\r\n")
    if end < 0 or b"\r\nconnection: close\r\n" in head[: end + 2].lower():
        return head
    return head[:end] + b"\r\nconnection: close" + head[end:]


def coalescing_protocol(parser: str) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class for ``parser`` (``heads.protocol_class``), writing through
    ``_Coalescing``, a client that reads nothing of its answer cut (``StalledWrites``)."""
    from gateway.upstream.heads import protocol_class

    class Coalescing(StalledWrites, protocol_class(parser)):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(
                _Coalescing(transport, asyncio.get_running_loop(), self.unread, self.answered_early)
            )

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
