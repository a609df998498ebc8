"""The upstream MCP server: one low-level SDK server in front of the hub.

``initialize`` waits briefly for the discovery barrier so the advertised capabilities
are the union of what the servers offer; ``tools/list`` and every routed request wait
for the barrier, so no client ever sees a partial catalog. Each client connection gets
its own session (activation state and artifacts); on stdio there is one.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, SERVER_INFO_META_KEY
from mcp_types.jsonrpc import INVALID_PARAMS
from mcp_types.methods import is_input_required
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel

from gateway import __version__
from gateway.downstream.connection import DownstreamUnavailable, error_result
from gateway.downstream.modern import relayable
from gateway.engine.hub import ClientConnection, Hub
from gateway.state.session import ClientState
from gateway.upstream.inputs import answer_over_back_channel, missing_capability, refusal, requests_of
from gateway.wire import CACHE_HINTS, LIST_CACHE_FIELDS, with_result_type

log = logging.getLogger("prefixgate.server")

INSTRUCTIONS = (
    "prefixgate aggregates several MCP servers; tool names are '<server prefix>__<tool>'. "
    "When tool_search is offered, some tools are deferred: find them with tool_search, "
    "which activates the tools it returns, then call them (with tool_call when offered). "
    "Large results are cut to a preview; read the full output with artifact_read."
)
INITIALIZE_WAIT = 10.0
"""Seconds ``initialize`` waits for the barrier before advertising every capability."""
_STATE_KEY = "prefixgate.upstream"

StateFactory = Callable[[ServerRequestContext[Any, Any]], ClientState]
"""The state (activation, artifacts) a new client connection belongs to."""


def _connection(ctx: ServerRequestContext[Any, Any]) -> Any:
    # The SDK has one Connection per client connection (stdio: one; HTTP: one per
    # Mcp-Session-Id) but exposes it only on its context object; ServerSession holds it.
    return ctx.session._connection  # noqa: SLF001


def build_server(hub: Hub, new_state: StateFactory) -> tuple[Server[Any], InitializationOptions]:
    router = hub.router

    async def client_of(ctx: ServerRequestContext[Any, Any]) -> ClientConnection:
        connection = _connection(ctx)
        client: ClientConnection | None = connection.state.get(_STATE_KEY)
        if client is None:
            client = await hub.connect(new_state(ctx))
            connection.state[_STATE_KEY] = client
            connection.exit_stack.callback(hub.disconnect, client)
        client.server_session = ctx.session
        return client

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.method in ("initialize", "server/discover"):
            with anyio.move_on_after(INITIALIZE_WAIT):
                await hub.discovered.wait()
            result = await call_next(ctx)
            if ctx.method == "initialize":
                await client_of(ctx)  # connected now: the most recent client from here on
            if isinstance(result, BaseModel):
                result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            if isinstance(result, dict) and "capabilities" in result:
                caps = hub.capabilities() if hub.discovered.is_set() else _everything()
                kept = {k: v for k, v in result["capabilities"].items() if k not in _EVERYTHING}
                result["capabilities"] = {**kept, **caps}
            return result
        if ctx.request_id is not None:
            await client_of(ctx)
            if ctx.method == "tools/list":
                # The epoch's wire form was built (and validated) once: serve it as is,
                # canonical bytes, instead of re-validating thousands of tools on every call.
                epoch = await router.current()
                return list_result(ctx, epoch.published(ctx.protocol_version), server.server_info_stamp)
            if ctx.method == "tools/call" and ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
                # The hot path: the router checks names and arguments itself and every
                # result it returns is checked against the protocol model (router._checked),
                # so the SDK's own params model and result re-validation are skipped.
                params = ctx.params or {}
                name, arguments = params.get("name"), params.get("arguments")
                if isinstance(name, str) and (arguments is None or isinstance(arguments, dict)):
                    return await call_tool_raw(ctx, name, arguments)
        return await call_next(ctx)

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:  # pragma: no cover
        epoch = await router.current()  # the middleware answers tools/list; kept for the SDK's capabilities
        return list_result(ctx, epoch.published(ctx.protocol_version), server.server_info_stamp)

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        return _result(ctx, dict(await call_tool_raw(ctx, params.name, params.arguments)))

    async def call_tool_raw(ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any] | None) -> Any:
        client = await client_of(ctx)
        raw_meta = (ctx.params or {}).get("_meta")
        meta = dict(raw_meta) if isinstance(raw_meta, dict) else None
        wants_progress = bool(meta and meta.get("progressToken") is not None)
        if (declared := _declared(ctx)) is not None:
            # What this client can answer (either era), for a 2026-07-28 server (gateway/downstream/modern.py).
            meta = {**(meta or {}), CLIENT_CAPABILITIES_META_KEY: declared}

        async def progress(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        await router.current()
        target = router.server_of(name, arguments)

        def run(on_progress: Any, answers: Mapping[str, Any] | None = None) -> Awaitable[dict[str, Any]]:
            return router.call(
                name,
                arguments,
                client.state,
                meta=meta,
                on_progress=on_progress if wants_progress else None,
                version=ctx.protocol_version,
                answers=answers,
            )

        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:

            async def quiet_progress(value: float, total: float | None, message: str | None) -> None:
                with contextlib.suppress(Exception):  # the request that asked may be answered already
                    await progress(value, total, message)

            # Its logs go to this request while it waits (no place in the back-channel order).
            with _in_flight(client, ctx, target, None):
                return await with_input(
                    ctx, client, "tools/call", name, _digest(arguments), target, lambda a: run(quiet_progress, a)
                )
        with _in_flight(client, ctx, target, hub.round_trips.order()):
            result = await run(progress)
            if target is not None and is_input_required(result):
                try:
                    return await over_back_channel(result, target, lambda a: run(progress, a))
                except MCPError as exc:
                    return error_result(f"{target}: tool {name!r}: {exc.error.message}")
            return result

    async def over_back_channel(
        first: dict[str, Any], server_id: str, retry: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """A modern server's ``input_required`` during a handshake-era client's request:
        the gateway asks that client over its back-channel and retries the server."""
        downstream = hub.by_id[server_id]

        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await hub.server_request(downstream, method, params)

        return await answer_over_back_channel(first, server_id, ask, retry, hub.config.gateway.max_round_trips)

    async def with_input(
        ctx: ServerRequestContext[Any, Any],
        client: ClientConnection,
        method: str,
        target: str,
        binding: str,
        server_id: str | None,
        run: Callable[[Mapping[str, Any] | None], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """A modern client's request: the call runs in the gateway, so a server's request
        for input becomes an ``input_required`` result and the retry resumes the call.

        A modern server's own ``input_required`` is passed on with its state wrapped, and
        a retry carrying such a state goes straight back to that server (gateway/upstream/inputs.py).
        """
        params = ctx.params or {}
        state = params.get("requestState")
        capabilities = ctx.session.client_capabilities
        trips = hub.round_trips
        owner = client.state

        def passed_on(result: dict[str, Any]) -> dict[str, Any]:
            if server_id is None or not is_input_required(result):
                return result
            lacking = missing_capability(requests_of(result, server_id), capabilities)
            if lacking is not None:
                if method == "tools/call":
                    return error_result(f"{server_id}: tool {target!r}: {refusal(lacking).error.message}")
                raise refusal(lacking)
            server_state = result.get("requestState")
            wrapped = trips.wrap(
                owner, method, target, binding, server_id, server_state if isinstance(server_state, str) else None
            )
            return {**result, "requestState": wrapped}

        if trips.is_wrapped(state):
            origin, server_state = trips.unwrap(state, owner, method, target, binding)
            if origin != server_id:
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"prefixgate: {method} {target!r}: requestState belongs to server {origin!r}, "
                    "which no longer serves this request; call again without requestState",
                )
            answers: dict[str, Any] = {"inputResponses": params.get("inputResponses") or {}}
            if server_state is not None:
                answers["requestState"] = server_state
            return passed_on(await run(answers))
        if state is not None:
            responses = params.get("inputResponses")
            trip = trips.resume(state, owner, method, target, binding, capabilities, responses)
        elif server_id is None:
            return await run(None)
        else:
            # Answers sent before anything was asked go to a modern server as they are (its
            # keys; it ignores what it did not ask for); a handshake-era server has no use for them.
            given = params.get("inputResponses")
            early = {"inputResponses": given} if isinstance(given, dict) and hub.by_id[server_id].modern else None

            async def first() -> dict[str, Any]:
                return passed_on(await run(early))

            trip = trips.begin(owner, method, target, binding, server_id, capabilities, first)
        return await trips.next_answer(trip)

    # --- resources, prompts, completion, logging --------------------------------------

    async def routed(
        ctx: ServerRequestContext[Any, Any], server_id: str | None, what: str, method: str, params: dict[str, Any]
    ) -> Any:
        if server_id is None:
            raise MCPError(code=INVALID_PARAMS, message=f"prefixgate: no server offers {what}")
        downstream = hub.by_id[server_id]

        async def run(answers: Mapping[str, Any] | None = None) -> dict[str, Any]:
            try:
                return await downstream.request(
                    method,
                    {**params, **(answers or {})},
                    timeout=downstream.config.call_timeout,
                    capabilities=relayable(_declared(ctx)),
                )
            except DownstreamUnavailable as exc:
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None

        if method not in _INPUT_METHODS:
            return _result(ctx, await run())
        client = await client_of(ctx)
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            target = str(params.get("uri") if method == "resources/read" else params.get("name"))
            return _result(ctx, await with_input(ctx, client, method, target, _digest(params), server_id, run))
        with _in_flight(client, ctx, server_id, hub.round_trips.order()):
            result = await run()
            if is_input_required(result):
                result = await over_back_channel(result, server_id, run)
        return _result(ctx, result)

    def raw(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        params = dict(ctx.params or {})
        for key in ("_meta", "inputResponses", "requestState"):  # this client's round trip, not the server's
            params.pop(key, None)
        return params

    async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        await router.current()
        return _result(ctx, {"resources": hub.surface.resources})

    async def list_templates(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        await router.current()
        return _result(ctx, {"resourceTemplates": hub.surface.templates})

    async def read_resource(ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams) -> Any:
        await router.current()
        uri = str(params.uri)
        return await routed(ctx, _resource_server(hub, uri), f"resource {uri!r}", "resources/read", raw(ctx))

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> Any:
        await router.current()
        uri = str(params.uri)
        client = await client_of(ctx)
        if uri not in client.subscriptions:
            await hub.watches.watch(uri)
            client.subscriptions.add(uri)
        return _result(ctx, {})

    async def unsubscribe(ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams) -> Any:
        await router.current()
        uri = str(params.uri)
        client = await client_of(ctx)
        if uri in client.subscriptions:
            client.subscriptions.discard(uri)
            await hub.watches.unwatch(uri)
        return _result(ctx, {})

    async def list_prompts(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        await router.current()
        return _result(ctx, {"prompts": hub.surface.prompts})

    async def get_prompt(ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
        await router.current()
        route = hub.surface.prompt_route.get(params.name)
        if route is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown prompt {params.name!r}")
        server_id, original = route
        return await routed(ctx, server_id, f"prompt {params.name!r}", "prompts/get", {**raw(ctx), "name": original})

    async def complete(ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams) -> Any:
        await router.current()
        request = raw(ctx)
        ref = dict(request.get("ref") or {})
        server_id: str | None = None
        if ref.get("type") == "ref/prompt":
            route = hub.surface.prompt_route.get(str(ref.get("name")))
            if route is not None:
                server_id, ref["name"] = route
        elif ref.get("type") == "ref/resource":
            uri = str(ref.get("uri"))
            server_id = hub.surface.owner_of_template(uri) or hub.surface.owner_of_uri(uri)
        what = f"completion for {ref.get('type')}"
        return await routed(ctx, server_id, what, "completion/complete", {**request, "ref": ref})

    async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> Any:
        await router.current()
        await hub.set_log_level(await client_of(ctx), params.level)
        return {}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging/setLevel is deprecated in 2026-07-28; still served
        server: Server[Any] = Server(
            "prefixgate",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
            on_completion=complete,
            on_set_logging_level=set_level,
            on_subscriptions_listen=WatchingListen(hub),
            cache_hints=CACHE_HINTS,
        )
    server.middleware.insert(0, middleware)
    options = server.create_initialization_options(
        NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)
    )
    return server, options


_INPUT_METHODS = ("prompts/get", "resources/read")
"""Besides tools/call, the requests a server may answer with a request for input."""


def _declared(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    """The capabilities the client declared: at ``initialize``, or on this 2026-07-28 request."""
    declared = ctx.session.client_capabilities
    return None if declared is None else declared.model_dump(by_alias=True, mode="json", exclude_none=True)


@contextlib.contextmanager
def _in_flight(
    client: ClientConnection, ctx: ServerRequestContext[Any, Any], target: str | None, order: Any
) -> Iterator[None]:
    """Record a call to ``target`` as in flight for the time of the block, so a server's
    logs and requests find the call (and client) that caused them."""
    if target is not None:
        client.calls[ctx.request_id] = target
        client.call_sessions[ctx.request_id] = ctx.session
        if order is not None:
            client.call_order[ctx.request_id] = order
    try:
        yield
    finally:
        client.calls.pop(ctx.request_id, None)
        client.call_order.pop(ctx.request_id, None)
        client.call_sessions.pop(ctx.request_id, None)


def _digest(value: Any) -> str:
    """What a ``requestState`` binds besides the target: the request's arguments."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def list_result(
    ctx: ServerRequestContext[Any, Any], tools: list[dict[str, Any]], stamp: dict[str, Any]
) -> dict[str, Any]:
    """A ``tools/list`` result as the SDK's result pipeline would finish it, which a
    middleware answer bypasses: on 2026-07-28 with its type, cache hints and the
    ``serverInfo`` stamp."""
    if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        return {"tools": tools}
    return {"tools": tools, **LIST_CACHE_FIELDS, "_meta": {SERVER_INFO_META_KEY: stamp}}


