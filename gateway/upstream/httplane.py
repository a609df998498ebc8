"""2026-07-28 ``tools/call`` and ``tools/list`` over HTTP answered in the request's own task.

The SDK's modern entry runs every request through a Starlette ``Request``, a task group
with the handler and a disconnect watcher as sibling tasks, a memory stream for
notifications, the runner's middleware chain and the reply's model. For the
two requests an agent sends most, this lane does what that entry does with less: the
same checks in the same order (transport security, ``Accept``, the JSON-RPC envelope,
duplicated routing headers, the inbound ladder, ``Mcp-Param-*`` headers, the params'
surface check), the same ``Handlers`` calls (the client record, the gate, ``finish``), and
the same bytes out: JSON with the table-mapped status when the handler answers without a
notification within ``PING_INTERVAL`` seconds, else ``text/event-stream`` carrying the
notifications, keep-alive pings and the answer (tests/test_http_lane.py sends the same
requests down both). Closing the response stream cancels the call, as it does there.

Only what passes every check is claimed; anything else (a rejection, a notification, any
other method, any handshake-era request) goes to the SDK, which answers it as before.
As on the stdio fast path, the SDK's OpenTelemetry middleware is not run for these two.
``PREFIXGATE_FAST_PATH=0`` turns the lane off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

import anyio
import mcp_types as types
import pydantic_core
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PARAM_HEADER_PREFIX,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    InboundModernRoute,
    classify_inbound_request,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway.fastpath import FAST_PATH_ENV
from gateway.jsontext import parsed_aside
from gateway.sdk import modern_error_data
from gateway.upstream.departures import Departure
from gateway.upstream.fast import (
    answer_directly,
    envelope_connection,
    meta_key,
    progress_params,
    unwind,
    valid_call,
    valid_list,
)
from gateway.upstream.server import Handlers

log = logging.getLogger("prefixgate.http")

METHODS = frozenset(("tools/call", "tools/list"))
PING_INTERVAL = 15.0
"""As the SDK's modern entry: a silent handler commits the event stream after this, then pings."""
WATCH_AFTER = 0.05
"""Seconds before a call starts watching for its client to go away (which cancels it): most
calls are answered sooner, and a task per call to watch cost more CPU than the call's own
gate (a disconnect noticed up to this much later changes nothing a client can see)."""
_ENVELOPE = frozenset(("jsonrpc", "id", "method", "params"))
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
_PING = b": ping\r\n\r\n"
_HEADER_KEYWORD = "x-mcp-header"


def names_key(value: Any, key: str) -> bool:
    """Whether any object within ``value`` (a decoded JSON value) has ``key``: a superset of
    the positions the SDK reads annotations from, so False means it finds none."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if key in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(..., separators=(",", ":"))``'s encoder, made once (``dumps`` makes one per call)."""


def _json(message: dict[str, Any]) -> str:
    """A JSON-RPC message as the SDK's modern entry writes it (its model dumped in JSON mode,
    NaN and infinities as null, then ``json.dumps`` compact), without building the model."""
    return _COMPACT.encode(pydantic_core.to_jsonable_python(message, inf_nan_mode="null"))


def _sse(message: dict[str, Any]) -> bytes:
    return f"event: message\r\ndata: {_json(message)}\r\n\r\n".encode()


_ROUTING_HEADERS = frozenset(name.lower() for name in (MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, MCP_NAME_HEADER))
"""The headers ``find_duplicated_routing_header`` refuses twice (lower case, as ASGI gives them)."""
_ACCEPTS: dict[str, bool] = {}
"""``check_accept_headers``' verdict (both JSON and event streams) per ``Accept`` value: a
client sends the same one with every request."""
MAX_ACCEPT_KEY = 512
"""Longest ``Accept`` value remembered (with at most ``MAX_ACCEPTS`` of them): what a client's
made-up values can make the gateway keep is bounded."""
MAX_ACCEPTS = 64


def _accepts_json_and_events(accept: str) -> bool:
    """Whether ``check_accept_headers`` finds both JSON and event streams acceptable."""
    verdict = _ACCEPTS.get(accept)
    if verdict is None:
        has_json, has_sse = check_accept_headers(cast(Request, _Headed({"accept": accept})))
        verdict = has_json and has_sse
        if len(accept) <= MAX_ACCEPT_KEY:
            if len(_ACCEPTS) >= MAX_ACCEPTS:
                _ACCEPTS.clear()
            _ACCEPTS[accept] = verdict
    return verdict


