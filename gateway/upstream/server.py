"""The upstream MCP server: one low-level SDK server in front of the hub.

``initialize`` is answered at once, never behind the discovery barrier: it advertises the
union of what the servers offer once the catalog is known (from the barrier, or from a
warm start's record), and everything the gateway can relay before that. ``tools/list``
and every routed request wait for a published epoch, so no client ever sees a partial
catalog. Each client connection gets its own session (activation state and artifacts);
on stdio there is one.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    LOG_LEVEL_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED,
)
from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, REQUEST_TIMEOUT
from mcp_types.methods import is_input_required, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from gateway import __version__, tracing
from gateway.config import env_count
from gateway.downstream.calltime import CallTimedOut
from gateway.downstream.connection import Downstream, offers
from gateway.downstream.errors import DownstreamUnavailable
from gateway.downstream.link import ProgressFn
from gateway.downstream.modern import relayable, relayed_meta
from gateway.downstream.related import CALLER
from gateway.downstream.stdio import MESSAGE_TOO_LARGE, UNPARSABLE_REPLY
from gateway.downstream.toolcall import connection_gone, one_line
from gateway.engine.capabilities import answers_none, refusal
from gateway.engine.clients import ClientConnection
from gateway.engine.hub import Hub
from gateway.engine.relay import Relay
from gateway.engine.router import result_shape
from gateway.engine.shares import Shares
from gateway.engine.telemetry import UNKNOWN_TOOL
from gateway.eras import CACHE_HINTS, LIST_CACHE_FIELDS, with_result_type
from gateway.results import error_result
from gateway.sdk import UpdatesListen, connection_of
from gateway.state.session import ClientState, principal_key
from gateway.upstream.inputs import (
    answer_over_back_channel,
    declined,
    missing_capability,
    requests_of,
    url_elicitations,
)
from spill import json_size

log = logging.getLogger("prefixgate.server")


def instructions(separator: str = "__") -> str:
    """What ``initialize`` and ``server/discover`` tell the model, naming the configured
    separator (``[gateway] separator``): with ``-`` the names are ``github-create_issue``,
    and the model read that they were ``github__create_issue``. A function of the config
    only, so answered at once, before any server is up, the same whatever is down."""
    return (
        f"prefixgate aggregates several MCP servers; tool names are '<server prefix>{separator}<tool>'. "
        "When tool_search is offered, some tools are deferred: find them with tool_search, "
        "which activates the tools it returns, then call them (with tool_call when offered). "
        "Large results are cut to a preview; read the full output with artifact_read."
    )


INSTRUCTIONS = instructions()
"""The instructions with the default separator."""
UNKNOWN_PROMPT = "Unknown prompt: not among the prompts prefixgate lists"
"""prompts/get's and completion's refusal of a prompt name: the name is not repeated (a client's
own text, which the SDK's trace span would record in its status)."""
_STATE_KEY = "prefixgate.upstream"
_ROOTS_CHANGED = "notifications/roots/list_changed"

StateFactory = Callable[[ServerRequestContext[Any, Any]], ClientState]
"""The state (activation, artifacts) a new client connection belongs to."""
Context = ServerRequestContext[Any, Any]
RunWith = Callable[[Mapping[str, Any] | None], Awaitable[dict[str, Any]]]
"""One attempt at a request, given the answers of its retry (None on the first)."""


def build_server(
    hub: Hub, new_state: StateFactory, *, detached: bool = False
) -> tuple[Server[Any], InitializationOptions]:
    """The low-level SDK server every transport (stdio, HTTP) runs; ``detached``: its clients are
    not the hub's (no notifications, no relays: the warm-start record's own requests)."""
    handlers = Handlers(hub, new_state, detached=detached)
    return handlers.server, handlers.options


class Handlers:
    """The gateway's MCP server side: one handler per method, on one hub.

    The SDK validates and dispatches; the middleware answers the two hot requests itself
    (``tools/list`` from the epoch's published form, ``tools/call`` in both protocol eras)
    because the router already checks what they carry and return. A call reads top to
    bottom: the client, the barrier once, the name resolved once, then the call.
    """

    def __init__(self, hub: Hub, new_state: StateFactory, *, detached: bool = False) -> None:
        self.hub = hub
        self.router = hub.router
        self.new_state = new_state
        self.detached = detached
        self._roots_told: set[object] = set()
        """Principals (``principal_key``) whose roots changed since the servers were last told."""
        self._telling_roots = False
        self.listening = WatchingListen(hub)
        """``subscriptions/listen``, which a token taken away ends (``WatchingListen.end``)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging/setLevel, roots: deprecated in 2026-07-28; still served
            self.server: Server[Any] = Server(
                "prefixgate",
                version=__version__,
                instructions=INSTRUCTIONS,
                on_list_tools=self.list_tools,
                on_call_tool=self.call_tool,
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_templates,
                on_read_resource=self.read_resource,
                on_subscribe_resource=self.subscribe,
                on_unsubscribe_resource=self.unsubscribe,
                on_list_prompts=self.list_prompts,
                on_get_prompt=self.get_prompt,
                on_completion=self.complete,
                on_set_logging_level=self.set_level,
                on_roots_list_changed=self.roots_changed,
                on_subscriptions_listen=self.listening,
                cache_hints=CACHE_HINTS,
                get_tool_input_schema=self.input_schema,
            )
        if detached:
            # The SDK's only default middleware is its server span per request ("drop it from
            # this list to opt out"): the warm-start record's requests are the gateway's own,
            # and a trace backend would show them as clients' after every published epoch.
            self.server.middleware.clear()
        if tracing.configured() and not detached:
            self.server.middleware.append(self.traced)  # inside the SDK's span, which it then covers
        else:
            self.server.middleware.insert(0, self.middleware)
        self.options = self.server.create_initialization_options(
            NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)
        )

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The ``inputSchema`` a 2026-07-28 ``tools/list`` publishes for ``name`` (None before
        the first epoch, or for a name it does not list): the SDK's HTTP entry checks a call's
        ``Mcp-Param-*`` headers against it, and without this lookup it would list every tool
        again on every call to find it."""
        epoch = self.router.epoch
        return None if epoch is None else epoch.input_schema(name)

    async def client_of(self, ctx: Context) -> ClientConnection:
        """The gateway's record of the client this request came from (made on first use)."""
        connection = connection_of(ctx)
        client: ClientConnection | None = connection.state.get(_STATE_KEY)
        if client is None and self.detached:
            client = connection.state[_STATE_KEY] = ClientConnection(self.new_state(ctx))
        elif client is None:
            client = self.hub.clients.connect(self.new_state(ctx), ctx.session)
            connection.state[_STATE_KEY] = client
            connection.exit_stack.callback(self.hub.clients.disconnect, client)  # (before anything is awaited)
            await self.hub.clients.bind(client)
            await self.hub.publisher.joined(client)
        client.server_session = ctx.session
        return client

    async def traced(self, ctx: Context, call_next: CallNext) -> Any:
        """``middleware`` inside the SDK's server span, whose name and tool or prompt attribute
        become ``(unknown)`` for a name outside the catalog (docs/telemetry.md: nothing a peer
        made up is recorded). Decided once the request is over: by then the catalog it ran
        against is the router's."""
        try:
            return await self.middleware(ctx, call_next)
        finally:
            name = ctx.params.get("name") if ctx.params and ctx.method in tracing.NAMED_BY else None
            if isinstance(name, str) and not self._known(ctx.method, name):
                tracing.unknown_name(ctx.method, UNKNOWN_TOOL)

    def _known(self, method: str, name: str) -> bool:
        if method == "prompts/get":
            return name in self.hub.surface.prompt_route
        epoch = self.router.epoch
        return epoch is not None and epoch.knows(name)

    async def middleware(self, ctx: Context, call_next: CallNext) -> Any:
        if ctx.method in ("initialize", "server/discover"):
            return await self.discover(ctx, call_next)
        if ctx.request_id is None:
            if ctx.method == _ROOTS_CHANGED and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                # 2026-07-28 defines no such notice (its server asks for roots with each
                # request), so the SDK would drop it; but a handshake-era server behind the
                # gateway keeps the roots it listed (server-filesystem does), and the SDK's
                # client still sends the notice, which directly would reach that server.
                return await self.roots_changed(ctx, None)
            return await call_next(ctx)
        client = await self.client_of(ctx)
        if ctx.method == "tools/list" and _well_formed(ctx):
            # Malformed params (an envelope whose logLevel is no level, clientCapabilities
            # that are no object) go on to the SDK, which refuses them as for any list.
            return await self.list_tools(ctx, None)
        if ctx.method == "tools/call" and _well_formed(ctx):
            # The router checks the name and arguments itself and every result it returns
            # against the protocol model (router._checked): the SDK's typed params and its
            # result re-serialisation are skipped. Malformed params go on to the SDK,
            # which refuses them with its own error.
            params = ctx.params or {}
            return self.finish(ctx, await self.run_tool_call(ctx, client, params["name"], params.get("arguments")))
        if ctx.method in _LISTS:
            refuse_cursor(ctx.params)
        return await call_next(ctx)

    async def discover(self, ctx: Context, call_next: CallNext) -> Any:
        """``initialize`` / ``server/discover``, at once: the capabilities are the union of what
        the catalog's servers offer when a catalog is published, else all the gateway relays."""
        hub = self.hub
        result = await call_next(ctx)
        if ctx.method == "initialize":
            await self.client_of(ctx)  # connected now: the most recent client from here on
        if isinstance(result, BaseModel):
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        if isinstance(result, dict) and "capabilities" in result:
            caps = hub.capabilities() if hub.capabilities_known else _everything()
            kept = {k: v for k, v in result["capabilities"].items() if k not in _EVERYTHING}
            result["capabilities"] = {**kept, **caps}
            if "instructions" in result:
                result["instructions"] = instructions(hub.config.gateway.separator)
        return result

    def finish(self, ctx: Context, result: dict[str, Any]) -> dict[str, Any]:
        """A result as the SDK's result pipeline would finish it, which a middleware answer
        bypasses: on 2026-07-28 with its type and the gateway's ``serverInfo`` stamp (a
        relayed server's own stamp names that server, not the one the client talks to)."""
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            return result
        return self._stamped(result, ctx.protocol_version)

    def _stamped(self, result: dict[str, Any], version: str) -> dict[str, Any]:
        meta = result.get("_meta")
        stamp = {SERVER_INFO_META_KEY: self._server_info}
        return {**with_result_type(result, version), "_meta": {**meta, **stamp} if isinstance(meta, dict) else stamp}

    def added_bytes(self, version: str) -> int:
        """The most bytes ``finish`` adds to a result in ``version`` (exactly these to one
        without ``_meta``): the router pays them from ``max_visible_bytes`` when it bounds a
        result, so what the client receives stays within the ceiling in either era."""
        if version in HANDSHAKE_PROTOCOL_VERSIONS:
            return 0
        return self._added_bytes

    @functools.cached_property
    def _added_bytes(self) -> int:
        bare: dict[str, Any] = {"content": []}
        size = json_size(bare)
        return json_size(self._stamped(bare, MODERN_PROTOCOL_VERSIONS[-1])) - size

    @functools.cached_property
    def _server_info(self) -> dict[str, Any]:
        """The ``serverInfo`` stamp, dumped once (the SDK's property deep-copies it on every
        read): shared read-only by the results, which are only encoded."""
        return self.server.server_info_stamp

    async def list_tools(self, ctx: Context, params: Any) -> Any:
        """The epoch's wire form, built (and validated) once per epoch and era: served as
        is, canonical bytes, instead of re-validating thousands of tools on every call."""
        refuse_cursor(ctx.params)
        epoch = await self.router.current()
        tools = epoch.published(ctx.protocol_version)
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            return {"tools": tools}
        return self.finish(ctx, {"tools": tools, **LIST_CACHE_FIELDS})

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> Any:
        """Registered so the SDK advertises tools; the middleware answers every call."""
        return await self.run_tool_call(ctx, await self.client_of(ctx), params.name, params.arguments)

    async def run_tool_call(
        self, ctx: Context, client: ClientConnection, name: str, arguments: dict[str, Any] | None
    ) -> dict[str, Any]:
        """One ``tools/call``, either era; what its server sent the client before its answer
        (a log line on the call's stream) is sent first (``Outbox.flushed``)."""
        try:
            result = await self._run_tool_call(ctx, client, name, arguments)
        except MCPError:  # (an error answer too; a cancelled call has no answer to wait with)
            await _sent_first(client, ctx.request_id)
            raise
        await _sent_first(client, ctx.request_id)
        return result

    async def _run_tool_call(
        self, ctx: Context, client: ClientConnection, name: str, arguments: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Resolve the call once, then run it with the round trips the client's era needs
        when a server asks for input."""
        hub, router = self.hub, self.router
        call = router.resolve(await router.current(), name, arguments)
        target = call.server
        raw_meta = (ctx.params or {}).get("_meta")
        meta = dict(raw_meta) if isinstance(raw_meta, dict) else None
        progress = _progress_to(ctx)
        if (declared := _declared(ctx)) is not None:
            # What this client can answer (either era), for a 2026-07-28 server (gateway/downstream/modern.py).
            meta = {**(meta or {}), CLIENT_CAPABILITIES_META_KEY: declared}
        modern = ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS
        started = time.perf_counter()  # (every round the gateway runs for this request: one call)

        def run(answers: Mapping[str, Any] | None) -> Awaitable[dict[str, Any]]:
            return router.call(
                call,
                client.state,
                meta=meta,
                on_progress=progress,
                version=ctx.protocol_version,
                answers=answers,
                reserve=self.added_bytes(ctx.protocol_version),
                started=started,
            )

        if modern:
            # Its logs go to this request while it waits (no place in the back-channel order).
            with _Attributed(client, ctx, target, None, hub.relay):
                binding = _Digest(arguments)
                result = await self.with_input(ctx, client, "tools/call", name, binding, target, run, progress)
        else:
            with _Attributed(client, ctx, target, hub.round_trips.order(), hub.relay):
                if target is not None and hub.relay.waits_for(target):
                    await hub.relay.ask_waiting_over_back_channel(client, target, ctx.request_id)
                try:
                    result = await run(None)
                    if result.get("isError") is True:  # (timed out, say, while its server asked)
                        await hub.relay.withdraw(client, ctx.request_id)
                except MCPError as exc:
                    await hub.relay.withdraw(client, ctx.request_id)
                    if target is not None:
                        self._urls_required(exc, target, client)
                    raise
                except anyio.get_cancelled_exc_class():
                    await hub.relay.withdraw(client, ctx.request_id)
                    raise
                if target is not None and is_input_required(result):
                    recorded = False  # (a round that raised recorded the call: the router's error or cancellation)

                    async def retry(answers: Mapping[str, Any] | None) -> dict[str, Any]:
                        nonlocal recorded
                        try:
                            return await run(answers)
                        except BaseException:
                            recorded = True
                            raise

                    try:
                        result = await self.over_back_channel(result, target, retry, client.state)
                    except MCPError as exc:
                        result = error_result(f"{target}: tool {name!r}: {exc.error.message}")
                        if not recorded:
                            router.ended(call, client.state, ctx.protocol_version, started, result)
                        return result
                    except anyio.get_cancelled_exc_class():
                        if not recorded:
                            router.ended(call, client.state, ctx.protocol_version, started, None)
                        raise
        if target is not None:  # a resource it links to is read from it (gateway/engine/links.py)
            hub.links.note(principal_key(client.state), target, result)
        return result

    def _urls_required(self, exc: MCPError, target: str, client: ClientConnection) -> None:
        """A ``-32042`` error a handshake-era client is given: the completion notice of each
        URL-mode elicitation in its data comes later, on the server's session, for this client."""
        if exc.code == URL_ELICITATION_REQUIRED and isinstance(exc.error.data, dict):
            owner = self.hub.instances.owner(self.hub.by_id.get(target), client.state)
            self.hub.relay.sent_urls(target, exc.error.data.get("elicitations"), client, None, owner)

    async def over_back_channel(
        self, first: dict[str, Any], server_id: str, retry: RunWith, state: ClientState
    ) -> dict[str, Any]:
        """A modern server's ``input_required`` during a handshake-era client's request:
        the gateway asks that client over its back-channel and retries the server (the
        caller's own instance of it asked, when it runs one per principal)."""
        hub = self.hub
        shared = hub.by_id[server_id]
        owner = hub.instances.owner(shared, state)
        downstream = (hub.instances.of(server_id, owner) if owner is not None else None) or shared

        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await hub.server_request(downstream, method, params)

        return await answer_over_back_channel(first, server_id, ask, retry, hub.config.gateway.max_round_trips)

    async def with_input(
        self,
        ctx: Context,
        client: ClientConnection,
        method: str,
        target: str,
        binding: object,
        server_id: str | None,
        run: RunWith,
        progress: ProgressFn | None,
    ) -> dict[str, Any]:
        """A modern client's request: the call runs in the gateway, so a server's request
        for input becomes an ``input_required`` result and the retry resumes the call.
        ``progress``: where ``run`` reports the server's progress (``_progress_to``).

        A modern server's own ``input_required`` is passed on with its state wrapped, and
        a retry carrying such a state goes straight back to that server (gateway/upstream/inputs.py).
        """
        params = ctx.params or {}
        state = params.get("requestState")
        capabilities = ctx.session.client_capabilities
        trips = self.hub.round_trips
        owner = client.state

        def passed_on(result: dict[str, Any], rerun: bool = False) -> dict[str, Any]:
            if server_id is None or not is_input_required(result):
                return result
            try:
                lacking = missing_capability(requests_of(result, server_id), capabilities)
                if lacking is not None:
                    raise refusal(lacking)
                server_state = result.get("requestState")
                server_state = server_state if isinstance(server_state, str) else None
                wrapped = trips.wrap(owner, method, target, binding, server_id, server_state, rerun=rerun)
            except MCPError as exc:
                if method == "tools/call":
                    return error_result(f"{server_id}: tool {target!r}: {exc.error.message}")
                raise
            return {**result, "requestState": wrapped}

        async def fresh() -> dict[str, Any]:
            """The request run anew at a handshake-era server; its -32042 asked as 2026-07-28 asks."""
            assert server_id is not None
            try:
                return passed_on(await run(None))
            except MCPError as exc:
                if exc.code != URL_ELICITATION_REQUIRED:
                    raise
                try:
                    asked = url_elicitations(exc, server_id)
                except MCPError as malformed:
                    if method == "tools/call":
                        return error_result(f"{server_id}: tool {target!r}: {malformed.error.message}")
                    raise
                return passed_on(asked, rerun=True)

        if trips.is_wrapped(state):
            origin, server_state, rerun = trips.unwrap(state, owner, method, target, binding)
            if origin != server_id:
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"prefixgate: {method} {target!r}: requestState belongs to server {origin!r}, "
                    "which no longer serves this request; call again without requestState",
                )
            if not rerun:  # (the state says so: a replica's server may not have answered yet, its era unknown)
                answers: dict[str, Any] = {"inputResponses": params.get("inputResponses") or {}}
                if server_state is not None:
                    answers["requestState"] = server_state
                return passed_on(await run(answers))
            # A handshake-era server's -32042, its URL elicitations answered: the request runs
            # anew (as a handshake-era client retries it), unless the user would not sign in.
            if declined(params.get("inputResponses")):
                message = f"prefixgate: {method} {target!r}: server {origin!r} requires a URL elicitation, declined"
                if method == "tools/call":
                    return error_result(message)
                raise MCPError(code=INVALID_REQUEST, message=message)
            state = None
        if state is not None:
            responses = params.get("inputResponses")
            trip = trips.resume(state, owner, method, target, binding, capabilities, responses)
        elif server_id is None or server_id not in self.hub.by_id:
            # (Not in it: resolved in an epoch published before a reload removed its server,
            # which the router refuses as an isError, as it does a handshake-era client's call.)
            return await run(None)
        else:
            if self.hub.by_id[server_id].modern:
                # A modern server asks with its own ``input_required``: nothing waits in the
                # gateway. Answers sent before anything was asked go to it as they are (its
                # keys; it ignores what it did not ask for); a handshake-era server has no use for them.
                given = params.get("inputResponses")
                return passed_on(await run({"inputResponses": given} if isinstance(given, dict) else None))

            async def first() -> dict[str, Any]:
                if self.hub.relay.waits_for(server_id):  # what its server asked outside any call, first
                    await self.hub.relay.ask_waiting(trip)
                return await fresh()

            trip = trips.book(owner, method, target, binding, server_id, capabilities)
            if answers_none(capabilities):
                return await trips.run_here(trip, first)
            trip.progress = progress
            trips.begin(trip, first)
        relay = trip.progress
        if not isinstance(relay, _Progress):
            return await trips.next_answer(trip)
        relay.to = mine = _reporter(ctx)  # this request waits on the call now: its progress
        try:
            return await trips.next_answer(trip)
        finally:
            if relay.to is mine:
                relay.to = None

    # --- resources, prompts, completion, logging --------------------------------------

    async def routed(self, ctx: Context, server_id: str | None, what: str, method: str, params: dict[str, Any]) -> Any:
        """A request one server answers, relayed with the round trips its era needs."""
        if server_id is None:
            raise MCPError(code=INVALID_PARAMS, message=f"prefixgate: no server offers {what}")
        downstream = self.hub.by_id.get(server_id)
        if downstream is None:  # named by lists published before a reload removed its server
            raise MCPError(
                code=INVALID_PARAMS, message=f"prefixgate: {what}: its server {server_id!r} was removed from the config"
            )
        progress = _progress_to(ctx)
        instances = self.hub.instances
        state = self.new_state(ctx) if instances.serves(downstream) else None
        # A 2026-07-28 client's log opt-in on this request holds for its hop too, as a tool call's does.
        meta = (ctx.params or {}).get("_meta")
        wanted = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, dict) else None
        level = wanted if isinstance(wanted, str) else None

        async def request(target: Downstream, answers: Mapping[str, Any] | None) -> dict[str, Any]:
            try:  # timed as a tool call: held while the server's question is with the user
                return await target.request(
                    method,
                    {**params, **(answers or {})},
                    timeout=target.config.call_timeout,
                    on_progress=progress,
                    log_level=level,
                    capabilities=relayable(_declared(ctx)),
                    max_time=target.config.max_call_time,
                )
            except CallTimedOut as exc:
                raise MCPError(code=REQUEST_TIMEOUT, message=f"{server_id}: {what} {exc.detail}") from None
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED and connection_gone(target, exc):
                    # The SDK's bare words named no one: which server went, during what.
                    message = f"prefixgate: connection to server {server_id!r} closed during the request for {what}"
                    raise MCPError(code=CONNECTION_CLOSED, message=message) from None
                if exc.code in (MESSAGE_TOO_LARGE, UNPARSABLE_REPLY):
                    # The gateway's own codes for a reply it could not take, which are in the range
                    # 2026-07-28 keeps for its own codes: said as a tool call's isError says it.
                    message = f"prefixgate: server {server_id!r}: {what}: {exc.error.message}"
                    raise MCPError(code=INTERNAL_ERROR, message=message) from None
                if exc.code == UNSUPPORTED_PROTOCOL_VERSION:
                    # The version of the gateway's hop, not the client's: passed on, it would tell
                    # the client that the gateway refused the client's own.
                    message = (
                        f"prefixgate: server {server_id!r}: {what}: the server refused the protocol version "
                        f"prefixgate speaks with it ({exc.code} {one_line(exc.error.message)})"
                    )
                    raise MCPError(code=INTERNAL_ERROR, message=message) from None
                if exc.code == _RESOURCE_NOT_FOUND and ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
                    raise MCPError(code=INVALID_PARAMS, message=exc.error.message, data=exc.error.data) from None
                raise

        async def run(answers: Mapping[str, Any] | None = None) -> dict[str, Any]:
            try:
                if state is None:
                    return await request(downstream, answers)
                async with instances.held(downstream, principal_key(state)) as instance:  # the caller's own process
                    return await request(instance, answers)
            except DownstreamUnavailable as exc:  # (its server is down: the params were not wrong)
                raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None

        if method not in _INPUT_METHODS:
            result = await run()
            if is_input_required(result):  # (a hostile server's: the SDK would refuse it unnamed, with a traceback)
                message = (
                    f"prefixgate: server {server_id!r}: {what}: it answered input_required, which {method} may not"
                )
                raise MCPError(code=INTERNAL_ERROR, message=message)
            return _checked(ctx, server_id, what, method, result)
        client = await self.client_of(ctx)
        try:
            result = await self._attributed(ctx, client, server_id, method, params, run, progress)
        except MCPError:  # what its server logged before the error goes out first, as for a tool call
            await _sent_first(client, ctx.request_id)
            raise
        await _sent_first(client, ctx.request_id)
        result = _checked(ctx, server_id, what, method, result)
        if method == "prompts/get":  # a resource its messages link to is read from it (gateway/engine/links.py)
            self.hub.links.note_prompt(principal_key(client.state), server_id, result)
        return result

    async def _attributed(
        self,
        ctx: Context,
        client: ClientConnection,
        server_id: str,
        method: str,
        params: dict[str, Any],
        run: RunWith,
        progress: ProgressFn | None,
    ) -> dict[str, Any]:
        """A ``prompts/get`` or ``resources/read`` in flight as a tool call is: what its server
        logs or asks meanwhile finds this request (``_Attributed``), in either era."""
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            target = str(params.get("uri") if method == "resources/read" else params.get("name"))
            bound = {k: v for k, v in params.items() if k != "_meta"}  # (a trace context differs on the retry)
            with _Attributed(client, ctx, server_id, None, self.hub.relay):
                return await self.with_input(ctx, client, method, target, _Digest(bound), server_id, run, progress)
        with _Attributed(client, ctx, server_id, self.hub.round_trips.order(), self.hub.relay):
            try:
                result = await run(None)
            except MCPError as exc:
                await self.hub.relay.withdraw(client, ctx.request_id)
                self._urls_required(exc, server_id, client)
                raise
            except anyio.get_cancelled_exc_class():
                await self.hub.relay.withdraw(client, ctx.request_id)
                raise
            if is_input_required(result):
                result = await self.over_back_channel(result, server_id, run, client.state)
            return result

    async def list_resources(self, ctx: Context, params: Any) -> Any:
        await self.router.current()
        return _result(ctx, {"resources": self.hub.surface.resources})

    async def list_templates(self, ctx: Context, params: Any) -> Any:
        await self.router.current()
        return _result(ctx, {"resourceTemplates": self.hub.surface.templates})

    async def read_resource(self, ctx: Context, params: types.ReadResourceRequestParams) -> Any:
        await self.router.current()
        uri = str(params.uri)
        owner = self.hub.resource_owner(uri, principal_key((await self.client_of(ctx)).state))
        server_id = owner.id if owner is not None else None
        return await self.routed(ctx, server_id, f"resource {uri!r}", "resources/read", _relayed_params(ctx))

    async def subscribe(self, ctx: Context, params: types.SubscribeRequestParams) -> Any:
        await self.router.current()
        uri = str(params.uri)
        client = await self.client_of(ctx)
        if uri not in client.subscriptions:
            await self.hub.watches.watch(uri, principal_key(client.state), self.hub.resource_owner)
            client.subscriptions.add(uri)
        return _result(ctx, {})

    async def unsubscribe(self, ctx: Context, params: types.UnsubscribeRequestParams) -> Any:
        await self.router.current()
        uri = str(params.uri)
        client = await self.client_of(ctx)
        if uri in client.subscriptions:
            client.subscriptions.discard(uri)
            await self.hub.watches.unwatch(uri, principal_key(client.state), self.hub.resource_owner)
        return _result(ctx, {})

    async def list_prompts(self, ctx: Context, params: Any) -> Any:
        await self.router.current()
        return _result(ctx, {"prompts": self.hub.surface.prompts})

    async def get_prompt(self, ctx: Context, params: types.GetPromptRequestParams) -> Any:
        await self.router.current()
        route = self.hub.surface.prompt_route.get(params.name)
        if route is None:
            raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_PROMPT)
        server_id, original = route
        request = {**_relayed_params(ctx), "name": original}
        return await self.routed(ctx, server_id, f"prompt {params.name!r}", "prompts/get", request)

    async def complete(self, ctx: Context, params: types.CompleteRequestParams) -> Any:
        await self.router.current()
        surface = self.hub.surface
        request = _relayed_params(ctx)
        ref = dict(request.get("ref") or {})
        server_id: str | None = None
        of = str(ref.get("type"))
        if ref.get("type") == "ref/prompt":
            # Refused as prompts/get refuses the name (a down server's prompt is still listed:
            # it gets the routed requests' own "is down" answer).
            name = str(ref.get("name"))
            route = surface.prompt_route.get(name)
            if route is None:
                raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_PROMPT)
            server_id, ref["name"] = route
            of = f"prompt {name!r}"
        elif ref.get("type") == "ref/resource":
            uri = str(ref.get("uri"))
            server_id = surface.owner_of_template(uri) or surface.owner_of_uri(uri)
            of = f"resource {uri!r}"  # (as resources/read names its URI)
        known = self.hub.by_id.get(server_id) if server_id is not None else None
        if known is not None and not offers(known, "completions"):
            # It never offered the method (a direct client would not have asked): its bare
            # "Method not found" (404 over 2026-07-28 HTTP) would read as the gateway's, which
            # advertises completions when any of its servers does.
            message = f"prefixgate: server {server_id!r} does not offer completion ({of})"
            raise MCPError(code=INVALID_PARAMS, message=message)
        return await self.routed(ctx, server_id, f"completion for {of}", "completion/complete", {**request, "ref": ref})

    async def roots_changed(self, ctx: Context, params: Any) -> None:
        """A client says its roots changed (``tell_roots_changed``)."""
        await self.tell_roots_changed(principal_key((await self.client_of(ctx)).state))

    async def tell_roots_changed(self, principal: object) -> None:
        """Each handshake-era server whose ``roots/list`` would be put to ``principal`` is told
        its roots changed, as its client would tell it directly (the gateway declared
        ``roots.listChanged`` to the servers). Passed on one round at a time, each principal
        once a round: a flood of notices costs the servers at most one more."""
        self._roots_told.add(principal)
        if self._telling_roots:
            return
        self._telling_roots = True
        try:
            while self._roots_told:
                principals, self._roots_told = self._roots_told, set()
                relay = self.hub.relay
                told = [d for d in self.hub.downstreams if any(relay.answers_to(d.id, p) for p in principals)]
                # and each of their principals' own instances (gateway/engine/instances.py)
                theirs = [i for i in self.hub.instances.running() if i.principal in principals]
                async with anyio.create_task_group() as tg:
                    for downstream in [*told, *theirs]:
                        tg.start_soon(downstream.roots_changed)
        finally:
            self._telling_roots = False

    async def set_level(self, ctx: Context, params: types.SetLevelRequestParams) -> Any:
        await self.router.current()
        await self.hub.clients.set_log_level(await self.client_of(ctx), params.level)
        return {}


