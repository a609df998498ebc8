"""The HTTP/1.1 parser ``serve --http`` reads requests with, and the bound on a request's head.

httptools (llhttp, Node's parser, in C) where it is installed, as it is with the gateway
(a dependency on CPython): against h11 (pure Python) the gateway spent 19-25% less CPU a
call and answered 7-10% sooner, in both eras (bench/README.md, 2026-12-06). A direct server
in the same environment gains about as much, so the bench's ratios do not move; a shared
gateway serves more calls a core. ``PREFIXGATE_HTTP_PARSER=h11`` chooses h11 (as where
httptools is not installed: PyPy).

h11 refuses a head (request line and headers) over 16 KiB that is not yet complete (400,
uvicorn's answer to any parse error); uvicorn's httptools protocol has no such bound, and
httptools itself joins the pieces of an unfinished header line, so a peer that streams header
lines, or one header line without end, grew the gateway's memory for as long as it went on.
``BoundedHead`` gives it the same bound: past ``MAX_HEAD`` bytes without the end of a head,
431 and the connection closed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("prefixgate.http")

PARSER_ENV = "PREFIXGATE_HTTP_PARSER"
MAX_HEAD = 16 * 1024
"""Bytes a request's head may take: h11's own bound (``DEFAULT_MAX_INCOMPLETE_EVENT_SIZE``)."""
_REFUSAL = b"request head over %d bytes (request line and headers)" % MAX_HEAD


def parser_name(environ: Mapping[str, str] = os.environ) -> str:
    """``"httptools"`` unless ``PREFIXGATE_HTTP_PARSER=h11`` or it is not installed; else ``"h11"``."""
    if environ.get(PARSER_ENV, "").strip().lower() == "h11":
        return "h11"
    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"


def protocol_class(name: str) -> type[asyncio.Protocol]:
    """uvicorn's protocol class for ``name``, bounded as h11 is (``BoundedHead``) for httptools."""
    if name == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Bounded(BoundedHead, HttpToolsProtocol):
        pass

    return Bounded


class BoundedHead:
    """On uvicorn's httptools protocol: a head still unfinished after ``MAX_HEAD`` bytes is refused.

    The bytes are counted as they arrive, from the end of the previous request's body (or
    the connection's start) until the parser reports the head complete. A read that ends one
    request and begins the next counts toward neither, so a head is refused at the latest one
    read (at most 256 KiB) after its bound: the memory a peer can make the parser hold stays
    bounded either way."""

    _in_head = True
    _head_bytes = 0
    transport: Any

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)  # type: ignore[misc]
        if self._in_head and self._head_bytes > MAX_HEAD and not self.transport.is_closing():
            log.info("a request head went past %d bytes: 431, connection closed", MAX_HEAD)
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_REFUSAL), _REFUSAL)
            )
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes = False, 0
        super().on_headers_complete()  # type: ignore[misc]

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()  # type: ignore[misc]
