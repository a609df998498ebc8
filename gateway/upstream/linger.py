"""How ``serve --http`` ends a connection whose client may still be sending: a lingering close.

The gateway answers some requests before it has read all of them (413 over the body limit,
408 past a deadline, 431 for a head over its bound) and closes their connections. A socket
closed with bytes unread in its receive buffer, or sent bytes after it is closed, answers
with a TCP reset, not a FIN: a client still sending its body then fails with
``ECONNRESET`` (or a broken pipe) instead of reading the answer it was sent, and its own
stack may drop that answer unread (RFC 9112, section 9.6). So such a connection is closed
in halves, as nginx's ``lingering_close`` and Apache do: the answer and a FIN go out, what
the client still sends is read and dropped (into no buffer, whatever it sends), and the
socket is closed at the client's end of stream, or after ``LINGER`` seconds at most, so a
client that never stops costs that long, not for ever.
"""

from __future__ import annotations

import asyncio

from gateway.config import env_number

LINGER = env_number("PREFIXGATE_HTTP_LINGER", 2.0)
"""Seconds a half-closed connection is read and drained before it is closed regardless."""


class _Draining(asyncio.Protocol):
    """What a lingering connection's bytes go to: nowhere. Its end still reaches the protocol
    that served it (uvicorn's: it counts its connections until then)."""

    def __init__(self, transport: asyncio.Transport, served: asyncio.BaseProtocol) -> None:
        self._served = served
        self._cut = asyncio.get_running_loop().call_later(LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool | None:
        return None  # (the transport closes itself)

    def pause_writing(self) -> None:
        self._served.pause_writing()

    def resume_writing(self) -> None:
        self._served.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cut.cancel()
        self._served.connection_lost(exc)


def linger(transport: asyncio.Transport) -> None:
    """End ``transport`` in halves: what was written, then a FIN; closed at its client's end
    of stream or after ``LINGER`` seconds, its bytes read and dropped meanwhile."""
    if transport.is_closing():
        return
    if not transport.can_write_eof():
        transport.close()
        return
    transport.set_protocol(_Draining(transport, transport.get_protocol()))
    transport.write_eof()  # (after what is buffered)
    transport.resume_reading()  # (uvicorn pauses reading while a body waits for its app)
