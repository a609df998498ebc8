"""``prefixgate catalog``: the same discovery and build as ``serve``, printed as text or JSON."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from catalog.budget import DecisionError
from catalog.history import summary
from catalog.lock import Lock, LockError
from catalog.model import CatalogWarning, Entry
from catalog.policy import matches, unmatched
from catalog.text import escape, json_text, plural, printable
from gateway import __version__
from gateway.commands.startup import discover, running
from gateway.config import Config, ConfigError, PolicyConfig
from gateway.downstream.connection import Downstream
from gateway.engine.barrier import required_failures
from gateway.engine.checks import CheckCache
from gateway.engine.epoch import Epoch, approve_hint, epoch_of
from gateway.engine.lockfile import lock_path, read_lock
from gateway.engine.surface import Surface, build_surface
from gateway.state.history import EpochHistory

log = logging.getLogger("prefixgate")


UNMATCHED = "matches no tool (patterns are case-sensitive globs on tool names): it denies nothing"
"""What ``catalog`` and ``doctor`` say of a ``[policy] deny`` pattern no tool's name matches."""


def view_unmatched(key: str) -> str:
    """What a profile's ``include`` or ``exclude`` pattern that matches no published name does."""
    does = "keeps" if key == "include" else "excludes"
    return f"matches no tool (patterns are case-sensitive globs on published names): it {does} nothing"


HELD = ("excluded", "quarantined", "duplicate")
"""Warning kinds that keep a listed tool out of the catalog (a rename keeps it in)."""


def policy_refusal(entry: Entry, policy: PolicyConfig) -> str | None:
    """Why ``[policy]`` refuses every call to this tool, or None: the rule the router applies
    at call time (a deny glob on any identity, then ``read_only``), for the reader's eye."""
    for pattern in policy.deny:
        matched = next((n for n in entry.identities if matches(n, pattern)), None)
        if matched is not None:
            via = "" if matched == entry.name else f" (matches {matched})"
            return f"denied by {pattern!r}{via}"
    if policy.read_only:
        annotations = entry.declaration.get("annotations")
        if not (isinstance(annotations, dict) and annotations.get("readOnlyHint") is True):
            return "refused: read_only and no readOnlyHint"
    return None


def held_counts(warnings: Sequence[CatalogWarning]) -> dict[str, dict[str, int]]:
    """Per server, how many listed tools each kind of warning kept out of the catalog."""
    held: dict[str, dict[str, int]] = {}
    for w in warnings:
        if w.kind in HELD:
            bucket = held.setdefault(w.server, dict.fromkeys(HELD, 0))
            bucket[w.kind] += 1
    return held


def held_text(held: dict[str, int]) -> str:
    """``1 excluded, 2 quarantined``, or empty when nothing was held back."""
    return ", ".join(f"{n} {kind}" for kind, n in held.items() if n)


def catalog_report(config: Config, downstreams: Sequence[Downstream], epoch: Epoch) -> dict[str, Any]:
    """The ``catalog --json`` object: ``declarations`` is exactly what ``serve`` publishes."""
    catalog = epoch.catalog
    decision = epoch.decision
    counts: dict[str, int] = {}
    for entry in catalog.entries:
        counts[entry.server] = counts.get(entry.server, 0) + 1
    held = held_counts(catalog.warnings)
    return {
        "profile": config.profile,
        "fingerprint": epoch.fingerprint,
        "catalog_fingerprint": catalog.fingerprint,
        "identity": epoch.identity,
        **decision.numbers(),
        "discovery_ms": epoch.discovery_ms,
        "servers": [
            {
                "id": d.config.id,
                "status": d.status,
                "tools": counts.get(d.config.id, 0),
                "listed": len(d.tools),
                "held": held.get(d.config.id, dict.fromkeys(HELD, 0)),
                "error": d.error,
                "startup_ms": d.startup_ms,
                "required": d.config.required,
                "transport": d.config.transport,
            }
            for d in downstreams
        ],
        "tools": [
            {
                "name": e.name,
                "server": e.server,
                "original": e.original,
                "declared": epoch.declares(e.name),
                "deferred": epoch.is_deferred(e.name),
                "policy": policy_refusal(e, config.policy),
                "lock": epoch.lock_refusals.get(e.name),
            }
            for e in catalog.entries
        ],
        "policy_unmatched": unmatched(config.policy.deny, (e.identities for e in catalog.entries)),
        "profile_unmatched": {key: [p for k, p in catalog.unmatched if k == key] for key in ("include", "exclude")},
        "declarations": epoch.published(),
        "warnings": [
            {"kind": w.kind, "server": w.server, "tool": w.tool, "detail": w.detail, "message": w.line()}
            for w in catalog.warnings
        ],
    }