class _Headed:
    """What the SDK's header checks read of a request (``validate_request``,
    ``check_accept_headers``: ``request.headers.get``), over headers decoded once."""

    __slots__ = ("headers",)

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class Claimed:
    """A request the lane answers: what the checks found, kept for the answer."""

    __slots__ = ("request", "request_id", "method", "params", "route", "meta")

    def __init__(
        self,
        request: Request,
        request_id: types.RequestId,
        method: str,
        params: dict[str, Any],
        route: InboundModernRoute,
        meta: str | None,
    ) -> None:
        self.request = request
        self.meta = meta
        """The request's ``meta_key``."""
        self.request_id = request_id
        self.method = method
        self.params = params
        self.route = route


class Exchange:
    """One claimed request's response, and the ``DispatchContext`` its handler writes to.

    JSON until the first notification (or ``PING_INTERVAL`` of silence) commits the event
    stream; every send after that is made under one lock, so notifications, pings and the
    answer never interleave.
    """

    def __init__(
        self, send: Send, request: Request, request_id: types.RequestId, token: Any, interval: float = PING_INTERVAL
    ) -> None:
        self._send = send
        self.interval = interval
        self.request_id = request_id
        self._token = token
        self.streaming = False
        self.closed = False
        self._lock: asyncio.Lock | None = None
        self._last = time.monotonic()
        self._cancel_requested: anyio.Event | None = None
        self._request = request
        self._transport: TransportContext | None = None

    # --- the DispatchContext contract --------------------------------------------------

    can_send_request = False

    @property
    def transport(self) -> TransportContext:
        """Made when first read: a plain call never reads it."""
        if self._transport is None:
            self._transport = TransportContext(
                kind="streamable-http", can_send_request=False, headers=self._request.headers
            )
        return self._transport

    @property
    def message_metadata(self) -> ServerMessageMetadata:
        return ServerMessageMetadata(request_context=self._request)

    @property
    def cancel_requested(self) -> anyio.Event:
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self.event(_sse(message))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self._token is not None:
            await self.notify("notifications/progress", progress_params(self._token, progress, total, message))

    # --- the response ----------------------------------------------------------------------

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def event(self, data: bytes) -> None:
        """A notification or a ping on the event stream (committed by the first one)."""
        async with self._locked():
            if self.closed:
                log.debug("dropped an event: the response is complete")
                return
            if not self.streaming:
                self.streaming = True
                await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            self._last = time.monotonic()
            await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def pings(self) -> None:
        """Started after ``interval`` s of silence: commit the stream with a ping, then ping
        whenever it was silent that long."""
        while not self.closed:
            await asyncio.sleep(max(0.0, self._last + self.interval - time.monotonic()))
            if not self.closed and time.monotonic() - self._last >= self.interval:
                await self.event(_PING)

    async def finish(self, message: dict[str, Any]) -> None:
        async with self._locked():
            self.closed = True
            if self.streaming:
                await self._send({"type": "http.response.body", "body": _sse(message), "more_body": False})
                return
            error = message.get("error")
            status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200) if error is not None else 200
            body = _json(message).encode()
            headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
            await self._send({"type": "http.response.start", "status": status, "headers": headers})
            await self._send({"type": "http.response.body", "body": body})


