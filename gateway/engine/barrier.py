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
    """Return once every server is ready, failed or late (``deadline`` seconds at most).

    ``downstreams`` is read again after each wait (``serve`` passes the hub's own list): a
    reload during the barrier replaces a server whose table changed and adds new ones, and
    the barrier waits for those processes, not for the one it stopped. It used to settle on
    the stopped one: the first epoch went out without the server (a second epoch once it was
    up), and a ``required`` one, still starting, stopped the gateway."""

    def unsettled() -> list[Downstream]:
        return [d for d in downstreams if d.config.enabled and not d.settled.is_set()]

    with anyio.move_on_after(deadline):
        while waiting := unsettled():
            await waiting[0].settled.wait()
    for downstream in unsettled():
        downstream.abandon(f"not ready within discovery_deadline {deadline:g} s")
    # Abandoned servers settle as soon as their task sees the cancellation.
    with anyio.move_on_after(5):
        while waiting := unsettled():
            await waiting[0].settled.wait()


def required_failures(downstreams: Sequence[Downstream]) -> list[str]:
    """One line per ``required`` server that is not ready."""
    return [
        f"required server {d.config.id!r} is {d.status}: {d.error or 'no reason given'}"
        for d in downstreams
        if d.config.enabled and d.config.required and d.status != "ready"
    ]
