"""Which call a streamable-HTTP server's request belongs to, from the stream it came on.

A server that asks for input during a call (``elicitation/create``, ``sampling/createMessage``)
sends the request on that call's own response stream, as streamable HTTP lets it. The SDK's
client hands the request to the gateway without saying which stream it came on, so with
calls of two principals in flight to one server the gateway could not tell whose it was,
and refused it. Here the wire is read for it:

- a request sent on behalf of an upstream call (``CALLER``, set by whoever runs the call)
  carries a private header naming it, which the HTTP transport takes off before sending;
- that request's event-stream response is scanned, as it passes through, for requests of
  the server (an event whose data has a ``method`` and an ``id``); each is noted with the
  call whose stream it came on;
- the callback that answers the server's request takes the note by the request's id.

A log message (``notifications/message``) on a call's stream is that call's too, but has no
id: it is noted by its content (``log_key``), and the gateway takes the note as the message
reaches it, so the call's own log line still reaches its caller while another principal's
call to the server is in flight.

A request the scan could not place (on the standalone GET stream, a resumed stream, an
event over ``MAX_EVENT`` bytes) has no note and falls back to the rule for pipes, which
never guesses across principals. The scan reads only events whose data names a ``method``:
inside a JSON string a quote is escaped, so ``"method"`` appears raw only as a key or a value.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import httpx2

CALLER: ContextVar[object | None] = ContextVar("prefixgate_caller", default=None)
"""The upstream call a downstream request is made for (opaque here; the engine reads it)."""

HEADER = "x-prefixgate-call"
"""The private header naming a request's call between ``Downstream.request`` and the transport."""
MAX_EVENT = 1 << 20
"""Bytes of one event the scan keeps at most; a longer one is passed on unread."""
MAX_NOTES = 256
"""Server requests noted but not yet taken, at most (the oldest note is dropped first)."""
_METHOD = b'"method"'
LOG = "notifications/message"


def log_key(params: Any) -> str | None:
    """A log message's params as one string, the same whether read off the wire or from the
    SDK's parsed notification (whose dump leaves out a null ``logger``); None if not a dict."""
    if not isinstance(params, dict):
        return None
    try:
        return json.dumps([params.get("level"), params.get("logger"), params.get("data")], sort_keys=True)
    except (TypeError, ValueError):
        return None


class Related:
    """The calls in flight over one HTTP connection, and the server requests seen on their streams."""

    def __init__(self) -> None:
        self._calls: dict[str, object] = {}
        self._notes: dict[Any, object] = {}
        self._logs: list[tuple[str, object]] = []
        """Log messages seen on a call's stream, not yet taken: (``log_key``, the call), oldest first."""
        self._ids = itertools.count(1)

    def open(self, caller: object) -> str:
        """Name a request made for ``caller``: the value of its private header."""
        name = str(next(self._ids))
        self._calls[name] = caller
        return name

    def close(self, name: str) -> None:
        self._calls.pop(name, None)

    def note(self, name: str, request_id: Any) -> None:
        caller = self._calls.get(name)
        if caller is None:
            return
        notes = self._notes
        notes.pop(request_id, None)
        if len(notes) >= MAX_NOTES:
            del notes[next(iter(notes))]
        notes[request_id] = caller

    def take(self, request_id: Any) -> object | None:
        """The call whose stream the server's request ``request_id`` came on, or None."""
        return self._notes.pop(request_id, None)

    def note_log(self, name: str, params: Any) -> None:
        caller = self._calls.get(name)
        if caller is None or (key := log_key(params)) is None:
            return
        if len(self._logs) >= MAX_NOTES:
            del self._logs[0]
        self._logs.append((key, caller))

    def take_log(self, params: Any) -> object | None:
        """The call on whose stream a log message with these params came (the oldest such), or None."""
        if not self._logs or (key := log_key(params)) is None:
            return None
        for i, (noted, caller) in enumerate(self._logs):
            if noted == key:
                del self._logs[i]
                return caller
        return None


class _Scanned(httpx2.AsyncByteStream):
    """An event stream passed through unchanged, its server requests noted as they pass."""

    def __init__(self, inner: httpx2.AsyncByteStream, related: Related, name: str) -> None:
        self.inner = inner
        self.related = related
        self.name = name
        self._line = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        """Bytes of ``_data``."""
        self._skip = False
        """The event's data outgrew ``MAX_EVENT``: it is passed on unread."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self._feed(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._line += chunk[start:end]
            self._end_line()
            start = end + 1
        if start < len(chunk):
            self._line += chunk[start:]
            if len(self._line) > MAX_EVENT:
                self._skip = True
                self._line.clear()

    def _end_line(self) -> None:
        line = bytes(self._line).rstrip(b"\r")
        self._line.clear()
        if not line:
            data, self._data, self._size, skip, self._skip = self._data, [], 0, self._skip, False
            if data and not skip:
                self._event(b"\n".join(data))
        elif line.startswith(b"data:") and not self._skip:
            value = line[6:] if line[5:6] == b" " else line[5:]
            self._data.append(value)
            self._size += len(value)
            if self._size > MAX_EVENT:
                self._skip, self._data, self._size = True, [], 0

    def _event(self, data: bytes) -> None:
        if _METHOD not in data:
            return
        try:
            message = json.loads(data)
        except ValueError:
            return
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            request_id = message.get("id")
            if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
                self.related.note(self.name, request_id)
            elif request_id is None and message["method"] == LOG:
                self.related.note_log(self.name, message.get("params"))


class RelatedStreams(httpx2.AsyncBaseTransport):
    """An HTTP transport that takes a request's private call header off before sending it, and
    notes the server requests on that request's event-stream response (see the module docstring)."""

    def __init__(self, related: Related, inner: httpx2.AsyncBaseTransport) -> None:
        self.related = related
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        name = request.headers.get(HEADER)
        if name is None:
            return await self.inner.handle_async_request(request)
        # Off for the server, back on afterwards: an auth flow may send the same request again.
        del request.headers[HEADER]
        try:
            response = await self.inner.handle_async_request(request)
        finally:
            request.headers[HEADER] = name
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Scanned(response.stream, self.related, name)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