class ModernLane:
    """Claims the 2026-07-28 ``tools/call`` and ``tools/list`` requests it can answer as the SDK would."""

    def __init__(self, handlers: Handlers, security: TransportSecuritySettings | None) -> None:
        self.handlers = handlers
        self.security = TransportSecurityMiddleware(security)
        self.lifespan: Any = None
        self.used = False
        self._epoch: Any = None
        self._annotated: dict[str, bool] = {}
        """Per tool of ``_epoch``: whether its input schema names ``x-mcp-header`` anywhere."""

    async def claim(self, scope: Scope, body: bytes) -> Claimed | None:
        """The request, when every check the SDK's modern entry makes passes; else None.

        The SDK's checks read its headers through starlette's ``Headers``, which decodes
        and scans every header on each lookup; they get the headers decoded once instead
        (``dict(headers)``: lower-case names, the first value of each, as ``Headers.get``)."""
        folded: dict[str, str] = {}
        for raw_key, raw_value in scope["headers"]:  # (ASGI header names are lower case)
            key = raw_key.decode("latin-1")
            if key not in folded:
                folded[key] = raw_value.decode("latin-1")
            elif key in _ROUTING_HEADERS:
                return None  # a routing header given twice (``find_duplicated_routing_header``)
        headed = cast(Request, _Headed(folded))
        if await self.security.validate_request(headed, is_post=True) is not None:
            return None
        if not _accepts_json_and_events(folded.get("accept", "")):
            return None
        try:
            decoded = await parsed_aside(body, "a 2026-07-28 POST body")
        except (ValueError, RecursionError):
            return None
        if type(decoded) is not dict or not decoded.keys() <= _ENVELOPE or decoded.get("jsonrpc") != "2.0":
            return None
        method, request_id, params = decoded.get("method"), decoded.get("id"), decoded.get("params")
        if type(method) is not str or method not in METHODS:
            return None  # an unhashable method (a list, an object) is the SDK's to refuse
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return None
        if type(params) is not dict:
            return None
        route = classify_inbound_request(decoded, headers=folded)
        if isinstance(route, InboundLadderRejection):
            return None
        meta = meta_key(params)
        request = Request(scope)
        if method == "tools/call":
            if not self._headers_agree(params, folded, request):
                return None
            if not valid_call(route.protocol_version, params, meta):
                return None  # the SDK refuses it with its own error
        elif not valid_list(route.protocol_version, params, meta):
            return None  # (an envelope whose values are malformed, say a logLevel of no level)
        if not self.used:
            self.used = True
            log.info("2026-07-28 tools/call, tools/list answered on the HTTP lane (%s=0 turns it off)", FAST_PATH_ENV)
        return Claimed(request, request_id, method, params, route, meta)

    def _headers_agree(self, params: dict[str, Any], folded: Mapping[str, str], request: Request) -> bool:
        """The ``Mcp-Param-*`` check of the SDK's entry passes (a refusal is left to the SDK).

        A schema that names no ``x-mcp-header`` passes any headers there, so whether it
        names one is found once per tool and epoch: the check no longer walks the whole
        schema on every call."""
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or (arguments is not None and not isinstance(arguments, Mapping)):
            return False
        arguments = arguments or {}
        if not arguments and not any(key.startswith(_PARAM_PREFIX) for key in folded):
            return True
        epoch = self.handlers.router.epoch
        schema = None if epoch is None else epoch.input_schema(name)
        if schema is None:
            return True
        if epoch is not self._epoch:
            self._epoch, self._annotated = epoch, {}
        annotated = self._annotated.get(name)
        if annotated is None:
            annotated = self._annotated[name] = names_key(schema, _HEADER_KEYWORD)
        return not annotated or validate_mcp_param_headers(schema, arguments, request.headers) is None

    async def answer(self, claimed: Claimed, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the handler in this task; a disconnect cancels it, as closing the stream does in the SDK."""
        exchange = Exchange(send, claimed.request, claimed.request_id, progress_token_from_params(claimed.params))
        departure = Departure(receive, lambda: not exchange.closed)
        loop = asyncio.get_running_loop()
        pinger: asyncio.TimerHandle | asyncio.Task[None] | None = None

        def start_watching() -> None:
            nonlocal pinger
            departure.watch()
            # (armed only now: most calls are answered before, and never pay for this timer)
            pinger = loop.call_later(max(0.0, exchange.interval - WATCH_AFTER), start_pings)

        def start_pings() -> None:
            nonlocal pinger
            pinger = loop.create_task(exchange.pings())

        watcher = loop.call_later(WATCH_AFTER, start_watching)
        try:
            try:
                message: dict[str, Any] = {
                    "jsonrpc": "2.0",
                    "id": claimed.request_id,
                    "result": await self._run(claimed, exchange),
                }
            except Exception as exc:  # noqa: BLE001 - the SDK's exception-to-wire boundary, mirrored
                error = modern_error_data(exc).model_dump(by_alias=True, mode="json", exclude_none=True)
                message = {"jsonrpc": "2.0", "id": claimed.request_id, "error": error}
            if pinger is not None:
                pinger.cancel()
            await exchange.finish(message)
        except asyncio.CancelledError:
            if not departure.caught():  # (the client closed the stream: this request is over)
                raise
        finally:
            exchange.closed = True
            if pinger is not None:
                pinger.cancel()
            watcher.cancel()
            departure.stop()

    async def _run(self, claimed: Claimed, dctx: Exchange) -> dict[str, Any]:
        connection = envelope_connection(claimed.route, claimed.meta)
        try:
            return await answer_directly(
                self.handlers,
                dctx,
                connection,
                claimed.method,
                claimed.params,
                claimed.request_id,
                self.lifespan,
                claimed.request,
                key=claimed.meta,
            )
        finally:
            await unwind(connection)
