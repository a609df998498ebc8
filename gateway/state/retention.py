"""Artifact retention, applied after each spill and at start-up.

Lives with the state it trims (not in the router, which only triggers it): oldest first
past ``max_age_days``, then oldest first until ``max_total_bytes`` fits, never the
session's fresh artifacts. A failure is logged and never fails the call that spilled.
"""

from __future__ import annotations

import logging

from gateway.config import SpillConfig
from spill import Artifacts, StoreError

log = logging.getLogger("prefixgate.retention")


def collect(store: Artifacts, spill: SpillConfig) -> None:
    """Apply retention to ``store`` (blocking: call from a worker thread)."""
    try:
        removed = store.gc(max_age_seconds=spill.max_age_days * 86400, max_total_bytes=spill.max_total_bytes)
    except (OSError, StoreError) as exc:
        log.warning("artifact retention failed: %s", exc)
        return
    except Exception as exc:  # noqa: BLE001 - retention never fails a call or a start
        log.warning("artifact retention failed: %s: %s", type(exc).__name__, str(exc)[:200])
        return
    if removed:
        log.info("artifact retention removed %d artifacts", len(removed))
