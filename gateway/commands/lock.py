"""``prefixgate catalog lock``, ``catalog approve`` and ``catalog diff --lock``.

Each discovers the *live* catalog (the servers as they list their tools now, no lock
applied) and compares it with the lock file: of every profile, each with its own file
(``prefixgate.NAME.lock`` beside ``prefixgate.lock``), from one start of the servers.
``lock`` writes the lock when there is none (or nothing is pending); ``approve`` shows each
pending change and records the chosen ones; ``diff --lock`` only shows them. The lock's
fingerprint and mode are those of the list a gateway publishes under it, computed by the
same ``build_epoch`` that serves.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from catalog.lock import Lock, LockedTool, LockError, Pending, apply, approve
from catalog.text import plural, printable
from gateway.commands.startup import Exit, discover, running
from gateway.config import Config, ConfigError
from gateway.downstream.connection import Downstream
from gateway.engine.checks import CheckCache
from gateway.engine.epoch import Epoch, client_policy, epoch_of
from gateway.engine.hub import Hub
from gateway.engine.lockfile import (
    commit_lock,
    lock_bytes,
    lock_target,
    read_lock_and_bytes,
    stage_lock,
    writing_locks,
)


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


def _existing(config: Config) -> tuple[Lock, bytes]:
    """The profile's lock and the file's bytes (a write checks they are still in place)."""
    path = lock_target(config)
    if not path.exists():
        raise Exit(2, f"prefixgate: catalog lock: {path}: no lock file (write one with prefixgate catalog lock)")
    try:
        return read_lock_and_bytes(path)
    except LockError as exc:
        raise Exit(2, f"prefixgate: catalog lock: {exc}") from None


def _out(text: str) -> None:
    sys.stdout.write(printable(text))
    sys.stdout.flush()


def views(config: Config) -> list[Config]:
    """The default profile and every profile (``Config.view``): a lock covers them all, one file each."""
    return [config, *(config.view(name) for name in sorted(config.profiles))]


def _label(config: Config) -> str:
    return f"profile {config.profile}: " if config.profile else ""


@dataclasses.dataclass
class _Locked:
    """One profile's live catalog and its lock file."""

    hub: Hub
    live: Epoch
    path: Path
    existing: Lock | None
    read: bytes | None = None
    """The lock file's bytes as ``existing`` was read from them (None: there was no file)."""

    def pending(self) -> tuple[Pending, ...]:
        if self.existing is None:
            return ()
        return pending_of(self.hub.config, self.hub.downstreams, self.live, self.existing)


async def write_all(command: str, chosen: Sequence[tuple[_Locked, Sequence[LockedTool]]]) -> list[tuple[Lock, bool]]:
    """Write each profile's lock, all or none: every file is staged (written and synced beside
    its lock) before any is renamed into place, so a full disk leaves every lock as it was;
    then each warm-start record. Per item: the lock and whether its bytes changed."""
    staged: list[tuple[_Locked, Lock, str | None]] = []
    try:
        for each, tools in chosen:
            new = finished(each.hub.config, each.hub.downstreams, each.hub.checks, tools)
            try:
                staged.append((each, new, stage_lock(each.path, new)))
            except OSError as exc:
                why = exc.strerror or exc
                raise Exit(1, f"prefixgate: {command}: {each.path}: cannot write: {why} (nothing written)") from None
        # Each lock was read as this command started (and, for approve, asked about): one
        # another command wrote since (an approval given meanwhile) is not written over unseen.
        with writing_locks(each.path for each, _, _ in staged):
            moved = [each.path for each, _, _ in staged if lock_bytes(each.path) != each.read]
            if moved:
                raise Exit(
                    1,
                    f"prefixgate: {command}: {moved[0]}: changed by another command while this one ran "
                    "(nothing written): run it again",
                )
            for each, _, temp in staged:
                if temp is not None:
                    commit_lock(temp, each.path)
    except BaseException:
        for _, _, temp in staged:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)
        raise
    for each, _, _ in staged:
        await remember(each.hub, each.path)
    return [(new, temp is not None) for _, new, temp in staged]


