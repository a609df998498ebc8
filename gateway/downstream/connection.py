"""One connection to a downstream MCP server: start-up, raw listings, raw calls, recovery.

Lists and call results are taken as raw JSON (below the SDK's typed layer) because the
typed layer rejects a whole page when one tool's schema is invalid; the catalog
quarantines that one tool instead. Calls are forwarded with ``send_raw_request`` so
``content``, ``structuredContent``, ``isError`` and ``_meta`` reach the client untouched.

A server whose config references an unset ``${VAR}`` fails at once and is never
retried. Under ``serve`` a server is supervised: one that misses its start-up timeout keeps
connecting and joins when ready; one that exits or drops is restarted with exponential
backoff (``gateway.downstream.backoff``: 1 s doubling to 60 s, reset after 5 minutes healthy). A
remote server has no exit to see: it is checked every ``LIVENESS_INTERVAL`` (15 s).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any, Literal, Protocol

import anyio
import mcp_types as types
from mcp.client.session import ClientRequestContext, ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.jsonrpc import CONNECTION_CLOSED, INVALID_REQUEST, PARSE_ERROR, REQUEST_TIMEOUT

from catalog.text import escape
from catalog.warm import Contribution
from gateway import __version__
from gateway.config import ServerConfig
from gateway.downstream import backoff
from gateway.downstream.errors import leaf, short
from gateway.downstream.inbox import Inbox
from gateway.downstream.listening import ListenStream
from gateway.downstream.modern import ENVELOPE as _ENVELOPE
from gateway.downstream.modern import (
    client_info,
    handshake,
    header_maps,
    hop_local_removed,
    negotiate,
    refused_handshake,
    relayable,
    stamp,
)
from gateway.downstream.oauth import LoginNeeded, OAuthSetup
from gateway.downstream.related import CALLER, HEADER
from gateway.downstream.spawn import Spawned
from gateway.downstream.stderrtail import informative
from gateway.downstream.stdio import MESSAGE_TOO_LARGE, UNPARSABLE_REPLY, CommandNotFound
from gateway.downstream.transports import Transport, transport_for
from gateway.fastpath import fast_path
from gateway.redact import redact
from gateway.results import error_result

Status = Literal["starting", "ready", "failed", "late", "disabled", "exited", "restarting"]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]

log = logging.getLogger("prefixgate.downstream")

_MAX_PAGES = 10_000
LIVENESS_INTERVAL = float(os.environ.get("PREFIXGATE_LIVENESS_INTERVAL") or 15.0)
"""Seconds between liveness checks of a remote server (the environment variable exists for tests)."""
SPEC_ERRORS = (-32099, -32020)
"""Error codes the 2026-07-28 spec allocates (about the request itself, not the tool)."""
MAX_ERROR_CHARS = 500
"""A server's error message kept in a tool's ``isError`` text (one line)."""
LISTEN_WAIT = 10.0
"""Seconds a modern server's start waits for its listen stream before listing without it."""


class DownstreamUnavailable(Exception):
    """The server cannot take calls now; ``str()`` is the model-visible reason."""


class Events(Protocol):
    """What a downstream reports to the gateway (the hub implements it)."""

    async def server_ready(self, downstream: Downstream) -> None: ...

    async def server_down(self, downstream: Downstream) -> None: ...

    async def server_notification(self, downstream: Downstream, method: str, params: dict[str, Any]) -> None: ...

    async def server_request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        """``caller``: the call whose stream the request came on, when the wire says (``related.py``)."""
        ...


class NoEvents:
    """For one-shot discovery (``catalog``): nothing listens."""

    async def server_ready(self, downstream: Downstream) -> None:
        return None

    async def server_down(self, downstream: Downstream) -> None:
        return None

    async def server_notification(self, downstream: Downstream, method: str, params: dict[str, Any]) -> None:
        return None

    async def server_request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        raise MCPError(code=INVALID_REQUEST, message=f"prefixgate has no client to forward {method} to")


