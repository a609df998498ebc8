"""Artifact retention, applied after each spill and at start-up.

Lives with the state it trims (not in the router, which only triggers it): oldest first
past ``max_age_days``, then oldest first until ``max_total_bytes`` fits, never the
session's fresh artifacts. A failure is logged and never fails the call that spilled.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from contextlib import AbstractContextManager
from typing import BinaryIO

from gateway.config import SpillConfig
from spill import ArtifactInfo, Artifacts, StoreError

log = logging.getLogger("prefixgate.retention")


def collect(store: Artifacts, spill: SpillConfig, handed: Collection[str] = ()) -> None:
    """Apply retention to ``store`` (blocking: call from a worker thread), sparing the ids
    ``handed`` out by the answer that spilled (``Handing``): each stays readable, not only the newest."""
    try:
        removed = store.gc(
            max_age_seconds=spill.max_age_days * 86400, max_total_bytes=spill.max_total_bytes, handed=handed
        )
    except (OSError, StoreError) as exc:
        log.warning("artifact retention failed: %s", exc)
        return
    except Exception as exc:  # noqa: BLE001 - retention never fails a call or a start
        log.warning("artifact retention failed: %s: %s", type(exc).__name__, str(exc)[:200])
        return
    if removed:
        log.info("artifact retention removed %d artifacts", len(removed))


class Handing:
    """``store`` as one answer writes to it, noting each id it hands out (``handed``): a result
    saves its text and its structuredContent apart, a search several schemas, and the
    retention pass after it must remove none of them (it spared the newest alone)."""

    def __init__(self, store: Artifacts) -> None:
        self.store = store
        self.handed: list[str] = []

    def put_chunks(self, chunks: Iterable[bytes | memoryview]) -> str:
        artifact_id = self.store.put_chunks(chunks)
        self.handed.append(artifact_id)
        return artifact_id

    def open(self, artifact_id: str) -> AbstractContextManager[BinaryIO]:
        return self.store.open(artifact_id)

    def size(self, artifact_id: str) -> int:
        return self.store.size(artifact_id)

    def read(self, artifact_id: str, offset: int, length: int) -> bytes:
        return self.store.read(artifact_id, offset, length)

    def gc(
        self, *, max_age_seconds: float, max_total_bytes: int, now: float | None = None, handed: Collection[str] = ()
    ) -> list[ArtifactInfo]:
        return self.store.gc(max_age_seconds=max_age_seconds, max_total_bytes=max_total_bytes, now=now, handed=handed)
