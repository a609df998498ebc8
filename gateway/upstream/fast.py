"""``tools/call`` on stdio answered from the reader: parsed once, gated once, written once.

Through the SDK a call costs about eight task hops and four (de)serialisations in the
gateway. On stdio the gateway owns its end of the wire (gateway/upstream/stdio.py),
so a ``tools/call`` line is claimed here right after ``json.loads``: the same
``Handlers.run_tool_call`` and ``Handlers.finish`` the SDK path runs (resolution, policy,
activation, arguments, forward, spill, result check, both eras' round trips), under a
real ``ServerRequestContext`` built as the SDK's runner builds it, and the response is
encoded as the SDK encodes it. So the bytes are the SDK path's bytes
(tests/test_fast_path.py sends the same requests down both).

Only what the SDK would run the same way is claimed: a well-formed ``tools/call`` on a
handshake connection once ``initialize`` was accepted, or a 2026-07-28 request whose
envelope passes the SDK's inbound ladder on a connection that opened in that era.
Everything else (initialize, lists, notifications, the client's answers to the
gateway's own requests) still goes to the SDK, which owns those ids: a server's request
during a fast call goes out through the SDK's dispatcher and its answer comes back there.

``PREFIXGATE_FAST_PATH=0`` turns the lane off (every request through the SDK).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import CallOptions, coerce_request_id
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data, progress_token_from_params
from mcp.shared.message import MessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import CONNECTION_CLOSED, PROTOCOL_VERSION_META_KEY, ErrorData, RequestParams
from mcp_types.methods import validate_client_request
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from gateway.fastpath import FAST_PATH_ENV
from gateway.sdk import connection_like, connection_of, modern_error_data, notify_only
from gateway.shapes import plain_call_params
from gateway.upstream.server import Handlers
from gateway.upstream.stdio import ClientWriter

log = logging.getLogger("prefixgate.fast")

_ENVELOPE = frozenset(("jsonrpc", "id", "method", "params"))
_SHUTDOWN_WRITE_TIMEOUT = 1.0
"""As the SDK's dispatcher: the shutdown answer to an unanswered call gives up after this."""


class _WireOutbound:
    """A modern connection's standalone channel: notifications on the wire, no requests."""

    def __init__(self, wire: ClientWriter) -> None:
        self.wire = wire

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        await self.wire.send(_notification(method, params))


def progress_params(token: Any, progress: float, total: float | None, message: str | None) -> dict[str, Any]:
    """A ``notifications/progress`` payload as the SDK's dispatch contexts build it."""
    params: dict[str, Any] = {"progressToken": token, "progress": progress}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    return params


def _notification(method: str, params: Mapping[str, Any] | None) -> types.JSONRPCNotification:
    """As the SDK's dispatcher builds it (``params`` left unset when None)."""
    if params is not None:
        return types.JSONRPCNotification(jsonrpc="2.0", method=method, params=dict(params))
    return types.JSONRPCNotification(jsonrpc="2.0", method=method)


