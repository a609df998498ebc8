"""One downstream MCP server as the gateway knows it: its status, its lists, its requests.

A ``Downstream`` outlives its connections. It holds what the catalog and the commands
read (status, error, the lists with where they came from, capabilities) and is where a
request to the server is made. ``supervisor.py`` runs its connections one after another,
each a ``link.py`` ``Link`` over one of the ``transports.py`` transports; ``toolcall.py``
makes a tool call and turns its failures into ``isError`` results.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import anyio
import mcp_types as types
import pydantic
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST, METHOD_NOT_FOUND

from catalog.text import escape, plural
from catalog.warm import Contribution
from gateway.config import ServerConfig, env_number
from gateway.downstream import backoff
from gateway.downstream.errors import DownstreamUnavailable, short
from gateway.downstream.httpcalls import SessionRefused
from gateway.downstream.link import Link, ProgressFn, list_all
from gateway.downstream.listening import ListenStream
from gateway.downstream.oauth import LoginNeeded, OAuthSetup
from gateway.downstream.spawn import Spawned
from gateway.downstream.sseclient import untaken
from gateway.downstream.stderrtail import informative
from gateway.downstream.transports import Transport, transport_for
from gateway.logs import ServerLog
from gateway.redact import mask, masked_error, redact, secrets_of

Status = Literal["starting", "ready", "failed", "late", "disabled", "exited", "restarting"]
NOTICE_TIMEOUT = 5.0
"""Longest a notification the gateway passes on to a server may wait for it to read."""


class Events(Protocol):
    """What a downstream reports to the gateway (the hub implements it)."""

    async def server_ready(self, downstream: Downstream) -> None: ...

    async def server_down(self, downstream: Downstream) -> None: ...

    async def server_notification(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> None:
        """``caller``: the call whose stream a log message came on, when the wire says (``related.py``)."""
        ...

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

    async def server_notification(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> None:
        return None

    async def server_request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        raise MCPError(code=INVALID_REQUEST, message=f"prefixgate has no client to forward {method} to")


class Downstream:
    """One server: its record (status, lists) and its requests, across its connections."""

    def __init__(
        self,
        config: ServerConfig,
        events: Events | None = None,
        *,
        oauth: OAuthSetup | None = None,
        early: Spawned | None = None,
        principal: object | None = None,
    ) -> None:
        self.config = config
        self.principal = principal
        """The one principal this process serves (an instance: gateway/engine/instances.py), else None."""
        self._secrets = secrets_of(config)  # masked in each stderr line it writes (once: it may write many)
        self.oauth = oauth
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
        """Where the lists come from: the server ("live", kept while it is down) or the warm-start record."""
        self.server_info: dict[str, Any] | None = None
        self.protocol_version: str | None = None
        self.modern = False
        """The server speaks 2026-07-28: every request carries its own envelope (``gateway.downstream.modern``)."""
        self.log_level: str | None = None
        """Modern servers: the log level asked for on every request (no ``logging/setLevel``)."""
        self.restarts = 0
        self.retry_at: float | None = None
        self.settled = anyio.Event()
        """Set once the server is ready, failed or late: what the barrier waits for."""
        self.closed = anyio.Event()
        """Set when ``run`` has returned: the process and transport are gone."""
        self.joined = anyio.Event()
        """Set once the gateway has taken in its first start (``Events.server_ready`` returned)."""
        self.restarted = anyio.Event()
        """Set when a restart's attempt is over (ready, failed or late); a new one for each restart."""
        if not config.enabled:
            self.settled.set()
            self.closed.set()
        self.log: ServerLog = logging.getLogger(f"prefixgate.server.{config.id}")
        self.transport: Transport = transport_for(config, on_stderr=self._stderr_line, auth=self._auth, early=early)
        """How the server is reached: a stdio child, streamable HTTP or SSE (``transports.py``)."""
        self.link: Link | None = None
        """The connection requests go over, while there is one that is open (``link.py``)."""
        self.supervised = False
        """Whether a supervisor restarts its connections when they end (so a retry will be scheduled)."""
        self.stopping = False
        self.stop_reason: str | None = None
        self.scope: anyio.CancelScope | None = None
        """The scope its supervisor runs in (``supervisor.py``), which ``stop`` cancels."""
        self.listen_stream = ListenStream(config.id, self.log, self._relisted)
        """A modern server's change events (``listening.py``)."""

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def listed(self) -> bool:
        """Whether its lists belong in the catalog: it listed them (and is serving, or down and
        expected back), or the warm-start record holds them while it starts."""
        return self.source is not None

    def joining(self) -> bool:
        """Its first start not over: starting, or up but not yet taken in (its gate published)."""
        return self.status == "starting" or (self.status == "ready" and not self.joined.is_set())

    async def started(self) -> None:
        """Until its first start is over: ready and taken in by the gateway, or failed, or late
        (at most its startup_timeout). A call made from a warm start's catalog waits here."""
        if self.joining() and self.supervised and not self.stopping:
            await self.settled.wait()
            if self.joining():  # (read afresh: up, and not yet taken in)
                await self.joined.wait()

    def remember(self, recorded: Contribution) -> None:
        """A warm start: the lists it gave last time stand for it until it lists its own."""
        if self.source is None:
            self.tools, self.resources, self.templates = recorded.tools, recorded.resources, recorded.templates
            self.prompts, self.capabilities = recorded.prompts, dict(recorded.capabilities)
            self.source = "record"

    # --- life cycle (its supervisor, supervisor.py, runs it) ---------------------------

    def stop(self, reason: str | None = None) -> None:
        """Stop it for good (``reason``: what its in-flight calls are told stopped it)."""
        self.stopping = True
        self.stop_reason = reason
        self.transport.discard()  # a process started early, never adopted (the gateway stops first)
        if self.scope is not None:
            self.scope.cancel()

    def abandon(self, reason: str) -> None:
        """A server that missed the discovery deadline: reported late.

        Supervised servers keep connecting and join when ready; a one-shot discovery
        stops them.
        """
        if self.status == "starting":
            self.set_status("late", reason)

    def adopt(self, link: Link) -> None:
        """A new connection's era and what the server said of itself become the record's."""
        self.link = link
        self.modern, self.protocol_version = link.modern, link.protocol_version
        self.server_info, self.capabilities = link.server_info, link.capabilities
        link.tools_listed(self.tools)  # its tools' headers until it lists them anew

    def set_status(self, status: Status, error: str | None) -> None:
        """Record a status. The error text is kept redacted (it can quote a header or env
        value: a server echoing a token, an HTTP library quoting a header) and logged as
        one escaped line (a server's message can hold newlines or terminal escapes)."""
        self.status = status
        self.error = redact(error, self.config) if error else error
        self.restarted.set()  # (never called with "restarting": the supervisor sets that itself)
        if status == "ready":
            self.log.info(
                "[%s] ready: %s in %d ms", self.config.id, plural(len(self.tools), "tool"), self.startup_ms or 0
            )
        elif self.error and not (self.supervised and status in ("failed", "exited")):
            # (supervised, the end is logged once, with its retry: Supervisor.run)
            self.log.warning("[%s] %s: %s", self.config.id, status, escape(self.error))
        if status != "starting":
            self.settled.set()

    def unavailable(self) -> str:
        """Why calls cannot go to this server now, and when it will be retried."""
        if self.status in ("restarting", "failed", "exited") and self.retry_at is not None:
            wait = max(0.0, self.retry_at - anyio.current_time())
            return f"Server {self.id!r} is down ({self.error_reason()}); it will be retried in {math.ceil(wait)} s."
        return f"Server {self.id!r} is not connected ({self.status}{': ' + self.error if self.error else ''})."

    def error_reason(self) -> str:
        return self.error or self.status

    def stderr_tail(self) -> list[str]:
        """The last lines the server's process wrote to stderr (none for a remote server)."""
        child = self.transport.child
        return list(child.stderr_tail) if child is not None else []

    def stderr_hint(self) -> str:
        """The most telling line of its stderr, to follow a reason it failed."""
        child = self.transport.child
        line = informative(child.stderr_tail) if child is not None else None
        return f"; stderr: {line[:200]}" if line else ""

    def _stderr_line(self, line: str) -> None:
        self.log.info("[%s] %s", self.config.id, mask(line, self._secrets))

    async def _auth(self) -> Any:
        """This connection's OAuth provider (None without ``auth``): built anew for each
        connection, so tokens stored meanwhile (``prefixgate login`` elsewhere) are used."""
        if self.config.auth is None:
            return None
        if self.oauth is None:
            raise LoginNeeded("auth is configured, but this command keeps no tokens")
        from gateway.downstream.oauth import provider

        self.oauth.problems.clear(self.id)
        return await provider(self.config, self.oauth)

    def login_problem(self, since: int | None = None) -> str | None:
        """What the last failed OAuth flow said (since ``since``, a ``problems.mark()``)."""
        if self.oauth is None:
            return None
        problems = self.oauth.problems
        return problems.get(self.id) if since is None else problems.since(self.id, since)

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
        """Send one raw request over the current connection (``Link.request``); the result
        is the peer's JSON, unvalidated. ``log_level``: that request's log opt-in, else the
        gateway's level; ``max_time``: progress restarts ``timeout``, up to this in all."""
        options: dict[str, Any] = dict(
            timeout=timeout,
            on_progress=on_progress,
            log_level=log_level or self.log_level,
            capabilities=capabilities,
            max_time=max_time,
            beside=beside,
        )
        try:
            return await _request(self, method, params, options)
        except MCPError as exc:
            # A server that quotes the token it rejected: the error reaches the client (an
            # isError naming it, or the error itself) with the configured values masked.
            exc.error = masked_error(exc.error, self._secrets)
            raise

    async def roots_changed(self) -> None:
        """Tell a handshake-era server that is up that its client's roots changed, as that
        client would tell it directly (a 2026-07-28 server is asked for roots with each
        request: nothing of its can go stale). A server that does not read its input holds
        the notice up for ``NOTICE_TIMEOUT`` at most, then it is dropped."""
        link = self.link
        if link is None or link.modern or link.gone or self.status != "ready":
            return
        with anyio.move_on_after(NOTICE_TIMEOUT) as scope:
            await link.notify("notifications/roots/list_changed")
        if scope.cancelled_caught:
            self.log.warning("[%s] roots/list_changed not sent: its input is not being read", self.id)

    async def refresh(
        self, *, tools: bool = False, resources: bool = False, prompts: bool = False, again: bool = False
    ) -> None:
        """Re-list what the server offers (at start-up and, ``again``, on its list_changed)."""
        if tools:
            self.tools = await _tools_listed(self, again)
            if (link := self.link) is not None:
                link.tools_listed(self.tools)
        # A bad, refused or silent resources or prompts list costs that list alone (``_listed``);
        # a failed re-list keeps the old one, replaced only once a new one is in.
        if resources:
            if "resources" not in self.capabilities:
                self.resources = self.templates = ()
            else:
                found = await _listed(self, "resources/list", "resources", "its resources", again)
                templates = await _listed(
                    self, "resources/templates/list", "resourceTemplates", "its resource templates", again
                )
                self.resources = found if found is not None else self.resources if again else ()
                self.templates = templates if templates is not None else self.templates if again else ()
        if prompts:
            if "prompts" not in self.capabilities:
                self.prompts = ()
            else:
                found = await _listed(self, "prompts/list", "prompts", "its prompts", again)
                self.prompts = found if found is not None else self.prompts if again else ()

    async def watch_resource(self, uri: str, watch: bool) -> None:
        """``resources/subscribe`` toward a modern server: its listen stream's filter (``listening.py``)."""
        await self.listen_stream.watch(uri, watch)

    async def _relisted(self) -> None:
        """A lost listen stream is back: every list may have changed meanwhile (no replay)."""
        for kind in ("tools", "prompts", "resources"):
            await self.events.server_notification(self, f"notifications/{kind}/list_changed", {})


