"""One client session's activation state, bound to the current epoch's identity.

A grant is written to the journal (fsynced) before it exists in memory, under one lock,
so the journal's last line always matches what the session allows; a failed write
grants nothing. Restores fail closed: anything doubtful grants nothing and is recorded,
and a journal that fails verification (not ours, not a regular file) grants nothing and
is logged with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio
import anyio.to_thread

from catalog.activation import ActivationState, encode_record, restore
from gateway.state.journal import Journal
from spill import ArtifactStore

log = logging.getLogger("prefixgate.session")


class ClientState:
    """Activation (``journal``) and artifacts (``store``) of one client session."""

    def __init__(self, journal: Journal | None = None, store: ArtifactStore | None = None) -> None:
        self.journal = journal
        self.store = store
        self.state: ActivationState | None = None
        self._lock = anyio.Lock()

    async def enter(self, identity: str) -> None:
        """Bind to an epoch: restore from the journal once, clear on any identity change."""
        async with self._lock:
            if self.state is not None:
                if self.state.reset(identity):
                    log.info("new epoch %s: activation cleared", identity[:12])
                return
            active: frozenset[str] = frozenset()
            if self.journal is not None:
                active = await self._restore(self.journal, identity)
            self.state = ActivationState(identity, active)

    async def _restore(self, journal: Journal, identity: str) -> frozenset[str]:
        try:
            data = await anyio.to_thread.run_sync(journal.read)
        except OSError as exc:
            log.warning("activation journal not used: %s; nothing restored", exc.strerror or exc)
            return frozenset()
        active, reason = restore(data, identity)
        if reason is None:
            if active:
                log.info("restored %d activated tools for epoch %s", len(active), identity[:12])
            return active
        log.warning("activation journal: %s; nothing restored", reason)
        # Record the fresh start, first ending a torn line so the new record stands alone.
        record = (b"\n" if data and not data.endswith(b"\n") else b"") + encode_record(identity, ())
        try:
            await anyio.to_thread.run_sync(journal.append, record)
        except OSError as exc:
            log.warning("activation journal not writable (%s)", exc.strerror or exc)
        return frozenset()

    def allows(self, name: str) -> bool:
        return self.state is not None and self.state.allows(name)

    async def activate(self, names: Iterable[str]) -> None:
        """Grant ``names``; raise OSError (granting nothing) if the journal write fails."""
        names = frozenset(names)
        if not names:
            return
        async with self._lock:
            assert self.state is not None
            snapshot = self.state.snapshot
            new, record = self.state.activate(names)
            if new == self.state.active:
                return
            if self.journal is not None:
                await anyio.to_thread.run_sync(self.journal.append, record)
            self.state.commit(new, snapshot)
