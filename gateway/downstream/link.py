"""One connection to a server, from the transport's open to its close: its era and its requests.

A server's record (``connection.Downstream``) outlives its connections; each connection is
a ``Link``. The link settles the era (the handshake, or ``server/discover`` for a server
that refuses it), sends requests the way that era wants them (the 2026-07-28 envelope and
headers on every request; a stdio server's ``tools/call`` as a raw line on its pipes), and
is where the server's own messages arrive: its notifications go to the connection's inbox,
its requests (sampling, elicitation, roots) to the gateway's ``ask``.

Results are raw JSON (below the SDK's typed layer): the typed layer rejects a whole page
when one tool's schema is invalid, and a call's ``content``, ``structuredContent``,
``isError`` and ``_meta`` must reach the client untouched.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientRequestContext, ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST
from pydantic import BaseModel, ConfigDict, ValidationError

from gateway import __version__
from gateway.downstream.calltime import Clock, Expiry
from gateway.downstream.errors import NotJsonRpc
from gateway.downstream.inbox import Inbox
from gateway.downstream.modern import (
    client_info,
    handshake,
    header_maps,
    hop_local_removed,
    negotiate,
    refused_handshake,
    stamp,
)
from gateway.downstream.related import CALLER, HEADER, LOG
from gateway.downstream.stdio import UNPARSABLE_REPLY
from gateway.downstream.transports import Transport
from gateway.logs import PEER, ServerLog
from gateway.sdk import later_revision_fields

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
Ask = Callable[[str, dict[str, Any], object | None], Awaitable[dict[str, Any]]]
"""The gateway's answer to a server's request: (method, params, the call it came on, if known)."""

_MAX_PAGES = 10_000
MAX_LISTED = 100_000
"""Items one listing may gather over all its pages: 20 times the largest servers' (~5,000
tools). A server whose pages never end (a fresh ``nextCursor`` on each) fails its listing
here instead of filling the gateway's memory (a page itself is bounded by the message limit)."""
MAX_ASKING = 1024
"""A server's requests (sampling, elicitation, roots) one connection may have waiting for
clients at once, every principal's together; more are refused to the server at once. Each
waiting one holds a task here and a request to a client (20,000 a client left unanswered held
~400 MB), and what a server may ask should not be what it may make the gateway hold. One
principal's are bounded lower, by ``relay.MAX_ASKING`` (64), so that one leaving them
unanswered leaves room for the others' (64 here had one principal's refuse everyone's)."""
_RESULT_TYPES = frozenset(("input_required", "task"))
"""The ``resultType`` values a 2026-07-28 server's answer may name besides ``complete`` (which
``hop_local_removed`` drops): the core's, and the tasks extension's for a call run as a task."""
TASK_STATUS = "notifications/tasks/status"
"""A task's status (SEP-1686), which the SDK's session only passes on to a binding."""


class _Status(BaseModel):
    """A task status's params as read here: any object, since what is used of it
    (gateway/downstream/tasks.py ``task_status``) is checked there. The SDK's model requires
    every field of a task, and logs a traceback for each status that lacks one."""

    model_config = ConfigDict(extra="allow")


STRAY_LINES_LOGGED = 3
"""A connection's lines that are not JSON-RPC the log names; a server that prints many is not
allowed to fill it."""