async def _discover_all(hub: Hub, *, every_lock: bool) -> list[_Locked]:
    """Each profile's live catalog (one discovery: the servers are shared), with its lock
    (``every_lock``: each must exist)."""
    found = []
    for each in hub.family:
        live = await discover(each.config, each)
        path = lock_target(each.config)
        existing, read = _existing(each.config) if every_lock or path.exists() else (None, None)
        found.append(_Locked(each, live, path, existing, read))
    return found


async def lock(config: Config) -> int:
    """Write the lock of every profile from the live catalog; refuse to overwrite one with pending changes."""
    for view in views(config):
        if lock_target(view).exists():
            _existing(view)  # unreadable: exit 2 before anything starts
    async with running(config, use_lock=False, profiles=views(config)[1:]) as hub:
        profiles = await _discover_all(hub, every_lock=False)
        missing = [d.config.id for d in hub.downstreams if d.config.enabled and d.status != "ready"]
        if missing:
            raise Exit(
                1,
                f"prefixgate: catalog lock: server {missing[0]!r} is not ready: a lock written now would leave "
                "its tools out (nothing written)",
            )
        for each in profiles:
            pending = each.pending()
            if pending:
                for p in pending:
                    _out(_label(each.hub.config) + "\n".join(p.lines()) + "\n")
                raise Exit(
                    1,
                    f"prefixgate: catalog lock: {each.path} exists and {plural(len(pending), 'live change')} "
                    f"{'is' if len(pending) == 1 else 'are'} pending: "
                    "review and accept them with prefixgate catalog approve (nothing written)",
                )
        chosen = [(each, [LockedTool.of(e) for e in each.live.catalog.entries] + _kept(each)) for each in profiles]
        results = await write_all("catalog lock", chosen)
        written = [(each, new, changed) for (each, _), (new, changed) in zip(chosen, results, strict=True)]
    for each, new, changed in written:
        done = "wrote" if changed else "unchanged:"
        _out(f"{done} {each.path}: {plural(len(new.tools), 'tool')}, fingerprint {new.fingerprint}\n")
    return 0


def _kept(each: _Locked) -> list[LockedTool]:
    """The locked tools of servers the config disables: still published under the lock (as a
    server that is not up), so a lock written now keeps them. Dropped, they came back as
    "new since the lock" once the server was enabled again: their approvals lost unseen."""
    if each.existing is None:
        return []
    disabled = {s.id for s in each.hub.config.servers if not s.enabled}
    live = {e.name for e in each.live.catalog.entries}
    return [t for t in each.existing.tools if t.server in disabled and t.name not in live]


async def diff(config: Config, as_json: bool) -> int:
    """List what is pending against the lock, for every profile: exit 0 when nothing is, 1 when
    something is, or when a server is not ready (its tools could not be compared: a CI gate
    that passed while a server failed to start would pass any change of its tools)."""
    for view in views(config):
        _existing(view)
    async with running(config, use_lock=False, profiles=views(config)[1:]) as hub:
        profiles = await _discover_all(hub, every_lock=True)
        pending = {
            each.hub.config.profile: (
                each.path,
                each.pending(),
                [d.config.id for d in each.hub.downstreams if d.config.enabled and d.status != "ready"],
            )
            for each in profiles
        }
    unsure = any(found or unready for _, found, unready in pending.values())
    if as_json:

        def one(path: Path, found: Sequence[Pending], unready: list[str]) -> dict[str, object]:
            return {"lock": str(path), "pending": [p.to_json() for p in found], "not_ready": unready}

        report = one(*pending.pop(None))
        if pending:
            report["profiles"] = {n: one(*each) for n, each in pending.items()}
        _out(json.dumps(report, indent=2) + "\n")
        return 1 if unsure else 0
    for path, found, unready in pending.values():
        missed = (
            f"; not compared: {'server' if len(unready) == 1 else 'servers'} {', '.join(repr(i) for i in unready)} "
            "(not ready: its tools may have changed)"
            if unready
            else ""
        )
        if not found:
            _out(
                f"{path}: "
                + ("nothing pending in the servers compared" if unready else "the live catalog matches the lock")
                + missed
                + "\n"
            )
            continue
        _out(f"{path}: {plural(len(found), 'pending change')}{missed}\n")
        for p in found:
            _out("\n".join(p.lines()) + "\n")
    return 1 if unsure else 0


