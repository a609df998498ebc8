"""The event loop ``serve`` runs on: uvloop where it is installed, else asyncio's own.

Every call through the gateway crosses its loop several times (a line read, a task woken,
a line written, on each side), and uvloop does that loop work in C: per stdio call 3% less
time and 10-12% less gateway CPU, in both eras (bench/README.md). The servers a gateway
starts and the commands other than ``serve`` keep asyncio's loop. ``PREFIXGATE_UVLOOP=0``
turns it off (asyncio's loop, as where uvloop is not installed: Windows, PyPy).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any

UVLOOP_ENV = "PREFIXGATE_UVLOOP"


def backend_options(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """anyio's asyncio backend options for ``serve``: uvloop unless turned off or missing."""
    if environ.get(UVLOOP_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return {}
    if importlib.util.find_spec("uvloop") is None:
        return {}
    return {"use_uvloop": True}
