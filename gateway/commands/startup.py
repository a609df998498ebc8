"""What serve, catalog and doctor share: start every server, wait for the barrier, build the first epoch.

:class:`Exit` (``gateway.commands.base``) carries a command's exit status and its one-line
message up to ``main``.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import anyio

from catalog.budget import DecisionError
from catalog.lock import LockError
from catalog.text import plural
from gateway.commands.base import Exit as Exit
from gateway.commands.base import load as load
from gateway.config import Config
from gateway.downstream.spawn import Spawned
from gateway.engine.barrier import wait_for_discovery
from gateway.engine.epoch import Epoch, built_epoch
from gateway.engine.hub import Hub
from gateway.engine.publishing import log_pending
from gateway.upstream.answers import capture

log = logging.getLogger("prefixgate")


@asynccontextmanager
async def running(
    config: Config,
    *,
    supervise: bool = False,
    persist: bool = True,
    use_lock: bool = True,
    early: Mapping[str, Spawned] | None = None,
    warm_records: bool | None = None,
    profiles: Sequence[Config] = (),
    instances: bool = False,
) -> AsyncIterator[Hub]:
    """Start every server concurrently; stop them all on exit.

    ``profiles``: the views (``Config.view``) of the other profiles served over the same
    servers, each with a hub of its own (``Hub.family``).

    ``persist=False`` (doctor) writes nothing to the state directory but, with
    ``warm_records``, the warm-start record; ``use_lock=False`` (``catalog lock``,
    ``approve``, ``diff --lock``) builds the live catalog, not the locked one; ``early``:
    stdio servers ``serve`` started before the gateway was up, by id; ``instances``: a
    per-principal server runs a process for each principal (``serve --http``), set before any
    server starts (its shared process's first requests are judged by it).
    """
    hub = Hub(config, persist=persist, use_lock=use_lock, early=early, warm_records=warm_records)
    hub.instances.enabled = instances
    for view in profiles:
        hub.profile(view)
    for each in hub.family:
        each.publisher.capture = functools.partial(capture, each)
    async with anyio.create_task_group() as tg:
        hub.start(tg, supervise=supervise)
        try:
            yield hub
        finally:
            tg.cancel_scope.cancel()


async def discover(config: Config, hub: Hub) -> Epoch:
    """Wait for the barrier, build and decide the first epoch, publish it.

    Raises Exit(1) when no declaration plan fits the client (``declarations = "fixed"``
    over the function limit), Exit(2) when the catalog lock cannot be read.
    """
    try:
        hub.lock.load()
    except LockError as exc:
        raise Exit(2, f"prefixgate: catalog lock: {exc}") from None
    downstreams = hub.downstreams
    started = anyio.current_time()
    # (the hub's own list: a reload meanwhile replaces servers in it, and the wait follows. The first
    # epoch is still built from ``config``: the publisher rebuilds it under a reload's right after.)
    await wait_for_discovery(downstreams, config.gateway.discovery_deadline)
    try:
        epoch = await built_epoch(config, downstreams, hub.checks, hub.lock.current)
    except DecisionError as exc:  # (serve --http and the lock commands build every profile's: name it)
        raise Exit(1, f"prefixgate: {f'profile {config.profile}: ' if config.profile else ''}{exc}") from None
    epoch.discovery_ms = round((anyio.current_time() - started) * 1000)
    for warning in epoch.catalog.warnings:
        log.log(logging.INFO if warning.informational else logging.WARNING, "%s", warning.line())
    ready = [d for d in downstreams if d.status == "ready"]
    decision = epoch.decision
    listed = sum(len(d.tools) for d in ready)
    held = Counter(w.kind for w in epoch.catalog.warnings)
    why = ", ".join(f"{held[kind]} {kind}" for kind in ("excluded", "quarantined", "duplicate") if held[kind])
    # Each server's "ready: N tools" line counts what it listed; say what became of the rest.
    listing = "" if listed == len(epoch.catalog.entries) else f" ({listed} listed" + (f": {why}" if why else "") + ")"
    # Counted against the config in force (``hub.config``): the servers ready are the hub's, which
    # a reload during the barrier changed too (it said "from 3 of 2 servers" after adding one).
    log.info(
        "%scatalog: %s from %d of %s%s; %s, %d declared, %d deferred; fingerprint %s",
        f"profile {config.profile}: " if config.profile else "",
        plural(len(epoch.catalog.entries), "tool"),
        len(ready),
        plural(len(hub.config.enabled_servers), "server"),
        listing,
        decision.mode,
        decision.function_count,
        len(decision.deferred_names),
        epoch.fingerprint[:16],
    )
    if decision.fallback is not None:
        log.warning("declarations fell back to %s (%s): %s", decision.mode, decision.fallback, decision.detail)
    log_pending(epoch, config.profile)
    await hub.publisher.first_epoch(epoch)
    return epoch