async def _request(
    d: Downstream, method: str, params: Mapping[str, Any] | None, options: dict[str, Any]
) -> dict[str, Any]:
    """``Link.request`` on the connection there is; a call the server refused for its session
    (HTTP 404: it was not run) goes once more, on the next one (``httpcalls.SessionRefused``;
    over SSE, ``sseclient.untaken``), as the spec has a client start a new session and a
    client directly would send it again."""
    if d.transport.ended is None:  # (not SSE: every stdio call passes here, and pays no context variable)
        try:
            return await (await _usable_link(d)).request(method, params, **options)
        except SessionRefused:
            pass
    else:
        with untaken() as refused:
            try:
                return await (await _usable_link(d)).request(method, params, **options)
            except MCPError:
                if not refused:
                    raise
    # (the supervisor opens the next session at once: waited for here)
    return await (await _usable_link(d)).request(method, params, **options)


async def _usable_link(d: Downstream) -> Link:
    """The connection a request goes on, or ``DownstreamUnavailable`` saying why there is none."""
    link = d.link
    if link is not None and not link.gone:
        return link  # (every call: nothing else to wait for)
    if link is None:
        await d.started()  # its first start still under way: a request from a warm start's catalog
    await _retry_scheduled(d)
    if (d.link is None or d.link.gone) and _restarting_soon(d):
        with anyio.move_on_after(backoff.START + d.config.startup_timeout):
            await d.restarted.wait()
        await _retry_scheduled(d)
    link = d.link
    if link is None or link.gone:
        raise DownstreamUnavailable(d.unavailable())
    return link


