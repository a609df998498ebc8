"""Handshake-era requests over HTTP, inside a session, without the SDK's per-request layers.

In a 2025-11-25 session the SDK's transport turns each POST into a Starlette request, a
validated message on the session's read stream, a dispatcher task running the runner and
its middleware, and an ``EventSourceResponse`` (a task group of three) fed through two more
memory streams. This lane does the same with less:

- the same checks first (the session known, live and the caller's; transport security,
  ``Accept``, content type, the JSON-RPC envelope), and only a well-formed request of a
  session past ``initialize`` is claimed (a ``tools/call`` whose params the SDK would
  refuse is not), once the SDK has served the session's ``initialize`` or a request of it
  (the lane learns the session's connection there): anything else goes to the SDK as
  before; while the request is read and runs it holds the session's idle countdown, as there;
- the request is handed to the session's own dispatcher (its in-flight table, its task
  group), so the client's ``notifications/cancelled``, the session's end and the cancelled
  request's ``Request cancelled`` answer are the SDK's own; a ``tools/call`` is run as the
  stdio fast path runs it (``answer_directly``), any other request by the SDK's own runner
  for the session (its validation, the middleware, the handler);
- every message of the call (progress, logs, a server's request, the answer) still leaves
  through the session's write stream and message router, so event ids, the event store
  (``Last-Event-ID`` resumption) and their order are the SDK's; this lane only writes the
  request's event stream (priming event, events, pings every 15 s) in place of the
  ``EventSourceResponse``, with the same headers and the same encoder;
- except for a call answered within ``ANSWER_GRACE`` with nothing before its answer: that
  answer is one JSON body, as the transport's JSON mode writes it (the spec lets the server
  choose per request). The SDK's client leaves an event stream as soon as its answer is in,
  before the stream's end, and httpx then closes the connection: every call cost a new TCP
  connection (answered in JSON, the gateway spends 28-40% less CPU a call). A call still
  running after the grace gets the event stream, priming event first, and is resumable
  from then on. Any other request has ``PING_INTERVAL`` as its grace (it starts the stream
  with a ping, as the SDK's would): the SDK's client refuses an event over 1 MiB, and a
  list of the gateway's (every server's items in one page) or a resource read through it
  can be larger, where the server paging it or read directly is fine.

tests/test_session_lane.py sends the same requests down both paths. ``PREFIXGATE_FAST_PATH=0``
turns the lane off.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from contextlib import nullcontext, suppress
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.runner import ServerRunner
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, EventMessage, check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types import PROTOCOL_VERSION_META_KEY, JSONRPCError, JSONRPCRequest, JSONRPCResponse
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway.fastpath import FAST_PATH_ENV
from gateway.jsontext import PARSE_ASIDE_BYTES, parsed_aside
from gateway.sdk import (
    close_request_stream,
    connection_of,
    dispatch_request,
    holding_session,
    open_request_stream,
    session_transport,
    sse_headers,
)
from gateway.shapes import plain_call_params
from gateway.upstream.coalesce import send_whole
from gateway.upstream.departures import disconnected
from gateway.upstream.fast import answer_directly, meta_key, valid_call
from gateway.upstream.server import Handlers

log = logging.getLogger("prefixgate.http")

_ENVELOPE = frozenset(("jsonrpc", "id", "method", "params"))
_SEP = "\r\n"
"""sse_starlette's default line separator, which the SDK's event streams use."""
PING_INTERVAL = 15.0
"""sse_starlette's default: the SDK's event stream sends a ping comment this often."""
ANSWER_GRACE = 0.1
"""Seconds a call may take to be answered with one JSON body; a call still running then (or
one that notified or asked first) gets the event stream, whose priming event makes it
resumable with ``Last-Event-ID`` from then on."""
_PING = object()
_GONE = object()
_COMMIT = object()
_HEADERS_KEY = "prefixgate.sse_headers"
_RUNNER_KEY = "prefixgate.runner"


class Claimed:
    """A request the lane answers, and the session parts it found for it."""

    __slots__ = ("request", "request_id", "method", "params", "meta", "version", "transport", "connection")

    def __init__(
        self,
        request: Request,
        request_id: int | str,
        method: str,
        params: dict[str, Any] | None,
        meta: str | None,
        version: str,
        transport: Any,
        connection: Connection,
    ) -> None:
        self.request = request
        self.request_id = request_id
        self.method = method
        self.params = params
        self.meta = meta
        """A ``tools/call``'s ``meta_key``."""
        self.version = version
        """The request's ``MCP-Protocol-Version`` header (the priming event depends on it)."""
        self.transport = transport
        self.connection = connection


def _content_type_is_json(request: Request) -> bool:
    """The transport's own content-type check (a list of types, any of them JSON)."""
    content_type = request.headers.get("content-type", "")
    return any(part.strip() == "application/json" for part in content_type.split(";")[0].split(","))