def _well_formed(ctx: Context) -> bool:
    """Whether the request's params pass the protocol's own surface check for its era
    (cheap: a few microseconds; ``arguments`` is checked by the router against the tool's schema)."""
    try:
        validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
    except (ValidationError, KeyError):
        return False
    return True


def _relayed_params(ctx: Context) -> dict[str, Any]:
    """The request's params as a server receives them: without this client's own round
    trip (``inputResponses``, ``requestState``, the envelope and progress token in
    ``_meta``), which the gateway handles."""
    params = dict(ctx.params or {})
    for key in ("inputResponses", "requestState"):
        params.pop(key, None)
    meta = params.pop("_meta", None)
    if isinstance(meta, dict) and (kept := relayed_meta(meta)):
        params["_meta"] = kept
    return params


def _progress_to(ctx: Context) -> ProgressFn | None:
    """Where a server's progress for this request goes: to the client, if it asked for
    progress (a token in its ``_meta``), else nowhere (None). A 2026-07-28 request's is a
    ``_Progress``: the call may outlive the request (``with_input``)."""
    report = _reporter(ctx)
    if report is None or ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        return report
    return _Progress(report)


def _reporter(ctx: Context) -> ProgressFn | None:
    """Progress reported on this request, under its own token (None: it asked for none)."""
    meta = (ctx.params or {}).get("_meta")
    if not isinstance(meta, dict) or meta.get("progressToken") is None:
        return None
    if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        return ctx.session.report_progress

    async def progress(value: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(Exception):  # the request that asked may be answered already
            await ctx.session.report_progress(value, total, message)

    return progress


class _Progress:
    """Where a 2026-07-28 call's progress goes. A call that asks the client for input runs
    on in the gateway past the request that began it (``RoundTrips.begin``): each request
    that waits on it from then on (the client's retry, under its own progress token) takes
    its progress, and what comes while none waits is dropped, as after an answer."""

    __slots__ = ("to",)

    def __init__(self, to: ProgressFn | None) -> None:
        self.to = to

    async def __call__(self, value: float, total: float | None, message: str | None) -> None:
        to = self.to
        if to is not None:
            await to(value, total, message)


_INPUT_METHODS = ("prompts/get", "resources/read")
"""Besides tools/call, the requests a server may answer with a request for input."""

_RESOURCE_NOT_FOUND = -32002
"""A server's "Resource not found" up to 2025-11-25: 2026-07-28 replaced it with -32602 and
says its implementations must not send it, so a 2026-07-28 client is told -32602 instead."""

_LISTS = frozenset(("tools/list", "prompts/list", "resources/list", "resources/templates/list"))
"""The lists the SDK hands to ``Handlers`` (a well-formed tools/list the middleware answers itself)."""


def refuse_cursor(params: Any) -> None:
    """A list's ``cursor`` the gateway did not issue refused with -32602, as the spec asks of an
    invalid cursor: every list is one page, no ``nextCursor``, so only none (absent or null) is
    valid. Answered as if absent, a client's stale or forged cursor read as "from the start".
    The cursor itself is not repeated (a client's own text). One dict lookup a list."""
    cursor = params.get("cursor") if isinstance(params, dict) else None
    if cursor is None:
        return
    if not isinstance(cursor, str):
        raise MCPError(code=INVALID_PARAMS, message="Invalid params: cursor must be a string")
    raise MCPError(code=INVALID_PARAMS, message="Invalid cursor: prefixgate issues none (every list is one page)")


class _LastDump:
    """The last capabilities model dumped, and its dump: a handshake-era client declares them
    once, at ``initialize``, so each of its calls would dump the same model again."""

    model: object = None
    dump: dict[str, Any] = {}


def _declared(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    """The capabilities the client declared: at ``initialize``, or on this 2026-07-28 request.
    Read only (the dump may be shared with the calls before)."""
    declared = ctx.session.client_capabilities
    if declared is None:
        return None
    if declared is not _LastDump.model:
        _LastDump.dump = declared.model_dump(by_alias=True, mode="json", exclude_none=True)
        _LastDump.model = declared
    return _LastDump.dump


async def _sent_first(client: ClientConnection, request_id: Any) -> None:
    """What a call's server sent its client before the answer (a log line on the call's
    stream) goes out first: ``Outbox.flushed``, awaited only when something is queued for it."""
    if (outbox := client.outbox) is not None and outbox.holds(request_id):
        await outbox.flushed(request_id)


class _Attributed:
    """Record a call to ``target`` as in flight for the time of the block, so a server's
    logs and requests find the call (and client) that caused them. A class, not a
    generator context manager: this runs on every call."""

    __slots__ = ("client", "request_id", "session", "target", "order", "relay", "_caller")

    def __init__(
        self,
        client: ClientConnection,
        ctx: ServerRequestContext[Any, Any],
        target: str | None,
        order: Any,
        relay: Relay,
    ) -> None:
        self.client = client
        self.request_id = ctx.request_id
        self.session = ctx.session
        self.target = target
        self.order = order
        self.relay = relay

    def __enter__(self) -> None:
        self._caller = None
        if self.target is not None:
            client, request_id = self.client, self.request_id
            self.relay.called(self.target, principal_key(client.state))
            client.calls[request_id] = self.target
            client.call_sessions[request_id] = self.session
            if self.order is not None:
                client.call_order[request_id] = self.order
            # Whose call the downstream requests made now are: a server's request on their
            # stream comes back to this one (gateway/downstream/related.py).
            self._caller = CALLER.set((client, request_id))

    def __exit__(self, *exc: object) -> None:
        if self._caller is not None:
            CALLER.reset(self._caller)
        client, request_id = self.client, self.request_id
        client.calls.pop(request_id, None)
        client.call_order.pop(request_id, None)
        client.call_sessions.pop(request_id, None)


class _Digest:
    """What a ``requestState`` binds besides the target: the request's arguments as canonical
    JSON, made when a state is first minted or checked (most calls never need one)."""

    __slots__ = ("value", "_text")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = json.dumps(self.value, sort_keys=True, separators=(",", ":"), default=str)
        return self._text


def _result(ctx: ServerRequestContext[Any, Any], result: dict[str, Any]) -> dict[str, Any]:
    return with_result_type(result, ctx.protocol_version)


def _checked(ctx: Context, server_id: str, what: str, method: str, result: dict[str, Any]) -> dict[str, Any]:
    """A server's result relayed as is, checked first against the protocol's model of the
    client's era, where the server can still be named (as a tool call's result is,
    ``router._checked``): after the handler the SDK's own check refused it as "Handler returned
    an invalid result", naming no server, and logged a traceback; on 2026-07-28 it passed as the
    ``input_required`` arm (every field optional) with its fields stripped, which the client's
    own model then refused. Its field and the problem are said, never its value."""
    result = _result(ctx, result)
    if is_input_required(result):  # (a 2026-07-28 client's to answer: the gateway made it)
        return result
    candidate = result
    if (hint := CACHE_HINTS.get(method)) is not None and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        candidate = {"ttlMs": hint.ttl_ms, "cacheScope": hint.scope, **result}  # (the SDK's, filled in after)
    try:
        result_shape(ctx.protocol_version, method).validate_python(candidate, by_name=False)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "it"
        problem = f"its result is not a valid {method} result: {where}: {one_line(error['msg'])}"
        log.warning("[%s] %s: %s", server_id, what, problem)
        raise MCPError(code=INTERNAL_ERROR, message=f"prefixgate: server {server_id!r}: {what}: {problem}") from None
    except (KeyError, ValueError):  # (a version or method the protocol's table lacks: the SDK's check decides)
        pass
    return result


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
LISTEN_STREAMS_PER_PRINCIPAL = env_count("PREFIXGATE_LISTEN_STREAMS_PER_PRINCIPAL", 256)
"""``subscriptions/listen`` streams one principal may hold open at each endpoint (the
variable exists for tests): the SDK's own bound (1,024) is one for every principal."""


def _honoring(
    params: types.SubscriptionsListenRequestParams, watched: list[str]
) -> types.SubscriptionsListenRequestParams:
    """``params`` with only the resources watched: the acknowledgment names "the subset the
    server agreed to honor" (2026-07-28, subscriptions), and a resource whose server does not
    report updates (or that was refused) would otherwise be acknowledged and never heard of."""
    requested = params.notifications.resource_subscriptions
    if not requested:
        return params
    kept = set(watched)
    honored = [uri for uri in requested if uri in kept] or None
    return params.model_copy(
        update={"notifications": params.notifications.model_copy(update={"resource_subscriptions": honored})}
    )


class WatchingListen:
    """``subscriptions/listen`` that also watches the stream's resources downstream.

    The SDK's handler filters the gateway's own event bus; a resource update reaches that
    bus only if the owning server reports it, so the stream's ``resourceSubscriptions``
    are watched (counted, see gateway/engine/watches.py) while the stream is open.
    """

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.inner: dict[object, ListenHandler] = {}
        """Per principal (``principal_key``) with a stream open: the SDK's handler serving its
        streams, so that ``end`` can close them (bounded per principal here, not there)."""
        self.open = Shares(LISTEN_STREAMS_PER_PRINCIPAL)
        """Per principal (``principal_key``): its listen streams open now."""
        self.admits: Callable[[object], bool] = lambda principal: True
        """Whether a principal's token may use this endpoint now (gateway/upstream/http.py
        ``Front.admits``): asked again as a stream opens, after its resources are watched
        (a server may take its time), since ``end`` closes only the streams open by then."""

    def end(self, principals: Collection[object]) -> None:
        """Close the open streams of ``principals`` (their token was taken out of the token file,
        or may no longer use this profile), each with its final result as the SDK's graceful
        closing sends it: a stream stays open for as long as its client reads, and refusing the
        token's next request leaves it hearing every change and update it listens for."""
        for principal in principals:
            inner = self.inner.get(principal)
            if inner is not None:
                log.info("listen streams of principal %s ended: its token may no longer use this endpoint", principal)
                inner.close()

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
        client = connection_of(ctx).state.get(_STATE_KEY)  # (made by the middleware for every request)
        who = principal_key(client.state) if client is not None else None
        stream = object()
        if not self.open.take_nowait(who, stream):
            held = self.open.size
            log.info("listen stream refused: its principal holds %d open already", held)
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: this principal has {held} listen streams open already (the limit)",
            )
        try:
            await self.hub.router.current()  # which server owns a resource is known once a catalog is
            for uri in wanted:
                try:
                    await self.hub.watches.watch(uri, who, self.hub.resource_owner)
                    watched.append(uri)
                except MCPError as exc:  # not offered, or refused: the stream serves the rest
                    log.info("listen stream: not watching %r: %s", uri, exc.message)
            if not self.admits(who):
                raise MCPError(code=INVALID_REQUEST, message="prefixgate: this token may no longer use this endpoint")
            inner = self.inner.get(who)  # (from here on, until the stream is open, nothing awaits)
            if inner is None:
                inner = self.inner[who] = UpdatesListen(self.hub.clients.bus, who, max_subscriptions=1 << 30)
            return await inner(ctx, _honoring(params, watched))
        finally:
            self.open.give(who, stream)
            if who not in self.open:
                self.inner.pop(who, None)
            with anyio.CancelScope(shield=True):
                for uri in watched:
                    await self.hub.watches.unwatch(uri, who, self.hub.resource_owner)