def _confirm(count: int) -> bool:
    if not sys.stdin.isatty():
        raise Exit(2, "prefixgate: catalog approve: stdin is not a terminal; pass --yes to approve without asking")
    sys.stderr.write(f"Approve {plural(count, 'change')}? [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


async def approve_command(
    config: Config, names: Sequence[str], everything: bool, yes: bool, profile: str | None = None
) -> int:
    """Show each chosen pending change, confirm, and record it in the lock of every profile it is
    pending in. A name is the tool's published name in one profile: the tool it names (its server
    and original name) is approved in every profile, where a long name may read otherwise.
    ``profile``: the names (and ``everything``) are that profile's only, where each names one
    tool; in two profiles one name can be two servers' tools (``prefix = ""``)."""
    if not names and not everything:
        raise Exit(2, "prefixgate: catalog approve: name the changes to approve (catalog diff --lock) or pass --all")
    try:
        config.view(profile)
    except ConfigError as exc:
        raise Exit(2, f"prefixgate: config error: {exc}") from None
    _existing(config)  # the default profile's (each other profile's that exists is read below)
    for view in views(config)[1:]:
        if lock_target(view).exists():
            _existing(view)
    async with running(config, use_lock=False, profiles=views(config)[1:]) as hub:
        profiles = await _discover_all(hub, every_lock=False)
        for each in profiles:
            if each.existing is None:  # (a profile added since: approving elsewhere lets catalog lock write it)
                label = _label(each.hub.config)
                _out(f"{label}{each.path}: no lock yet; catalog lock writes it once nothing is pending\n")
        chosen: list[tuple[_Locked, list[Pending]]] = []
        known: dict[str, None] = {}
        found = [(each, each.pending()) for each in profiles]
        named = [p for each, pending in found if profile in (None, each.hub.config.profile) for p in pending]
        routes = {(p.server, p.original) for p in named if everything or p.name in names}
        known.update(dict.fromkeys(p.name for p in named))
        for each, pending in found:
            picked = [p for p in pending if (p.server, p.original) in routes]
            if picked:
                chosen.append((each, picked))
        unknown = [n for n in names if n not in known]
        if unknown:
            listed = ", ".join(known) or "none"
            raise Exit(2, f"prefixgate: catalog approve: no pending change named {unknown[0]!r} (pending: {listed})")
        count = sum(len(picked) for _, picked in chosen)
        if not count:
            _out(f"{lock_target(config)}: nothing pending; the lock is unchanged\n")
            return 0
        for each, picked in chosen:
            for p in picked:
                _out(_label(each.hub.config) + "\n".join(p.lines()) + "\n")
        if not yes and not _confirm(count):
            _out("not approved; the lock is unchanged\n")
            return 1
        to_write = []
        for each, picked in chosen:
            assert each.existing is not None
            to_write.append((each, approve(each.existing, picked).tools))
        done = await write_all("catalog approve", to_write)
        written = [(each.path, len(picked), new) for (each, picked), (new, _) in zip(chosen, done, strict=True)]
    for path, approved, new in written:
        tools = plural(len(new.tools), "tool")
        _out(f"approved {plural(approved, 'change')}: {path}: {tools}, fingerprint {new.fingerprint}\n")
    return 0