class CallContext:
    """The request-scoped channel of one fast call: the SDK's ``DispatchContext`` contract.

    Notifications (progress, logs) go on the wire in order with the call's answer; a
    server-to-client request goes through the SDK connection's own channel, whose
    dispatcher owns request ids and matches the client's reply.
    """

    def __init__(
        self,
        wire: ClientWriter,
        request_id: types.RequestId,
        token: Any,
        requests: Connection | None,
    ) -> None:
        self.wire = wire
        self._request_id = request_id
        self._token = token
        self._requests = requests
        self._closed = False
        self._cancel_requested: anyio.Event | None = None
        self.transport = TransportContext(kind="jsonrpc", can_send_request=requests is not None)

    @property
    def cancel_requested(self) -> anyio.Event:
        """Made when first asked for (nothing in the gateway waits on it): one event less per call."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    @property
    def request_id(self) -> types.RequestId | None:
        return self._request_id

    @property
    def message_metadata(self) -> MessageMetadata:
        return None

    @property
    def can_send_request(self) -> bool:
        return self.transport.can_send_request and not self._closed

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if self._requests is None or not self.can_send_request:
            raise NoBackChannelError(method)
        return await self._requests.outbound.send_raw_request(method, params, opts)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        if self._closed:
            log.debug("dropped %s: the call was answered", method)
            return
        await self.wire.send(_notification(method, params))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self._token is not None:
            await self.notify("notifications/progress", progress_params(self._token, progress, total, message))

    def close(self) -> None:
        self._closed = True


class FastCall:
    """One claimed ``tools/call``: run as the SDK's dispatcher and runner would run it, in a
    plain asyncio task (an anyio task-group task with its cancel scope costs ~20 µs more per
    call); the client's ``notifications/cancelled`` cancels that task."""

    def __init__(
        self,
        calls: FastCalls,
        request_id: types.RequestId,
        params: dict[str, Any],
        route: InboundModernRoute | None,
        legacy: Connection | None,
        meta: str | None,
    ) -> None:
        self.calls = calls
        self.meta = meta
        """The request's ``meta_key``."""
        self.request_id = request_id
        self.params = params
        self.route = route
        self.legacy = legacy
        self.cancelled = False
        """The client cancelled it: no answer is written, as in the SDK."""
        self.task: asyncio.Task[None] | None = None
        self.started = False
        self.wire: ClientWriter | None = None
        self.connection: Connection | None = None
        """A 2026-07-28 call's own connection, closed once its answer is written."""
        self.key = coerce_request_id(request_id)
        calls.cancellable[self.key] = self  # from the moment it is read; duplicate ids overwrite, as in the SDK

    def start(self, wire: ClientWriter) -> None:
        self.wire = wire
        self.task = asyncio.get_running_loop().create_task(self.run(wire))
        wire.claimed.add(self.task)

    def _unlist(self) -> None:
        """No longer cancellable by its id (answered, or over)."""
        if self.calls.cancellable.get(self.key) is self:
            del self.calls.cancellable[self.key]

    def _forget(self) -> None:
        """Out of the lane's and the wire's books (no done-callback: one loop turn less per call)."""
        self._unlist()
        if self.wire is not None and self.task is not None:
            self.wire.claimed.discard(self.task)
        # A cancelled task keeps its cancellation, whose traceback holds this call's frames:
        # holding the task here too would make every cancelled call a reference cycle.
        self.task = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()
        if not self.started:  # it will never run its own cleanup (nor start: it waited its turn)
            self._forget()

    async def run(self, wire: ClientWriter) -> None:
        """Answer on ``wire``; then close the call's own connection (2026-07-28). The SDK closes
        it before its dispatcher writes the answer; only the gateway's client record is on it
        (unwind), whose removal the client cannot observe, so the answer goes out first."""
        self.started = True
        try:
            await self.answer_on(wire)
        finally:
            self._forget()
            if self.connection is not None:
                await unwind(self.connection)

    async def answer_on(self, wire: ClientWriter) -> None:
        request_id = self.request_id
        token = progress_token_from_params(self.params)
        dctx = CallContext(wire, request_id, token, self.legacy)
        answered = False
        try:
            try:
                result = await self.answer(dctx)
            finally:
                dctx.close()
                self._unlist()
            if not self.cancelled:
                answered = True
                await wire.send_result(request_id, result)
        except asyncio.CancelledError:
            if self.cancelled:
                dctx.cancel_requested.set()
            elif not answered:
                closed = ErrorData(code=CONNECTION_CLOSED, message="Connection closed")
                with anyio.move_on_after(_SHUTDOWN_WRITE_TIMEOUT, shield=True):
                    await wire.send(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=closed))
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK's exception-to-wire boundary, mirrored
            error = self.error_of(exc)
            if not self.cancelled:
                await wire.send(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))

    def error_of(self, exc: Exception) -> ErrorData:
        """The error the SDK's dispatcher writes for a handler's exception, per era."""
        if self.route is not None:
            return modern_error_data(exc)
        error = handler_exception_to_error_data(exc)
        if error is None:
            log.exception("handler for 'tools/call' raised")
            error = ErrorData(code=0, message=str(exc))
        return error

    async def answer(self, dctx: CallContext) -> dict[str, Any]:
        calls, params, route = self.calls, self.params, self.route
        handlers = calls.handlers
        if route is not None:
            connection = self.connection = envelope_connection(route, self.meta, calls.outbound(dctx.wire))
        else:
            assert self.legacy is not None
            connection = self.legacy
        try:
            request_id, lifespan = self.request_id, calls.lifespan
            return await answer_directly(
                handlers, dctx, connection, "tools/call", params, request_id, lifespan, key=self.meta
            )
        except (MCPError, ValidationError):
            raise
        except Exception as exc:
            if route is None:
                raise
            error = modern_error_data(exc)  # as the SDK's modern stream loop maps it, inside the call
            raise MCPError(code=error.code, message=error.message, data=error.data) from exc