class Link:
    """One connection: the session its era was settled on, and how requests go over it."""

    def __init__(
        self, server_id: str, transport: Transport, inbox: Inbox, ask: Ask, log: ServerLog, *, raw_calls: bool
    ) -> None:
        self.server_id = server_id
        self.transport = transport
        self.inbox = inbox
        """The server's notifications, in order, with one consumer (``inbox.py``)."""
        self._ask = ask
        self._log = log
        self._raw_calls = raw_calls
        """``tools/call`` (and requests made ``beside``) below the SDK's session: raw lines to a
        stdio child, one POST to a streamable-HTTP server (``PREFIXGATE_FAST_PATH=0``: through the SDK)."""
        self.handshake_refused = False
        """The server refused the handshake: its reconnects go straight to ``server/discover``."""
        self._hinted = False
        """The back-channel hint (below) was logged for this connection."""
        self._stray = 0
        """Lines it wrote that are not JSON-RPC (``NotJsonRpc``), so far."""
        self.answered = 0
        """Requests of the gateway's it has answered, so far (the supervisor's ``served``)."""
        self.answered_clients = 0
        """Of those, the ones made for a client's request (``CALLER``): it served them, ready or not."""
        self._asking = 0
        """Its requests waiting for a client's answer now (``MAX_ASKING`` at most)."""
        self._refusing = False
        """Its requests are refused for ``MAX_ASKING`` (logged once until one is taken again)."""
        self.clocks: dict[Clock, object | None] = {}
        """The clocks of its tool calls in flight, with the upstream call each is made for
        (``CALLER``): held while the server waits for the client."""
        # The era, once open() has settled it:
        self.session: ClientSession | None = None
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        self.modern = False
        """The server speaks 2026-07-28: every request carries its own envelope (``modern.py``)."""
        self.protocol_version = ""
        self._headers: dict[str, str] = {}
        self.header_maps: dict[str, dict[tuple[str, ...], str]] = {}
        """A modern server's tools' ``Mcp-Param`` headers (refreshed with its tool list)."""
        self.server_info: dict[str, Any] | None = None
        self.capabilities: dict[str, Any] = {}

    async def open(self, stack: AsyncExitStack, protocol: str, *, http: bool, handshake_refused: bool = False) -> None:
        """Open the transport and settle the era (the rule: :data:`ServerConfig.protocol`).

        "auto" (the default) tries the handshake first, so a server that offers both eras
        keeps its back-channel; one that refuses it is reached anew (a stdio server is
        respawned: its connection kept the era of that first request) with
        ``server/discover``, and ``handshake_refused`` says so for its reconnects. Over HTTP
        the handshake's request carries the 2026-07-28 headers and envelope too
        (:func:`~gateway.downstream.modern.handshake`): a 2026-07-28 server expects them on
        every request, and a server of both eras reads the version they name (``http``).
        """
        self.handshake_refused = handshake_refused
        if protocol == "auto" and not handshake_refused:
            attempt = await stack.enter_async_context(AsyncExitStack())
            session, dispatcher = await self._session_on(attempt)
            try:
                await handshake(session, dispatcher, http=http)
            except Exception as exc:
                if not refused_handshake(exc):
                    raise
                self._log.info("[%s] refused the handshake (%s); reaching it with server/discover", self.server_id, exc)
                self.handshake_refused = True
                await attempt.aclose()
            else:
                self._adopt(session, dispatcher, modern=False)
                return
        session, dispatcher = await self._session_on(stack)
        if protocol == "legacy":
            await handshake(session, dispatcher, http=http)
            self._adopt(session, dispatcher, modern=False)
        else:
            self._adopt(session, dispatcher, modern=await negotiate(session))

    async def _session_on(self, stack: AsyncExitStack) -> tuple[ClientSession, JSONRPCDispatcher[Any]]:
        read, write = await stack.enter_async_context(self.transport.open())
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        session = ClientSession(
            dispatcher=dispatcher,
            client_info=types.Implementation(name="prefixgate", version=__version__),
            sampling_callback=self._sampling,
            sampling_capabilities=types.SamplingCapability(tools=types.SamplingToolsCapability()),
            elicitation_callback=self._elicitation,
            list_roots_callback=self._list_roots,
            message_handler=self._message,
            # Not in the SDK's core tables: a task's status (gateway/downstream/tasks.py), through
            # the SDK's bounded queue for such notifications (the oldest dropped past its size).
            notification_bindings=[NotificationBinding(method=TASK_STATUS, params_type=_Status, handler=self._status)],
        )
        named = PEER.set(self.server_id)  # (the session's read loop, started here, keeps it)
        try:
            return await stack.enter_async_context(session), dispatcher
        finally:
            PEER.reset(named)

    async def _status(self, params: _Status) -> None:
        self.inbox.put(TASK_STATUS, params.model_dump(mode="json"))

    def _adopt(self, session: ClientSession, dispatcher: JSONRPCDispatcher[Any], *, modern: bool) -> None:
        version = session.protocol_version
        assert version is not None
        self.modern = modern
        self.protocol_version = version
        self._headers = {"mcp-protocol-version": version}
        self.session, self._dispatcher = session, dispatcher
        info, caps = session.server_info, session.server_capabilities
        self.server_info = info.model_dump(by_alias=True, mode="json", exclude_none=True) if info else None
        self.capabilities = caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps else {}
        self._log.info("[%s] protocol %s", self.server_id, version)

    @property
    def gone(self) -> bool:
        """Nothing more will be answered here: a stdio server's process closed its stdout, a
        streamable-HTTP server ended the session (a 404; the supervisor opens the next one), or
        an SSE connection ended (its event stream over, or a 404 to a message)."""
        child = self.transport.child
        if child is not None:
            return child.stdout_closed.is_set()
        if (ended := self.transport.ended) is not None:
            return ended.forgotten or ended.event.is_set()
        calls = self.transport.http_calls
        return calls is not None and calls.session_ended

    def tools_listed(self, tools: tuple[Any, ...]) -> None:
        """The headers a modern server's tools declare (``Mcp-Param``) go on their calls."""
        if self.modern:
            self.header_maps = header_maps(tools)

    # --- requests ---------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout: float | None = None,
        on_progress: ProgressFn | None = None,
        log_level: str | None = None,
        capabilities: dict[str, Any] | None = None,
        max_time: float | None = None,
        beside: bool = False,
    ) -> dict[str, Any]:
        """Send one raw request; the result is the peer's JSON, unvalidated.

        ``tools/call``, and any request made ``beside``, goes below the SDK's session when the
        connection allows (``raw_calls``). A re-list goes so: for thousands of tools the SDK's
        streamable-HTTP transport takes ~0.5 s of the event loop to validate the listing (and
        to format it for a debug line never written). The first listing does not: it must
        follow ``notifications/initialized``, which the session may still be sending.

        To a modern server the request carries the 2026-07-28 envelope and headers
        (``log_level``: the log opt-in it carries; ``capabilities``: what the client it is
        made for can answer, else all the gateway relays). ``max_time``: progress restarts
        ``timeout``, up to this in all (``calltime.py``).
        """
        dispatcher = self._dispatcher
        assert dispatcher is not None, "a link takes requests once open() has returned"
        raw = self.transport.raw_calls if self._raw_calls and (method == "tools/call" or beside) else None
        if self.modern:
            params, headers = stamp(
                method,
                params,
                version=self.protocol_version,
                client_info=client_info(__version__),
                log_level=log_level,
                header_maps=self.header_maps,
                capabilities=capabilities,
                headers=raw is None or raw.takes_headers,  # a raw line on a pipe has none to carry
            )
        else:
            headers = dict(self._headers)
        related = self.transport.related  # a streamable-HTTP server's: which call its requests are for
        name = None
        if related is not None and (caller := CALLER.get()) is not None:
            name = headers[HEADER] = related.open(caller)
        opts: dict[str, Any] = {"headers": headers}
        progress = None
        if on_progress is not None:
            opts["on_progress"] = progress = ProgressInOrder(on_progress)
        clock = None
        if max_time is not None:  # timed by the clock (below), not by the SDK's timeout
            clock = Clock(timeout, max_time)
            self.clocks[clock] = CALLER.get()
        elif timeout is not None:
            opts["timeout"] = timeout
        try:
            if raw is not None:  # below the session: a raw line (rawcalls.py) or a POST (httpcalls.py)
                if beside:
                    self._log.debug("[%s] %s made beside the SDK's session", self.server_id, method)
                result: dict[str, Any] = await raw.request(
                    method,
                    params,
                    timeout=timeout,
                    on_progress=opts.get("on_progress"),
                    headers=headers,
                    clock=clock,
                )
            elif clock is not None:
                result = await _restarted_by_progress(dispatcher, method, params, opts, clock)
            else:
                result = await dispatcher.send_raw_request(method, params, opts)  # type: ignore[arg-type]
        except MCPError as exc:
            if self.modern and "back-channel" in exc.message and not self._hinted:
                # A dual-era server pinned to 2026-07-28 that asks for input the handshake way (a
                # request of its own) cannot do so there; the handshake ("auto") would let it.
                self._hinted = True
                self._log.warning(
                    "[%s] its %s asked the client for input over a back-channel, which the 2026-07-28 "
                    'protocol does not have; remove protocol = "modern" for this server (the default, "auto", '
                    "uses the handshake toward a server that offers it) to relay such requests",
                    self.server_id,
                    method,
                )
            raise
        finally:
            if name is not None and related is not None:
                related.close(name)
            if clock is not None:
                del self.clocks[clock]
        if self.modern:
            result = hop_local_removed(result)
            kind = result.get("resultType") if isinstance(result, dict) else None
            if kind is not None and kind not in _RESULT_TYPES:
                # "A resultType of any value unrecognized by the client MUST be considered invalid."
                raise MCPError(
                    code=UNPARSABLE_REPLY,
                    message=f"resultType {kind!r}, which 2026-07-28 does not define (complete, input_required): "
                    "an invalid result",
                )
        elif not (later := later_revision_fields(method, self.protocol_version)).isdisjoint(result):
            # A handshake-era server's result read in its era, as the SDK's client reads it:
            # ``resultType: input_required`` means nothing there, so it asks for no input.
            result = {key: value for key, value in result.items() if key not in later}
        self.answered += 1
        if CALLER.get() is not None:
            self.answered_clients += 1
        await self.inbox.settle()  # what the server said before its reply goes out first
        if progress is not None:
            await progress.flush()
        return result

    async def notify(self, method: str) -> None:
        """Send the server a notification without params, as the SDK's session sends one
        (fire and forget: a connection that is gone drops it)."""
        dispatcher = self._dispatcher
        assert dispatcher is not None, "a link takes notifications once open() has returned"
        await dispatcher.notify(method, None, {"headers": dict(self._headers)})

    # --- what the server sends ----------------------------------------------------------

    async def _message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            if isinstance(message, NotJsonRpc):
                self._stray += 1
                if self._stray <= STRAY_LINES_LOGGED:
                    more = " (further ones are not logged)" if self._stray == STRAY_LINES_LOGGED else ""
                    self._log.info("[%s] %s%s", self.server_id, message, more)
            else:
                self._log.debug("[%s] transport error: %s", self.server_id, message)
            return
        if isinstance(message, types.ProgressNotification):
            return  # delivered to its call's on_progress by the dispatcher
        data = message.model_dump(by_alias=True, mode="json", exclude_none=True)
        params = data.get("params") or {}
        # A log line on a call's own stream is that call's (a streamable-HTTP server's: related.py).
        related = self.transport.related if data["method"] == LOG else None
        self.inbox.put(data["method"], params, related.take_log(params) if related is not None else None)

    async def _forward(self, context: ClientRequestContext, method: str, params: Any) -> Any:
        if self._asking >= MAX_ASKING:
            if not self._refusing:
                self._refusing = True
                self._log.warning(
                    "[%s] %s refused: %d of its requests already wait for a client (further ones are not logged)",
                    self.server_id,
                    method,
                    MAX_ASKING,
                )
            return types.ErrorData(
                code=INVALID_REQUEST,
                message=f"prefixgate: {MAX_ASKING} requests of this server already wait for a client's answer",
            )
        self._refusing = False
        self._asking += 1
        try:
            return await self._forward_one(context, method, params)
        finally:
            self._asking -= 1

    async def _forward_one(self, context: ClientRequestContext, method: str, params: Any) -> Any:
        raw = params.model_dump(by_alias=True, mode="json", exclude_none=True) if params is not None else {}
        related = self.transport.related
        caller = related.take(context.request_id) if related is not None else None
        # The call the request is for, when its stream says so (streamable HTTP); on a pipe,
        # which is not known: every call of the server then.
        held = [clock for clock, made_for in self.clocks.items() if caller is None or made_for is caller]
        for clock in held:
            clock.hold()
        try:
            return await self._ask(method, raw, caller)
        except MCPError as exc:
            return exc.error
        finally:
            now = anyio.current_time()
            for clock in held:
                clock.release(now)

    async def _sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        result = await self._forward(context, "sampling/createMessage", params)
        if isinstance(result, types.ErrorData):
            return result
        if params.tools is not None or params.tool_choice is not None:  # as the SDK's wants_sampling_tools
            return _answer("sampling/createMessage", types.CreateMessageResultWithTools, result)
        return _answer("sampling/createMessage", types.CreateMessageResult, result)

    async def _elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        result = await self._forward(context, "elicitation/create", params)
        return (
            result if isinstance(result, types.ErrorData) else _answer("elicitation/create", types.ElicitResult, result)
        )

    async def _list_roots(self, context: ClientRequestContext) -> Any:
        result = await self._forward(context, "roots/list", None)
        return result if isinstance(result, types.ErrorData) else _answer("roots/list", types.ListRootsResult, result)


