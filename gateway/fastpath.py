"""The switch of the gateway's direct paths (stdio ``tools/call`` on both ends, and the
2026-07-28 HTTP lane): off, every request goes through the SDK's machinery instead."""

from __future__ import annotations

import os
from collections.abc import Mapping

FAST_PATH_ENV = "PREFIXGATE_FAST_PATH"
"""``0`` sends every ``tools/call`` through the SDK on both sides of a stdio gateway
(gateway/upstream/fast.py, gateway/downstream/rawcalls.py): the same bytes, slower."""


def fast_path(environ: Mapping[str, str] = os.environ) -> bool:
    """On unless turned off, or while traces are exported (``gateway.tracing``: the SDK's path
    makes the spans)."""
    from gateway.tracing import configured

    return environ.get(FAST_PATH_ENV, "1").strip().lower() not in ("0", "false", "no", "off") and not configured(
        environ
    )
