"""A state store whose operations are counted, by operation and outcome, for the metrics.

Wraps whichever store the config selects (``backend.state_store``); a count is two dict
operations, so it is always on and ``/metrics`` reads it (``prefixgate_store_operations_total``).
An operation that raises ``OSError`` (``StoreUnavailable`` included) counts as an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import Any, TypeVar

from gateway.state.store import StateStore, StoreHealth
from spill import ArtifactInfo, Artifacts

T = TypeVar("T")


class CountedStore:
    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.where = inner.where
        self.shared = inner.shared
        self.counts: Counter[tuple[str, str]] = Counter()
        """(operation, "ok" or "error") -> how many."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what one store has of its own (the file store's root)

    async def _count(self, operation: str, work: Awaitable[T]) -> T:
        try:
            result = await work
        except OSError:
            self.counts[operation, "error"] += 1
            raise
        self.counts[operation, "ok"] += 1
        return result

    async def open(self) -> None:
        await self._count("open", self.inner.open())

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def last_record(self, owner: str) -> bytes:
        return await self._count("last_record", self.inner.last_record(owner))

    def record_label(self, owner: str) -> str:
        return self.inner.record_label(owner)

    async def write_record(self, owner: str, record: bytes, previous: bytes) -> bool:
        return await self._count("write_record", self.inner.write_record(owner, record, previous))

    def artifacts(self, owner: str) -> Artifacts:
        return self.inner.artifacts(owner)

    async def list_artifacts(self) -> list[ArtifactInfo]:
        return await self._count("list_artifacts", self.inner.list_artifacts())

    async def find_artifact(self, artifact_id: str) -> Artifacts:
        return await self._count("find_artifact", self.inner.find_artifact(artifact_id))

    async def collect(self, *, max_age_seconds: float, max_total_bytes: int) -> list[ArtifactInfo]:
        work = self.inner.collect(max_age_seconds=max_age_seconds, max_total_bytes=max_total_bytes)
        return await self._count("collect", work)

    def keep_for(self, max_age_seconds: float) -> None:
        self.inner.keep_for(max_age_seconds)

    async def warm_record(self, key: str) -> bytes | None:
        return await self._count("warm_record", self.inner.warm_record(key))

    async def put_warm_record(self, key: str, data: bytes) -> None:
        await self._count("put_warm_record", self.inner.put_warm_record(key, data))

    async def integrity_key(self) -> bytes:
        return await self._count("integrity_key", self.inner.integrity_key())

    async def health(self) -> StoreHealth:
        return await self._count("health", self.inner.health())