def _result(ctx: ServerRequestContext[Any, Any], result: dict[str, Any]) -> dict[str, Any]:
    return with_result_type(result, ctx.protocol_version)


def _resource_server(hub: Hub, uri: str) -> str | None:
    """The server that answers for a URI (see ``Hub._resource_owner``)."""
    owner = hub.resource_owner(uri)
    return owner.id if owner is not None else None


_EVERYTHING: dict[str, Any] = {
    "tools": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "prompts": {"listChanged": True},
    "completions": {},
    "logging": {},
}
"""Every capability the gateway can relay; it advertises those its servers offer."""


def _everything() -> dict[str, Any]:
    return copy.deepcopy(_EVERYTHING)


MAX_LISTEN_URIS = 64
"""Resources one ``subscriptions/listen`` stream may watch."""


class WatchingListen:
    """``subscriptions/listen`` that also watches the stream's resources downstream.

    The SDK's handler filters the gateway's own event bus; a resource update reaches that
    bus only if the owning server reports it, so the stream's ``resourceSubscriptions``
    are watched (counted, see gateway/engine/watches.py) while the stream is open.
    """

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.inner = ListenHandler(hub.bus)

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> Any:
        wanted = sorted(set(params.notifications.resource_subscriptions or ()))
        if len(wanted) > MAX_LISTEN_URIS:
            raise MCPError(
                code=INVALID_PARAMS,
                message=(
                    f"prefixgate: a listen stream may watch at most {MAX_LISTEN_URIS} resources ({len(wanted)} given)"
                ),
            )
        watched: list[str] = []
        try:
            for uri in wanted:
                try:
                    await self.hub.watches.watch(uri)
                    watched.append(uri)
                except MCPError as exc:  # not offered, or refused: the stream serves the rest
                    log.info("listen stream: not watching %r: %s", uri, exc.message)
            return await self.inner(ctx, params)
        finally:
            with anyio.CancelScope(shield=True):
                for uri in watched:
                    await self.hub.watches.unwatch(uri)