class FastCalls:
    """The stdio end's ``Lane``: claims the ``tools/call`` requests it can answer as the SDK would."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers
        self.legacy: Connection | None = None
        """The SDK's handshake-era connection, once a request of it was seen."""
        self.modern = False
        """Whether the connection opened in the 2026-07-28 era (the SDK decides, once)."""
        self.lifespan: Any = None
        self.cancellable: dict[Any, FastCall] = {}
        self.used = False
        self._outbound: tuple[ClientWriter, Any] | None = None
        handlers.server.middleware.insert(0, self.observe)

    async def observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        """Learn the connection's era from what the SDK serves: claims start after that."""
        self.lifespan = ctx.lifespan_context
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            self.modern = True
        elif self.legacy is None:
            self.legacy = connection_of(ctx)
        return await call_next(ctx)

    def outbound(self, wire: ClientWriter) -> Any:
        """A 2026-07-28 connection's channel on ``wire`` (notifications only), made once per wire."""
        if self._outbound is None or self._outbound[0] is not wire:
            self._outbound = (wire, notify_only(_WireOutbound(wire)))
        return self._outbound[1]

    def claim(self, data: Any) -> FastCall | None:
        """A ``tools/call`` the SDK would hand to ``Handlers`` unchanged, else None."""
        if type(data) is not dict or data.get("method") != "tools/call" or data.get("jsonrpc") != "2.0":
            return None
        request_id = data.get("id")
        params = data.get("params")
        if isinstance(request_id, bool) or not isinstance(request_id, int | str) or type(params) is not dict:
            return None
        if not data.keys() <= _ENVELOPE:
            return None
        meta = params.get("_meta")
        enveloped = isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
        key = meta_key(params)
        route: InboundModernRoute | None = None
        if self.modern:
            if not enveloped or (route := route_of(params, key)) is None:
                return None
            version = route.protocol_version
        elif self.legacy is not None and self.legacy.initialize_accepted and not enveloped:
            version = self.legacy.protocol_version
        else:
            return None
        if (route is not None or not plain_call_params(params)) and not valid_call(version, params, key):
            return None  # the SDK refuses it with its own error
        if not self.used:
            self.used = True
            log.info("tools/call is answered on the stdio fast path (%s=0 turns it off)", FAST_PATH_ENV)
        return FastCall(self, request_id, params, route, None if route is not None else self.legacy, key)

    def cancel(self, request_id: Any) -> None:
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return
        call = self.cancellable.get(coerce_request_id(request_id))
        if call is not None:
            call.cancel()