def render_text(report: dict[str, Any], config: Config) -> str:
    """The report a newcomer reads at a glance: every number once, each where it is explained."""
    seen = f"  profile: {config.profile}" if config.profile else ""
    lines = [f"prefixgate {__version__}  config: {config.path}{seen}", ""]
    servers = report["servers"]
    width = max([6, *(len(s["id"]) for s in servers)])
    lines.append(f"  {'server':<{width}}  {'status':<8}  {'tools':>5}  {'start-up':>8}")
    for s in servers:
        ms = f"{s['startup_ms']} ms" if s["startup_ms"] is not None else "-"
        ready = s["status"] == "ready"
        line = f"  {s['id']:<{width}}  {s['status']:<8}  {s['tools'] if ready else '-':>5}  {ms:>8}"
        held = held_text(s.get("held", {}))
        if ready and (held or s["listed"] != s["tools"]):
            line += f"  ({s['listed']} listed" + (f": {held}" if held else "") + ")"
        if s["error"]:
            line += f"  {escape(s['error'])}"
        lines.append(line.rstrip())

    ready = [s for s in servers if s["status"] == "ready"]
    enabled = [s for s in servers if s["status"] != "disabled"]
    listed = sum(s["listed"] for s in ready)
    held_all: dict[str, int] = {}
    for s in ready:
        for kind, n in s.get("held", {}).items():
            held_all[kind] = held_all.get(kind, 0) + n
    tools = report["tools"]
    total = f"catalog: {plural(len(tools), 'tool')} from {len(ready)} of {plural(len(enabled), 'server')}"
    if listed != len(tools):
        total += f" ({listed} listed" + (f": {held_text(held_all)}" if held_text(held_all) else "") + ")"
    lines += ["", total]
    if "resources" in report:
        prompts = report.get("prompts", [])
        lines.append(
            f"  also: {plural(report['resources'], 'resource')}, "
            f"{plural(report.get('resource_templates', 0), 'resource template')}, {plural(len(prompts), 'prompt')}"
        )

    fn, tok = report["functions"], report["tokens"]
    limit = "no limit" if fn["limit"] is None else f"limit {fn['limit']}"
    budget = "no context window set" if tok["budget"] is None else f"budget {tok['budget']}"
    fell = f" (fell back: {report['fallback']})" if report["fallback"] else ""
    meta = [d["name"] for d in report["declarations"] if d["name"] in ("tool_search", "tool_call", "artifact_read")]
    declared_tools = sum(1 for t in tools if t["declared"])
    lines += [
        "",
        f"declarations: {report['mode']}{fell}",
        f"  {plural(fn['declared'], 'function')} declared ({limit}): "
        + " + ".join([plural(declared_tools, "tool")] * bool(declared_tools) + meta),
        f"  ~{tok['declared']} tokens ({budget}), {report['deferred']} deferred"
        + (" (reachable through tool_search, marked *)" if report["deferred"] else ""),
    ]
    steps = str(report["detail"]).split("; ")[:-1]  # the last step is the numbers above
    lines += [f"  {'why:' if i == 0 else 'then'} {step}" for i, step in enumerate(steps)]
    refused = [t for t in tools if t.get("policy")]
    if refused:
        lines.append(f"  policy: {plural(len(refused), 'tool')} refused at call time, marked !")
    for pattern in report.get("policy_unmatched", ()):
        lines.append(f"  policy: deny pattern {escape(repr(pattern))} {UNMATCHED}")
    for key, patterns in report.get("profile_unmatched", {}).items():
        lines += [f"  profile: {key} pattern {escape(repr(p))} {view_unmatched(key)}" for p in patterns]

    lines += ["", "tools, in published order:"]
    name_width = min(max((len(t["name"]) for t in tools), default=0), 48)
    for tool in tools:
        mark = ("!" if tool.get("policy") or tool.get("lock") else " ") + ("*" if tool["deferred"] else " ")
        line = f" {mark} {escape(tool['name']):<{name_width}}  <- {tool['server']}/{escape(tool['original'])}"
        if tool.get("policy"):
            line += f"  {escape(tool['policy'])}"
        elif tool.get("lock"):
            line += "  refused until approved (catalog lock)"
        lines.append(line)
    if meta:
        lines.append(f"    + gateway tools: {', '.join(meta)}")
    if report["warnings"]:
        lines += ["", f"warnings ({len(report['warnings'])}):"]
        lines += [f"  {escape(w['message'])}" for w in report["warnings"]]
    lock = report.get("lock")
    if lock is not None:
        pending = lock["pending"]
        state = (
            f"{plural(len(pending), 'change')} pending approval, the locked declarations are served "
            f"(accept: {approve_hint(config.profile)} NAME)"
            if pending
            else "the live catalog matches it"
        )
        lines += ["", f"lock: {escape(lock['path'])}: {state}"]
        lines += [f"  {line}" for p in pending for line in p["message"].split("\n")]
    lines += ["", f"fingerprint: {report['fingerprint']}", f"identity:    {report['identity']}"]
    if report.get("profiles"):
        lines += ["", "profiles (catalog --profile NAME shows one):", *profile_lines(report["profiles"])]
    return printable("\n".join(lines)) + "\n"


