"""The first catalog frozen out of the garbage collector's full collections.

A full collection walks every object the collector tracks while it holds the interpreter
lock: with a 5,000-tool catalog (~150,000 objects beside the imports, which
``gateway.commands.cli.importing`` freezes) each took 36-188 ms, every client waiting
(bench/README.md, the run of 2026-12-06 04:34). The catalog holds no reference cycles, so
freezing it takes nothing from memory: a frozen object still goes when its last reference
does (a later epoch replaces it), and only a frozen object in a cycle is never collected.

So once per process, a few seconds after the first catalog is published (not while the
first clients list it), one full collection clears what is already garbage, and what is
alive then is frozen. Kept for good, once: the cycles alive at that moment that die later
(a client connected then, each server's first connection), a bounded amount. A catalog
that later changes is walked again, as before.
"""

from __future__ import annotations

import gc
import logging
import time

import anyio

log = logging.getLogger("prefixgate")

FREEZE_AFTER = 3.0
"""Seconds after the first catalog is published: its first clients have listed it."""


async def freeze_the_first_catalog(delay: float = FREEZE_AFTER) -> None:
    """Once the first catalog is out: collect, then freeze everything alive (see above)."""
    await anyio.sleep(delay)
    started = time.perf_counter()
    collected = gc.collect()
    before = gc.get_freeze_count()
    gc.freeze()
    log.debug(
        "garbage collector: %d objects frozen out of its full collections, %d collected (%.0f ms)",
        gc.get_freeze_count() - before,
        collected,
        (time.perf_counter() - started) * 1000,
    )
