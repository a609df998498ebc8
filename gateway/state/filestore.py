"""The file store: today's state under ``state_dir``, behind the state-store seam.

It wraps, never re-implements: activation is ``journal.Journal`` (one append-only file
per owner, fsynced per record, verified 0700 directory, 0600 file) and artifacts are
``spill.ArtifactStore`` (one 0700 directory per owner, 0600 files created through
verified descriptors). File work runs in worker threads. The integrity key is random per
process, as before: a file store serves one process.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path

import anyio.to_thread

from gateway.state.journal import Journal
from gateway.state.store import StoreHealth
from gateway.state.warmrecords import read_record, write_record
from spill import (
    ArtifactInfo,
    Artifacts,
    ArtifactStore,
    StoreError,
    find_artifact,
    gc,
    list_artifacts,
    open_private_dir,
)


class FileStore:
    kind = "file"
    shared = False

    def __init__(self, state_dir: Path, *, max_age_seconds: float = math.inf) -> None:
        self.state_dir = Path(state_dir)
        self.where = str(self.state_dir)
        self.root = self.state_dir / "artifacts"
        self._key = secrets.token_bytes(32)
        self.max_age = max_age_seconds

    async def open(self) -> None:
        """Nothing to connect: a broken directory is reported by the operation that needs it."""

    async def aclose(self) -> None:
        pass

    def _journal(self, owner: str) -> Journal:
        return Journal(self.state_dir, key=owner)

    async def last_record(self, owner: str) -> bytes:
        return await anyio.to_thread.run_sync(self._journal(owner).read)

    def record_label(self, owner: str) -> str:
        return self._journal(owner).label

    async def write_record(self, owner: str, record: bytes, previous: bytes) -> bool:
        await anyio.to_thread.run_sync(self._journal(owner).append, record)
        return True

    def artifacts(self, owner: str) -> Artifacts:
        return ArtifactStore(self.root, owner, max_age=lambda: self.max_age)

    async def list_artifacts(self) -> list[ArtifactInfo]:
        return await anyio.to_thread.run_sync(list_artifacts, self.root)

    async def find_artifact(self, artifact_id: str) -> Artifacts:
        return await anyio.to_thread.run_sync(find_artifact, self.root, artifact_id)

    async def collect(self, *, max_age_seconds: float, max_total_bytes: int) -> list[ArtifactInfo]:
        return await anyio.to_thread.run_sync(
            lambda: gc(self.root, max_age_seconds=max_age_seconds, max_total_bytes=max_total_bytes)
        )

    def keep_for(self, max_age_seconds: float) -> None:
        # (``collect`` is given the age each time; reads refuse what it would remove)
        self.max_age = max_age_seconds

    async def warm_record(self, key: str) -> bytes | None:
        return await anyio.to_thread.run_sync(read_record, self.state_dir, key)

    async def put_warm_record(self, key: str, data: bytes) -> None:
        await anyio.to_thread.run_sync(write_record, self.state_dir, key, data)

    async def integrity_key(self) -> bytes:
        return self._key

    async def shared_key(self) -> bytes:
        return self._key  # (this process's own: nothing to agree on)

    async def health(self) -> StoreHealth:
        return await anyio.to_thread.run_sync(self._health)

    def _health(self) -> StoreHealth:
        """Checked without writing anything (``doctor`` leaves the state directory alone)."""
        try:
            fd = open_private_dir(self.state_dir, f"state directory {self.where!r}", create=False, tighten=False)
        except StoreError as exc:
            return StoreHealth(self.kind, self.where, False, False, problems=(str(exc),))
        if fd is None:
            parent = self.state_dir.parent
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
            writable = os.access(parent, os.W_OK)
            return StoreHealth(self.kind, self.where, True, writable, problems=() if writable else (
                f"cannot be created: {str(parent)!r} is not writable",
            ))
        try:
            writable = os.access(f"/proc/self/fd/{fd}", os.W_OK) or os.access(self.state_dir, os.W_OK)
        finally:
            os.close(fd)
        return StoreHealth(self.kind, self.where, True, writable, problems=() if writable else ("not writable",))