def full_report(
    config: Config,
    downstreams: Sequence[Downstream],
    epoch: Epoch,
    lock: Path | None,
    locked: Lock | None,
    surface: Surface | None = None,
) -> dict[str, Any]:
    """``catalog --json``'s object for ``config``'s profile: the catalog, what else its servers
    serve (resources, templates, prompts, as its clients see them: ``surface``, the one its hub
    published, else built here), and its lock (``lock``: the lock file in force, if any;
    ``locked``: what it holds, whose recorded fingerprint doctor compares). One path for
    ``--profile NAME`` and ``profiles.NAME``."""
    report = catalog_report(config, downstreams, epoch)
    if surface is None:
        surface = build_surface(downstreams, config.client.names, config.gateway.separator)
    report["resources"] = len(surface.resources)
    report["resource_templates"] = len(surface.templates)
    report["prompts"] = [p["name"] for p in surface.prompts]
    report["warnings"] += [
        {"kind": "surface", "server": "", "tool": "", "detail": w, "message": w} for w in surface.warnings
    ]
    if lock is not None:
        report["lock"] = {"path": str(lock), "pending": [p.to_json() for p in epoch.pending]}
        if locked is not None:
            report["lock"]["fingerprint"] = locked.fingerprint
    return report


def profile_reports(config: Config, downstreams: Sequence[Downstream], checks: CheckCache) -> dict[str, Any]:
    """Each ``[profiles.NAME]``'s report, built from the same discovery as ``serve --profile NAME``
    builds it (under its lock, when the catalog is locked); ``{"error": ...}`` for one that
    cannot be served (its lock cannot be read, no plan fits)."""
    reports: dict[str, Any] = {}
    for name in sorted(config.profiles):
        try:
            view = config.view(name)
            ids = {s.id for s in view.servers}
            seen = [d for d in downstreams if d.config.id in ids]
            path = lock_path(view)
            lock = read_lock(path) if path is not None else None
            reports[name] = full_report(view, seen, epoch_of(view, seen, checks, lock), path, lock)
        except (ConfigError, DecisionError, LockError) as exc:
            reports[name] = {"profile": name, "error": str(exc)}
    return reports


def profile_lines(reports: dict[str, Any]) -> list[str]:
    """One line a profile: what its clients are published, or why it cannot be served."""
    lines = []
    for name, r in reports.items():
        if "error" in r:
            lines.append(f"  {name}: {r['error']}")
            continue
        lines.append(f"  {profile_summary(name, r)}{profile_pending(r)}")
        for key, patterns in r.get("profile_unmatched", {}).items():
            lines += [f"    {key} pattern {escape(repr(p))} {view_unmatched(key)}" for p in patterns]
    return lines


def profile_pending(report: dict[str, Any]) -> str:
    """What waits against a profile's own lock, as a tail for its line ("" when nothing does):
    its clients are refused those tools as the default profile's are refused its own."""
    pending = (report.get("lock") or {}).get("pending") or []
    if not pending:
        return ""
    return f"; {escape(report['lock']['path'])}: {plural(len(pending), 'change')} pending approval"


def profile_summary(name: str, report: dict[str, Any]) -> str:
    """What a profile publishes, in one line (``catalog`` and ``doctor``)."""
    tools = sum(s["tools"] for s in report["servers"])
    return (
        f"{name}: {plural(tools, 'tool')}, {report['mode']}, {report['functions']['declared']} declared, "
        f"{report['deferred']} deferred; fingerprint {report['fingerprint'][:16]}"
    )


async def run(config: Config, as_json: bool) -> int:
    """Discover, print the catalog, and exit 1 when a ``required`` server failed."""
    async with running(config) as hub:
        epoch = await discover(config, hub)
        report = full_report(config, hub.downstreams, epoch, hub.lock.path, hub.lock.current, hub.surface)
        if config.profile is None:  # the default profile's run shows every profile's view too
            report["profiles"] = profile_reports(config, hub.downstreams, hub.checks)
        downstreams = hub.downstreams
    if as_json:
        sys.stdout.write(json_text(report) + "\n")
    else:
        sys.stdout.write(render_text(report, config))
    failures = required_failures(downstreams)
    for line in failures:
        log.error("%s", line)
    return 1 if failures else 0


def history(config: Config, as_json: bool, limit: int) -> int:
    """``catalog history``: the last ``limit`` epochs the serving gateway published for this profile."""
    store = EpochHistory(config.gateway.state_dir, config.profile, config.path)
    try:
        records = store.read()[-limit:]
    except OSError as exc:
        log.error("%s", exc)
        return 1
    if as_json:
        sys.stdout.write(json_text(records) + "\n")
        return 0
    if not records:
        sys.stdout.write(f"no epoch recorded in {store.path} yet (serve records them)\n")
        return 0
    lines = []
    for r in records:
        was = r.get("previous")
        if not was:
            before = "first recorded"
        else:
            before = "same bytes as before" if was == r["fingerprint"] else f"was {was[:16]}"
        lines.append(f"{r.get('time', '?')}  {r['fingerprint'][:16]}  ({before}): {r.get('reason', '')}")
        lines += [f"    {line}" for line in summary(r.get("changes") or {})]
    sys.stdout.write(printable("\n".join(escape(line) for line in lines)) + "\n")
    return 0
