"""The running gateway: downstream servers, the current epoch, and the connected clients.

It reacts to what downstream servers report: a ``list_changed`` re-lists that server and
rebuilds the catalog (coalesced per server: one re-list running, at most one pending),
but publishes a new epoch (clearing activation, notifying clients in both protocol
eras) only when the canonical declarations really changed; a server that becomes ready
late, or comes back after a crash, joins the same way. It also relays server-to-client
traffic: log messages, resource updates, and sampling / elicitation /
roots requests (to the client whose call caused them, when there is one).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp_types import LoggingLevel
from mcp_types.jsonrpc import INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY

from catalog.budget import DecisionError
from catalog.diff import name_changes
from catalog.lock import Lock, LockError
from catalog.names import code_unit_key
from gateway.config import Config
from gateway.downstream.connection import Downstream
from gateway.engine.checks import CheckCache
from gateway.engine.epoch import Epoch, build_epoch
from gateway.engine.lockfile import lock_path, read_lock
from gateway.engine.oauth import oauth_setup
from gateway.engine.roundtrip import CAPABILITY_FOR, RoundTrips
from gateway.engine.router import Router
from gateway.engine.surface import Surface, build_surface
from gateway.engine.watches import Watches
from gateway.sdk import send_raw_request
from gateway.state.backend import state_store
from gateway.state.journal import session_key
from gateway.state.session import ClientState

log = logging.getLogger("prefixgate")

_CAPABILITY_FOR = CAPABILITY_FOR


def _require_capability(method: str, capabilities: Any) -> None:
    """Refuse a server request the client cannot answer, in either era, with the
    2026-07-28 error for an undeclared capability (SEP-2575): the server's call fails
    with it, so the client learns which capability the call needed instead of waiting."""
    capability = _CAPABILITY_FOR.get(method)
    if capability is None:
        raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: the connected client does not support {method}")
    if capabilities is None or getattr(capabilities, capability, None) is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"prefixgate: the connected client does not support {capability}",
            data={"requiredCapabilities": {capability: {}}},
        )


@dataclass(eq=False)
class ClientConnection:
    """One connected client: its state (activation, artifacts) and its notification channel."""

    state: ClientState
    server_session: ServerSession | None = None
    subscriptions: set[str] = field(default_factory=set)
    calls: dict[Any, str] = field(default_factory=dict)
    """In-flight tools/call request id -> downstream server id (to route its requests back)."""
    call_order: dict[Any, int] = field(default_factory=dict)
    """In-flight handshake-era tools/call request id -> when it began (``RoundTrips.order``)."""
    call_sessions: dict[Any, ServerSession] = field(default_factory=dict)
    """In-flight tools/call request id -> that request's session (its stream, its log opt-in)."""
    log_level: str | None = None
    """The level this client set with ``logging/setLevel`` (None: never set)."""


LOCK_POLL = 1.0
"""Seconds between checks of the lock file for a change (``catalog approve`` while serving)."""


