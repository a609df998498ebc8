"""A config reload as a diff: what the running gateway changes when its config file does.

Servers added start (each joins the catalog once it is ready, as a server back from a
restart does); servers removed stop (their process group, as at shutdown, and a
per-principal server's instances with it); servers whose table changed restart, their lists
kept until they list their own (``Downstream.remember``, as at a warm start), and their
instances stop (each principal's next request starts one from the new table); every other
server keeps running untouched: the same process, the same connection. ``[client]``,
``[policy]``, ``[spill]``, profiles' views and deferrals take effect for new requests, and
every profile's catalog is rebuilt: identical bytes are the same epoch (no ``list_changed``,
the same fingerprint), other bytes one new epoch whose reason is the reload. A policy change
never changes the published bytes.
``[telemetry] audit_arguments`` applies from the next call.

What cannot change while serving (``FIXED``: where state lives, the stdio line limit, the
catalog lock's file, the set of profiles an HTTP gateway serves; ``FIXED_TELEMETRY``: whether
there is an audit log, its size, the metrics listener) refuses the whole reload, with one line
naming it: nothing is half-applied or silently ignored, and the running config keeps serving.
So does a config whose catalog no declaration plan fits (``unfit``), as it exits 1 at start.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from catalog.budget import DecisionError
from gateway.config import Config, ServerConfig
from gateway.downstream.connection import Downstream
from gateway.downstream.supervisor import Supervisor
from gateway.engine.epoch import built_epoch
from gateway.engine.hub import Hub
from gateway.engine.oauth import oauth_setup
from gateway.engine.warm import contribution

log = logging.getLogger("prefixgate")

FIXED = ("state_dir", "store", "max_message_bytes", "lock")
"""``[gateway]`` keys a reload may not change (a restart does)."""
FIXED_TELEMETRY = ("audit", "audit_max_bytes", "metrics")
"""``[telemetry]`` keys a reload may not change: the audit log's writer and the metrics
listener are made once, at start (``gateway/commands/observe.py``)."""
REASON = "config reload"
"""What a stopped server's in-flight calls are told stopped it."""


@dataclass(frozen=True)
class Plan:
    added: tuple[ServerConfig, ...]
    removed: tuple[str, ...]
    changed: tuple[ServerConfig, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def summary(self) -> str:
        parts = [
            f"{what} {', '.join(repr(i) for i in ids)}"
            for what, ids in (
                ("added", [s.id for s in self.added]),
                ("removed", list(self.removed)),
                ("restarted", [s.id for s in self.changed]),
            )
            if ids
        ]
        return "; ".join(parts) or "no server changed"


def refused(old: Config, new: Config, served: Sequence[str | None]) -> list[str]:
    """What the new config changes that cannot change while serving (empty: it may apply)."""
    found = [f"gateway.{key}" for key in FIXED if getattr(old.gateway, key) != getattr(new.gateway, key)]
    found += [
        f"telemetry.{key}" for key in FIXED_TELEMETRY if getattr(old.telemetry, key) != getattr(new.telemetry, key)
    ]
    if len(served) > 1 and set(old.profiles) != set(new.profiles):
        found.append("the profiles served (one is added or removed)")
    for profile in served:
        if profile is not None and profile not in new.profiles:
            found.append(f"profiles.{profile} (the profile served is gone)")
    return found


async def unfit(hub: Hub, new: Config) -> list[str]:
    """Why the new config cannot build a profile's catalog from the servers' lists now (no
    declaration plan fits its client: what exits 1 at start), one line each; empty: it may
    apply. Such a file was half applied: its policy took effect, the catalog stayed the old
    one (the rebuild refused it, and every rebuild after), and the log said it was reloaded.
    (Before the first epoch the servers have listed nothing yet: such a file is then taken, and
    the rebuild after the barrier's epoch refuses its catalog, as before.)"""
    running = {d.id: d for d in hub.downstreams}  # (the first hub's: every server served)
    found = []
    for each in hub.family:
        view = new.view(each.config.profile)
        servers = [running[s.id] for s in view.servers if s.id in running]  # (one added has no lists yet)
        try:
            await built_epoch(view, servers, each.checks, each.lock.current)
        except DecisionError as exc:
            found.append(f"profile {view.profile}: {exc}" if view.profile else str(exc))
    return found


def plan(old: Config, new: Config) -> Plan:
    before = {s.id: s for s in old.servers}
    after = {s.id: s for s in new.servers}
    return Plan(
        added=tuple(s for i, s in after.items() if i not in before),
        removed=tuple(i for i in before if i not in after),
        changed=tuple(s for i, s in after.items() if i in before and before[i] != s),
    )


async def apply(hub: Hub, new: Config) -> Plan:
    """Move the running gateway (``hub``: the first of its hubs) to ``new`` (the whole config,
    already checked with ``refused``); what changed among the servers."""
    served = [each.config.profile for each in hub.family]
    first = new.view(served[0])
    changes = plan(hub.config, first)
    going = {*changes.removed, *(s.id for s in changes.changed)}
    listed = {s.id: contribution(hub.by_id[s.id]) for s in changes.changed if hub.by_id[s.id].listed}
    # 1. Servers that go are stopped now (their in-flight calls end as isError naming the reload).
    for server_id in sorted(going):
        hub.restarts_before[server_id] = hub.by_id[server_id].restarts
        hub.by_id[server_id].stop(REASON)
        hub.instances.stop_server(server_id, REASON)  # its per-principal processes go with it
    # 2. Every hub takes its view: the servers it sees, its client, policy and spill settings.
    running = {d.id: d for d in hub.downstreams if d.id not in going}
    oauth = oauth_setup(first)
    started = [Downstream(server, hub, oauth=oauth) for server in (*changes.added, *changes.changed)]
    for downstream in started:
        # ``prefixgate_server_restarts_total`` only a process restart may reset: a server's new
        # process (a changed table, or a server removed and added again) counts on from its last.
        downstream.restarts = hub.restarts_before.pop(downstream.id, 0)
        if downstream.id in listed and downstream.config.enabled:
            # A restarted server's lists stand for it until it lists its own, as at a warm start
            # (its calls wait for it): the same tools are the same bytes, so no prompt cache
            # misses for a restart, and other tools are one epoch, not one without them and one with.
            downstream.remember(listed[downstream.id])
    running |= {d.id: d for d in started}
    for each, profile in zip(hub.family, served, strict=True):
        view = new.view(profile)
        each.configure(view, [running[s.id] for s in view.servers])
        if each.router.telemetry is not None:  # (none without an audit log, metrics or spans)
            each.router.telemetry.audit_arguments = new.telemetry.audit_arguments
    # 3. New servers start, supervised; each joins the catalogs that see it once it is ready.
    assert hub.tasks is not None
    for downstream in started:
        hub.tasks.start_soon(functools.partial(Supervisor(downstream).run, supervise=True))
    # 4. Every profile's catalog is rebuilt: the same bytes stay the same epoch.
    why = REASON + (f" ({changes.summary()})" if changes else "")
    for each in hub.family:
        await each.publisher.rebuild(why)
    return changes
