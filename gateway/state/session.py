"""One client session's activation state, bound to the current epoch's identity.

A grant is written to the state store (fsynced, in the file store) before it exists in
memory, under one lock, so the stored record always matches what the session allows; a
failed write grants nothing. Restores fail closed: anything doubtful grants nothing and is
recorded, and a record that cannot be read (a journal that fails verification, a store
that cannot be reached) grants nothing and is logged with the reason.

With a shared store (Redis: other replicas write the same owner's record) memory is only
a cache: a tool not granted here is looked up in the store before it is refused, and a
grant merges with whatever another replica recorded first (compare-and-set, retried). So
binding reads nothing there: the first such look-up is the restore, and a request that
needs no grant never waits for a store that does not answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio

from catalog.activation import ActivationState, encode_record, restore
from catalog.text import plural
from gateway.state.store import StateStore, StoreUnavailable
from spill import Artifacts

log = logging.getLogger("prefixgate.session")

CAS_ATTEMPTS = 8
"""Grants retried when other replicas keep writing the same record in between."""


def principal_key(state: object) -> object:
    """A principal, the same in every profile: its key, else (a stdio session) the state itself."""
    principal = getattr(state, "principal", None)
    return principal if isinstance(principal, str) else id(state)


class ClientState:
    """Activation (the ``records`` store under ``owner``) and artifacts (``store``) of one client session."""

    def __init__(
        self,
        records: StateStore | None = None,
        owner: str | None = None,
        store: Artifacts | None = None,
        *,
        principal: str | None = None,
        session: str | None = None,
    ) -> None:
        self.records = records if owner is not None else None
        self.owner = owner
        """The owner's key (``journal.activation_key``): names its state, binds its round-trip states."""
        self.principal = principal
        """Who it is, the same in every profile (an HTTP principal's name: ``local``, or a hash of
        its token); None: this state alone (a stdio client)."""
        self.session = session
        """A hash of the stdio ``--session`` it is, for the audit log."""
        self.store = store
        self.state: ActivationState | None = None
        self._unread = False
        """Bound without reading the shared store yet: its record is read at the first need."""
        self._lock = anyio.Lock()
        self._failures = 0
        """Store operations under the lock (reads before a refusal, grants) that failed, counted."""
        self._failed: str | None = None
        """Why the last store operation under the lock failed; None if it succeeded."""

    async def enter(self, identity: str) -> None:
        """Bind to an epoch: restore from the store once, clear on any identity change."""
        if self.state is not None and self.state.snapshot == identity:
            return  # bound already: every 2026-07-28 request enters its principal's state again
        async with self._lock:
            if self.state is not None:
                if self.state.reset(identity):
                    log.info("new epoch %s: activation cleared", identity[:12])
                return
            active: frozenset[str] = frozenset()
            if self.records is not None and self.records.shared:
                # Read at the first need (``refresh`` before a deferred tool is refused, ``activate``),
                # never here: every request binds its principal's state, and a shared store that
                # does not answer held every new principal's first request (a tools/list, a call
                # of a tool that needs no grant) for the store's timeout.
                self._unread = True
            elif self.records is not None:
                active = await self._restore(self.records, identity)
            self.state = ActivationState(identity, active)

    async def _restore(self, records: StateStore, identity: str) -> frozenset[str]:
        assert self.owner is not None
        try:
            data = await records.last_record(self.owner)
        except OSError as exc:
            log.warning("activation record not used: %s; nothing restored", exc.strerror or exc)
            return frozenset()
        return await self._restored(records, identity, data)

    async def _restored(self, records: StateStore, identity: str, data: bytes) -> frozenset[str]:
        """What the last record ``data`` grants in epoch ``identity``; a record that grants
        nothing for a reason (another epoch, damaged) is logged and a fresh one recorded."""
        assert self.owner is not None
        active, reason = restore(data, identity)
        if reason is None:
            if active:
                log.info("restored %s for epoch %s", plural(len(active), "activated tool"), identity[:12])
            return active
        log.warning("%s: %s; nothing restored", records.record_label(self.owner), reason)
        # Record the fresh start, first ending a torn line so the new record stands alone.
        record = (b"\n" if data and not data.endswith(b"\n") else b"") + encode_record(identity, ())
        try:
            await records.write_record(self.owner, record, data)
        except OSError as exc:
            log.warning("activation record not writable (%s)", exc.strerror or exc)
        return frozenset()

    def allows(self, name: str) -> bool:
        return self.state is not None and self.state.allows(name)

    async def _merge(self, records: StateStore) -> bytes:
        """Take in what the store holds for this epoch (another replica's grants); return it."""
        assert self.state is not None and self.owner is not None
        data = await records.last_record(self.owner)
        if self._unread:  # (the first read: what a restore says and records, it says and records)
            self._unread = False
            active = await self._restored(records, self.state.snapshot, data)
        else:
            active, reason = restore(data, self.state.snapshot)
            active = active if reason is None else frozenset()
        if active:
            self.state.commit(active, self.state.snapshot)
        return data

    async def refresh(self) -> str | None:
        """Before refusing a tool not granted here: read what other replicas granted.

        Returns why the store could not be read (nothing is granted then), else None.
        """
        if self.records is None or not self.records.shared or self.state is None:
            return None
        arrived = self._failures
        async with self._lock:
            if (why := self._failed_since(arrived)) is not None:
                return why
            try:
                await self._merge(self.records)
            except OSError as exc:
                log.error("activation record not readable: %s", exc.strerror or exc)
                return self._failing(exc)
            self._failed = None
        return None

    def _failing(self, exc: OSError) -> str:
        self._failures += 1
        self._failed = str(exc.strerror or exc)
        return self._failed

    def _failed_since(self, arrived: int) -> str | None:
        """Why the store failed the last operation, if it failed while the caller waited for the
        lock (``arrived``: the failures counted then). It did not answer a moment ago; asking
        again held each of the principal's waiting requests for one more timeout of a store that
        does not answer (paused, hung): its fifth call at once waited five timeouts."""
        return self._failed if self._failures > arrived else None

    async def activate(self, names: Iterable[str], snapshot: str | None = None) -> bool:
        """Grant ``names``, found by a search of epoch ``snapshot`` (None: the state's own);
        raise OSError (granting nothing) if the store write fails. False (nothing granted) when
        the state is bound to another epoch by now: a search of an epoch that ended (one
        published while it ran) grants nothing in the next, where those tools may read otherwise."""
        names = frozenset(names)
        if not names:
            return True
        arrived = self._failures
        async with self._lock:
            assert self.state is not None
            if snapshot is None:
                snapshot = self.state.snapshot
            elif snapshot != self.state.snapshot:
                return False
            if (why := self._failed_since(arrived)) is not None:
                raise StoreUnavailable(why)
            try:
                granted = await self._grant(names, snapshot)
            except OSError as exc:
                self._failing(exc)
                raise
            self._failed = None
            if granted is None:  # (the store answered every time: no failure of the store's)
                raise StoreUnavailable(f"the activation record kept changing ({CAS_ATTEMPTS} attempts)")
            return granted

    async def _grant(self, names: frozenset[str], snapshot: str) -> bool | None:
        """``activate``'s compare-and-set rounds; None when other replicas' writes won every one."""
        assert self.state is not None
        records = self.records
        for _ in range(CAS_ATTEMPTS):
            previous = await self._merge(records) if records is not None and records.shared else b""
            new, record = self.state.activate(names)
            if new == self.state.active:
                return True
            if records is None or await records.write_record(self.owner or "", record, previous):
                return self.state.commit(new, snapshot)
        return None
