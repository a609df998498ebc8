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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
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
from gateway.downstream.inbox import Inbox
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
from gateway.downstream.related import CALLER, HEADER, Related
from gateway.downstream.spawn import Spawned
from gateway.downstream.stderrtail import informative
from gateway.downstream.stdio import MESSAGE_TOO_LARGE, UNPARSABLE_REPLY, ChildProcess, CommandNotFound, stdio_transport
from gateway.fastpath import fast_path
from gateway.results import error_result

Status = Literal["starting", "ready", "failed", "late", "disabled", "exited", "restarting"]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]

log = logging.getLogger("prefixgate.downstream")

_MAX_PAGES = 10_000
BACKOFF_START = backoff.START
BACKOFF_MAX = backoff.LIMIT
LIVENESS_INTERVAL = float(os.environ.get("PREFIXGATE_LIVENESS_INTERVAL") or 15.0)
"""Seconds between liveness checks of a remote server (the environment variable exists for tests)."""
SPEC_ERRORS = (-32099, -32020)
"""Error codes the 2026-07-28 spec allocates (about the request itself, not the tool)."""
MAX_ERROR_CHARS = 500
"""A server's error message kept in a tool's ``isError`` text (one line)."""
LISTEN_WAIT = 10.0
"""Seconds a modern server's start waits for its listen stream before listing without it."""
MAX_WATCHED = 1024
"""Resource URIs one modern server is watched for (each is a filter entry of its listen stream)."""


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


def _capped_client_factory(endpoint: str) -> Any:
    """The SSE transport's HTTP client, built as the SDK builds it, with OAuth-side answers capped."""
    import httpx2

    from gateway.downstream.oauth import CappedAuthAnswers

    def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers=headers, timeout=timeout, auth=auth, follow_redirects=False, transport=CappedAuthAnswers(endpoint)
        )

    return factory


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups: the one worth reporting."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _short(exc: BaseException) -> str:
    """One line for an error, escaped; a few that would quote what must not be shown are reworded."""
    text = str(exc).strip()
    if isinstance(exc, UnicodeDecodeError):
        text = f"an answer that is not UTF-8 text (byte {exc.start})"
    elif text.startswith("State parameter mismatch"):  # the SDK would print the expected state
        text = "the authorization response's state is not this login's (a stale or forged redirect)"
    elif "Illegal header value" in text:  # the HTTP library would print the header: a credential
        text = "a header value the HTTP library refused (not shown)"
    line = f"{type(exc).__name__}: {escape(text.splitlines()[0][:300])}" if text else type(exc).__name__
    host = _host_of(exc)
    return line + f" ({escape(host)})" if host is not None and host.rsplit(":", 1)[0] not in text else line


