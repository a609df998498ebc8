"""Which epoch clients see: published at start-up, rebuilt on every change, kept when equal.

A change (a server that is up, re-lists or comes back; a new lock file) rebuilds the
catalog, but a new epoch (clearing activation, notifying clients in both protocol eras)
is published only when the canonical declarations really changed. Before any server is
up, a warm-start record or a holding lock can publish a catalog the discovery barrier then
confirms or replaces (``first_epoch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread

from catalog.budget import DecisionError
from catalog.diff import name_changes
from catalog.history import epoch_changes
from catalog.text import plural
from catalog.warm import Record
from gateway.config import Config, env_number
from gateway.downstream.connection import Downstream
from gateway.engine.checks import CheckCache
from gateway.engine.clients import ClientConnection, Clients
from gateway.engine.epoch import Epoch, approve_hint, built_epoch
from gateway.engine.lockfile import ServedLock, lock_path
from gateway.engine.router import Router
from gateway.engine.surface import Surface, SurfaceInputs, surface_inputs, surface_of
from gateway.engine.warm import Capture, WarmRecords, warm_epoch
from gateway.state.history import EpochHistory

log = logging.getLogger("prefixgate")

SAVE_TIMEOUT = env_number("PREFIXGATE_WARM_SAVE_TIMEOUT", 10.0)
"""Seconds a warm-start record may take to capture and write, also while the gateway stops."""


class Publisher:
    """The epoch clients see, and the surface (resources, templates, prompts) served with it."""

    def __init__(
        self,
        config: Config,
        downstreams: Sequence[Downstream],
        checks: CheckCache,
        router: Router,
        clients: Clients,
        records: WarmRecords,
        lock: ServedLock,
    ) -> None:
        self.surface = Surface()
        """Resources, templates and prompts, rebuilt with every catalog."""
        self._surface_warned: frozenset[str] = frozenset()
        """The surface's warnings logged, while they hold (``_resurface``)."""
        self.capture: Capture | None = None
        """The gateway's own answers to the epoch it serves (set by the command that serves them)."""
        self.history: EpochHistory | None = None
        """Where each published epoch is recorded (set by ``serve``; ``catalog`` and ``doctor`` publish to no one)."""
        self.on_epoch: Callable[[str], None] | None = None
        """Told the reason of each epoch published (the metrics' epoch counter)."""
        self.client_saw: str | None = None
        """The fingerprint of a tools/list answered before the gateway was up (``gateway.upstream.prelude``)."""
        self.discovered = router.settled
        """Set once the discovery barrier's epoch is in place (the router's calls wait on it too)."""
        self._config = config
        self._downstreams = downstreams
        self._checks = checks
        self._router = router
        self._clients = clients
        self._records = records
        self._lock = lock
        self._rebuild_lock = anyio.Lock()
        self._rebuild_waiting = False
        self._save_asked = False
        self._saving = False
        """A task keeps the warm-start record (``_saves``): one at most, whatever the rebuilds."""
        self._asked_before: str | None = None
        """Why a rebuild was asked for before the barrier's epoch was out (run once it is)."""
        self._barrier_built = False
        """The barrier's epoch is built: a server up from now on is not in it."""
        self._surface_lock = anyio.Lock()
        self._surfaced: SurfaceInputs | None = None
        """What the surface was last built from (``surface_inputs``)."""
        self._warned: frozenset[str] = frozenset()
        """The catalog warnings of the last epoch logged: a new epoch logs only the others (a
        server with 1,000 renamed tools logged 1,000 lines again at each of its changes)."""

    def configure(self, config: Config) -> None:
        """A reloaded config (its view for this profile): the next build is made with it."""
        self._config = config

    def sees(self, downstream: Downstream) -> bool:
        """Whether this profile's catalog holds ``downstream``'s lists."""
        return any(d is downstream for d in self._downstreams)

    # --- before the barrier -----------------------------------------------------------

    async def warm_start(self, record: Record) -> bool:
        """Publish the record's catalog now, before any server is up (``gateway.engine.warm``).

        Each server stands on its recorded lists until it lists its own; the barrier, run
        behind this, confirms the bytes or starts a new epoch (``first_epoch``). False (and
        nothing published) when the record does not rebuild to the bytes it recorded.
        """
        # Built on the loop, as every build under a lock is (``built_epoch`` says why): out
        # before any server's start is seen.
        epoch = warm_epoch(self._config, record, self._checks, self._lock.current)
        if epoch is None:
            return False
        self._records.seed(record, self._downstreams)
        self.surface = self._build_surface()
        await self._publish_new(epoch, "warm start: the last verified catalog of this config, before any server is up")
        log.info(
            "warm start: published the last verified catalog (%s, fingerprint %s) before any server is up",
            plural(len(epoch.catalog.entries), "tool"),
            epoch.fingerprint[:16],
        )
        return True

    async def locked_start(self) -> bool:
        """Under a catalog lock that holds new tools back, the lock is the approved catalog: its
        bytes are published now, before any server is up (False: no such lock, nothing published)."""
        if self._lock.current is None or self._config.gateway.lock_new != "hold":
            return False
        try:
            epoch = await self._built()  # (under the lock: on the loop)
        except DecisionError:
            return False  # the barrier's build says why
        await self._router.publish(epoch)
        await self._remember(None, epoch, "catalog lock: the locked catalog, before any server is up")
        log.info(
            "catalog lock: published the locked catalog (fingerprint %s) before any server is up",
            epoch.fingerprint[:16],
        )
        return True

    async def first_epoch(self, epoch: Epoch) -> None:
        """The barrier's epoch: published; after a warm start, compared with the warm one (the
        same bytes change nothing for clients, other bytes are a new epoch with list_changed).

        Shielded, within ``SAVE_TIMEOUT``: from the moment it is published a client may list
        it and leave at once (an agent probing its servers), which stops the gateway, and
        what follows the publication (the epoch history, the warm-start record) is what the
        next start needs. Cancelled at the first await after the answer, neither was kept."""
        self._barrier_built = True
        self._warned = frozenset(w.line() for w in epoch.catalog.warnings)  # (``discover`` logged them)
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + SAVE_TIMEOUT):
            await self._first_epoch(epoch)

    async def _first_epoch(self, epoch: Epoch) -> None:
        warm = self._router.epoch
        kinds = await self._resurface()
        notified = False
        if warm is None:
            await self._publish_new(epoch, "the discovery barrier")
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
                await self._clients.list_changed(kind)
        if not notified:
            await self._tell_stale()
        self.discovered.set()
        if (why := self._asked_before) is not None:
            # A change that came while this epoch was built or published (a client can call a
            # tool from the moment it is published, and the call can change the lists).
            self._asked_before = None
            await self.rebuild(why)
        else:
            await self.save_warm()

    def _warm_changes(self) -> str:
        """Which servers list something other than the warm-start record held, for the log line."""
        seeded = self._records.seeded
        if self._records.record is None:
            return ""  # published from the lock alone
        parts = []
        for d in self._downstreams:
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

    async def joined(self, client: ClientConnection) -> None:
        """A client's session is set up (it can be notified): tell it now if what it listed
        before the gateway was up is already stale."""
        if self.client_saw is not None and client.server_session is not None:
            await self._tell_stale()

    async def _tell_stale(self) -> None:
        """A tools/list answered from the record before the gateway was up, whose bytes are not
        the catalog published now (the record did not rebuild to them): the client re-lists."""
        epoch = self._router.epoch
        if self.client_saw is None or epoch is None or self.client_saw == epoch.fingerprint:
            return
        if self._clients.notifiable:  # else: told when it joins
            await self._tools_changed()

    # --- while serving ----------------------------------------------------------------

    async def server_up(self, downstream: Downstream) -> None:
        """A server is ready: after the barrier, a rebuild; before it, under a lock, its calls are gated.

        Once the barrier's epoch is built, a server that comes up (one past the discovery
        deadline) is not in it: its rebuild runs when that epoch is out (``rebuild``)."""
        if self._barrier_built:
            await self.rebuild(f"server {downstream.id!r} is ready")
        elif self._lock.current is not None and self._router.epoch is not None:
            await self._regate(downstream)

    async def _regate(self, downstream: Downstream) -> None:
        """Before the barrier, under a lock: a server that is up gates its calls by its live
        tools (a tool changed since the lock is refused) as soon as it is up. The published
        bytes wait for the barrier: a catalog that differs is published there, once."""
        async with self._rebuild_lock:
            try:
                epoch = await self._built()  # (under the lock: on the loop)
            except DecisionError:
                return
            if epoch.same_for_clients(self._router.epoch):
                await self._router.publish(epoch)
                log.debug("server %r is ready: the lock's call gate takes its live tools", downstream.id)

    async def rebuild(self, why: str) -> None:
        """Rebuild the catalog; publish a new epoch only when what clients see changed.

        A request made while another rebuild waits for the lock is folded into that one:
        it builds from the state current when it runs, so it includes this change.
        """
        if not self.discovered.is_set():
            # The barrier builds the first epoch, maybe from the lists before this change:
            # the rebuild runs once that epoch is out (``first_epoch``).
            self._asked_before = why
            return
        if self._rebuild_waiting:
            log.debug("%s: a rebuild is already waiting and will include it", why)
            return
        self._rebuild_waiting = True
        try:
            await self._rebuild_lock.acquire()
        finally:
            self._rebuild_waiting = False
        try:
            rebuilt = await self._rebuild(why)
        finally:
            self._rebuild_lock.release()
        if rebuilt:
            # Neither under the lock nor awaited: the record goes to a shared store too, and one
            # that does not answer (Redis paused) held the next rebuild for its timeout, and a
            # server that joined (its calls wait for it to be taken in, which this rebuild is part
            # of). One task saves, the newest epoch each time: a rebuild storm while saves were
            # slow (Redis paused) queued a task per rebuild, each to save an epoch already gone.
            self._save_asked = True
            if self._saving:
                return
            if self._clients.tasks is not None:
                self._saving = True
                self._clients.tasks.start_soon(self._saves)
            else:
                self._save_asked = False
                await self.save_warm()

    async def _saves(self) -> None:
        try:
            while self._save_asked:
                self._save_asked = False
                await self.save_warm()
        finally:
            self._saving = False

    async def _rebuild(self, why: str) -> bool:
        """Build and publish; False when the change was refused."""
        try:
            epoch = await self._built(searchable=True)
        except DecisionError as exc:
            log.error("catalog change refused (%s): %s; keeping the current epoch", why, exc)
            return False
        kinds = await self._resurface()
        old = self._router.epoch
        if old is None or epoch.pending != old.pending:
            log_pending(epoch, self._config.profile)
        if await self._adopt(epoch, why):
            log.info("%s: catalog unchanged (fingerprint %s), same epoch", why, epoch.fingerprint[:16])
        for kind in kinds:  # a server that joined (or came back) brings its prompts and resources too
            await self._clients.list_changed(kind)
        return True

    async def relisted(self, kind: str) -> None:
        """A server re-listed its resources or prompts: clients hear of it if the list changed
        and they could have listed it already (before any epoch is out, none could).

        Not "once the barrier passed": a client lists from the moment an epoch is published
        (a warm start's, or the barrier's while its history is still being written), and a
        change it caused then was taken into the surface here and never announced."""
        if kind in await self._resurface() and self._router.epoch is not None:
            await self._clients.list_changed(kind)

    # --- publishing -------------------------------------------------------------------

    async def _adopt(self, epoch: Epoch, why: str, detail: str = "") -> bool:
        """Publish ``epoch`` as a new epoch if clients would see other bytes (clearing
        activation, notifying clients in both eras); True when it is the same epoch."""
        old = self._router.epoch
        if epoch.same_for_clients(old):
            # The same bytes: the same epoch for clients (no list_changed, activation kept),
            # but the call gate takes the fresh build (under a lock the live tools change
            # what is pending and refused; a server back from a warm start or a crash gives
            # its tools' routes and identities from its own listing).
            await self._router.publish(epoch)
            return True
        lines = [w.line() for w in epoch.catalog.warnings]
        for warning, line in zip(epoch.catalog.warnings, lines, strict=True):
            if line not in self._warned:
                log.log(logging.INFO if warning.informational else logging.WARNING, "%s", line)
        self._warned = frozenset(lines)
        log.warning(
            "new epoch (%s): fingerprint %s -> %s; %s",
            why,
            old.fingerprint[:16] if old else "-",
            epoch.fingerprint[:16],
            "; ".join(part for part in (change_summary(old, epoch), detail) if part),
        )
        if old is None or epoch.decision.fallback != old.decision.fallback:
            log.warning("declarations: %s (%s)", epoch.decision.mode, epoch.decision.detail)
        await self._publish_new(epoch, why + (f" ({detail})" if detail else ""))
        await self._tools_changed()
        return False

    async def _publish_new(self, epoch: Epoch, why: str) -> None:
        """A new epoch for clients: the call gate takes it and every client's state binds to its
        identity (activation of another identity is cleared); the epoch history keeps it."""
        old = self._router.epoch
        await self._router.publish(epoch)
        await self._clients.enter(epoch.identity)
        await self._remember(old, epoch, why)

    async def _remember(self, old: Epoch | None, epoch: Epoch, why: str) -> None:
        """The epoch history's record of a published epoch (a failed write is logged, never raised)."""
        if self.on_epoch is not None:
            self.on_epoch(why)
        if self.history is None:
            return
        history = self.history

        def write() -> None:
            previous: str | None
            if old is not None:
                previous = old.fingerprint
            else:  # this process's first epoch: the one before is the history's last
                try:
                    last = history.last()
                except OSError as exc:  # (damaged: this record is still written, and rotates it away)
                    log.warning("epoch history: the record before is not known: %s", exc)
                    last = None
                previous = last["fingerprint"] if last is not None else None
            history.append(
                {
                    "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "profile": self._config.profile,
                    "fingerprint": epoch.fingerprint,
                    "previous": previous,
                    "reason": why,
                    "mode": epoch.decision.mode,
                    "tools": len(epoch.catalog.entries),
                    "changes": None if old is None else epoch_changes(_tools(old), _tools(epoch)),
                }
            )

        try:
            await anyio.to_thread.run_sync(write)
        except OSError as exc:
            log.warning("epoch history not written: %s", exc)

    async def _tools_changed(self) -> None:
        if self._clients.notifiable:
            self.client_saw = None  # the client that listed before the gateway was up hears it now
        await self._clients.tools_changed()

    async def _built(self, *, searchable: bool = False) -> Epoch:
        """A build, in a worker thread (``built_epoch``): the loop goes on serving meanwhile;
        under a catalog lock on the loop, in the step that sees a server's state."""
        return await built_epoch(
            self._config, self._downstreams, self._checks, self._lock.current, searchable=searchable
        )

    def _surface_inputs(self) -> SurfaceInputs:
        return surface_inputs(self._downstreams, self._config.client.names, self._config.gateway.separator)

    def _build_surface(self) -> Surface:
        """On the loop: a warm start's, from the record, before any server is up."""
        inputs = self._surface_inputs()
        surface, _ = _resurfaced(inputs, self.surface)
        self._surfaced = inputs
        return surface

    async def _resurface(self) -> list[str]:
        """Rebuild resources, templates and prompts; the lists whose contents changed.

        Only when a server's lists (or the naming) changed, one build at a time, in a worker
        thread: its size is the servers' to set, and on the loop 60,000 items held every
        client 1-3 s at each change (and at each tools rebuild, when every one rebuilt them)."""
        async with self._surface_lock:
            inputs = self._surface_inputs()
            if inputs == self._surfaced:
                self._surfaced = inputs  # (the lists a server re-listed alike: the old ones go)
                kinds: list[str] = []
            else:
                self.surface, kinds = await anyio.to_thread.run_sync(_resurfaced, inputs, self.surface)
                self._surfaced = inputs
            self._warn_surface()
        return kinds

    def _warn_surface(self) -> None:
        """Each warning of the surface (a URI or template two servers offer, an item left out)
        logged once while it holds: one that a server's re-list or late start brings is said
        as one at the barrier is (a warm start's surface, from the record, at the barrier)."""
        warnings = self.surface.warnings
        for warning in warnings:
            if warning not in self._surface_warned:
                log.warning("%s", warning)
        self._surface_warned = frozenset(warnings)

    async def save_warm(self) -> None:
        """Keep the warm-start record of what is published now (``gateway.engine.warm``): only
        by a hub that serves the catalog a ``serve`` would (not one told to ignore a lock)."""
        epoch = self._router.epoch
        if epoch is None or (self._lock.path is None and lock_path(self._config) is not None):
            return
        # Shielded: a client that lists and leaves at once (an agent probing its servers) stops
        # the gateway right after the barrier's answer, and the record is what its next start needs.
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + SAVE_TIMEOUT):
            await self._records.save(
                self._downstreams, epoch, self._checks, self.capture, self._lock.current, self._lock.data
            )