async def answer_directly(
    handlers: Handlers,
    dctx: Any,
    connection: Connection,
    method: str,
    params: dict[str, Any],
    request_id: types.RequestId,
    lifespan: Any,
    request: Any = None,
    *,
    key: str | None,
) -> dict[str, Any]:
    """``tools/call`` or ``tools/list`` answered as ``Handlers.middleware`` answers it, for a
    direct path (this one, the HTTP lane) that made its own dispatch context and connection:
    the request context as the SDK's runner builds it, then the client record, the gate and
    ``finish``. ``key``: the request's ``meta_key``."""
    meta = meta_of(params, key)
    ctx: ServerRequestContext[Any, Any] = ServerRequestContext(
        session=ServerSession(dctx, connection, request_meta=meta),
        lifespan_context=lifespan,
        method=method,
        params=params,
        request_id=request_id,
        meta=meta,
        protocol_version=connection.protocol_version,
        request=request,
    )
    client = await handlers.client_of(ctx)
    if method == "tools/list":
        return dict(await handlers.list_tools(ctx, None))
    result = await handlers.run_tool_call(ctx, client, params["name"], params.get("arguments"))
    return dict(handlers.finish(ctx, result))


class _Remembered:
    """The latest distinct values of something a client repeats on every request (LRU,
    bounded: a client varying it only evicts its own), keyed by ``meta_key``."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.seen: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str) -> Any:
        found = self.seen.get(key)
        if found is not None:
            self.seen.move_to_end(key)
        return found

    def put(self, key: str, value: Any) -> None:
        self.seen[key] = value
        if len(self.seen) > self.size:
            self.seen.popitem(last=False)


class _Envelopes:
    """The connections the latest distinct request envelopes made, as models for the next
    ones (``connection_like``): each client sends the same envelope on every request."""

    models = _Remembered()
    no_channel: Any = None


_VALID_CALLS = _Remembered(256)
"""``tools/call`` params found valid, ``arguments`` aside (see ``valid_call``)."""
_METAS = _Remembered()
"""The ``_meta`` models of the latest distinct request ``_meta`` objects (read only)."""
_ROUTES = _Remembered()
"""The inbound ladder's verdicts on the latest distinct ``_meta`` objects (see ``route_of``)."""


MAX_META_KEY = 4096
"""Longest ``_meta`` (as its key) remembered: every cache keyed by it holds a bounded number
of keys, so this bounds what a client's envelopes can make the gateway keep."""


def meta_key(params: Mapping[str, Any]) -> str | None:
    """A key for a request's ``_meta`` ("" when it has none), made once per request, that
    keys every value remembered about the envelope: its ``repr``, which tells apart any two
    different JSON values (strings quoted and escaped, ``True`` from ``1``, ``1.0`` from
    ``1``) at a third of the cost of canonical JSON; the same envelope with its keys in
    another order only makes a second key. None, so that nothing is remembered, when it
    cannot be keyed (nested past the interpreter's recursion limit), is longer than
    ``MAX_META_KEY``, or is new on every request: one that carries a progress token
    (keeping it would only evict the envelopes worth keeping)."""
    if "_meta" not in params:
        return ""
    raw = params["_meta"]
    if isinstance(raw, dict) and "progressToken" in raw:
        return None
    try:
        key = repr(raw)
    except RecursionError:
        return None
    return key if len(key) <= MAX_META_KEY else None


def route_of(params: Mapping[str, Any], key: str | None) -> InboundModernRoute | None:
    """The SDK's inbound ladder (``classify_inbound_request``, no headers: stdio) on a
    request's params, or None where it rejects them; remembered per ``_meta`` (``key``:
    ``meta_key``), the one part of the request that ladder reads. The route is frozen and
    its envelope values are only read, so it is shared."""
    found = _ROUTES.get(key) if key is not None else None
    if found is None:
        found = classify_inbound_request({"method": "tools/call", "params": params})
        if key is not None:
            _ROUTES.put(key, found)
    return found if isinstance(found, InboundModernRoute) else None


_PLAIN_CALL = frozenset(("name", "arguments", "_meta"))
MAX_NAME_KEY = 256
"""Longest tool name a verdict is remembered for (the spec's names are at most 128
characters): a client's made-up names cannot fill the cache with megabytes."""