def _restarting_soon(d: Downstream) -> bool:
    """It was serving, exited, and its restart is under way or due within the backoff's
    first step: a request waits for that restart rather than failing meanwhile, as Claude
    Code, running a server itself, restarts it at the next call to it. A crash loop (a
    longer backoff, or a start that fails) is still answered at once."""
    if not d.supervised or d.stopping or d.status != "restarting":
        return False
    return d.retry_at is None or d.retry_at - anyio.current_time() <= backoff.START


RETRY_SCHEDULED_WAIT = env_number("PREFIXGATE_RETRY_SCHEDULED_WAIT", 3.0)
"""Seconds a request waits at most for the supervisor to schedule a lost server's retry
(the tests set it long: a wait that misses the retry then shows as a hang, not as a delay)."""


async def _retry_scheduled(d: Downstream) -> None:
    """The process is gone (or its start failed) but the supervisor has not scheduled the
    retry yet: wait for that (briefly) so the answer says when it will be retried, not a
    stale "ready" or a bare "exited" or "failed". A retry at once (a session the server ended)
    is scheduled and begun between two looks: the restart it began ends the wait too."""
    link = d.link
    if (link is not None and link.gone) or (
        d.supervised and link is None and d.status in ("exited", "failed") and d.retry_at is None
    ):
        restarts = d.restarts
        with anyio.move_on_after(RETRY_SCHEDULED_WAIT):
            while d.retry_at is None and not d.stopping and d.restarts == restarts:
                await anyio.sleep(0.01)


