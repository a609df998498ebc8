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

import functools
import logging
from collections.abc import Mapping
from typing import Any

import anyio

from catalog.budget import DecisionError
from catalog.diff import name_changes
from catalog.names import code_unit_key
from catalog.warm import Record
from gateway.config import Config
from gateway.downstream.connection import Downstream
from gateway.downstream.spawn import Spawned
from gateway.engine.checks import CheckCache
from gateway.engine.clients import ClientConnection, Clients
from gateway.engine.epoch import Epoch, epoch_of
from gateway.engine.lockfile import ServedLock, lock_path
from gateway.engine.oauth import oauth_setup
from gateway.engine.relay import Relay
from gateway.engine.roundtrip import RoundTrips
from gateway.engine.router import Router
from gateway.engine.surface import Surface, build_surface, capability_union
from gateway.engine.warm import Capture, WarmRecords, warm_epoch
from gateway.engine.watches import Watches
from gateway.state.backend import state_store

log = logging.getLogger("prefixgate")

SAVE_TIMEOUT = 10.0
"""Seconds a warm-start record may take to capture and write, also while the gateway stops."""


class Hub:
    def __init__(
        self,
        config: Config,
        *,
        persist: bool = True,
        use_lock: bool = True,
        early: Mapping[str, Spawned] | None = None,
        warm_records: bool | None = None,
    ) -> None:
        """``early``: stdio servers already started (``gateway.upstream.prelude``), by id;
        ``warm_records``: keep the warm-start record (default: when ``persist``)."""
        self.config = config
        self.lock = ServedLock(lock_path(config) if use_lock else None)
        """The catalog lock served under (``load`` reads it), polled while serving."""
        early = early or {}
        self.downstreams = [
            Downstream(s, self, oauth=oauth_setup(config), early=early.get(s.id)) for s in config.servers
        ]
        self.by_id = {d.id: d for d in self.downstreams}
        self.router = Router(self.by_id, config.policy, config.spill)
        self.surface = Surface()
        self.discovered = self.router.settled
        """Set once the discovery barrier's epoch is in place (the router's calls wait on it too)."""
        self.checks = CheckCache(config.gateway.state_dir, persist=persist)
        self.store = state_store(config)
        """Activation, artifacts and the integrity key (opened by ``serve``)."""
        self.records = WarmRecords(config, self.store, enabled=persist if warm_records is None else warm_records)
        """The warm-start record: seeded from by ``warm_start``, written after each verified build."""
        self.capture: Capture | None = None
        """The gateway's own answers to the epoch it serves (set by the command that serves them)."""
        self.client_saw: str | None = None
        """The fingerprint of a tools/list answered before the gateway was up (``gateway.upstream.prelude``)."""
        self._rebuild_lock = anyio.Lock()
        self._rebuild_waiting = False
        self._relists: dict[tuple[str, str], bool] = {}
        """(server id, kind) -> whether another re-list is pending behind the running one."""
        self._tasks: anyio.abc.TaskGroup | None = None
        self.watches = Watches(self.resource_owner)
        """Resources clients watch (resources/subscribe, listen streams), counted per URI."""
        self.round_trips = RoundTrips(
            timeout=config.gateway.round_trip_timeout, per_owner=config.gateway.max_round_trips
        )
        """Calls of 2026-07-28 clients that may wait for the client's input (no back-channel)."""
        self.clients = Clients(config, self.store, self.router, self.downstreams, self.watches)
        self.relay = Relay(self.clients, self.round_trips)

    # --- start-up ---------------------------------------------------------------------

    def start(self, tg: anyio.abc.TaskGroup, *, supervise: bool) -> None:
        self._tasks = self.clients.tasks = tg
        self.round_trips.tasks = tg
        tg.start_soon(self.round_trips.keep)
        for downstream in self.downstreams:
            tg.start_soon(functools.partial(downstream.run, supervise=supervise))
        if self.lock.path is not None and supervise:
            tg.start_soon(self.lock.watch, self.discovered, self.rebuild)

    async def warm_start(self, record: Record) -> bool:
        """Publish the record's catalog now, before any server is up (``gateway.engine.warm``).

        Each server stands on its recorded lists until it lists its own; the barrier, run
        behind this, confirms the bytes or starts a new epoch (``first_epoch``). False (and
        nothing published) when the record does not rebuild to the bytes it recorded.
        """
        epoch = warm_epoch(self.config, record, self.checks, self.lock.current)
        if epoch is None:
            return False
        self.records.seed(record, self.downstreams)
        self.surface = build_surface(self.downstreams, self.config.client.names, self.config.gateway.separator)
        await self.router.publish(epoch)
        await self.clients.enter(epoch.identity)
        log.info(
            "warm start: published the last verified catalog (%d tools, fingerprint %s) before any server is up",
            len(epoch.catalog.entries),
            epoch.fingerprint[:16],
        )
        return True

    async def locked_start(self) -> bool:
        """Under a catalog lock that holds new tools back, the lock is the approved catalog: its
        bytes are published now, before any server is up (False: no such lock, nothing published)."""
        if self.lock.current is None or self.config.gateway.lock_new != "hold":
            return False
        try:
            epoch = epoch_of(self.config, self.downstreams, self.checks, self.lock.current)
        except DecisionError:
            return False  # the barrier's build says why
        await self.router.publish(epoch)
        log.info(
            "catalog lock: published the locked catalog (fingerprint %s) before any server is up",
            epoch.fingerprint[:16],
        )
        return True

    @property
    def capabilities_known(self) -> bool:
        """Whether what the servers offer is known (the barrier passed, or a warm start's record
        says): else ``initialize`` advertises everything the gateway can relay."""
        return self.discovered.is_set() or self.records.record is not None

    async def first_epoch(self, epoch: Epoch) -> None:
        """The barrier's epoch: published; after a warm start, compared with the warm one (the
        same bytes change nothing for clients, other bytes are a new epoch with list_changed)."""
        warm = self.router.epoch
        kinds = self._resurface()
        for warning in self.surface.warnings:
            log.warning("%s", warning)
        notified = False
        if warm is None:
            await self.router.publish(epoch)
            await self.clients.enter(epoch.identity)
        else:
            changes = self._warm_changes()
            if await self._adopt(epoch, "the discovery barrier after a warm start", changes):
                log.info(
                    "warm start confirmed: the catalog is byte-identical (fingerprint %s)%s",
                    warm.fingerprint[:16],
                    f"; {changes}" if changes else "",
                )
            else:
                notified = True
            for kind in kinds:
                await self.clients.list_changed(kind)
        if not notified:
            await self._tell_stale()
        self.discovered.set()
        await self.save_warm()

    async def _tell_stale(self) -> None:
        """A tools/list answered from the record before the gateway was up, whose bytes are not
        the catalog published now (the record did not rebuild to them): the client re-lists."""
        epoch = self.router.epoch
        if self.client_saw is None or epoch is None or self.client_saw == epoch.fingerprint:
            return
        if self.clients.notifiable:  # else: told when it joins
            await self._notify_tools()

    def _warm_changes(self) -> str:
        """Which servers list something other than the warm-start record held, for the log line."""
        seeded = self.records.seeded
        if self.records.record is None:
            return ""  # published from the lock alone
        parts = []
        for d in self.downstreams:
            recorded = seeded.get(d.id)
            if not d.config.enabled or (recorded is None and d.source is None):
                continue
            if recorded is None:
                parts.append(f"server {d.id!r} is new")
            elif d.source != "live":
                parts.append(f"server {d.id!r} is {d.status} (its recorded tools are kept)")
            elif recorded.tools != d.tools:
                parts.append(f"server {d.id!r} lists other tools")
        return "; ".join(parts)

    async def save_warm(self) -> None:
        """Keep the warm-start record of what is published now (``gateway.engine.warm``): only
        by a hub that serves the catalog a ``serve`` would (not one told to ignore a lock)."""
        epoch = self.router.epoch
        if epoch is None or (self.lock.path is None and lock_path(self.config) is not None):
            return
        # Shielded: a client that lists and leaves at once (an agent probing its servers) stops
        # the gateway right after the barrier's answer, and the record is what its next start needs.
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + SAVE_TIMEOUT):
            await self.records.save(
                self.downstreams, epoch, self.checks, self.capture, self.lock.current, self.lock.data
            )

    # --- clients ----------------------------------------------------------------------

    async def joined(self, client: ClientConnection) -> None:
        """A client's session is set up (it can be notified): tell it now if what it listed
        before the gateway was up is already stale."""
        if self.client_saw is not None and client.server_session is not None:
            await self._tell_stale()

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

    def capabilities(self) -> dict[str, Any]:
        """The union of what the servers in the catalog offer (tools are always served)."""
        return capability_union(self.downstreams)

    # --- Events (from downstream servers) ---------------------------------------------

    async def server_ready(self, downstream: Downstream) -> None:
        await self.clients.pass_level(downstream)
        if self.discovered.is_set():
            await self.rebuild(f"server {downstream.id!r} is ready")
        elif self.lock.current is not None and self.router.epoch is not None:
            await self._regate(downstream)

    async def _regate(self, downstream: Downstream) -> None:
        """Before the barrier, under a lock: a server that is up gates its calls by its live
        tools (a tool changed since the lock is refused) as soon as it is up. The published
        bytes wait for the barrier: a catalog that differs is published there, once."""
        async with self._rebuild_lock:
            try:
                epoch = epoch_of(self.config, self.downstreams, self.checks, self.lock.current)
            except DecisionError:
                return
            old = self.router.epoch
            if old is not None and (epoch.identity, epoch.fingerprint) == (old.identity, old.fingerprint):
                await self.router.publish(epoch)
                log.debug("server %r is ready: the lock's call gate takes its live tools", downstream.id)

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
                await self.clients.resource_updated(uri)
        elif method == "notifications/message":
            await self.relay.log(downstream, params)

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
                    elif kind in self._resurface() and self.discovered.is_set():
                        await self.clients.list_changed(kind)
                except Exception as exc:  # noqa: BLE001 - a server that fails to re-list keeps its old lists
                    log.warning("[%s] re-listing %s after list_changed failed: %s", downstream.id, kind, exc)
                if not self._relists[key]:
                    return
        finally:
            del self._relists[key]

    async def server_request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        """Sampling, elicitation or roots, to the client that can answer it (``Relay.request``)."""
        return await self.relay.request(downstream, method, params, caller)

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
        try:
            epoch = epoch_of(self.config, self.downstreams, self.checks, self.lock.current)
        except DecisionError as exc:
            log.error("catalog change refused (%s): %s; keeping the current epoch", why, exc)
            return
        self._resurface()
        old = self.router.epoch
        if old is None or epoch.pending != old.pending:
            log_pending(epoch)
        if await self._adopt(epoch, why):
            log.info("%s: catalog unchanged (fingerprint %s), same epoch", why, epoch.fingerprint[:16])
        await self.save_warm()

    async def _adopt(self, epoch: Epoch, why: str, detail: str = "") -> bool:
        """Publish ``epoch`` as a new epoch if clients would see other bytes (clearing
        activation, notifying clients in both eras); True when it is the same epoch."""
        old = self.router.epoch
        if old is not None and epoch.identity == old.identity and epoch.fingerprint == old.fingerprint:
            # The same bytes: the same epoch for clients (no list_changed, activation kept),
            # but the call gate takes the fresh build (under a lock the live tools change
            # what is pending and refused; a server back from a warm start or a crash gives
            # its tools' routes and identities from its own listing).
            await self.router.publish(epoch)
            return True
        for warning in epoch.catalog.warnings:
            log.warning("%s", warning.line())
        log.warning(
            "new epoch (%s): fingerprint %s -> %s; %s",
            why,
            old.fingerprint[:16] if old else "-",
            epoch.fingerprint[:16],
            "; ".join(part for part in (change_summary(old, epoch), detail) if part),
        )
        if old is None or epoch.decision.fallback != old.decision.fallback:
            log.warning("declarations: %s (%s)", epoch.decision.mode, epoch.decision.detail)
        await self.router.publish(epoch)
        await self.clients.enter(epoch.identity)
        await self._notify_tools()
        return False

    async def _notify_tools(self) -> None:
        if self.clients.notifiable:
            self.client_saw = None  # the client that listed before the gateway was up hears it now
        await self.clients.tools_changed()

    def _resurface(self) -> list[str]:
        """Rebuild resources, templates and prompts; the lists whose contents changed."""
        new = build_surface(self.downstreams, self.config.client.names, self.config.gateway.separator)
        old, self.surface = self.surface, new
        kinds = []
        if (new.resources, new.templates) != (old.resources, old.templates):
            kinds.append("resources")
        if new.prompts != old.prompts:
            kinds.append("prompts")
        return kinds


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