def _host_of(exc: BaseException) -> str | None:
    """``host:port`` of the request an HTTP library error was for ("Name or service not known"
    names no host); never its path or query, which may carry credentials."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]  # httpx's errors; a RuntimeError when unset
    except (AttributeError, RuntimeError):
        return None
    port = url.port or {"https": 443, "http": 80}.get(url.scheme)
    return f"{url.host}:{port}" if url.host else None


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
        self._early = early
        """A stdio server's process started before the gateway was up (``gateway.upstream.prelude``):
        the first connection adopts it instead of spawning one."""
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
        self._child: ChildProcess | None = None
        self._raw_calls = fast_path()
        """``tools/call`` to a stdio child as raw lines (``PREFIXGATE_FAST_PATH=0``: through the SDK)."""
        self._headers: dict[str, str] = {}
        self._related: Related | None = None
        """A streamable-HTTP server's calls in flight, to tell whose its requests are (``related.py``)."""
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
        self._watched: set[str] = set()
        """Resource URIs clients subscribed to on a modern server (its listen filter)."""
        self._listening: frozenset[str] = frozenset()
        self._relisten = anyio.Event()
        self._listen_changed = anyio.Event()

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
            if self._early is not None:
                self._early.discard()
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
                            tg.start_soon(self._listen, self._session, listening)
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
                    leaf = _leaf(exc)
                    if isinstance(leaf, MCPError):
                        self._set("failed", await self._startup_error(leaf))
                    elif isinstance(leaf, CommandNotFound | LoginNeeded):
                        self._set("failed", str(leaf))
                    elif ready.is_set() and self._child is None:
                        # A remote connection that was serving: its HTTP client failed (the
                        # server went away), which is a lost connection, not a failed start.
                        self._set("exited", f"connection lost: {_short(leaf)}")
                    else:
                        self._set("failed", _short(leaf) + self._stderr_hint())
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
        read, write = await stack.enter_async_context(self._open())
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

    async def _listen(self, session: ClientSession, listening: anyio.Event) -> None:
        """A modern server's change events come only on a ``subscriptions/listen`` stream.

        Its events also reach ``_message`` (the SDK tees them), which re-lists or relays
        as for a handshake-era server; this task holds the stream open and drains it. The
        resource URIs clients subscribed to are the stream's filter, so a change to them
        re-opens it. A lost stream is re-opened after a pause, and everything re-listed
        (events may have been missed meanwhile, and there is no replay).
        """
        from mcp.client.subscriptions import listen

        caps = self.capabilities
        tools, prompts, resources = (
            bool((caps.get(k) or {}).get("listChanged")) for k in ("tools", "prompts", "resources")
        )
        if not (tools or prompts or resources or (caps.get("resources") or {}).get("subscribe")):
            listening.set()
            return
        pause = BACKOFF_START
        lost = False
        while self._session is session:
            relisten = self._relisten = anyio.Event()
            uris = sorted(self._watched)
            try:
                async with listen(
                    session,
                    tools_list_changed=tools,
                    prompts_list_changed=prompts,
                    resources_list_changed=resources,
                    resource_subscriptions=uris,
                ) as events:
                    pause = BACKOFF_START
                    listening.set()
                    self._listening = frozenset(uris)
                    self._listen_changed.set()
                    self._listen_changed = anyio.Event()
                    if lost:
                        lost = False
                        for kind in ("tools", "prompts", "resources"):
                            await self.events.server_notification(self, f"notifications/{kind}/list_changed", {})
                    with anyio.CancelScope() as scope:

                        async def wake(relisten: anyio.Event = relisten) -> None:
                            await relisten.wait()
                            scope.cancel()

                        async with anyio.create_task_group() as tg:
                            tg.start_soon(wake)
                            async for _ in events:
                                pass
                            tg.cancel_scope.cancel()
                    if relisten.is_set():
                        continue
            except Exception as exc:  # noqa: BLE001 - no stream costs change events, never the server
                self._log.info("[%s] subscriptions/listen ended: %s", self.id, _short(exc))
            listening.set()
            lost = True
            await anyio.sleep(pause)
            pause = min(pause * 2, BACKOFF_MAX)

    async def watch_resource(self, uri: str, watch: bool) -> None:
        """``resources/subscribe`` toward a modern server (2026-07-28 has no such request):
        the URI joins (or leaves) the listen stream's filter; returns once the re-opened
        stream is acknowledged (at most 10 s)."""
        if watch and uri not in self._watched and len(self._watched) >= MAX_WATCHED:
            raise MCPError(
                code=INVALID_REQUEST, message=f"prefixgate: more than {MAX_WATCHED} resources watched on {self.id!r}"
            )
        (self._watched.add if watch else self._watched.discard)(uri)
        self._relisten.set()
        with anyio.move_on_after(10):
            while (uri in self._listening) != watch:
                await self._listen_changed.wait()

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
                    self._log.warning("[%s] its resources are not offered: %s", self.id, _short(exc))
        if prompts:
            self.prompts = ()
            if "prompts" in self.capabilities:
                try:
                    self.prompts = await self.list_all("prompts/list", "prompts")
                except (MCPError, ValueError) as exc:
                    self.prompts = ()
                    self._log.warning("[%s] its prompts are not offered: %s", self.id, _short(exc))

    async def _startup_error(self, exc: MCPError) -> str:
        if exc.code == CONNECTION_CLOSED and self._child is not None:
            await self._child.wait_exit(2.0)
            return f"exited during start-up ({self._child.exit_description()})" + self._stderr_hint()
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
        if self._early is not None:
            self._early.discard()  # never adopted (the gateway stops before this server's first connection)
        if self._scope is not None:
            self._scope.cancel()

    def _set(self, status: Status, error: str | None) -> None:
        """Record a status. The error text is kept redacted (it can quote a header or env
        value: a server echoing a token, an HTTP library quoting a header) and logged as
        one escaped line (a server's message can hold newlines or terminal escapes)."""
        from catalog.text import escape  # here, not at the top: this method is the only hunk
        from gateway.redact import redact

        self.status = status
        self.error = redact(error, self.config) if error else error
        if status == "ready":
            self._log.info("[%s] ready: %d tools in %d ms", self.config.id, len(self.tools), self.startup_ms or 0)
        elif self.error:
            self._log.warning("[%s] %s: %s", self.config.id, status, escape(self.error))
        if status != "starting":
            self.settled.set()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        self._child = None
        if cfg.transport == "stdio":
            assert cfg.command is not None
            early, self._early = self._early, None
            async with stdio_transport(
                cfg.command,
                cfg.args,
                env=cfg.env,
                cwd=cfg.cwd,
                on_stderr=self._stderr_line,
                max_message_bytes=cfg.max_message_bytes,
                spawned=early,
            ) as (read, write, child):
                self._child = child
                yield read, write
        elif cfg.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            assert cfg.url is not None
            auth = await self._auth()
            # The SDK transports' own defaults: a response stream may stay open for minutes.
            timeout = httpx2.Timeout(30.0, read=300.0)
            from gateway.downstream.related import RelatedStreams
            from gateway.downstream.reuse import ReusedConnections

            if auth is not None:
                from gateway.downstream.oauth import CappedAuthAnswers

                inner: httpx2.AsyncBaseTransport = CappedAuthAnswers(cfg.url)
            else:
                inner = httpx2.AsyncHTTPTransport()
            self._related = Related()
            transport = ReusedConnections(RelatedStreams(self._related, inner))
            async with httpx2.AsyncClient(
                headers=dict(cfg.headers), timeout=timeout, auth=auth, transport=transport
            ) as http:
                async with streamable_http_client(cfg.url, http_client=http) as (read, write):
                    yield read, write
        else:
            from mcp.client.sse import sse_client

            assert cfg.url is not None
            auth = await self._auth()
            factory = _capped_client_factory(cfg.url) if auth is not None else None
            options = {"httpx_client_factory": factory} if factory is not None else {}
            async with sse_client(cfg.url, headers=dict(cfg.headers), auth=auth, **options) as (read, write):
                yield read, write

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
        if self._child is not None:
            await self._child.stdout_closed.wait()
            await self._child.wait_exit(2.0)
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
                self.error = f"connection lost: {_short(_leaf(exc))}"
                return

    def _exit_reason(self) -> str:
        if self._child is not None:
            return f"server exited ({self._child.exit_description()})" + self._stderr_hint()
        return self.error or "connection closed"

    def stderr_tail(self) -> list[str]:
        """The last lines the server's process wrote to stderr (none for a remote server)."""
        return list(self._child.stderr_tail) if self._child is not None else []

    def _stderr_hint(self) -> str:
        line = informative(self._child.stderr_tail) if self._child is not None else None
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
        related = self._related
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
        gone = dispatcher is not None and self._child is not None and self._child.stdout_closed.is_set()
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
        raw = self._child.calls if self._child is not None and method == "tools/call" and self._raw_calls else None
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
        related = self._related  # a streamable-HTTP server's: which call its requests are for
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
        if self._child is not None:
            return self._child.stdout_closed.is_set()
        return exc.message == "Connection closed" and exc.error.data is None

    async def _closed_reason(self, tool: str) -> str:
        if self._child is not None:
            await self._child.wait_exit(2.0)
            return f"server {self.config.id!r} exited during the call to {tool!r} ({self._child.exit_description()})"
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
    from catalog.text import escape

    text = escape(" ".join(message.split()))
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return f"Server {server!r} answered tool {tool!r} with JSON-RPC error {code}: {text or '(no message)'}"
