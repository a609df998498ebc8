"""The HTTP/1.1 parser ``serve --http`` reads requests with, and the bounds on a request's head.

httptools (llhttp, Node's parser, in C) where it is installed, as it is with the gateway
(a dependency on CPython): against h11 (pure Python) the gateway spent 15-26% less CPU a
call in both eras, and one 2026-07-28 caller's calls took 6-9% less time
(docs/http-and-replicas.md, 2026-12-06). A direct server in the same environment gains
about as much, so the bench's ratios do not move; a shared gateway serves more calls a
core. ``PREFIXGATE_HTTP_PARSER=h11`` chooses h11 (as where httptools is not installed: PyPy).

h11 refuses a head (request line and headers) over 16 KiB that is not yet complete (400,
uvicorn's answer to any parse error); uvicorn's httptools protocol has no such bound, and
httptools itself joins the pieces of an unfinished header line, so a peer that streams header
lines, or one header line without end, grew the gateway's memory for as long as it went on.
``BoundedHead`` gives it the same bound: past ``MAX_HEAD`` bytes without the end of a head,
431 and the connection closed.

Neither protocol bounds a head's time: uvicorn's keep-alive timer runs only between
requests and is reset by every byte, so a connection that sent nothing, or a head sent a
byte every few seconds, was held for ever (a connection and a task each; enough of them use
up the gateway's file descriptors). With either parser a connection's first head, and any
head once its first byte is in, must be complete within ``HEAD_TIMEOUT`` seconds: else 408
and the connection closed (``HeadDeadline``), as a body must within ``BODY_TIMEOUT``. A
request answered before its body is all in (the body deadline is then nobody's) closes its
connection, lingering, for the same reason.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
from collections.abc import Mapping
from typing import Any

from gateway.config import env_number

log = logging.getLogger("prefixgate.http")

PARSER_ENV = "PREFIXGATE_HTTP_PARSER"
MAX_HEAD = 16 * 1024
"""Bytes a request's head may take: h11's own bound (``DEFAULT_MAX_INCOMPLETE_EVENT_SIZE``)."""
MAX_AHEAD = 64
"""Requests one connection may have read ahead of their answers (pipelined) with httptools."""
HEAD_TIMEOUT = env_number("PREFIXGATE_HTTP_HEAD_TIMEOUT", 30.0)
"""Seconds a request head may take to arrive in full (the environment variable exists for tests)."""
_REFUSAL = b"request head over %d bytes (request line and headers)" % MAX_HEAD
_TRAILERS_REFUSAL = b"chunked body framing over %d bytes (a chunk size line, or the trailers)" % MAX_HEAD


def parser_name(environ: Mapping[str, str] = os.environ) -> str:
    """``"httptools"`` unless ``PREFIXGATE_HTTP_PARSER=h11`` or it is not installed; else
    ``"h11"``. Another value is named in a warning (it was taken for httptools unsaid)."""
    asked = environ.get(PARSER_ENV, "").strip().lower()
    if asked == "h11":
        return "h11"
    if asked not in ("", "httptools"):
        log.warning("%s=%r is neither h11 nor httptools: using the default", PARSER_ENV, environ[PARSER_ENV])
    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"


def protocol_class(name: str) -> type[asyncio.Protocol]:
    """uvicorn's protocol class for ``name``, with a deadline on each head (``HeadDeadline``)
    and, for httptools, h11's bound on its size (``BoundedHead``)."""
    if name == "h11":
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol

        class TimedH11(HeadDeadline, H11Protocol):
            def _heading(self) -> bool:
                return self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])

        return TimedH11

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Bounded(BoundedHead, HttpToolsProtocol):
        pass

    return Bounded


def _refuse(transport: Any, status: bytes, text: bytes) -> None:
    """A plain-text refusal, and the connection closed (what is unread of the request is
    read and dropped for a while: gateway/upstream/linger.py)."""
    transport.write(
        b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%s" % (status, len(text), text)
    )
    transport.close()


