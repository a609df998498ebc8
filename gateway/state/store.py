"""The state-store seam: everything gateway replicas must share, behind one interface.

Activation records (per principal and session), artifacts with their retention, the
integrity key of input round trips, and warm-start records. Two backends: the file store under ``state_dir``
(``gateway.state.filestore``, the default: embedded, today's files, modes and fsyncs) and
the Redis store (``gateway.state.redisstore``) that lets ``serve --http`` replicas behind
any load balancer answer any request.

Owners are keys, never names: ``journal.session_key`` of the session id or of
``principal:<hash>``, so neither a principal nor a session id ever appears in a file name
or a Redis key. The record format and the fail-closed restore rules stay in
``catalog.activation``; a store only keeps bytes.

Every failure to reach the store is :class:`StoreUnavailable`, an ``OSError`` (so the
activation path's fail-closed handling covers both backends) with one line to show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from spill import ArtifactInfo, Artifacts


class StoreUnavailable(OSError):
    """The store cannot be reached or refused the operation; ``strerror`` is the one line to show."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.strerror = message

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass(frozen=True)
class StoreHealth:
    """What ``doctor`` reports about a store: reachable, writable, and its version."""

    kind: str
    where: str
    """The file path or the URL with its password masked."""
    reachable: bool
    writable: bool
    version: str | None = None
    problems: tuple[str, ...] = field(default=())


class StateStore(Protocol):
    """The shared state of a gateway: one per process, opened at start-up.

    ``shared`` says whether other processes may write the same owners' state while this
    one runs (Redis: other replicas), so a session re-reads its activation on a miss and
    writes with compare-and-set instead of trusting its memory.
    """

    kind: str
    where: str
    shared: bool

    async def open(self) -> None:
        """Connect and verify now; raise StoreUnavailable naming the store when it cannot be used."""
        ...

    async def aclose(self) -> None: ...

    # --- activation -------------------------------------------------------------------

    async def last_record(self, owner: str) -> bytes:
        """The owner's last activation record (empty when none); raise OSError when unreadable."""
        ...

    def record_label(self, owner: str) -> str:
        """The owner's activation record as a log line names it: its file, or its key and store."""
        ...

    async def write_record(self, owner: str, record: bytes, previous: bytes) -> bool:
        """Make ``record`` the owner's last record, durably; raise OSError if it is not written.

        A shared store writes only if the last record is still ``previous`` and returns
        False otherwise (another replica wrote first: re-read, merge, retry); the file
        store appends (its last line wins) and always returns True.
        """
        ...

    # --- artifacts --------------------------------------------------------------------

    def artifacts(self, owner: str) -> Artifacts:
        """The owner's artifacts for spilling and ``artifact_read`` (blocking: call from a worker thread)."""
        ...

    async def list_artifacts(self) -> list[ArtifactInfo]:
        """Every complete artifact of every owner, oldest first (the owner's CLI)."""
        ...

    async def find_artifact(self, artifact_id: str) -> Artifacts:
        """The artifacts of whichever owner holds ``artifact_id`` (the owner's CLI); ArtifactNotFound otherwise."""
        ...

    async def collect(self, *, max_age_seconds: float, max_total_bytes: int) -> list[ArtifactInfo]:
        """Retention across the whole store: oldest first past the age, then until the total fits."""
        ...

    def keep_for(self, max_age_seconds: float) -> None:
        """The age new artifacts are kept for from now on (a reload's ``[spill] max_age_days``),
        for a store that gives each artifact its expiry when it is written."""
        ...

    # --- warm-start records ------------------------------------------------------------

    async def warm_record(self, key: str) -> bytes | None:
        """The warm-start record of launch identity ``key`` (``catalog.warm``), None when there is none."""
        ...

    async def put_warm_record(self, key: str, data: bytes) -> None:
        """Keep ``data`` as the warm-start record of ``key`` (the last writer wins: any complete one will do)."""
        ...

    # --- the integrity key ------------------------------------------------------------

    async def integrity_key(self) -> bytes:
        """The HMAC key of input round-trip states: per process in the file store, one for
        all replicas in a shared store (so a state sealed by one verifies on another)."""
        ...

    async def shared_key(self) -> bytes:
        """The key as the store holds it now (read again: a shared store may have lost it and
        another replica set its own), taken as this store's from then on."""
        ...

    async def health(self) -> StoreHealth: ...