def _answer(method: str, model: type[BaseModel], result: Any) -> Any:
    """The client's answer as the model the server is sent, or an error naming its first
    problem: the SDK answers a model it refuses with a bare "Invalid request parameters",
    which reached the caller as the server's own error."""
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "result"
        return types.ErrorData(
            code=INVALID_PARAMS,
            message=f"prefixgate: the client's answer to {method} is not a valid result: {where}: {error['msg']}",
        )


async def list_all(
    request: Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]], method: str, key: str
) -> tuple[Any, ...]:
    """Every item of every page, following ``nextCursor`` to the end (``MAX_LISTED`` at most).

    A repeated cursor is found by its digest: a cursor is as long as a message may be, and
    kept whole, the cursors of ``_MAX_PAGES`` empty pages were the gateway's memory."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[bytes] = set()
    for _ in range(_MAX_PAGES):
        page = await request(method, {"cursor": cursor} if cursor is not None else None)
        batch = page.get(key)
        if not isinstance(batch, list):
            raise ValueError(f"{method} result has no {key!r} list")
        items.extend(batch)
        if len(items) > MAX_LISTED:
            raise ValueError(f"{method} listed more than {MAX_LISTED:,} items, the most one listing may hold")
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            return tuple(items)
        digest = hashlib.sha256(cursor.encode("utf-8", "surrogatepass")).digest()
        if digest in seen:
            raise ValueError(f"{method} repeated cursor {cursor!r}")
        seen.add(digest)
    raise ValueError(f"{method} returned more than {_MAX_PAGES} pages")


async def _restarted_by_progress(
    dispatcher: JSONRPCDispatcher[Any],
    method: str,
    params: Mapping[str, Any] | None,
    opts: dict[str, Any],
    clock: Clock,
) -> dict[str, Any]:
    """Through the SDK's session, whose own timeout progress does not restart: the call's clock
    (``calltime.py``) is a cancel scope here."""
    clock.start(anyio.current_time())
    timer = anyio.CancelScope()
    if (forward := opts.get("on_progress")) is not None:
        opts["on_progress"] = _restarting(clock, forward)
    expiry = Expiry(timer)
    clock.moved = expiry.moved
    expiry.moved(clock)
    try:
        with timer:
            result: dict[str, Any] = await dispatcher.send_raw_request(method, params, opts)  # type: ignore[arg-type]
            return result
    finally:
        expiry.close()
    raise clock.expired(method)


def _restarting(clock: Clock, forward: ProgressFn) -> ProgressFn:
    """A call's progress callback that restarts its clock first."""

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        clock.progressed(anyio.current_time())
        await forward(progress, total, message)

    return progressed