async def _tools_listed(d: Downstream, again: bool) -> tuple[Any, ...]:
    """Every tool the server lists; a re-list (``again``) all pages within its ``startup_timeout``,
    or ``TimeoutError``.

    A re-list that never ends (a page left unanswered) fails as one the server refuses does: the
    old tools stay, and the next ``list_changed`` re-lists it anew (``relist.py``) instead of
    joining a re-list that waits for good. A first listing is the start's, which
    ``startup_timeout`` already watches: a server that slow is ``late`` and joins when it is done."""
    listing = list_all(functools.partial(d.request, beside=again), "tools/list", "tools")
    if not again:
        return await listing
    timeout = d.config.startup_timeout
    with anyio.move_on_after(timeout):
        return await listing
    raise TimeoutError(f"tools/list not answered in full within {timeout:g} s (its startup_timeout)")


async def _listed(d: Downstream, method: str, key: str, what: str, again: bool) -> tuple[Any, ...] | None:
    """Every item ``method`` lists, or None (logged) when the server refuses it, answers
    it badly or not within half its ``startup_timeout`` (the other half is its start's):
    a server whose ``prompts/list`` never answered was never ready, its tools never published."""
    timeout = d.config.startup_timeout / 2
    try:
        with anyio.fail_after(timeout):
            return _accepted(d, await list_all(d.request, method, key), key)
    except TimeoutError:
        problem = f"no answer within {timeout:g} s (half its startup_timeout)"
    except (MCPError, ValueError) as exc:
        if isinstance(exc, MCPError) and exc.error.code == METHOD_NOT_FOUND and key == "resourceTemplates":
            return ()  # (many servers with resources have no templates, and say so)
        problem = short(exc)
    d.log.warning("[%s] %s %s: %s", d.id, what, "kept as listed before" if again else "not offered", problem)
    return None


_MODELS: dict[str, tuple[type[pydantic.BaseModel], str]] = {
    "prompts": (types.Prompt, "prompt"),
    "resources": (types.Resource, "resource"),
    "resourceTemplates": (types.ResourceTemplate, "resource template"),
}


def _accepted(d: Downstream, items: tuple[Any, ...], key: str) -> tuple[Any, ...]:
    """The items the SDK's model accepts, checked once as they are listed: one it refuses
    would fail the whole list the gateway answers (every server's), so it is left out, with a
    warning naming it, its server and the field."""
    model, kind = _MODELS[key]
    kept = []
    for item in items:
        try:
            model.model_validate(item)
        except pydantic.ValidationError as exc:
            name = item.get("name") if isinstance(item, dict) else None
            what = f" {name!r}" if isinstance(name, str) else ""
            error = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in error["loc"]) or "it"
            d.log.warning("ignored %s%s of server %r: %s: %s", kind, what, d.id, where, error["msg"])
            continue
        kept.append(item)
    return tuple(kept)


def offers(d: Downstream, capability: str, feature: str | None = None) -> bool:
    """Whether a server's capabilities offer ``capability`` (and its ``feature``, say
    ``resources``' ``subscribe``). None known yet (before its first start) is left to its answer: True."""
    if not d.capabilities:
        return True
    if feature is None:
        return capability in d.capabilities
    offered = d.capabilities.get(capability)
    return isinstance(offered, dict) and bool(offered.get(feature))