def valid_call(version: str, params: dict[str, Any], meta: str | None) -> bool:
    """``validate_client_request("tools/call", version, params)``'s verdict, remembered.

    A client sends the same envelope on every call and only the name and arguments vary;
    ``arguments`` is ``dict[str, Any] | None`` in every era, so any object gives the same
    verdict: a call of just a name, arguments and ``_meta`` is validated once per distinct
    name (up to ``MAX_NAME_KEY``) and ``_meta`` (``meta``, its key). Anything else is
    validated every time."""
    name, arguments = params.get("name"), params.get("arguments", {})
    plain = (
        meta is not None
        and type(name) is str
        and len(name) <= MAX_NAME_KEY
        and type(arguments) is dict
        and params.keys() <= _PLAIN_CALL
    )
    # Neither the version nor a repr holds a NUL (it escapes one), so the name can come last unescaped.
    key = f"{version}\0{meta}\0{name}" if plain else None
    return _remembered_verdict("tools/call", version, params, key, _VALID_CALLS)


_VALID_LISTS = _Remembered()
"""``tools/list`` envelopes found valid (see ``valid_list``)."""


def valid_list(version: str, params: dict[str, Any], meta: str | None) -> bool:
    """``validate_client_request("tools/list", version, params)``'s verdict, remembered: a
    client lists with the same envelope each time, so a list of just ``_meta`` is validated
    once per distinct ``_meta`` (``meta``, its key). Anything else is validated every time."""
    key = f"{version}\0{meta}" if meta is not None and params.keys() <= {"_meta"} else None
    return _remembered_verdict("tools/list", version, params, key, _VALID_LISTS)


def _remembered_verdict(method: str, version: str, params: dict[str, Any], key: str | None, valid: _Remembered) -> bool:
    """``validate_client_request``'s verdict, taken from ``valid`` under ``key`` (None: not kept)."""
    if key is not None and valid.get(key) is not None:
        return True
    try:
        validate_client_request(method, version, params)
    except (ValidationError, KeyError):
        return False
    if key is not None:
        valid.put(key, True)
    return True


async def unwind(connection: Connection) -> None:
    """Close a per-request connection: only the gateway's own synchronous callbacks are on
    its exit stack (the client record's), so closing it never suspends and needs neither
    the shield nor the timer of the SDK's ``aclose_shielded``."""
    try:
        await connection.exit_stack.aclose()
    except Exception:  # noqa: BLE001 - as aclose_shielded: logged, never masking the request's outcome
        log.exception("connection exit_stack cleanup raised")


def envelope_connection(route: InboundModernRoute, key: str | None, outbound: Any = None) -> Connection:
    """``Connection.from_envelope`` for a route, built once per distinct envelope (three
    model validations and an event) and then copied (``connection_like``: the SDK keeps the
    same models read-only on the connection, so they can be shared). ``key`` is the
    request's ``meta_key``: the envelope is read from ``_meta`` alone. ``outbound``: the
    channel (None: the SDK's no-channel sentinel)."""
    version, info, capabilities = route.protocol_version, route.client_info, route.client_capabilities
    channel = {"outbound": outbound} if outbound is not None else {}
    if key is None:
        return Connection.from_envelope(version, info, capabilities, **channel)
    model = _Envelopes.models.get(key)
    if model is None or model.outbound is not (outbound if outbound is not None else _Envelopes.no_channel):
        model = Connection.from_envelope(version, info, capabilities, **channel)
        if outbound is None:
            _Envelopes.no_channel = model.outbound
        _Envelopes.models.put(key, model)
    return connection_like(model)


def meta_of(params: Mapping[str, Any], key: str | None) -> types.RequestParamsMeta | None:
    """The request's ``_meta`` as the SDK's runner lifts it (None when absent or malformed);
    parsed once per distinct value (a 2026-07-28 client repeats its envelope in every
    ``_meta``), the model shared read-only as the envelope's are (``key``: ``meta_key``)."""
    if "_meta" not in params:
        return None
    raw = params["_meta"]
    found = _METAS.get(key) if key is not None else None
    if found is not None:
        return None if found is _MALFORMED else found
    try:
        meta = RequestParams.model_validate({"_meta": raw}, by_name=False).meta
    except ValidationError:
        meta = None
    if key is not None:
        _METAS.put(key, _MALFORMED if meta is None else meta)
    return meta


_MALFORMED = object()