class HeadDeadline:
    """On a uvicorn HTTP/1.1 protocol: its first head, and each head from its first byte, within
    ``HEAD_TIMEOUT`` seconds (408 otherwise). ``_heading``: whether part of a head is in and
    not all of it. A deadline that passes while a request is being answered (bytes of the next
    one sent early) waits for that answer: it never cuts a response short."""

    transport: Any
    cycle: Any
    """uvicorn's: the connection's current request and response (None before its first)."""
    _deadline: asyncio.TimerHandle | None = None

    def _heading(self) -> bool:
        raise NotImplementedError

    def unread(self) -> bool:
        """Whether the client may still be sending what nobody will read: the rest of a head,
        or of a request's body (closing then lingers: gateway/upstream/linger.py)."""
        return self._heading() or (self.cycle is not None and self.cycle.more_body)

    def answered_early(self) -> bool:
        """Whether the response being written is to a request whose body is not all in: its
        connection closes once it is complete (``on_response_complete``), and its head says so
        (gateway/upstream/coalesce.py), or a keep-alive client sends its next request on it."""
        # (With requests read while this one was answered, uvicorn's httptools protocol holds them
        # in ``pipeline`` and ``cycle`` is the last of them, whose body may still be on its way.)
        return not getattr(self, "pipeline", None) and self.cycle is not None and self.cycle.more_body

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._heading():
            self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        """A request answered before its body is all in (401, a health path's 405, 404) closes
        its connection, lingering: uvicorn would keep it alive and drop the rest of the body as
        it came, and a client that sends that body a byte every few seconds (each byte restarts
        uvicorn's keep-alive timer; the body deadline is the app's, which never read it) held
        the connection for ever, token or none."""
        if not self.transport.is_closing() and self.answered_early():
            log.debug("a request was answered before its body was all in: connection closed")
            self.transport.close()  # (lingers: gateway/upstream/linger.py)
        super().on_response_complete()  # type: ignore[misc]

    def _arm(self, delay: float = HEAD_TIMEOUT) -> None:
        if self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(delay, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm(1.0)  # look again once it is answered
            return
        log.info("a request head took more than %g s: 408, connection closed", HEAD_TIMEOUT)
        _refuse(self.transport, b"408 Request Timeout", b"request head not received within %g s" % HEAD_TIMEOUT)


class _ReadAhead(Exception):
    """Raised in the parser's callback to stop it (``BoundedHead``, ``MAX_AHEAD``)."""


_UNLOGGED = logging.getLogger("prefixgate.http.unlogged")
"""uvicorn's logger while it handles ``_ReadAhead``, which it takes for a parse error."""
_UNLOGGED.setLevel(logging.CRITICAL + 1)
_UNLOGGED.propagate = False


class BoundedHead(HeadDeadline):
    """On uvicorn's httptools protocol: a head still unfinished after ``MAX_HEAD`` bytes is
    refused, and so is a chunked body's framing (a chunk's size line, the trailer section).

    The bytes are counted as they arrive, from the end of the previous request's body (or
    the connection's start) until the parser reports the head complete, and then from each
    piece of body until the next. A read that ends one and begins the next counts toward
    neither, so a head is refused at the latest one read (at most 256 KiB) after its bound:
    the memory a peer can make the parser hold stays bounded either way. A refusal waits for
    the answers owed to the requests before it (nothing more is read meanwhile), as a late
    head does: written at once, it cut a call's answer short and was read as that answer.

    A connection with ``MAX_AHEAD`` requests read ahead of their answers reads no more: those
    are answered, and then it is closed (its client sends the rest again, as a client that
    pipelines must be ready to). uvicorn's httptools protocol parses every request of a read
    into a queue of its own, about 1.2 KB each: 256 KiB of pipelined ``GET /healthz`` from a
    client that reads nothing held 9 MB until it read (h11 reads one request at a time).

    Trailers are dropped, as uvicorn's h11 protocol drops them: uvicorn's httptools protocol
    appended each to the request's headers, which the app holds already, and a trailer
    section has no end of its own but the body deadline: 300 MiB of trailer lines in its
    30 s grew the gateway by 340 MiB (h11 refuses the section past 16 KiB)."""

    _in_head = True
    _unfinished = 0
    """Bytes since the parser last finished something: a head, a piece of body, a request."""
    pipeline: Any
    """uvicorn's: the requests read while another was being answered, each (cycle, app)."""
    flow: Any
    logger: logging.Logger
    """uvicorn's (``_UNLOGGED`` while ``_ReadAhead`` unwinds, its own in ``_logger``)."""
    _logger: logging.Logger
    _refusal: bytes | None = None
    """A refusal waiting for the answers owed to the requests before the one it refuses
    (empty: none, the connection is only closed then)."""
    _refused: Any = None
    """The request it refuses (its cycle), when its head was whole (trailers over the bound)."""

    def _heading(self) -> bool:
        return self._in_head and self._unfinished > 0

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:  # (refused already: nothing more is read)
            self.flow.pause_reading()
            return
        self._unfinished += len(data)
        super().data_received(data)
        if self._unfinished <= MAX_HEAD or self.transport.is_closing():
            return
        if self._in_head:
            log.info("a request head went past %d bytes: 431, connection closed", MAX_HEAD)
            self._refusal = _REFUSAL
        elif self.cycle is not None and not self.cycle.response_started:
            log.info("a chunked body's size line or trailers went past %d bytes: 431, connection closed", MAX_HEAD)
            self._refusal, self._refused = _TRAILERS_REFUSAL, self.cycle
        else:
            self.transport.close()
            return
        if self._owed():  # its answer goes out first (a refusal now would be taken for it)
            self.flow.pause_reading()
        else:
            _refuse(self.transport, b"431 Request Header Fields Too Large", self._refusal)

    def _owed(self) -> bool:
        """Whether a request before the refused one is still being answered."""
        if self.pipeline:  # (the one being answered is not among them)
            return True
        return self._refused is None and self.cycle is not None and not self.cycle.response_complete

    def on_response_complete(self) -> None:
        if self._refusal is not None and not self.transport.is_closing():
            if not all(cycle is self._refused for cycle, _ in self.pipeline):
                pass  # answers still owed
            elif self._refusal:
                _refuse(self.transport, b"431 Request Header Fields Too Large", self._refusal)
            else:
                self.transport.close()  # (lingers: ``unread``)
        super().on_response_complete()

    def unread(self) -> bool:
        return self._refusal is not None or super().unread()

    def send_400_response(self, msg: str) -> None:
        if self._refusal == b"":  # (the parser stopped by ``on_headers_complete``, not a bad request)
            self.logger = self._logger
            self.flow.pause_reading()
            if not self._owed():
                self.transport.close()
            return
        super().send_400_response(msg)  # type: ignore[misc]

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:  # (else a trailer)
            super().on_header(name, value)  # type: ignore[misc]

    def on_headers_complete(self) -> None:
        self._in_head, self._unfinished = False, 0
        if len(self.pipeline) >= MAX_AHEAD:
            log.info("a connection sent %d requests ahead of their answers: closed once they are answered", MAX_AHEAD)
            self._refusal = b""
            # (uvicorn's ``data_received`` would log the stop as "Invalid HTTP request received.")
            self._logger, self.logger = self.logger, _UNLOGGED
            raise _ReadAhead  # (stops the parser: uvicorn's ``data_received`` calls ``send_400_response``)
        super().on_headers_complete()  # type: ignore[misc]

    def on_body(self, body: bytes) -> None:
        self._unfinished = 0
        super().on_body(body)  # type: ignore[misc]

    def on_message_complete(self) -> None:
        self._in_head, self._unfinished = True, 0
        super().on_message_complete()  # type: ignore[misc]