class ProgressInOrder:
    """Progress forwarded one at a time, in order; while one is on its way up to
    ``MAX_WAITING`` more wait, and beyond that the oldest waiting is dropped.

    The SDK runs a task per progress notification: against a slow client a flood would
    pile them up without bound. Progress is a level, not a log, so against such a client the
    newest are enough; but a burst a client keeps up with arrives whole, each step's message
    with it, as directly (only the newest waited once: "step 2 of 3" was lost when steps 2
    and 3 came while step 1 was on its way). The newest is also the one the call's answer
    must not overtake (``flush``): a handshake-era client over HTTP, where each forward takes
    a while, got the first progress of a burst and never the last (it was dropped once the
    call was answered).
    """

    def __init__(self, forward: ProgressFn) -> None:
        self._forward = forward
        self._waiting: deque[tuple[float, float | None, str | None]] = deque(maxlen=MAX_WAITING)
        self._idle: anyio.Event | None = None
        """Set when nothing is on its way (None: nothing ever was, or it was set)."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self._idle is not None:
            self._waiting.append((progress, total, message))  # (full: the oldest waiting goes)
            return
        self._idle = idle = anyio.Event()
        try:
            await self._forward(progress, total, message)
            while self._waiting:
                await self._forward(*self._waiting.popleft())
        finally:
            self._idle = None
            idle.set()

    async def flush(self) -> None:
        """Wait (``FLUSH_WAIT`` at most) until the progress on its way, and those waiting,
        are forwarded: the call's answer then comes after the last progress, as directly."""
        if (idle := self._idle) is not None:
            with anyio.move_on_after(FLUSH_WAIT):
                await idle.wait()


MAX_WAITING = 64
"""Progress notifications of one call held while one is being forwarded (``ProgressInOrder``)."""
FLUSH_WAIT = 5.0
"""Seconds a call's answer waits for its last progress to be forwarded (a client not reading)."""