class SessionLane:
    """Claims the handshake-era requests of one profile's sessions."""

    def __init__(self, handlers: Handlers, manager: Any, security: TransportSecuritySettings | None) -> None:
        self.handlers = handlers
        self.manager = manager
        self.security = TransportSecurityMiddleware(security)
        self.lifespan: Any = None
        self.sessions: weakref.WeakValueDictionary[str, Connection] = weakref.WeakValueDictionary()
        """Each session's SDK connection, learnt from the first request the SDK serves in it
        (held weakly: a session ends with its connection)."""
        self.used = False
        handlers.server.middleware.insert(0, self.observe)

    async def observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        """Learn a session's connection from its ``initialize`` (which the session's id is
        issued to) or from a request the SDK serves in it (which names it)."""
        request = ctx.request
        if isinstance(request, Request) and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            session_id = request.headers.get(MCP_SESSION_ID_HEADER)
            if session_id is None and ctx.method == "initialize":
                session_id = connection_of(ctx).session_id
            if session_id is not None and session_id not in self.sessions:
                connection = connection_of(ctx)
                if connection.session_id == session_id:
                    self.sessions[session_id] = connection
        return await call_next(ctx)

    async def claim(self, scope: Scope, body: bytes, session_id: str, version: str) -> Claimed | None:
        """The request, when the SDK's stateful entry and transport would dispatch it unchanged."""
        connection = self.sessions.get(session_id)
        if connection is None or not connection.initialize_accepted:
            return None
        transport = session_transport(self.manager, session_id, scope.get("user"))
        if transport is None:
            return None
        request = Request(scope)
        if await self.security.validate_request(request, is_post=True) is not None:
            return None
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse) or not _content_type_is_json(request):
            return None
        try:
            # The transport's parser, for the same verdicts (a long body: its verdicts, yielding;
            # the request holds its session meanwhile, as the transport holds it from the start;
            # a short one is parsed at once, and the call's own hold comes before any await).
            long = len(body) >= PARSE_ASIDE_BYTES
            with holding_session(transport) if long else nullcontext():
                decoded = await parsed_aside(body, "a handshake-era POST body", sdk_parser=True)
        except ValueError:
            return None
        if type(decoded) is not dict or not decoded.keys() <= _ENVELOPE or decoded.get("jsonrpc") != "2.0":
            return None
        request_id, method, params = decoded.get("id"), decoded.get("method"), decoded.get("params")
        if not isinstance(method, str) or method == "initialize" or isinstance(request_id, bool):
            return None
        if not isinstance(request_id, int | str) or not (params is None or type(params) is dict):
            return None
        meta = params.get("_meta") if params is not None else None
        if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
            return None
        key = None
        if method == "tools/call":
            if params is None:
                return None
            key = meta_key(params)
            if not plain_call_params(params) and not valid_call(connection.protocol_version, params, key):
                return None  # the SDK refuses it with its own error
        if transport.is_terminated:
            return None  # ended (its DELETE) while a long body was read: its dispatcher with it
        if not self.used:
            self.used = True
            log.info("handshake-era requests answered on the HTTP session lane (%s=0 turns it off)", FAST_PATH_ENV)
        return Claimed(request, request_id, method, params, key, version, transport, connection)

    async def answer(self, claimed: Claimed, receive: Receive, send: Send) -> None:
        """Dispatch the request into its session, then write its event stream until its answer
        (or until the session closes the stream: terminated, or the stream closed for polling).
        A client that goes away ends only the stream, as in the SDK: the request goes on, and
        what it sends is kept for a resumed stream (``Last-Event-ID``)."""
        with holding_session(claimed.transport):
            await self._answer(claimed, receive, send)

    async def _answer(self, claimed: Claimed, receive: Receive, send: Send) -> None:
        transport, connection = claimed.transport, claimed.connection
        message = JSONRPCRequest.model_construct(
            jsonrpc="2.0", id=claimed.request_id, method=claimed.method, params=claimed.params
        )
        priming, feed, events, metadata = await open_request_stream(
            transport, message, claimed.request, claimed.version
        )
        request_id = str(claimed.request_id)
        loop = asyncio.get_running_loop()
        keepalive: _Keepalive | None = None
        gone = False

        async def watch() -> None:
            nonlocal gone
            await disconnected(receive)
            gone = True
            with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                feed.send_nowait(_GONE)  # else the writer is busy and sees ``gone`` after its event

        watcher = loop.create_task(watch())
        try:
            await dispatch_request(connection.outbound, message, metadata, self._on_request(claimed))
            grace = ANSWER_GRACE if claimed.method == "tools/call" else PING_INTERVAL
            keepalive = _Keepalive(loop, feed, grace)
            item: Any = None
            try:
                item = await events.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                pass  # the stream ended first (closed for polling): resumable from the priming event
            if gone:
                log.debug("the client left before request %s (%s) was answered", request_id, claimed.method)
                return
            if _is_answer(item):
                # Answered at once, before anything else: one JSON body, which any client reads
                # to its end (the SDK's client leaves an event stream unfinished, and so loses
                # the connection with it).
                body = item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                await send_whole(send, 200, _json_headers(connection), body)
                return
            await send({"type": "http.response.start", "status": 200, "headers": self._headers(connection)})
            if priming is not None:
                await send({"type": "http.response.body", "body": _sse(priming), "more_body": True})
            while True:
                if item is None:
                    try:
                        item = await events.receive()
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        break
                if gone:
                    log.debug("the client closed the event stream of request %s (%s)", request_id, claimed.method)
                    return
                if item is _COMMIT:  # the grace is over: the stream has started already
                    item = None
                    continue
                if item is _PING:
                    comment = f"ping - {datetime.now(UTC)}"
                    await send({"type": "http.response.body", "body": _sse({"comment": comment}), "more_body": True})
                    item = None
                    continue
                final = _is_answer(item)
                await send({"type": "http.response.body", "body": _event_bytes(item), "more_body": not final})
                if final:
                    return
                item = None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            if keepalive is not None:
                keepalive.cancel()
            await close_request_stream(transport, request_id, feed, events)

    def _on_request(self, claimed: Claimed) -> Any:
        if claimed.method != "tools/call":
            return self._runner(claimed.connection).on_request

        async def on_request(dctx: Any, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
            assert params is not None
            return await answer_directly(
                self.handlers,
                dctx,
                claimed.connection,
                method,
                params,
                claimed.request_id,
                self.lifespan,
                claimed.request,
                key=claimed.meta,
            )

        return on_request

    def _runner(self, connection: Connection) -> ServerRunner[Any]:
        """The SDK's runner for the session, as its serving loop makes it (``serve_connection``;
        made once per session: it keeps nothing of its own between requests)."""
        runner = connection.state.get(_RUNNER_KEY)
        if runner is None:
            runner = connection.state[_RUNNER_KEY] = ServerRunner(self.handlers.server, connection, self.lifespan)
        return runner

    @staticmethod
    def _headers(connection: Connection) -> list[tuple[bytes, bytes]]:
        """The session's event-stream headers, made once per session."""
        headers = connection.state.get(_HEADERS_KEY)
        if headers is None:
            assert connection.session_id is not None
            headers = connection.state[_HEADERS_KEY] = sse_headers(connection.session_id)
        return headers


class _Keepalive:
    """A request's timer, in the request's stream of messages: ``_COMMIT`` once its answer
    grace is over, then ``_PING`` ``PING_INTERVAL`` after the start, and every
    ``PING_INTERVAL`` from then on. An object, not closures: a function that re-arms itself
    names itself, a cycle every call would leave to the collector (its handle drops its
    callback when cancelled, so ``cancel`` breaks this one)."""

    __slots__ = ("feed", "grace", "loop", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, feed: MemoryObjectSendStream[Any], grace: float) -> None:
        self.loop = loop
        self.feed = feed
        self.grace = grace
        self.timer = loop.call_later(grace, self.commit)

    def commit(self) -> None:
        with suppress(anyio.WouldBlock):  # messages are waiting: the first of them decides
            try:
                self.feed.send_nowait(_COMMIT)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
        self.timer = self.loop.call_later(PING_INTERVAL - self.grace, self.ping)

    def ping(self) -> None:
        try:
            self.feed.send_nowait(_PING)  # pings go in beside the router's messages
        except anyio.WouldBlock:
            pass  # events are waiting to be written: the stream is not idle
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
        self.timer = self.loop.call_later(PING_INTERVAL, self.ping)

    def cancel(self) -> None:
        self.timer.cancel()


def _is_answer(item: Any) -> bool:
    """A message of the call's stream that is its answer (a result or an error)."""
    return isinstance(item, EventMessage) and isinstance(item.message, JSONRPCResponse | JSONRPCError)


def _json_headers(connection: Connection) -> list[tuple[bytes, bytes]]:
    """The headers of the transport's JSON answer before its length (``_create_json_response``)."""
    assert connection.session_id is not None
    return [(b"content-type", b"application/json"), (MCP_SESSION_ID_HEADER.encode(), connection.session_id.encode())]


def _event_bytes(item: EventMessage) -> bytes:
    """An event as the transport's SSE writer makes it (``_create_event_data``, then sse_starlette)."""
    event: dict[str, Any] = {
        "event": "message",
        "data": item.message.model_dump_json(by_alias=True, exclude_unset=True),
    }
    if item.event_id:
        event["id"] = item.event_id
    return _sse(event)


def _sse(event: dict[str, Any]) -> bytes:
    """sse_starlette's encoding of an event given as a dict, as its response writes one."""
    return ServerSentEvent(**event, sep=_SEP).encode()