def _resurfaced(inputs: SurfaceInputs, old: Surface) -> tuple[Surface, list[str]]:
    """The surface of ``inputs`` and which of its lists differ from ``old``'s (in a worker thread)."""
    new = surface_of(inputs)
    log.debug(
        "resources and prompts: %s, %s, %s",
        plural(len(new.resources), "resource"),
        plural(len(new.templates), "template"),
        plural(len(new.prompts), "prompt"),
    )
    kinds = []
    if (new.resources, new.templates) != (old.resources, old.templates):
        kinds.append("resources")
    if new.prompts != old.prompts:
        kinds.append("prompts")
    return new, kinds


def log_pending(epoch: Epoch, profile: str | None = None) -> None:
    """Each change waiting for approval, with the JSON path of each difference (``profile``: the
    profile served, named: ``serve --http`` logs every profile's, each under its own lock)."""
    if not epoch.pending:
        return
    log.warning(
        "%scatalog lock: %s pending; the locked declarations are served "
        "(review: prefixgate catalog diff --lock; accept: %s NAME)",
        f"profile {profile}: " if profile else "",
        plural(len(epoch.pending), "change"),
        approve_hint(profile),
    )
    for pending in epoch.pending:
        for line in pending.lines():
            log.warning("  %s", line)


def _tools(epoch: Epoch) -> dict[str, tuple[str, Any]]:
    """An epoch's tools as the epoch history compares them: name -> (server, declaration)."""
    return {e.name: (e.server, e.declaration) for e in epoch.catalog.entries}


def change_summary(old: Epoch | None, new: Epoch) -> str:
    """Tools added, removed and changed between two epochs, for the log line."""
    if old is None:
        return plural(len(new.catalog.entries), "tool")
    before = {e.name: e.declaration for e in old.catalog.entries}
    after = {e.name: e.declaration for e in new.catalog.entries}
    parts = name_changes(before, after)
    if old.decision.mode != new.decision.mode:
        parts.append(f"mode {old.decision.mode} -> {new.decision.mode}")
    return "; ".join(parts) or "declarations changed"