class Downstream:
    """Owns one server's transport and session inside its own task (``run``)."""

    def __init__(
        self,
        config: ServerConfig,
        events: Events | None = None,
        *,
        oauth: OAuthSetup | None = None,
        early: Spawned | None = None,
    ) -> None:
        self.config = config
        self._oauth = oauth
        """Token store and login hints for a remote server with ``auth`` (``gateway.downstream.oauth``)."""
        self.events: Events = events or NoEvents()
        self.status: Status = "starting" if config.enabled else "disabled"
        self.error: str | None = None
        self.startup_ms: int | None = None
        self.tools: tuple[Any, ...] = ()
        self.resources: tuple[Any, ...] = ()
        self.templates: tuple[Any, ...] = ()
        self.prompts: tuple[Any, ...] = ()
        self.capabilities: dict[str, Any] = {}
        self.source: Literal["live", "record"] | None = None
        """Where ``tools`` and the other lists come from: the server itself ("live", its last
        listing, kept while it is down), or the warm-start record (until it lists its own)."""
        self.server_info: dict[str, Any] | None = None
        self.restarts = 0
        self.retry_at: float | None = None
        self.settled = anyio.Event()
        """Set once the server is ready, failed or late: what the barrier waits for."""
        self.closed = anyio.Event()
        """Set when ``run`` has returned: the process and transport are gone."""
        self.joined = anyio.Event()
        """Set once the gateway has taken in its first start (``Events.server_ready`` returned)."""
        if not config.enabled:
            self.settled.set()
            self.closed.set()
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        self.transport: Transport = transport_for(config, on_stderr=self._stderr_line, auth=self._auth, early=early)
        """How the server is reached: a stdio child, streamable HTTP or SSE (``transports.py``)."""
        self._raw_calls = fast_path()
        """``tools/call`` to a stdio child as raw lines (``PREFIXGATE_FAST_PATH=0``: through the SDK)."""
        self._headers: dict[str, str] = {}
        self._scope: anyio.CancelScope | None = None
        self._ready_at: float | None = None
        """When the current connection became ready: how long it stayed healthy decides the backoff."""
        self._stopping = False
        self._supervised = False
        """Whether ``run`` restarts the connection when it ends (so a retry will be scheduled)."""
        self._log = logging.getLogger(f"prefixgate.server.{config.id}")
        self._inbox: Inbox | None = None
        self.protocol_version: str | None = None
        self.modern = False
        """The server speaks 2026-07-28: every request carries its own envelope (``gateway.downstream.modern``)."""
        self.log_level: str | None = None
        """Modern servers: the log level asked for on every request (no ``logging/setLevel``)."""
        self._session: ClientSession | None = None
        self._header_maps: dict[str, dict[tuple[str, ...], str]] = {}
        self._hinted = False
        self._refused_handshake = False
        """The server refused the handshake once: its reconnects go straight to ``server/discover``."""
        self.listen_stream = ListenStream(config.id, self._log, self._relisted)
        """A modern server's change events (``listening.py``)."""

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def listed(self) -> bool:
        """Whether its lists belong in the catalog: it listed them (and is serving, or down and
        expected back), or the warm-start record holds them while it starts."""
        return self.source is not None

    async def started(self) -> None:
        """Until its first start is over: ready and taken in by the gateway, or failed, or late
        (at most its startup_timeout). A call made from a warm start's catalog waits here."""
        if self.status != "starting" or not self._supervised or self._stopping:
            return
        await self.settled.wait()
        if self._is_ready():
            await self.joined.wait()

    def _is_ready(self) -> bool:
        """The status read afresh (after an await it may have changed since the check above)."""
        return self.status == "ready"

    def remember(self, recorded: Contribution) -> None:
        """A warm start: the lists it gave last time stand for it until it lists its own."""
        if self.source is None:
            self.tools, self.resources, self.templates = recorded.tools, recorded.resources, recorded.templates
            self.prompts, self.capabilities = recorded.prompts, dict(recorded.capabilities)
            self.source = "record"

    # --- life cycle -------------------------------------------------------------------

    async def run(self, *, supervise: bool = False) -> None:
        """Connect and hold the connection; with ``supervise``, restart it when it ends.

        Without ``supervise`` (one-shot discovery) a server that misses its start-up
        timeout is stopped and reported late.
        """
        if not self.config.enabled:
            return
        if self.config.unset_reason is not None:
            # Nothing changes this without a restart: failed once, never retried.
            self._set("failed", self.config.unset_reason)
            self.settled.set()
            self.closed.set()
            return
        policy = backoff.Backoff()
        self._supervised = supervise
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                while True:
                    self._ready_at = None
                    await self._attempt(supervise)
                    if not supervise or self._stopping:
                        return
                    healthy = None if self._ready_at is None else anyio.current_time() - self._ready_at
                    wait = policy.delay(healthy)
                    self.retry_at = anyio.current_time() + wait
                    if self.status in ("exited", "ready"):
                        self.status = "restarting"  # it was serving: say so; a start-up failure stays "failed"
                    self._log.warning("[%s] retrying in %g s (%s)", self.id, wait, self.error or self.status)
                    await self.events.server_down(self)
                    await self._pause(wait)
                    self.restarts += 1
                    self.retry_at = None
        finally:
            self._dispatcher = None
            self._session = None
            self.transport.discard()
            self.settled.set()
            self.joined.set()
            self.closed.set()

    async def _attempt(self, supervise: bool) -> None:
        """One connection, from spawn to close; never raises (but for cancellation)."""
        started = anyio.current_time()
        self.startup_ms = None
        ready = anyio.Event()

        async def watch_startup(scope: anyio.CancelScope) -> None:
            await anyio.sleep(self.config.startup_timeout)
            if not ready.is_set():
                self._set("late", f"not ready within startup_timeout {self.config.startup_timeout:g} s")
                if not supervise:
                    scope.cancel()

        async with anyio.create_task_group() as tg:
            # Notifications wait in a bounded inbox with one consumer: a flood while the
            # client is slow costs dropped log lines, never unbounded tasks and memory.
            self._inbox = Inbox(self.id, lambda method, params: self.events.server_notification(self, method, params))
            tg.start_soon(self._inbox.run)
            with anyio.CancelScope() as scope:
                tg.start_soon(watch_startup, scope)
                try:
                    async with AsyncExitStack() as stack:
                        await self._connect(stack)
                        if self.modern and self._session is not None:
                            # Listening before listing: a change made between the two (a call
                            # from a warm start's catalog can come that early) is never missed.
                            listening = anyio.Event()
                            session = self._session
                            tg.start_soon(
                                self.listen_stream.hold, session, self.capabilities, listening, self._current(session)
                            )
                            with anyio.move_on_after(LISTEN_WAIT):
                                await listening.wait()
                        await self.refresh(tools=True, resources=True, prompts=True)
                        self.source = "live"
                        self.startup_ms = round((anyio.current_time() - started) * 1000)
                        self._ready_at = anyio.current_time()
                        ready.set()
                        self._set("ready", None)
                        try:
                            await self.events.server_ready(self)
                        finally:
                            self.joined.set()
                        await self._wait_closed()
                        self._dispatcher = None
                        self._set("exited", self._exit_reason())
                except CommandNotFound as exc:
                    self._set("failed", str(exc))
                except MCPError as exc:
                    self._set("failed", await self._startup_error(exc))
                except OSError as exc:
                    self._set("failed", f"cannot start: {exc.strerror or exc}")
                except Exception as exc:  # a broken server must never take the gateway down
                    cause = leaf(exc)
                    if isinstance(cause, MCPError):
                        self._set("failed", await self._startup_error(cause))
                    elif isinstance(cause, CommandNotFound | LoginNeeded):
                        self._set("failed", str(cause))
                    elif ready.is_set() and self.config.transport != "stdio":
                        # A remote connection that was serving: its HTTP client failed (the
                        # server went away), which is a lost connection, not a failed start.
                        self._set("exited", f"connection lost: {short(cause)}")
                    else:
                        self._set("failed", short(cause) + self._stderr_hint())
                finally:
                    self._dispatcher = None
                    self._session = None
                    if (problem := self._login_problem()) is not None and self.status in ("failed", "exited"):
                        # The SDK's transport reports a failed auth flow only as a closed
                        # connection; the redirect handler said why (and what to run).
                        self._set("failed", problem)
            tg.cancel_scope.cancel()

    async def _connect(self, stack: AsyncExitStack) -> None:
        """Open the transport and settle the era (the rule: :data:`ServerConfig.protocol`).

        "auto" (the default) tries the handshake first, so a server that offers both eras
        keeps its back-channel; one that refuses it is reached anew (a stdio server is
        respawned: its connection kept the era of that first request) with
        ``server/discover``, and this connection remembers that for its restarts. Over HTTP
        the handshake's request carries the 2026-07-28 headers and envelope too
        (:func:`~gateway.downstream.modern.handshake`): a 2026-07-28 server expects them on
        every request, and a server of both eras reads the version they name.
        """
        if self.config.protocol == "auto" and not self._refused_handshake:
            attempt = await stack.enter_async_context(AsyncExitStack())
            session, dispatcher = await self._session_on(attempt)
            try:
                await handshake(session, dispatcher, http=self.config.transport == "http")
            except Exception as exc:
                if not refused_handshake(exc):
                    raise
                self._log.info("[%s] refused the handshake (%s); reaching it with server/discover", self.id, exc)
                self._refused_handshake = True
                await attempt.aclose()
            else:
                self._adopt(session, dispatcher, modern=False)
                return
        session, dispatcher = await self._session_on(stack)
        if self.config.protocol == "legacy":
            await handshake(session, dispatcher, http=self.config.transport == "http")
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
            elicitation_callback=self._elicitation,
            list_roots_callback=self._list_roots,
            message_handler=self._message,
        )
        return await stack.enter_async_context(session), dispatcher

    def _adopt(self, session: ClientSession, dispatcher: JSONRPCDispatcher[Any], *, modern: bool) -> None:
        """The negotiated session becomes this connection's."""
        version = session.protocol_version
        assert version is not None
        self.modern = modern
        self.protocol_version = version
        self._headers = {"mcp-protocol-version": version}
        self._dispatcher, self._session = dispatcher, session
        info, caps = session.server_info, session.server_capabilities
        self.server_info = info.model_dump(by_alias=True, mode="json", exclude_none=True) if info else None
        self.capabilities = caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps else {}
        self._log.info("[%s] protocol %s", self.id, version)

    def _current(self, session: ClientSession) -> Callable[[], bool]:
        """Whether ``session`` is still this server's connection (a listen stream ends with it)."""
        return lambda: self._session is session

    async def _relisted(self) -> None:
        """A lost listen stream is back: every list may have changed meanwhile (no replay)."""
        for kind in ("tools", "prompts", "resources"):
            await self.events.server_notification(self, f"notifications/{kind}/list_changed", {})

    async def watch_resource(self, uri: str, watch: bool) -> None:
        """``resources/subscribe`` toward a modern server: its listen stream's filter (``listening.py``)."""
        await self.listen_stream.watch(uri, watch)

    async def refresh(self, *, tools: bool = False, resources: bool = False, prompts: bool = False) -> None:
        """Re-list what the server offers (at start-up and on its list_changed)."""
        if tools:
            self.tools = await self.list_all("tools/list", "tools")
            if self.modern:
                self._header_maps = header_maps(self.tools)
        # A bad resources or prompts page costs those lists, not the server's tools.
        if resources:
            self.resources = self.templates = ()  # none unless it offers them (now)
            if "resources" in self.capabilities:
                try:
                    self.resources = await self.list_all("resources/list", "resources")
                    self.templates = await self.list_all("resources/templates/list", "resourceTemplates")
                except (MCPError, ValueError) as exc:
                    self.resources = self.templates = ()
                    self._log.warning("[%s] its resources are not offered: %s", self.id, short(exc))
        if prompts:
            self.prompts = ()
            if "prompts" in self.capabilities:
                try:
                    self.prompts = await self.list_all("prompts/list", "prompts")
                except (MCPError, ValueError) as exc:
                    self.prompts = ()
                    self._log.warning("[%s] its prompts are not offered: %s", self.id, short(exc))

    async def _startup_error(self, exc: MCPError) -> str:
        if exc.code == CONNECTION_CLOSED and (child := self.transport.child) is not None:
            await child.wait_exit(2.0)
            return f"exited during start-up ({child.exit_description()})" + self._stderr_hint()
        return exc.message + self._stderr_hint()

    def abandon(self, reason: str) -> None:
        """A server that missed the discovery deadline: reported late.

        Supervised servers keep connecting and join when ready; a one-shot discovery
        stops them.
        """
        if self.status == "starting":
            self._set("late", reason)

    def stop(self) -> None:
        self._stopping = True
        self.transport.discard()  # a process started early, never adopted (the gateway stops first)
        if self._scope is not None:
            self._scope.cancel()

    def _set(self, status: Status, error: str | None) -> None:
        """Record a status. The error text is kept redacted (it can quote a header or env
        value: a server echoing a token, an HTTP library quoting a header) and logged as
        one escaped line (a server's message can hold newlines or terminal escapes)."""
        self.status = status
        self.error = redact(error, self.config) if error else error
        if status == "ready":
            self._log.info("[%s] ready: %d tools in %d ms", self.config.id, len(self.tools), self.startup_ms or 0)
        elif self.error:
            self._log.warning("[%s] %s: %s", self.config.id, status, escape(self.error))
        if status != "starting":
            self.settled.set()

    async def _auth(self) -> Any:
        """This connection's OAuth provider (None without ``auth``): built anew for each
        connection, so tokens stored meanwhile (``prefixgate login`` elsewhere) are used."""
        if self.config.auth is None:
            return None
        if self._oauth is None:
            raise LoginNeeded("auth is configured, but this command keeps no tokens")
        from gateway.downstream.oauth import provider

        self._oauth.problems.clear(self.id)
        return await provider(self.config, self._oauth)

    def _login_problem(self, since: int | None = None) -> str | None:
        if self._oauth is None:
            return None
        problems = self._oauth.problems
        return problems.get(self.id) if since is None else problems.since(self.id, since)

    async def _pause(self, seconds: float) -> None:
        """The wait before a retry; a server with ``auth`` retries as soon as its token file
        changes (a ``prefixgate login`` in another terminal), not after the whole backoff."""
        if self.config.auth is None or self._oauth is None:
            await anyio.sleep(seconds)
            return
        store = self._oauth.store_for(self.config)
        before = store.fingerprint()
        with anyio.move_on_after(seconds):
            while store.fingerprint() == before:
                await anyio.sleep(min(1.0, seconds))

    def _stderr_line(self, line: str) -> None:
        self._log.info("[%s] %s", self.config.id, line)

    async def _wait_closed(self) -> None:
        if (child := self.transport.child) is not None:
            await child.stdout_closed.wait()
            await child.wait_exit(2.0)
            return
        # Remote: the transport gives no close signal of its own; a failing ping is one.
        while True:
            await anyio.sleep(LIVENESS_INTERVAL)
            try:
                # ping does not exist in 2026-07-28; server/discover is always answered.
                await self.request("server/discover" if self.modern else "ping", None, timeout=10)
            except (MCPError, DownstreamUnavailable) as exc:
                self.error = f"connection lost: {exc}"
                return
            except Exception as exc:  # noqa: BLE001 - the HTTP client's own (ConnectError...): the same loss
                self.error = f"connection lost: {short(leaf(exc))}"
                return

    def _exit_reason(self) -> str:
        if (child := self.transport.child) is not None:
            return f"server exited ({child.exit_description()})" + self._stderr_hint()
        return self.error or "connection closed"

    def stderr_tail(self) -> list[str]:
        """The last lines the server's process wrote to stderr (none for a remote server)."""
        child = self.transport.child
        return list(child.stderr_tail) if child is not None else []

    def _stderr_hint(self) -> str:
        child = self.transport.child
        line = informative(child.stderr_tail) if child is not None else None
        return f"; stderr: {line[:200]}" if line else ""

    def unavailable(self) -> str:
        """Why calls cannot go to this server now, and when it will be retried."""
        if self.status in ("restarting", "failed", "exited") and self.retry_at is not None:
            wait = max(0.0, self.retry_at - anyio.current_time())
            return f"Server {self.id!r} is down ({self.error_reason()}); it will be retried in {math.ceil(wait)} s."
        return f"Server {self.id!r} is not connected ({self.status}{': ' + self.error if self.error else ''})."

    def error_reason(self) -> str:
        return self.error or self.status

    # --- server-to-client traffic -----------------------------------------------------

    async def _message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            self._log.debug("[%s] transport error: %s", self.id, message)
            return
        if isinstance(message, types.ProgressNotification):
            return  # delivered to its call's on_progress by the dispatcher
        data = message.model_dump(by_alias=True, mode="json", exclude_none=True)
        if self._inbox is not None:
            self._inbox.put(data["method"], data.get("params") or {})

    async def _forward(self, context: ClientRequestContext, method: str, params: Any) -> Any:
        raw = params.model_dump(by_alias=True, mode="json", exclude_none=True) if params is not None else {}
        related = self.transport.related
        caller = related.take(context.request_id) if related is not None else None
        try:
            return await self.events.server_request(self, method, raw, caller)
        except MCPError as exc:
            return exc.error

    async def _sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        result = await self._forward(context, "sampling/createMessage", params)
        if isinstance(result, types.ErrorData):
            return result
        if params.tools:
            return types.CreateMessageResultWithTools.model_validate(result)
        return types.CreateMessageResult.model_validate(result)

    async def _elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        result = await self._forward(context, "elicitation/create", params)
        return result if isinstance(result, types.ErrorData) else types.ElicitResult.model_validate(result)

    async def _list_roots(self, context: ClientRequestContext) -> Any:
        result = await self._forward(context, "roots/list", None)
        return result if isinstance(result, types.ErrorData) else types.ListRootsResult.model_validate(result)

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
    ) -> dict[str, Any]:
        """Send one raw request; the result is the peer's JSON, unvalidated.

        To a modern server the request carries the 2026-07-28 envelope and headers
        (``log_level``: that request's log opt-in, else the gateway's level;
        ``capabilities``: what the client it is made for can answer, else all the
        gateway relays).
        """
        if self._dispatcher is None:
            await self.started()  # its first start still under way: a request from a warm start's catalog
        dispatcher = self._dispatcher
        child = self.transport.child
        gone = dispatcher is not None and child is not None and child.stdout_closed.is_set()
        if gone or (self._supervised and dispatcher is None and self.status == "exited" and self.retry_at is None):
            # The process is gone but the supervisor has not scheduled the retry yet: wait
            # for that (briefly) so the answer says when it will be retried, not a stale
            # "ready" or a bare "exited".
            with anyio.move_on_after(3):
                while self.retry_at is None and not self._stopping:
                    await anyio.sleep(0.01)
            dispatcher = None
        if dispatcher is None:
            raise DownstreamUnavailable(self.unavailable())
        raw = self.transport.raw_calls if method == "tools/call" and self._raw_calls else None
        if self.modern and self.protocol_version is not None:
            params, headers = stamp(
                method,
                params,
                version=self.protocol_version,
                client_info=client_info(__version__),
                log_level=log_level or self.log_level,
                header_maps=self._header_maps,
                capabilities=capabilities,
                headers=raw is None,  # a raw line on a pipe has no HTTP headers to carry
            )
        else:
            headers = dict(self._headers)
        related = self.transport.related  # a streamable-HTTP server's: which call its requests are for
        name = None
        if related is not None and (caller := CALLER.get()) is not None:
            name = headers[HEADER] = related.open(caller)
        opts: dict[str, Any] = {"headers": headers}
        if timeout is not None:
            opts["timeout"] = timeout
        if on_progress is not None:
            opts["on_progress"] = _latest_only(on_progress)
        try:
            if raw is not None:  # our own pipes: a raw line, its reply taken before any model (rawcalls.py)
                result: dict[str, Any] = await raw.request(
                    method, params, timeout=timeout, on_progress=opts.get("on_progress")
                )
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
                    self.id,
                    method,
                )
            raise
        finally:
            if name is not None and related is not None:
                related.close(name)
        if self.modern:
            result = hop_local_removed(result)
        if self._inbox is not None:
            await self._inbox.settle()  # what the server said before its reply goes out first
        return result

    async def list_all(self, method: str, key: str) -> tuple[Any, ...]:
        """Every item of every page, following ``nextCursor`` to the end."""
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            page = await self.request(method, {"cursor": cursor} if cursor is not None else None)
            batch = page.get(key)
            if not isinstance(batch, list):
                raise ValueError(f"{method} result has no {key!r} list")
            items.extend(batch)
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return tuple(items)
            if cursor in seen:
                raise ValueError(f"{method} repeated cursor {cursor!r}")
            seen.add(cursor)
        raise ValueError(f"{method} returned more than {_MAX_PAGES} pages")

    async def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        *,
        meta: Mapping[str, Any] | None = None,
        on_progress: ProgressFn | None = None,
        answers: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Forward ``tools/call``; errors become ``isError`` results naming the server.

        ``answers`` (``inputResponses``, ``requestState``) retry a call the server
        answered with ``input_required`` (2026-07-28).

        A JSON-RPC error from the server (an offline server's ``-32603 fetch failed``)
        becomes an ``isError`` result too: the model can act on one, while a protocol
        error ends its turn. Only the spec's own codes (-32020..-32099: a header
        mismatch, a client capability the request lacked, an unsupported version) stay
        JSON-RPC errors: they are about the client's request, which a client acts on.
        """
        params: dict[str, Any] = {"name": tool}
        # A modern client's per-request log opt-in holds for this call's hop too.
        wanted_level = (meta or {}).get(_ENVELOPE + "logLevel")
        # ... and so do the capabilities it declared: the server asks only for what it can answer.
        capabilities = relayable((meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY))
        if arguments is not None:
            params["arguments"] = dict(arguments)
        if meta:
            # The client's progress token and its per-request protocol envelope (2026-07-28
            # keys) belong to the upstream connection, not to this one.
            forwarded = {k: v for k, v in meta.items() if k != "progressToken" and not k.startswith(_ENVELOPE)}
            if forwarded:
                params["_meta"] = forwarded
        if answers:
            params.update(answers)
        timeout = self.config.call_timeout
        mark = self._oauth.problems.mark() if self._oauth is not None else 0
        try:
            return await self.request(
                "tools/call",
                params,
                timeout=timeout,
                on_progress=on_progress,
                log_level=wanted_level if isinstance(wanted_level, str) else None,
                capabilities=capabilities,
            )
        except DownstreamUnavailable as exc:
            return error_result(str(exc))
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return error_result(f"{self.config.id}: tool {tool!r} timed out after {timeout:g} s")
            if exc.code == CONNECTION_CLOSED and self._connection_gone(exc):
                return error_result(await self._closed_reason(tool))
            if exc.code in (MESSAGE_TOO_LARGE, UNPARSABLE_REPLY, PARSE_ERROR):
                # The reply never arrived whole: refused by our transport, or (remote) by the
                # SDK's, whose JSON parser rejects lone surrogates (``\ud800``) outright.
                return error_result(f"{self.config.id}: tool {tool!r}: {exc.message}")
            if SPEC_ERRORS[0] <= exc.code <= SPEC_ERRORS[1]:
                raise
            if (problem := self._login_problem(since=mark)) is not None:
                # The server refused the token for this call (a step-up, or a login gone).
                return error_result(f"Server {self.config.id!r} refused tool {tool!r}: {problem}")
            return error_result(server_error(self.config.id, tool, exc.code, exc.message))

    def _connection_gone(self, exc: MCPError) -> bool:
        """Whether -32000 is the SDK's own "connection closed" rather than a server's error
        (the code is also a common implementation-defined one, e.g. "Internal error")."""
        if (child := self.transport.child) is not None:
            return child.stdout_closed.is_set()
        return exc.message == "Connection closed" and exc.error.data is None

    async def _closed_reason(self, tool: str) -> str:
        if (child := self.transport.child) is not None:
            await child.wait_exit(2.0)
            return f"server {self.config.id!r} exited during the call to {tool!r} ({child.exit_description()})"
        if (problem := self._login_problem()) is not None:
            return f"Server {self.config.id!r}: {problem}"
        return f"connection to server {self.config.id!r} closed during the call to {tool!r}"


def _latest_only(forward: ProgressFn) -> ProgressFn:
    """Progress forwarded one at a time; while one is on its way only the newest waits.

    The SDK runs a task per progress notification: against a slow client a flood would
    pile them up without bound. Progress is a level, not a log, so the newest is enough.
    """
    busy = False
    waiting: tuple[float, float | None, str | None] | None = None

    async def wrapped(progress: float, total: float | None, message: str | None) -> None:
        nonlocal busy, waiting
        if busy:
            waiting = (progress, total, message)
            return
        busy = True
        try:
            await forward(progress, total, message)
            while waiting is not None:
                args, waiting = waiting, None
                await forward(*args)
        finally:
            busy = False

    return wrapped


def server_error(server: str, tool: str, code: int, message: str) -> str:
    """A server's JSON-RPC error as one bounded, printable line naming server, tool and code."""

    text = escape(" ".join(message.split()))
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return f"Server {server!r} answered tool {tool!r} with JSON-RPC error {code}: {text or '(no message)'}"
