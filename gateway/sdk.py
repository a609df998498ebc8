"""The mcp SDK internals the gateway cannot do without, each behind one function.

mcp 2.x offers no public way to do these things: private attributes, and names its
modules leave out of their ``__all__``. Every other use of the SDK goes through its public
API (tests/test_layout.py checks both mechanically, and ruff's SLF rule the attributes). All
were checked against the minor release ``CHECKED`` names, which ``pyproject.toml`` pins:
on an SDK upgrade, check these first (tests/test_relay.py, tests/test_lifecycle.py,
tests/test_fast_path.py, tests/test_http_lane.py, tests/test_session_lane.py and
tests/test_http_calls.py exercise them).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import math
from collections.abc import Callable, Collection, Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import connection as connections
from mcp.server import runner
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.streamable_http import CONTENT_TYPE_SSE, MCP_SESSION_ID_HEADER, REQUEST_STREAM_BUFFER_SIZE, EventMessage
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ListenHandler,
    ResourceUpdated,
    ServerEvent,
    SubscriptionBus,
    _honored_subset,
)
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import event_matches, event_to_notification
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, ErrorData
from sse_starlette import EventSourceResponse

from gateway.jsontext import parsed_aside
from gateway.lines import not_a_message

log = logging.getLogger("prefixgate.http")

CHECKED = "2.3"
"""The mcp minor release this module was checked against (``mcp>=2.3,<2.4``)."""


_ENVELOPE_REFUSAL = b'"message":"Validation error: '
"""How the SDK's streamable HTTP transport (``StreamableHTTPServerTransport``, mcp 2.3.0)
answers a POST whose body is JSON but no JSON-RPC message: 400, ``INVALID_PARAMS``, and
pydantic's whole report as the message (many lines, the union's model names)."""


async def handled_post(handle: Any, scope: Any, receive: Any, send: Any) -> None:
    """``StreamableHTTPSessionManager.handle_request`` for a POST, where a client's notification
    races its own DELETE (a cancellation as it closes): the SDK answers 202, finds the session's
    stream closed, then sends a 500 after the complete response (uvicorn's RuntimeError and a
    traceback, the keep-alive connection dropped) and raises the closed stream (mcp 2.3.0
    ``StreamableHTTPServerTransport._handle_post_request``). The 202 stands here: what comes
    after the complete response is dropped, and the closed stream ends the request (the SDK's
    log of it, with a traceback, gateway/logs.py makes one line)."""
    complete = False

    async def sending(message: dict[str, Any]) -> None:
        nonlocal complete
        if complete:
            return
        complete = message["type"] == "http.response.body" and not message.get("more_body")
        await send(message)

    try:
        await handle(scope, receive, sending)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        if not complete:
            raise


def envelope_refused_in_one_line(send: Any, body: bytes) -> Any:
    """``send`` for a POST the SDK answers, with that one refusal given the stdio end's answer
    (``gateway.lines.not_a_message``: ``INVALID_REQUEST``, one line, the request's id). Costs
    one comparison per message unless the SDK refuses the request with 400."""
    held: dict[str, Any] | None = None

    async def sending(message: dict[str, Any]) -> None:
        nonlocal held
        if held is None and message["type"] == "http.response.start" and message.get("status") == 400:
            held = message  # (until its body shows which refusal it is)
            return
        if held is not None:
            start, held = held, None
            payload = message.get("body", b"")
            if (
                message["type"] == "http.response.body"
                and not message.get("more_body")
                and _ENVELOPE_REFUSAL in payload
            ):
                try:
                    data = await parsed_aside(body, "a refused POST body read for its id")
                except (ValueError, RecursionError):
                    data = None
                payload = not_a_message(data).model_dump_json(by_alias=True, exclude_unset=True).encode()
                kept = [(k, v) for k, v in start.get("headers", ()) if k.lower() != b"content-length"]
                start = {**start, "headers": [*kept, (b"content-length", str(len(payload)).encode())]}
                message = {**message, "body": payload}
            await send(start)
        await send(message)

    return sending


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The SDK's one ``Connection`` per client connection (stdio: one; HTTP: one per
    ``Mcp-Session-Id``), whose ``state`` and ``exit_stack`` tie the gateway's per-client
    record to the connection's life. The low-level context exposes only the session,
    which holds it as ``_connection`` (mcp 2.3.0; the high-level ``Context`` has a public
    ``connection`` but the low-level server never builds one)."""
    return ctx.session._connection  # noqa: SLF001


async def send_raw_request(session: ServerSession, method: str, params: dict[str, Any], *, related: bool) -> Any:
    """Send a server-to-client request exactly as a downstream server sent it, and return
    the client's raw result.

    ``ServerSession.send_request`` takes only typed requests and validates the result
    into a model, which would drop or reorder what the two peers exchange; the raw
    ``send_raw_request`` lives on the session's private outbound channels (mcp 2.3.0):
    the request's own channel (``related``: streamable HTTP answers on the call's
    stream) or the connection's standalone one.
    """
    channel = session._request_outbound if related else session._connection.outbound  # noqa: SLF001
    return await channel.send_raw_request(method, params, None)


def lifespan_state(manager: StreamableHTTPSessionManager) -> Any:
    """The server's lifespan state while ``manager.run()`` is active: the SDK's HTTP entry
    passes it to every request context, and the gateway's direct HTTP lane must too; the
    manager keeps it as ``_lifespan_state`` (mcp 2.3.0)."""
    return manager._lifespan_state  # noqa: SLF001


CONNECTION_ATTRIBUTES = frozenset(
    (
        "outbound",
        "protocol_version",
        "session_id",
        "_client_params",
        "client_capabilities",
        "initialized",
        "state",
        "exit_stack",
    )
)
"""What ``Connection.__init__`` sets (mcp 2.3.0): the last two belong to each connection."""


def connection_like(model: Connection) -> Connection:
    """A new connection with ``model``'s identity (channel, version, client params and
    capabilities, the ``initialized`` event a ``from_envelope`` connection has set) shared
    read-only, and a ``state`` and ``exit_stack`` of its own: what ``from_envelope`` builds
    for the same envelope, without the anyio event ``__init__`` makes only to set at once
    (a third of a 2026-07-28 request's connection). Relies on ``CONNECTION_ATTRIBUTES``."""
    connection = Connection.__new__(Connection)
    vars(connection).update(vars(model))
    connection.state = {}
    connection.exit_stack = AsyncExitStack()
    return connection


def notify_only(outbound: Any) -> Any:
    """The SDK's ``NotifyOnlyOutbound`` around a duplex channel: what a 2026-07-28 stdio
    connection's handlers get (notifications pass, server requests are refused), as the
    SDK's own stream loop installs it (``mcp.server.connection``, not in its ``__all__``)."""
    return connections.NotifyOnlyOutbound(outbound)


def modern_error_data(exc: Exception) -> ErrorData:
    """The SDK's mapping of a 2026-07-28 handler's exception to its wire error (one ladder
    for every modern entry; ``mcp.server.runner``, not in its ``__all__``)."""
    return runner.modern_error_data(exc)


def rebinding_refusal(
    check: TransportSecurityMiddleware, host: str | None, origin: str | None
) -> tuple[int, str] | None:
    """What ``check.validate_request`` answers a request with these ``Host`` and ``Origin``
    headers (status, text), or None: its own host and origin rules (wildcard ports included),
    for a server that is not Starlette's (the metrics listener's WSGI, gateway/commands/observe.py)."""
    if not check.settings.enable_dns_rebinding_protection:
        return None
    if not check._validate_host(host):  # noqa: SLF001
        return 421, "Invalid Host header"
    if not check._validate_origin(origin):  # noqa: SLF001
        return 403, "Invalid Origin header"
    return None


# --- the client session's parts (gateway/downstream/link.py) ---


@functools.cache
def later_revision_fields(method: str, version: str) -> frozenset[str]:
    """The result keys of ``method`` that only a protocol revision newer than ``version``
    declares (for ``tools/call`` on 2025-11-25: ``resultType``, ``inputRequests``,
    ``requestState``): what the SDK's client drops from a result on a ``version`` session
    before reading it. ``mcp.client.session._later_revision_fields`` (mcp 2.3.0); cached, as
    it runs on every call to a handshake-era server."""
    from mcp.client.session import _later_revision_fields

    return _later_revision_fields(method, version)


# --- the streamable-HTTP client's parts (gateway/downstream/httpcalls.py, transports.py) ---


def transport_headers(transport: Any) -> dict[str, str]:
    """The headers the SDK's ``StreamableHTTPTransport`` puts on every request of its
    connection (accept, content type, its session id, the negotiated version): its private
    ``_prepare_headers`` (mcp 2.3.0)."""
    headers: dict[str, str] = transport._prepare_headers()  # noqa: SLF001
    return headers


def unfollowed_redirect(response: Any) -> str | None:
    """The SDK transport's message for a redirect it leaves unfollowed (None: not one);
    ``mcp.client.streamable_http._unfollowed_redirect`` (mcp 2.3.0)."""
    from mcp.client.streamable_http import _unfollowed_redirect

    return _unfollowed_redirect(response)


def choose_authorization_server(provider: Any, choose: Any) -> None:
    """Have an ``OAuthClientProvider`` pick among the authorization servers a resource's
    metadata lists with ``choose(advertised) -> str`` (raising refuses them all): its hook is
    the private ``_select_authorization_server`` method (mcp 2.3.0), which takes the first."""
    provider._select_authorization_server = choose  # noqa: SLF001


def select_authorization_server(provider: Any, advertised: list[str]) -> str:
    """Which of the authorization servers a resource's metadata lists ``provider`` takes, as
    its own flow decides (``choose_authorization_server``'s choice when one was set): the
    private ``_select_authorization_server`` method (mcp 2.3.0)."""
    chosen: str = provider._select_authorization_server(advertised)  # noqa: SLF001
    return chosen


def post_on_origin(client: Any, url: str, **kwargs: Any) -> Any:
    """``client.stream("POST", ...)`` following redirects only on the endpoint's origin, as the
    SDK's transport posts (``mcp.shared._httpx_utils.stream_within_origin``, mcp 2.3.0)."""
    from mcp.shared._httpx_utils import stream_within_origin

    return stream_within_origin(client, "POST", url, **kwargs)


def redirect_on_origin(response: Any) -> Any:
    """The request following ``response``'s redirect when the SDK's transports and OAuth flow
    follow it (same method, within the origin), else None
    (``mcp.shared._httpx_utils.next_request_within_origin``, mcp 2.3.0)."""
    from mcp.shared._httpx_utils import next_request_within_origin

    return next_request_within_origin(response)


def events_on_origin(client: Any, url: str, *, headers: dict[str, str], max_event_size: int | None) -> Any:
    """The SDK transport's ``GET`` of an event stream, redirects as above
    (``mcp.shared._httpx_utils.sse_within_origin``, mcp 2.3.0)."""
    from mcp.shared._httpx_utils import sse_within_origin

    return sse_within_origin(client, url, headers=headers, max_event_size=max_event_size)


def sse_parser(max_event_size: int | None) -> Any:
    """The event-stream parser ``httpx2.EventSource`` feeds its response's text to
    (``httpx2._sse._SSEParser``, httpx2 2.16.2): its ``decode(text)`` and ``flush()`` give the
    same events, size cap and ``SSEError`` for a stream read without the response's text,
    byte and raw iterators (``gateway.downstream.httpcalls.events_of``)."""
    from httpx2._sse import _SSEParser

    return _SSEParser(max_event_size)


def context_streams(
    buffer: float = 0, admit: Callable[[Any], bool] | None = None
) -> tuple[Any, Any, MemoryObjectSendStream[Any]]:
    """A message-stream pair of the kind the SDK's transports hand its session (each send
    carries the sender's context; ``mcp.shared._context_streams``, mcp 2.3.0), and the memory
    stream beneath its send end (its statistics say whether the reader waits). ``admit``: a
    message sent for which it answers False is dropped, whoever sends it."""
    from mcp.shared._context_streams import ContextReceiveStream, ContextSendStream

    send, receive = anyio.create_memory_object_stream[Any](buffer)
    if admit is None:
        return ContextSendStream(send), ContextReceiveStream(receive), send
    admits = admit

    class Admitting(ContextSendStream[Any]):
        __slots__ = ()

        async def send(self, item: Any) -> None:
            if admits(item):
                await super().send(item)

    return Admitting(send), ContextReceiveStream(receive), send


# --- a handshake-era session's transport and dispatcher (gateway/upstream/sessionlane.py) ---


def session_transport(manager: StreamableHTTPSessionManager, session_id: str, user: Any) -> Any:
    """The live transport of session ``session_id`` when the manager's stateful entry would
    hand the request straight to it: known, not terminated, its idle time not run out, and
    opened with the credential the request carries (``user``: the ASGI scope's). None
    otherwise: the entry answers that request itself. mcp 2.3.0 keeps the sessions in
    ``_server_instances`` and their owners in ``_session_owners``."""
    transport = manager._server_instances.get(session_id)  # noqa: SLF001
    if transport is None or transport.is_terminated:
        return None
    if transport.idle_scope is not None and transport.idle_scope.cancel_called:
        return None
    if transport.is_json_response_enabled:
        return None
    requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
    if requestor != manager._session_owners.get(session_id):  # noqa: SLF001
        return None
    return transport


class PrincipalSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, with at most ``per_principal`` handshake-era sessions per
    principal: opening one more closes that principal's least recently used idle session
    (as its idle timeout would, so its id answers 404 and its client opens a new one). A
    client that initializes again and again without ending its sessions costs its own
    principal's oldest idle sessions, never memory without bound nor, through the SDK's
    own limit for all principals together, another principal's new sessions.

    Only a session opened costs one: the SDK admits a session for every request without a
    session id (a HEAD, a GET, a ``ping``, which it then refuses and discards), so the room is
    made once the opening request has been answered and its session kept. A session with a
    request in flight (an open GET stream among them) is never closed so: a principal with
    that many sessions all busy may have more, each held by a request of its own. mcp 2.3.0
    serves an opening request in ``_serve_opening_request``, which discards the session
    unless it was established."""

    def __init__(self, *args: Any, per_principal: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_principal = per_principal
        self._opening: set[str] = set()
        """Sessions whose opening request is being served: not open yet, so neither counted nor closed."""

    async def _serve_opening_request(self, http_transport: Any, scope: Any, receive: Any, send: Any) -> None:
        opened = http_transport.mcp_session_id
        self._opening.add(opened)
        try:
            await super()._serve_opening_request(http_transport, scope, receive, send)
        finally:
            self._opening.discard(opened)
        if self._server_instances.get(opened) is http_transport:  # noqa: SLF001 - kept: established
            self._make_room(self._session_owners.get(opened), opened)  # noqa: SLF001

    def _make_room(self, requestor: Any, opened: str) -> None:
        """Close ``requestor``'s least recently used idle sessions (never ``opened``, its newest)
        while it holds more than ``per_principal`` open."""
        mine = [
            (sid, t)
            for sid, t in self._server_instances.items()  # noqa: SLF001
            if self._session_owners.get(sid) == requestor and sid not in self._opening  # noqa: SLF001
        ]
        idle = sorted(
            (scope.deadline, sid, scope)
            for sid, t in mine
            if sid != opened
            and (scope := t.idle_scope) is not None
            and not scope.cancel_called
            and not t._requests_in_flight  # noqa: SLF001
        )
        for _, sid, scope in idle[: max(0, len(mine) - self.per_principal)]:
            del self._server_instances[sid]  # noqa: SLF001 - its id answers 404 from now on
            self._session_owners.pop(sid, None)  # noqa: SLF001
            scope.cancel()  # its serve loop ends as at its idle timeout, which terminates it
            log.info(
                "HTTP session %s closed: its principal opened more than %d (the least recently used idle one goes)",
                sid[:8],
                self.per_principal,
            )

    def end_sessions_of(self, principals: Collection[str]) -> int:
        """End every session ``principals`` opened (their token was taken out of the token file,
        or may no longer use this profile), as its idle timeout would, its open streams and
        requests with it; how many ended. Refusing its next request leaves its GET stream open,
        and with it what the servers send or ask outside any call, for as long as its client
        holds it. The requestor is the ``client_id`` of the principal's
        ``AuthenticatedUser`` (gateway/upstream/http.py ``_user``)."""
        ended = 0
        for sid, t in list(self._server_instances.items()):  # noqa: SLF001
            owner = self._session_owners.get(sid)  # noqa: SLF001
            if owner is None or owner.get("client_id") not in principals:
                continue
            if (scope := t.idle_scope) is None or scope.cancel_called:
                continue
            del self._server_instances[sid]  # noqa: SLF001 - its id answers 404 from now on
            self._session_owners.pop(sid, None)  # noqa: SLF001
            scope.cancel()  # its serve loop ends as at its idle timeout, which terminates it
            ended += 1
        return ended


@contextmanager
def holding_session(transport: Any) -> Iterator[None]:
    """A request in flight holds its session: the idle countdown stops while any is served and
    restarts when the last one ends, as the transport's ``handle_request`` keeps it (mcp
    2.3.0: ``_requests_in_flight``, ``_idle_timeout``)."""
    scope = transport.idle_scope
    if scope is None or transport._idle_timeout is None:  # noqa: SLF001
        yield
        return
    transport._requests_in_flight += 1  # noqa: SLF001
    scope.deadline = math.inf
    try:
        yield
    finally:
        transport._requests_in_flight -= 1  # noqa: SLF001
        if not transport._requests_in_flight:  # noqa: SLF001
            scope.deadline = anyio.current_time() + transport._idle_timeout  # noqa: SLF001


async def open_request_stream(transport: Any, message: Any, request: Any, version: str) -> tuple[Any, Any, Any, Any]:
    """What the transport's POST handler sets up for a request before it dispatches it
    (mcp 2.3.0, ``_handle_post_request``): the priming event (stored first, so storage order
    is wire order; None before 2025-11-25), the request's stream in ``_request_streams``
    (its message router deposits every message for the request there, event id and all),
    and the request's metadata (``_create_session_message``: the close callbacks and the
    hook that ends a request settled without an answer). Returns (priming, the stream's send
    and receive ends, metadata)."""
    request_id = str(message.id)
    priming = await transport._mint_priming_event(request_id, version)  # noqa: SLF001
    send, receive = anyio.create_memory_object_stream[EventMessage](REQUEST_STREAM_BUFFER_SIZE)
    transport._request_streams[request_id] = (send, receive)  # noqa: SLF001
    metadata = transport._create_session_message(message, request, request_id, version).metadata  # noqa: SLF001
    return priming, send, receive, metadata


async def close_request_stream(transport: Any, request_id: str, send: Any, receive: Any) -> None:
    """The transport's own clean-up of a request's stream (``send``, ``receive``) once its
    response is written or its client gone; when a resumed stream (``Last-Event-ID``) has
    taken the request's place since, only this one's ends are closed."""
    found = transport._request_streams.get(request_id)  # noqa: SLF001
    if found is not None and found[0] is send:
        await transport._clean_up_memory_streams(request_id)  # noqa: SLF001
        return
    send.close()
    receive.close()


async def dispatch_request(dispatcher: Any, message: Any, metadata: Any, on_request: Any) -> None:
    """Hand ``message`` to a session's dispatcher as its read loop does (mcp 2.3.0,
    ``JSONRPCDispatcher._dispatch_request``): in its in-flight table (so the client's
    ``notifications/cancelled`` reaches it), run by ``_handle_request`` in the session's
    task group with the sender's context, answered, refused or settled on its wire."""
    await dispatcher._dispatch_request(message, metadata, on_request, contextvars.copy_context())  # noqa: SLF001


