"""The discovery barrier: publish nothing until every server has had its chance.

All servers start concurrently, so start-up costs the slowest server, not the sum; a
server that is not ready by the deadline is stopped and reported ``late``, never hidden.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from gateway.downstream.connection import Downstream

log = logging.getLogger("prefixgate.barrier")


async def wait_for_discovery(downstreams: Sequence[Downstream], deadline: float) -> None:
    """Return once every server is ready, failed or late (``deadline`` seconds at most)."""
    with anyio.move_on_after(deadline):
        for downstream in downstreams:
            await downstream.settled.wait()
    for downstream in downstreams:
        if not downstream.settled.is_set():
            downstream.abandon(f"not ready within discovery_deadline {deadline:g} s")
    # Abandoned servers settle as soon as their task sees the cancellation.
    with anyio.move_on_after(5):
        for downstream in downstreams:
            await downstream.settled.wait()


def required_failures(downstreams: Sequence[Downstream]) -> list[str]:
    """One line per ``required`` server that is not ready."""
    return [
        f"required server {d.config.id!r} is {d.status}: {d.error or 'no reason given'}"
        for d in downstreams
        if d.config.enabled and d.config.required and d.status != "ready"
    ]
