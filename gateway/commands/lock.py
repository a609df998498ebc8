"""``prefixgate catalog lock``, ``catalog approve`` and ``catalog diff --lock``.

Each discovers the *live* catalog (the servers as they list their tools now, no lock
applied) and compares it with the lock file. ``lock`` writes the lock when there is none
(or nothing is pending); ``approve`` shows each pending change and records the chosen
ones; ``diff --lock`` only shows them. The lock's fingerprint and mode are those of the
list a gateway publishes under it, computed by the same ``build_epoch`` that serves.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from catalog.lock import Lock, LockedTool, LockError, Pending, apply, approve
from catalog.text import printable
from gateway.commands.startup import Exit, discover, running
from gateway.config import Config
from gateway.downstream.connection import Downstream
from gateway.engine.checks import CheckCache
from gateway.engine.epoch import Epoch, client_policy, epoch_of
from gateway.engine.hub import Hub
from gateway.engine.lockfile import lock_target, read_lock, read_lock_and_bytes, write_lock


def finished(
    config: Config, downstreams: Sequence[Downstream], checks: CheckCache, tools: Sequence[LockedTool]
) -> Lock:
    """A lock of ``tools`` with the fingerprint and mode of what a gateway publishes under it."""
    held = dataclasses.replace(config, gateway=dataclasses.replace(config.gateway, lock_new="hold"))
    epoch = epoch_of(held, downstreams, checks, Lock(tuple(tools)))
    return Lock(tuple(tools), epoch.fingerprint, epoch.decision.mode, client_policy(config).route())


async def remember(hub: Hub, path: Path) -> None:
    """Leave the warm-start record of what ``serve`` publishes under the lock just written, so the
    first start after it is warm (this hub built the live catalog; serve builds the locked one)."""
    lock, data = read_lock_and_bytes(path)
    epoch = hub.router.epoch
    if epoch is not None:
        await hub.records.save(hub.downstreams, epoch, hub.checks, hub.publisher.capture, lock, data, served=False)


def pending_of(config: Config, downstreams: Sequence[Downstream], live: Epoch, lock: Lock) -> tuple[Pending, ...]:
    ready = frozenset(d.config.id for d in downstreams if d.status == "ready")
    deferred = frozenset(d.config.id for d in downstreams if d.config.deferred)
    return apply(live.catalog, lock, ready, deferred).pending


def _existing(config: Config) -> Lock:
    path = lock_target(config)
    if not path.exists():
        raise Exit(2, f"prefixgate: catalog lock: {path}: no lock file (write one with prefixgate catalog lock)")
    try:
        return read_lock(path)
    except LockError as exc:
        raise Exit(2, f"prefixgate: catalog lock: {exc}") from None


def _out(text: str) -> None:
    sys.stdout.write(printable(text))
    sys.stdout.flush()


async def lock(config: Config) -> int:
    """Write the lock from the live catalog; refuse to overwrite one with pending changes."""
    path = lock_target(config)
    existing = _existing(config) if path.exists() else None
    async with running(config, use_lock=False) as hub:
        live = await discover(config, hub)
        missing = [d.config.id for d in hub.downstreams if d.config.enabled and d.status != "ready"]
        if missing:
            raise Exit(
                1,
                f"prefixgate: catalog lock: server {missing[0]!r} is not ready: a lock written now would leave "
                "its tools out (nothing written)",
            )
        if existing is not None:
            pending = pending_of(config, hub.downstreams, live, existing)
            if pending:
                for p in pending:
                    _out("\n".join(p.lines()) + "\n")
                raise Exit(
                    1,
                    f"prefixgate: catalog lock: {path} exists and {len(pending)} live change(s) are pending: "
                    "review and accept them with prefixgate catalog approve",
                )
        new = finished(config, hub.downstreams, hub.checks, [LockedTool.of(e) for e in live.catalog.entries])
        changed = write_lock(path, new)
        await remember(hub, path)
    _out(f"{'wrote' if changed else 'unchanged:'} {path}: {len(new.tools)} tools, fingerprint {new.fingerprint}\n")
    return 0


async def diff(config: Config, as_json: bool) -> int:
    """List what is pending against the lock: exit 0 when nothing is, 1 when something is."""
    existing = _existing(config)
    async with running(config, use_lock=False) as hub:
        live = await discover(config, hub)
        pending = pending_of(config, hub.downstreams, live, existing)
    if as_json:
        _out(json.dumps({"lock": str(lock_target(config)), "pending": [p.to_json() for p in pending]}, indent=2) + "\n")
    elif not pending:
        _out(f"{lock_target(config)}: the live catalog matches the lock\n")
    else:
        _out(f"{lock_target(config)}: {len(pending)} pending change(s)\n")
        for p in pending:
            _out("\n".join(p.lines()) + "\n")
    return 1 if pending else 0


def _confirm(count: int) -> bool:
    if not sys.stdin.isatty():
        raise Exit(2, "prefixgate: catalog approve: stdin is not a terminal; pass --yes to approve without asking")
    sys.stderr.write(f"Approve {count} change(s)? [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


async def approve_command(config: Config, names: Sequence[str], everything: bool, yes: bool) -> int:
    """Show each chosen pending change, confirm, and record it in the lock."""
    if not names and not everything:
        raise Exit(2, "prefixgate: catalog approve: name the changes to approve (catalog diff --lock) or pass --all")
    path = lock_target(config)
    existing = _existing(config)
    async with running(config, use_lock=False) as hub:
        live = await discover(config, hub)
        pending = pending_of(config, hub.downstreams, live, existing)
        by_name = {p.name: p for p in pending}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            known = ", ".join(by_name) or "none"
            raise Exit(2, f"prefixgate: catalog approve: no pending change named {unknown[0]!r} (pending: {known})")
        chosen = list(pending) if everything else [by_name[n] for n in dict.fromkeys(names)]
        if not chosen:
            _out(f"{path}: nothing pending; the lock is unchanged\n")
            return 0
        for p in chosen:
            _out("\n".join(p.lines()) + "\n")
        if not yes and not _confirm(len(chosen)):
            _out("not approved; the lock is unchanged\n")
            return 1
        updated = approve(existing, chosen)
        new = finished(config, hub.downstreams, hub.checks, updated.tools)
        write_lock(path, new)
        await remember(hub, path)
    _out(f"approved {len(chosen)} change(s): {path}: {len(new.tools)} tools, fingerprint {new.fingerprint}\n")
    return 0