def sse_headers(session_id: str) -> list[tuple[bytes, bytes]]:
    """The headers of the event stream the transport answers a POST with (mcp 2.3.0,
    ``_handle_post_request``: its ``EventSourceResponse`` and the headers it passes)."""
    headers = {
        "Cache-Control": "no-cache, no-transform",
        "Connection": "keep-alive",
        "Content-Type": CONTENT_TYPE_SSE,
        MCP_SESSION_ID_HEADER: session_id,
    }
    return list(EventSourceResponse(content=iter(()), headers=headers).raw_headers)


class UpdatesListen(ListenHandler):
    """The SDK's ``subscriptions/listen`` handler (acknowledgment first, then the events the
    stream asked for, each stamped with its subscription id; a backlog of
    ``max_buffered_events`` ends the stream), but a resource update keeps the ``_meta`` its
    server sent (an event with a ``meta``: ``gateway.engine.clients.Updated``), the
    subscription id joined to it: the SDK's handler makes each frame of the event's URI alone.
    Its body is mcp 2.3's ``ListenHandler.__call__`` (the frame aside, and an event meant for
    another principal's streams skipped), whose fields it uses. ``principal``: whose streams
    these are (``Updated.principal``)."""

    def __init__(self, bus: SubscriptionBus, principal: object, *, max_subscriptions: int = 1024) -> None:
        super().__init__(bus, max_subscriptions=max_subscriptions)
        self.principal = principal

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if len(self._streams) >= self._max_subscriptions:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        honored = _honored_subset(params.notifications)
        uris = frozenset(honored.resource_subscriptions or ())
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        send, events = anyio.create_memory_object_stream[ServerEvent](self._max_buffered_events)

        def deliver(event: ServerEvent) -> None:
            if getattr(event, "principal", None) not in (None, self.principal):
                return  # (an update of another principal's own process of a server)
            if event_matches(honored, uris, event):
                try:
                    send.send_nowait(event)
                except anyio.ClosedResourceError:
                    pass
                except anyio.WouldBlock:
                    log.warning("listen stream %r backlog full; ending the stream", subscription_id)
                    self._streams.discard(send)
                    send.close()

        unsubscribe = self._bus.subscribe(deliver)  # (before the acknowledgment: nothing is missed)
        self._streams.add(send)
        try:
            acknowledged = types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(params=acknowledged), related_request_id=subscription_id
            )
            async for event in events:
                await ctx.session.send_notification(_frame(event, meta), related_request_id=subscription_id)
        finally:
            unsubscribe()
            self._streams.discard(send)
            send.close()
            events.close()
        return types.SubscriptionsListenResult(_meta=meta)


def _frame(event: ServerEvent, meta: dict[str, Any]) -> Any:
    """An event as its stream's frame: the SDK's, with an update's own ``_meta`` kept."""
    kept = getattr(event, "meta", None)
    if isinstance(event, ResourceUpdated) and kept:
        params = types.ResourceUpdatedNotificationParams(uri=event.uri, _meta={**kept, **meta})
        return types.ResourceUpdatedNotification(params=params)
    return event_to_notification(event, meta)