class Hub:
    def __init__(self, config: Config, *, persist: bool = True, use_lock: bool = True) -> None:
        self.config = config
        self.lock_file = lock_path(config) if use_lock else None
        self.lock: Lock | None = None
        """The catalog lock served under (read by ``load_lock``), or None: serve the live catalog."""
        self._lock_stamp: tuple[int, int, int] | None = None
        self.downstreams = [Downstream(s, self, oauth=oauth_setup(config)) for s in config.servers]
        self.by_id = {d.id: d for d in self.downstreams}
        self.router = Router(self.by_id, config.policy, config.spill)
        self.surface = Surface()
        self.bus = InMemorySubscriptionBus()
        self.clients: list[ClientConnection] = []
        self.discovered = anyio.Event()
        self.checks = CheckCache(config.gateway.state_dir, persist=persist)
        self.store = state_store(config)
        """Activation, artifacts and the integrity key (opened by ``serve``)."""
        self._rebuild_lock = anyio.Lock()
        self._rebuild_waiting = False
        self._relists: dict[tuple[str, str], bool] = {}
        """(server id, kind) -> whether another re-list is pending behind the running one."""
        self._tasks: anyio.abc.TaskGroup | None = None
        self._log_level: str | None = None
        self._principals: dict[str, ClientState] = {}
        self.watches = Watches(self.resource_owner)
        """Resources clients watch (resources/subscribe, listen streams), counted per URI."""
        self.round_trips = RoundTrips(
            timeout=config.gateway.round_trip_timeout, per_owner=config.gateway.max_round_trips
        )
        """Calls of 2026-07-28 clients that may wait for the client's input (no back-channel)."""

    # --- start-up ---------------------------------------------------------------------

    def start(self, tg: anyio.abc.TaskGroup, *, supervise: bool) -> None:
        self._tasks = tg
        self.round_trips.tasks = tg
        tg.start_soon(self.round_trips.keep)
        for downstream in self.downstreams:
            tg.start_soon(functools.partial(downstream.run, supervise=supervise))
        if self.lock_file is not None and supervise:
            tg.start_soon(self._watch_lock)

    def load_lock(self) -> None:
        """Read the lock file (LockError names it and the problem); none configured or found: no lock."""
        if self.lock_file is None:
            return
        self._lock_stamp = _stamp(self.lock_file)
        self.lock = read_lock(self.lock_file)
        log.info("catalog lock: %s (%d tools)", self.lock_file, len(self.lock.tools))

    async def _watch_lock(self) -> None:
        """Serve an approved change without a restart: a new lock file is a rebuild.

        A lock that cannot be read keeps the previous one (an unreadable lock never
        unlocks the catalog); ``catalog approve`` replaces the file atomically.
        """
        assert self.lock_file is not None
        while True:
            await anyio.sleep(LOCK_POLL)
            stamp = _stamp(self.lock_file)
            if stamp == self._lock_stamp or not self.discovered.is_set():
                continue
            self._lock_stamp = stamp
            try:  # a 5,000-tool lock is megabytes of TOML: parsed off the event loop
                self.lock = await anyio.to_thread.run_sync(read_lock, self.lock_file)
            except LockError as exc:
                log.error("catalog lock not reloaded, keeping the previous one: %s", exc)
                continue
            await self.rebuild(f"lock file {self.lock_file.name} changed")

    async def first_epoch(self, epoch: Epoch) -> None:
        self.surface = build_surface(self.downstreams, self.config.client.names, self.config.gateway.separator)
        for warning in self.surface.warnings:
            log.warning("%s", warning)
        await self.router.publish(epoch)
        for client in self.clients:
            await client.state.enter(epoch.identity)
        self.discovered.set()

    # --- clients ----------------------------------------------------------------------

    async def connect(self, state: ClientState) -> ClientConnection:
        client = ClientConnection(state)
        self.clients.append(client)
        if self.router.epoch is not None:
            await state.enter(self.router.epoch.identity)
        return client

    def disconnect(self, client: ClientConnection) -> None:
        if client in self.clients:
            self.clients.remove(client)
        if client.subscriptions and self._tasks is not None:
            for uri in sorted(client.subscriptions):  # a client that leaves stops watching
                self._tasks.start_soon(self.watches.unwatch, uri)
            client.subscriptions.clear()

    def resource_owner(self, uri: str) -> Downstream | None:
        """The owner of a URI; else the first ready server (code-unit id order) offering resources."""
        owner = self.surface.owner_of_uri(uri)
        if owner is None:
            candidates = sorted(
                (d for d in self.downstreams if d.status == "ready" and "resources" in d.capabilities),
                key=lambda d: code_unit_key(d.id),
            )
            owner = candidates[0].id if candidates else None
        return self.by_id.get(owner) if owner is not None else None

    def principal_state(self, principal: str) -> ClientState:
        """The one state (activation, artifacts) of an HTTP principal, shared by all its connections and requests.

        The 2026-07-28 protocol has no sessions (every request is a connection of its
        own), so state keyed by connection would be lost between a ``tool_search`` and the
        call it enables. Activation and artifacts are kept in the state store under the
        principal's key, so both survive a restart (and reach every replica sharing a
        Redis store). Principals are
        the configured tokens (or the one local principal): this map cannot grow with
        what clients send.
        """
        state = self._principals.get(principal)
        if state is None:
            key = session_key(f"principal:{principal}")
            artifacts = self.store.artifacts(key) if self.config.spill.enabled else None
            state = self._principals[principal] = ClientState(self.store, key, artifacts)
        return state

    def capabilities(self) -> dict[str, Any]:
        """The union of what the ready servers offer (tools are always served)."""
        caps: dict[str, Any] = {"tools": {"listChanged": True}}
        for d in self.downstreams:
            if d.status != "ready":
                continue
            offered = d.capabilities
            if "resources" in offered:
                resources = caps.setdefault("resources", {"listChanged": True})
                if isinstance(offered["resources"], dict) and offered["resources"].get("subscribe"):
                    resources["subscribe"] = True
            if "prompts" in offered:
                caps["prompts"] = {"listChanged": True}
            if "completions" in offered:
                caps["completions"] = {}
            if "logging" in offered:
                caps["logging"] = {}
        return caps

    # --- Events (from downstream servers) ---------------------------------------------

    async def server_ready(self, downstream: Downstream) -> None:
        if downstream.modern:
            downstream.log_level = self._log_level  # 2026-07-28: asked for on each request
        elif self._log_level is not None and "logging" in downstream.capabilities:
            try:
                await downstream.request("logging/setLevel", {"level": self._log_level}, timeout=10)
            except Exception as exc:  # noqa: BLE001 - a server that refuses is still usable
                log.info("[%s] logging/setLevel refused: %s", downstream.id, exc)
        if self.discovered.is_set():
            await self.rebuild(f"server {downstream.id!r} is ready")

    async def server_down(self, downstream: Downstream) -> None:
        """A server went away: its tools stay in the epoch (calls report it down) until
        it comes back; if it comes back with the same tools, clients see nothing."""

    async def server_notification(self, downstream: Downstream, method: str, params: dict[str, Any]) -> None:
        if method.endswith("/list_changed"):
            if downstream.status != "ready":
                return  # still starting: its start-up listing comes after this
            kind = {
                "notifications/tools/list_changed": "tools",
                "notifications/prompts/list_changed": "prompts",
                "notifications/resources/list_changed": "resources",
            }.get(method)
            if kind is not None:
                self._relist_soon(downstream, kind)
        elif method == "notifications/resources/updated":
            uri = params.get("uri")
            if isinstance(uri, str):
                await self._broadcast(lambda s: s.send_resource_updated(uri), lambda u: uri in u.subscriptions)
                await self.bus.publish(ResourceUpdated(uri=uri))
        elif method == "notifications/message":
            await self._relay_log(downstream, params)

    def _relist_soon(self, downstream: Downstream, kind: str) -> None:
        """Coalesce a server's ``list_changed`` storm: one re-list runs, at most one waits.

        Each re-list may rebuild a catalog of thousands of tools; hundreds of notifications
        in a burst must not mean hundreds of rebuilds. A notification that arrives while a
        re-list runs marks one more as pending (it will see every change so far); while
        one is pending, a notification adds nothing. The re-list runs in the hub's own
        task, so whoever delivers notifications is never held up by it.
        """
        key = (downstream.id, kind)
        if key in self._relists:
            self._relists[key] = True
            return
        self._relists[key] = False
        if self._tasks is None:
            self._relists.pop(key)
            return
        self._tasks.start_soon(self._relist, downstream, kind, key)

    async def _relist(self, downstream: Downstream, kind: str, key: tuple[str, str]) -> None:
        try:
            while True:
                self._relists[key] = False
                try:
                    await downstream.refresh(**{kind: True})
                    if kind == "tools":
                        await self.rebuild(f"server {downstream.id!r} changed its tools")
                    elif await self._resurface() and self.discovered.is_set():
                        await self._notify_lists(kind)
                except Exception as exc:  # noqa: BLE001 - a server that fails to re-list keeps its old lists
                    log.warning("[%s] re-listing %s after list_changed failed: %s", downstream.id, kind, exc)
                if not self._relists[key]:
                    return
        finally:
            del self._relists[key]

    async def server_request(self, downstream: Downstream, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Relay sampling, elicitation or roots to the client that can answer it.

        A call of a 2026-07-28 client has no back-channel: the request waits for that
        client's ``input_required`` retry instead (gateway/engine/roundtrip.py).
        """
        trip = self.round_trips.waiting_on(downstream.id)
        target, related = self._requester(downstream.id)
        if trip is not None and (target is None or target.call_order.get(related, 0) < trip.seq):
            _require_capability(method, trip.capabilities)
            return await trip.ask(method, params)
        if target is None or target.server_session is None:
            raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: no client is connected to answer {method}")
        _require_capability(method, target.server_session.client_capabilities)
        # Raw, as the server sent it, on the originating call's own stream when there is
        # one (streamable HTTP needs that), else on the client's standalone channel.
        call_session = target.call_sessions.get(related) if related is not None else None
        result: dict[str, Any] = await send_raw_request(
            call_session or target.server_session, method, params, related=call_session is not None
        )
        return result

    async def _relay_log(self, downstream: Downstream, params: dict[str, Any]) -> None:
        """A server's log message goes to the client whose call to it is in flight (on that
        call's stream, as that call opted in); otherwise to every client whose own
        ``logging/setLevel`` admits it. Never to everyone regardless of who asked."""
        level = params.get("level")
        if level not in LOG_LEVELS:
            return
        name = params.get("logger")
        source = downstream.id if not name else f"{downstream.id}/{name}"
        data = params.get("data")
        caller, request_id = self._requester(downstream.id)
        if request_id is not None and caller is not None:
            session = caller.call_sessions.get(request_id)
            if session is not None and admits(caller.log_level, level):
                with contextlib.suppress(Exception):  # a gone client must not break the server's call
                    await _send_log(session, level, data, source, request_id)
            return
        await self._broadcast(
            lambda s: _send_log(s, level, data, source, None),
            lambda u: u.log_level is not None and admits(u.log_level, level),
        )

    def _requester(self, server_id: str) -> tuple[ClientConnection | None, Any]:
        for client in reversed(self.clients):
            for request_id, target in client.calls.items():
                if target == server_id:
                    return client, request_id
        return (self.clients[-1], None) if self.clients else (None, None)

    # --- epochs -----------------------------------------------------------------------

    async def rebuild(self, why: str) -> None:
        """Rebuild the catalog; publish a new epoch only when what clients see changed.

        A request made while another rebuild waits for the lock is folded into that one:
        it builds from the state current when it runs, so it includes this change.
        """
        if not self.discovered.is_set():
            return  # the barrier builds the first epoch
        if self._rebuild_waiting:
            log.debug("%s: a rebuild is already waiting and will include it", why)
            return
        self._rebuild_waiting = True
        try:
            await self._rebuild_lock.acquire()
        finally:
            self._rebuild_waiting = False
        try:
            await self._rebuild(why)
        finally:
            self._rebuild_lock.release()

    async def _rebuild(self, why: str) -> None:
        old = self.router.epoch
        try:
            epoch = build_epoch(self.config, self.downstreams, self.checks, self.lock)
        except DecisionError as exc:
            log.error("catalog change refused (%s): %s; keeping the current epoch", why, exc)
            return
        await self._resurface()
        if old is None or epoch.pending != old.pending:
            log_pending(epoch)
        if old is not None and epoch.identity == old.identity and epoch.fingerprint == old.fingerprint:
            # Under a lock the published bytes stay while the live tools change: only the
            # call gate learns of it (no new epoch, no list_changed, activation kept).
            old.pending, old.lock_refusals = epoch.pending, epoch.lock_refusals
            log.info("%s: catalog unchanged (fingerprint %s), same epoch", why, old.fingerprint[:16])
            return
        for warning in epoch.catalog.warnings:
            log.warning("%s", warning.line())
        log.warning(
            "new epoch (%s): fingerprint %s -> %s; %s",
            why,
            old.fingerprint[:16] if old else "-",
            epoch.fingerprint[:16],
            change_summary(old, epoch),
        )
        if old is None or epoch.decision.fallback != old.decision.fallback:
            log.warning("declarations: %s (%s)", epoch.decision.mode, epoch.decision.detail)
        await self.router.publish(epoch)
        for client in self.clients:
            await client.state.enter(epoch.identity)
        await self._broadcast(lambda s: s.send_tool_list_changed())
        await self.bus.publish(ToolsListChanged())

    async def _resurface(self) -> bool:
        new = build_surface(self.downstreams, self.config.client.names, self.config.gateway.separator)
        changed = (new.resources, new.templates, new.prompts) != (
            self.surface.resources,
            self.surface.templates,
            self.surface.prompts,
        )
        self.surface = new
        return changed

    async def _notify_lists(self, kind: str) -> None:
        if kind == "prompts":
            await self._broadcast(lambda s: s.send_prompt_list_changed())
            await self.bus.publish(PromptsListChanged())
        else:
            await self._broadcast(lambda s: s.send_resource_list_changed())
            await self.bus.publish(ResourcesListChanged())

    async def _broadcast(
        self, send: Callable[[ServerSession], Any], only: Callable[[ClientConnection], bool] = lambda u: True
    ) -> None:
        for client in list(self.clients):
            if client.server_session is None or not only(client):
                continue
            try:
                await send(client.server_session)
            except Exception as exc:  # noqa: BLE001 - a gone client must not stop the others
                log.debug("notification to a client failed: %s", exc)

    async def set_log_level(self, client: ClientConnection, level: str) -> None:
        """One client's level: each client filters at its own level, and the servers are
        asked for the most verbose level any client wants (never lowered by another)."""
        client.log_level = level
        wanted = [u.log_level for u in self.clients if u.log_level in LOG_LEVELS]
        verbose = min(wanted, key=LOG_LEVELS.index, default=level)
        if verbose == self._log_level:
            return
        self._log_level = verbose
        for d in self.downstreams:
            if d.modern:
                d.log_level = verbose
            elif d.status == "ready" and "logging" in d.capabilities:
                try:
                    await d.request("logging/setLevel", {"level": verbose}, timeout=10)
                except Exception as exc:  # noqa: BLE001 - one server refusing must not fail the client's request
                    log.info("[%s] logging/setLevel refused: %s", d.id, exc)


LOG_LEVELS: tuple[str, ...] = get_args(LoggingLevel)
"""Log levels, least severe first."""


async def _send_log(session: ServerSession, level: Any, data: Any, source: str, related: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging is deprecated in 2026-07-28; still relayed
        await session.send_log_message(level, data, source, related_request_id=related)


def admits(threshold: str | None, level: str) -> bool:
    """Whether a client at ``threshold`` (None: never set, sees what its calls cause) wants ``level``."""
    if threshold not in LOG_LEVELS:
        return True
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


def _stamp(path: Any) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def log_pending(epoch: Epoch) -> None:
    """Each change waiting for approval, with the JSON path of each difference."""
    if not epoch.pending:
        return
    log.warning(
        "catalog lock: %d pending change(s); the locked declarations are served "
        "(review: prefixgate catalog diff --lock; accept: prefixgate catalog approve NAME)",
        len(epoch.pending),
    )
    for pending in epoch.pending:
        for line in pending.lines():
            log.warning("  %s", line)


def change_summary(old: Epoch | None, new: Epoch) -> str:
    """Tools added, removed and changed between two epochs, for the log line."""
    if old is None:
        return f"{len(new.catalog.entries)} tools"
    before = {e.name: e.declaration for e in old.catalog.entries}
    after = {e.name: e.declaration for e in new.catalog.entries}
    parts = name_changes(before, after)
    if old.decision.mode != new.decision.mode:
        parts.append(f"mode {old.decision.mode} -> {new.decision.mode}")
    return "; ".join(parts) or "declarations changed"
