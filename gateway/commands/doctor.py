"""``prefixgate doctor``: one run that says what is wrong with a setup, and why.

It checks, each with a verdict line (``ok``, ``info``, ``warn`` or ``FAIL``):

1. the config parses (a config error is one ``FAIL`` line, and the doctor stops);
2. each server starts: its start-up time and tool count, or why it failed or was late,
   with the last lines it wrote to stderr;
3. renamed, quarantined, excluded and duplicate tools, with the reasons; for a client
   that wraps tool names (``--client claude-code`` or ``claude-desktop``:
   ``mcp__<entry>__<tool>``; ``gemini``: ``mcp_<entry>_<tool>``), whether every name still
   fits its limit once wrapped;
4. the declaration decision with its numbers: mode, fallback, functions against the
   limit, estimated tokens against the budget, deferred tools;
5. the state, activation and artifact directories: a real directory, owned by this user,
   mode 0700 (missing is fine: it will be created); the state store (the files, or the
   Redis store of ``[gateway] store``): reachable, writable, its server's version;
6. byte stability: discovery runs twice (fresh processes each time, the code path of
   ``catalog``) and the published ``tools/list`` bytes are compared; a server whose tool
   list changed between the two listings is named, because it defeats the prompt cache.

It ends with the snippet that registers prefixgate in the chosen client, with absolute
paths. Exit status: 0 when all is well, 1 when something needs attention (any ``FAIL``
or ``warn``; renames and exclusions alone are ``info``). A bad config is a ``FAIL`` too,
so also 1; usage errors stay 2 (argparse).

Everything but the timings is deterministic: servers in id order, warnings in catalog
order, no random names.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import pwd
import shlex
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2

from catalog.diff import name_changes
from catalog.lock import LockError
from catalog.names import DEFAULT_ENTRY, PROFILES
from catalog.policy import unmatched
from catalog.text import escape, json_text, plural, printable
from gateway import __version__, logs
from gateway.commands.arguments import doctor_arguments
from gateway.commands.catalog import (
    UNMATCHED,
    profile_pending,
    profile_reports,
    profile_summary,
    view_unmatched,
)
from gateway.commands.eventloop import run_until_stopped
from gateway.commands.startup import Exit, discover, running
from gateway.commands.toml_writer import toml_string
from gateway.config import Config, ConfigError, GatewayConfig, ServerConfig, find_config, load_config
from gateway.downstream.oauth import publishes_resource_metadata
from gateway.downstream.stderrtail import shown
from gateway.engine.epoch import Epoch, approve_hint
from gateway.engine.lockfile import lock_path, read_lock
from gateway.engine.oauth import login_command, token_file
from gateway.redact import redact
from gateway.state.backend import state_store
from gateway.state.oauthtokens import TokenFileError, usable_tokens

STDERR_LINES = 5
"""How many of a failed server's last stderr lines are shown."""

Verdict = Literal["ok", "info", "warn", "FAIL"]
ATTENTION: frozenset[str] = frozenset({"warn", "FAIL"})


# --- the report -------------------------------------------------------------------------


@dataclass
class Check:
    section: str
    verdict: Verdict
    message: str
    details: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"section": self.section, "verdict": self.verdict, "message": self.message, "details": self.details}


@dataclass
class Report:
    config: str | None
    client: str
    checks: list[Check] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    """Section -> a header suffix (e.g. a timing) shown after the section name."""
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, section: str, verdict: Verdict, message: str, details: Sequence[str] = ()) -> Check:
        check = Check(section, verdict, message, list(details))
        self.checks.append(check)
        return check

    def counts(self) -> dict[str, int]:
        out = {"FAIL": 0, "warn": 0, "info": 0, "ok": 0}
        for check in self.checks:
            out[check.verdict] += 1
        return out

    @property
    def status(self) -> int:
        return 1 if any(c.verdict in ATTENTION for c in self.checks) else 0


# --- one discovery ----------------------------------------------------------------------


@dataclass
class ServerSnapshot:
    """What one discovery saw of one server (taken before its process is stopped)."""

    id: str
    enabled: bool
    required: bool
    status: str
    error: str | None
    startup_ms: int | None
    listed: int
    stderr_tail: list[str]


@dataclass
class Round:
    servers: list[ServerSnapshot]
    epoch: Epoch | None
    """None when no declaration plan fits (``error`` says why)."""
    error: str | None
    discovery_ms: int
    surface_warnings: list[str]
    profiles: dict[str, Any] = field(default_factory=dict)
    """Each ``[profiles.NAME]``'s ``catalog --json`` report from this discovery."""
    warm: bool = False
    """The warm-start record of this config is in place after the round."""

    def published_bytes(self) -> bytes | None:
        if self.epoch is None:
            return None
        return json.dumps(self.epoch.published(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def discover_once(config: Config) -> Round:
    """One full start-up and tools/list round, through ``catalog``'s code path. It writes
    nothing to the state directory but the warm-start record, so the first session an agent
    starts after ``doctor`` is warm."""
    started = anyio.current_time()
    async with running(config, persist=False, warm_records=True) as hub:  # the record: the next start is warm
        try:
            epoch = await discover(config, hub)
            error = None
        except Exit as exc:
            epoch, error = None, str(exc).removeprefix("prefixgate: ")
        servers = []
        for d in hub.downstreams:
            tail = d.stderr_tail()  # what the user needs to see of a server that failed
            servers.append(
                ServerSnapshot(
                    id=d.config.id,
                    enabled=d.config.enabled,
                    required=d.config.required,
                    status=d.status,
                    error=d.error,
                    startup_ms=d.startup_ms,
                    listed=len(d.tools),
                    stderr_tail=[redact(line, d.config) for line in shown(tail, STDERR_LINES)],
                )
            )
        surface = list(hub.surface.warnings) if epoch is not None else []
        profiles = profile_reports(config, hub.downstreams, hub.checks) if config.profile is None else {}
        warm = hub.records.written
    return Round(servers, epoch, error, round((anyio.current_time() - started) * 1000), surface, profiles, warm)


# --- checks -----------------------------------------------------------------------------


def _per_server(epoch: Epoch | None) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    if epoch is None:
        return counts
    for entry in epoch.catalog.entries:
        counts.setdefault(entry.server, {}).setdefault("published", 0)
        counts[entry.server]["published"] += 1
    for w in epoch.catalog.warnings:
        bucket = counts.setdefault(w.server, {})
        bucket[w.kind] = bucket.get(w.kind, 0) + 1
    return counts


def check_servers(report: Report, first: Round) -> None:
    counts = _per_server(first.epoch)
    report.headers["servers"] = f"first discovery: {first.discovery_ms} ms"
    for s in first.servers:
        label = f"{s.id}:"
        if s.status == "disabled":
            report.add("servers", "info", f"{label} disabled (enabled = false)")
            continue
        required = " (required)" if s.required else ""
        tail = [f"stderr | {line}" for line in s.stderr_tail]
        if s.status == "ready" and first.epoch is None:
            report.add("servers", "ok", f"{label} ready in {s.startup_ms} ms, {plural(s.listed, 'tool')} listed")
        elif s.status == "ready":
            c = counts.get(s.id, {})
            published = c.get("published", 0)
            text = f"{label} ready in {s.startup_ms} ms, {plural(published, 'tool')}"
            held = [f"{c[k]} {k}" for k in ("quarantined", "excluded", "duplicate") if c.get(k)]
            if held or published != s.listed:
                text += f" ({s.listed} listed" + "".join(f", {h}" for h in held) + ")"
            report.add("servers", "ok", text)
        elif s.status == "late":
            report.add(
                "servers",
                "warn" if not s.required else "FAIL",
                f"{label} late{required}: {s.error or 'not ready in time'}; its tools are not in the catalog "
                "(raise startup_timeout or discovery_deadline if it is just slow)",
                tail,
            )
        else:
            report.add("servers", "FAIL", f"{label} {s.status}{required}: {s.error or 'no reason given'}", tail)


def check_tools(report: Report, first: Round) -> None:
    if first.epoch is None:
        return
    warnings = first.epoch.catalog.warnings
    for w in warnings:
        report.add("tools", "info" if w.informational else "warn", w.line())
    for line in first.surface_warnings:
        report.add("tools", "info", f"resources/prompts: {line}")
    if not warnings and not first.surface_warnings:
        report.add(
            "tools", "ok", f"{plural(len(first.epoch.catalog.entries), 'tool')}, none renamed, quarantined or excluded"
        )


def check_policy(report: Report, config: Config, first: Round) -> None:
    """A ``[policy] deny`` pattern that names no tool denies nothing: said, as a typo in it
    (``DEMO__ECHO`` for ``demo__echo``) would otherwise let the tool run unremarked."""
    if first.epoch is None or not config.policy.deny:
        return
    missing = unmatched(config.policy.deny, (e.identities for e in first.epoch.catalog.entries))
    unlisted = [s.id for s in first.servers if s.status != "ready"]
    hint = f" (not listed: {', '.join(unlisted)}, whose tools are not known)" if unlisted else ""
    for pattern in missing:
        report.add("tools", "warn", f"[policy] deny pattern {pattern!r} {UNMATCHED}{hint}")
    if not missing:
        report.add("tools", "ok", f"every [policy] deny pattern matches a tool ({len(config.policy.deny)})")


def check_view(report: Report, config: Config, first: Round) -> None:
    """A profile's ``include`` or ``exclude`` pattern that matches no published name: said, as a
    typo in an exclude (``github__delet_*``) would otherwise leave its clients the tool unremarked."""
    if first.epoch is None or config.profile is None:
        return
    unlisted = [s.id for s in first.servers if s.status != "ready"]
    hint = f" (not listed: {', '.join(unlisted)}, whose tools are not known)" if unlisted else ""
    for key, pattern in first.epoch.catalog.unmatched:
        report.add(
            "tools", "warn", f"[profiles.{config.profile}] {key} pattern {pattern!r} {view_unmatched(key)}{hint}"
        )


def check_wrapped_names(report: Report, config: Config, first: Round) -> None:
    """For a client that wraps tool names (Claude Code: ``mcp__<entry>__<tool>``), whether every
    name the gateway can declare still fits the client's limit once wrapped."""
    client = PROFILES.get(report.client)
    if first.epoch is None or client is None or not client.wrapper:
        return
    entry = config.client.entry
    names = sorted({e.name for e in first.epoch.catalog.entries} | {str(d["name"]) for d in first.epoch.published()})
    shown = client.wrapped("<name>", entry)
    too_long = [n for n in names if not client.valid(client.wrapped(n, entry))]
    longest = max((len(client.wrapped(n, entry)) for n in names), default=0)
    report.data["wrapped_names"] = {"wrapper": client.wrapped("", entry), "max_len": client.max_len,
                                    "longest": longest, "too_long": too_long}  # fmt: skip
    if not too_long:
        report.add("tools", "ok", f"every tool name fits {client.name}'s {client.max_len} characters as {shown} "
                   f"(longest {longest})")  # fmt: skip
        return
    fix = (
        f'set [client] profile = "{report.client}" so names are shortened to fit'
        if not PROFILES[config.client.profile].wrapper
        else f'check [client] entry = "{entry}": it must be the name prefixgate is registered under'
    )
    report.add(
        "tools",
        "warn",
        f"{plural(len(too_long), 'tool name')} over {client.max_len} characters once "
        f"{client.name} shows {'them' if len(too_long) != 1 else 'it'} as {shown}, "
        f"{_OVERLONG.get(report.client, 'which it rejects')}: {fix}",
        [f"{client.wrapped(n, entry)} ({len(client.wrapped(n, entry))})" for n in too_long[:5]]
        + ([f"... and {len(too_long) - 5} more"] if len(too_long) > 5 else []),
    )


_OVERLONG = {
    "gemini": "which it cuts to its first and last 30 characters around '...' (two such names can become one)",
}
"""What a wrapping client does with a name over its limit, where it does not reject it."""


def check_declarations(report: Report, config: Config, first: Round) -> None:
    if first.epoch is None:
        report.add("declarations", "FAIL", first.error or "no declaration plan fits the client")
        report.data["decision"] = None
        return
    d = first.epoch.decision
    limit = "no limit" if d.function_limit is None else f"limit {d.function_limit}"
    budget = "no budget: [client] context_window is not set" if d.token_budget is None else f"budget {d.token_budget}"
    details = [
        f"functions: {d.function_count} declared ({limit})",
        f"tokens: ~{d.declared_tokens} estimated ({budget})",
        f"deferred: {len(d.deferred_names)}" + (" (reachable through tool_search)" if d.deferred_names else ""),
        f"detail: {d.detail}",
    ]
    requested = config.client.declarations
    if d.fallback is None:
        text = f"mode {d.mode} (requested {requested}, profile {config.client.profile})"
        report.add("declarations", "ok", text, details)
    else:
        report.add(
            "declarations",
            "info",
            f"mode {d.mode} (requested {requested}, fell back: {d.fallback}, profile {config.client.profile})",
            details,
        )
    report.data["decision"] = {**d.numbers(), "requested": requested, "fingerprint": d.fingerprint}


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def inspect_dir(path: Path) -> tuple[Verdict, str]:
    """The verdict on one private directory, without creating or changing anything."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        parent = path.parent
        while not os.path.lexists(parent) and parent != parent.parent:
            parent = parent.parent
        if not os.path.isdir(parent):
            return "FAIL", f"missing, and cannot be created: {parent} is not a directory"
        if not os.access(parent, os.W_OK | os.X_OK):
            return "FAIL", f"missing, and cannot be created: {parent} is not writable"
        return "ok", "missing; will be created (mode 0700)"
    except OSError as exc:
        return "FAIL", f"cannot inspect: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return "FAIL", f"is a symlink (-> {target}); the gateway refuses symlinked private directories: use a real one"
    if not stat.S_ISDIR(st.st_mode):
        return "FAIL", "exists but is not a directory"
    me = os.geteuid()
    if st.st_uid != me:
        return "FAIL", f"owned by {_owner(st.st_uid)}, not by you ({_owner(me)})"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o700 != 0o700:
        return "FAIL", f"mode {mode:04o}: you cannot read, write or enter it (chmod 700 {shlex.quote(str(path))})"
    if mode & 0o077:
        return "warn", f"mode {mode:04o}: group/other bits set, expected 0700 (chmod 700 {shlex.quote(str(path))})"
    return "ok", f"mode {mode:04o}, owned by you"


def _session_problems(root: Path) -> tuple[int, list[str]]:
    """Entries of the artifact directory that the store would refuse."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return 0, []
    problems = []
    sessions = 0
    me = os.geteuid()
    for name in names:
        try:
            st = os.lstat(root / name)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            problems.append(f"{name}: a symlink")
        elif not stat.S_ISDIR(st.st_mode):
            continue
        elif st.st_uid != me:
            problems.append(f"{name}: owned by {_owner(st.st_uid)}")
        else:
            sessions += 1
            if stat.S_IMODE(st.st_mode) & 0o077:
                problems.append(f"{name}: mode {stat.S_IMODE(st.st_mode):04o}")
    return sessions, problems


def check_directories(report: Report, config: Config) -> None:
    state = Path(os.path.abspath(config.gateway.state_dir))
    dirs: list[tuple[str, Path]] = [("state directory", state), ("activation directory", state / "activation")]
    if config.spill.enabled:
        dirs.append(("artifact directory", state / "artifacts"))
    entries = []
    state_problem = False
    for label, path in dirs:
        if label != "state directory" and state_problem and not os.path.lexists(path):
            continue  # already said: it cannot be created under a broken state directory
        verdict, text = inspect_dir(path)
        details: list[str] = []
        if label == "artifact directory" and verdict != "FAIL" and os.path.isdir(path) and not os.path.islink(path):
            sessions, problems = _session_problems(path)
            text += f"; {sessions} session director{'y' if sessions == 1 else 'ies'}"
            if problems:
                verdict = "FAIL"
                details = [f"refused by the store: {p}" for p in problems[:5]]
                if len(problems) > 5:
                    details.append(f"... and {len(problems) - 5} more")
        if label == "state directory" and verdict == "FAIL":
            state_problem = True
        report.add("directories", verdict, f"{label} {path}: {text}", details)
        entries.append({"label": label, "path": str(path), "verdict": verdict, "message": text})
    if not config.spill.enabled:
        report.add("directories", "info", "artifact directory: not used ([spill] enabled = false)")
    report.data["directories"] = entries


async def check_store(report: Report, config: Config) -> None:
    """The state store: reachable, writable (a probe key that expires, for Redis; the
    directory's permissions, for files), and the server's version."""
    store = state_store(config)
    try:
        health = await store.health()
    finally:
        await store.aclose()
    version = f", {store.kind.capitalize()} {health.version}" if health.version else ""
    verdict: Verdict
    if not health.reachable:
        verdict, text = "FAIL", "unreachable"
    elif not health.writable:
        verdict, text = "FAIL", "reachable, not writable"
    else:
        verdict, text = ("warn" if health.problems else "ok"), "reachable, writable"
    report.add("store", verdict, f"{store.kind} store {health.where}: {text}{version}", list(health.problems))
    report.data["store"] = {
        "kind": store.kind,
        "where": health.where,
        "reachable": health.reachable,
        "writable": health.writable,
        "version": health.version,
        "problems": list(health.problems),
    }


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


async def check_auth(report: Report, config: Config, first: Round) -> None:
    """Each remote server with ``auth``: logged in or not, until when, which scopes, and the
    command that fixes it. Read from the token file; never a token or secret value."""
    entries = []
    ready = {s.id for s in first.servers if s.status == "ready"}
    for server in config.enabled_servers:
        if server.auth is None or server.url is None:
            continue
        fix = login_command(config, server.id) if server.auth == "oauth" else None
        entry: dict[str, Any] = {
            "id": server.id,
            "auth": server.auth,
            "logged_in": False,
            "expires_at": None,
            "scopes": None,
            "refreshable": False,
            "fix": fix,
        }
        entries.append(entry)
        try:
            record = token_file(config, server).read() or {}
        except TokenFileError as exc:
            entry["error"] = str(exc)
            report.add("auth", "FAIL", f"{server.id}: {exc}; remove it and run {fix or 'the gateway again'}")
            continue
        tokens, problem = usable_tokens(record.get("tokens"))
        if problem is not None and server.auth == "oauth":
            entry["error"] = problem
            report.add("auth", "FAIL", f"{server.id}: {problem}; they are not used: run {fix}")
            continue
        if server.auth == "client_credentials":
            how = f"client_credentials as client {server.client_id!r}: tokens are fetched without a browser"
            report.add("auth", "ok", f"{server.id}: {how}" + ("" if tokens else " (none fetched yet)"))
            entry["logged_in"] = tokens is not None
            continue
        if not tokens:
            if server.id not in ready:
                report.add("auth", "warn", f"{server.id}: not logged in: run {fix}")
                continue
            # Served without a token: a server that lists its tools to anyone may still refuse
            # its calls without one, which its protected-resource metadata tells.
            try:
                wanted: bool | None = await publishes_resource_metadata(server.url)
            except (httpx2.HTTPError, ValueError):
                wanted = None
            if wanted:
                report.add(
                    "auth",
                    "warn",
                    f"{server.id}: not logged in: the server lists its tools to anyone, but publishes OAuth "
                    f"metadata (its calls need a login): run {fix}",
                )
            else:
                unknown = " (its OAuth metadata could not be read)" if wanted is None else ""
                report.add("auth", "info", f"{server.id}: not logged in, and the server asked for no login{unknown}")
            continue
        expires = record.get("expires_at")
        scopes = tokens.scope
        refreshable = bool(tokens.refresh_token)
        entry.update(logged_in=True, expires_at=expires, scopes=scopes, refreshable=refreshable)
        granted = f"scopes {scopes}" if scopes else "no scopes named"
        if not isinstance(expires, int | float) or isinstance(expires, bool):
            report.add("auth", "ok", f"{server.id}: logged in ({granted}); the access token names no expiry")
        elif expires > time.time():
            more = "; refreshed before then" if refreshable else f"; no refresh token: then run {fix}"
            until = _when(expires)
            report.add("auth", "ok", f"{server.id}: logged in ({granted}); access token valid until {until}{more}")
        elif refreshable:
            report.add(
                "auth",
                "ok",
                f"{server.id}: logged in ({granted}); the access token expired "
                f"{_when(expires)} and is refreshed on the next connection",
            )
        else:
            report.add("auth", "warn", f"{server.id}: login expired {_when(expires)} (no refresh token): run {fix}")
    if entries:
        report.data["auth"] = entries


# --- stability --------------------------------------------------------------------------


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def server_view(rnd: Round, server: str) -> dict[str, str]:
    """One server's tools as the catalog saw them, by original name: canonical declarations
    (without the public name, which may depend on other servers) and the reasons a tool was
    held back (renames left out for the same reason)."""
    view: dict[str, str] = {}
    if rnd.epoch is None:
        return view
    for entry in rnd.epoch.catalog.entries:
        if entry.server == server:
            decl = {k: v for k, v in entry.declaration.items() if k != "name"}
            view[entry.original] = _canonical(decl)
    for w in rnd.epoch.catalog.warnings:
        if w.server == server and w.kind != "renamed":
            view.setdefault(w.tool, "")
            view[w.tool] += f"|{w.kind}: {w.detail}"
    return view


def check_stability(report: Report, first: Round, second: Round) -> None:
    report.headers["stability"] = f"second discovery: {second.discovery_ms} ms"
    a, b = first.published_bytes(), second.published_bytes()
    culprits: list[dict[str, Any]] = []
    quiet: list[dict[str, Any]] = []
    statuses = {s.id: s for s in second.servers}
    for s in first.servers:
        t = statuses.get(s.id)
        if t is None:
            continue
        if s.status != t.status:
            culprits.append(
                {
                    "id": s.id,
                    "changes": [
                        f"{s.status} in the first discovery, {t.status} in the second"
                        + (f" ({t.error or s.error})" if (t.error or s.error) else "")
                    ],
                }
            )
            continue
        if s.status != "ready":
            continue
        changes = name_changes(server_view(first, s.id), server_view(second, s.id))
        if changes:
            culprits.append({"id": s.id, "changes": changes})
    identical = None if a is None or b is None else a == b
    fingerprints = [r.epoch.fingerprint if r.epoch is not None else "-" for r in (first, second)]
    if identical is None or a is None:
        report.add("stability", "FAIL", "cannot compare: no catalog was published (see declarations)")
    elif identical:
        report.add(
            "stability",
            "ok",
            f"published tools/list is byte-identical across two discoveries ({len(a)} bytes, "
            f"fingerprint {fingerprints[0][:16]})",
        )
        quiet, culprits = culprits, []
        assert first.epoch is not None and second.epoch is not None
        deferred_changed = (
            first.epoch.catalog.fingerprint != second.epoch.catalog.fingerprint
            or first.epoch.identity != second.epoch.identity
        )
        if deferred_changed:
            report.add(
                "stability",
                "warn",
                "the deferred tools changed between discoveries: tool_search answers differ and a persisted "
                "activation (--session) is reset on every restart",
            )
        for c in quiet:
            report.add(
                "stability",
                "warn" if deferred_changed else "info",
                f"{c['id']}: its tool list changed between two listings"
                + ("" if deferred_changed else ", but not in anything the catalog holds (excluded or quarantined)")
                + ": "
                + "; ".join(c["changes"]),
            )
    else:
        report.add(
            "stability",
            "FAIL",
            f"published tools/list differs between two discoveries (fingerprint {fingerprints[0][:16]} -> "
            f"{fingerprints[1][:16]}): the provider's prompt cache will miss on every restart",
        )
        for c in culprits:
            report.add(
                "stability",
                "FAIL",
                f"{c['id']}: its tool list changed between two listings, a cache killer: " + "; ".join(c["changes"]),
            )
        if not culprits:
            report.add("stability", "FAIL", "no single server's tool list changed; the names or the decision did")
    report.data["stability"] = {
        "identical": identical,
        "fingerprints": fingerprints,
        "changed_servers": culprits,
        "unpublished_changes": quiet,
    }


# --- registration snippets --------------------------------------------------------------


def launcher() -> list[str]:
    """The absolute command that starts prefixgate: the ``prefixgate`` script beside this
    Python when there is one, else ``python -m gateway``."""
    exe = os.path.abspath(sys.executable)
    for name in ("prefixgate", "prefixgate.exe") if os.name == "nt" else ("prefixgate",):
        script = os.path.join(os.path.dirname(exe), name)
        if os.path.isfile(script) and os.access(script, os.X_OK):
            return [script]
    return [exe, "-m", "gateway"]


CLIENT_TIMEOUT_MARGIN = 30.0
"""Seconds a client's own clock on a call (Gemini CLI's ``timeout``, Codex's ``tool_timeout_sec``)
runs past prefixgate's longest ``max_call_time``."""
CLIENT_TIMEOUT_CAP_MS = 2**31 - 1
"""The longest client clock a snippet sets, about 24.8 days: Node's timers (Gemini CLI's) hold
no more, and fire at once past it."""


def client_timeout_ms(call_time: float) -> int:
    """Milliseconds a client's own clock on a call runs: ``CLIENT_TIMEOUT_MARGIN`` past
    ``call_time`` (the longest ``max_call_time``, which may be ``inf``), at most the cap."""
    total = (call_time + CLIENT_TIMEOUT_MARGIN) * 1000
    return CLIENT_TIMEOUT_CAP_MS if not math.isfinite(total) or total >= CLIENT_TIMEOUT_CAP_MS else math.ceil(total)


_WHERE = {
    "claude-code": "Claude Code: run once (user scope: every project)",
    "claude-desktop": "Claude Desktop: merge into claude_desktop_config.json (macOS: ~/Library/Application "
    "Support/Claude/, Windows: %APPDATA%\\Claude\\), then restart Claude Desktop",
    "cursor": "Cursor: merge into ~/.cursor/mcp.json (every project) or .cursor/mcp.json (this project)",
    "vscode": "VS Code: merge into .vscode/mcp.json in the workspace (or the user mcp.json: "
    "'MCP: Open User Configuration')",
    "codex": "Codex CLI: add to ~/.codex/config.toml",
    "gemini": "Gemini CLI: merge into ~/.gemini/settings.json (every project) or .gemini/settings.json (this project)",
}


def snippet(
    client: str,
    config_path: str,
    entry: str = DEFAULT_ENTRY,
    variables: Sequence[str] = (),
    profile: str | None = None,
    warm: bool = True,
    call_time: float | None = None,
    optional: Sequence[str] = (),
) -> dict[str, Any]:
    """The exact text that registers prefixgate in ``client`` as ``entry``, with absolute paths;
    ``variables``: the ``${VAR}``s the enabled servers and ``[gateway]`` (a store's password)
    reference, which the environment the client starts prefixgate in must carry. The snippet
    passes them on in the client's own way (their values are never written here, except as a
    placeholder Claude Desktop needs filled);
    ``profile``: the profile it serves (``serve --profile``); ``warm``: the warm-start record
    is in place (what a client that waits about a second for a server depends on);
    ``call_time``: the longest ``max_call_time`` of the enabled servers, for a client that
    stops waiting for a call on its own clock (Gemini CLI, Codex); ``optional``: those of
    ``variables`` that have a default wherever they are referenced (passed on all the same)."""
    head = launcher()
    command, args = head[0], [*head[1:], "serve", "--config", os.path.abspath(config_path)]
    if profile is not None:
        args += ["--profile", profile]
    names = sorted(variables)
    if client == "claude-code":
        # The shell that runs it fills in the values; after the name: ``-e`` takes several.
        passed = "".join(f' -e {name}="${name}"' for name in names)
        text = shlex.join(["claude", "mcp", "add", "--scope", "user", entry]) + passed
        text += " -- " + shlex.join([command, *args])
    elif client in ("claude-desktop", "cursor", "vscode"):
        table: dict[str, Any] = {"command": command, "args": args}
        if client == "vscode":
            table = {"type": "stdio", **table}
        if names:
            # Cursor and VS Code read ${env:NAME} from their own environment; Claude Desktop
            # reads nothing there, so its values must be written in.
            form = "<the value of {}>" if client == "claude-desktop" else "${{env:{}}}"
            table["env"] = {name: form.format(name) for name in names}
        text = json.dumps({"servers" if client == "vscode" else "mcpServers": {entry: table}}, indent=2)
    elif client == "gemini":
        table = {"command": command, "args": args}
        if names:
            # Gemini CLI withholds a variable named like a secret (*TOKEN*, *KEY*, ...) from a
            # server unless its env names it, and expands ${NAME} there from its own environment.
            table["env"] = {name: f"${{{name}}}" for name in names}
        if call_time is not None:
            # Its clock on a call is absolute (10 minutes by default), progress or not: past
            # prefixgate's own limit, so that prefixgate's answer, which says why, comes first.
            table["timeout"] = client_timeout_ms(call_time)
        text = json.dumps({"mcpServers": {entry: table}}, indent=2)
    elif client == "codex":
        lines = [
            f"[mcp_servers.{entry}]",
            f"command = {toml_string(command)}",
            "args = [" + ", ".join(toml_string(a) for a in args) + "]",
        ]
        if names:  # forwarded from the environment Codex runs in, under their own names
            lines.append("env_vars = [" + ", ".join(toml_string(n) for n in names) + "]")
        if call_time is not None:
            # Its clock on a call is absolute too (300 s by default) and per entry: a server
            # imported with a longer tool_timeout_sec would otherwise be cut off behind prefixgate.
            lines.append(f"tool_timeout_sec = {-(-client_timeout_ms(call_time) // 1000)}")
        text = "\n".join(lines)
    else:
        raise ValueError(f"unknown client {client!r}")
    return {
        "client": client,
        "where": _WHERE[client],
        "command": command,
        "args": args,
        "snippet": text,
        "variables": names,
        "optional": sorted(optional),
        "note": _NOTES[client].format(warm=_WARM[warm]) if client in _NOTES else None,
        "passes": _PASSES[client] if names else None,
    }


_PASSES = {
    "claude-code": "the snippet copies these from the shell it is pasted in (set them there first): ",
    "claude-desktop": "Claude Desktop does not pass its environment on: replace each <the value of ...> with it: ",
    "cursor": "Cursor passes these on from the environment it runs in: ",
    "vscode": "VS Code passes these on from the environment it runs in: ",
    "codex": "Codex passes these on from the environment it runs in (env_vars): ",
    "gemini": "Gemini CLI passes these on from the environment it runs in (env; one it lacks arrives empty): ",
}
"""How each client's snippet carries the servers' ${VAR}s, said before their names."""


_NOTES = {
    "codex": "Codex starts its session without an optional server that has not listed its tools after "
    "about a second. {warm} "
    "(required = true would make Codex wait, but fail to start when "
    "the first-ever discovery takes longer than its startup_timeout_sec, 10 s by default.) "
    "Codex cuts each tool result to its own limit (about 12,000 bytes for a model it has no metadata for), "
    "keeping head and tail: the middle of a larger preview or artifact_read page never reaches the model. "
    "Set tool_output_token_limit = 20000 at the top of ~/.codex/config.toml (before any table), or "
    "[spill] max_visible_bytes = 8192 in prefixgate.toml.",
}
"""What a client's own timing asks of a registration (measured: bench/agents.py; bench/README.md, "Real agents")."""
_WARM = {
    True: "This run left the warm-start record, so prefixgate answers at once (about 0.1 s); after changing "
    "the config, run doctor or catalog once more, or the first session after the change starts without "
    "prefixgate's tools.",
    False: "This run could not leave the warm-start record (no catalog was built: see the FAILs above), so "
    "until a run of doctor or catalog does, sessions start without prefixgate's tools.",
}


# --- the run ----------------------------------------------------------------------------


SECTIONS = (
    "config", "servers", "auth", "tools", "declarations", "directories", "store", "stability", "catalog lock",
    "profiles",
)  # fmt: skip


def render(report: Report) -> str:
    lines = [f"prefixgate doctor {__version__}", f"config: {report.config or '-'}", f"client: {report.client}"]
    for section in SECTIONS:
        checks = [c for c in report.checks if c.section == section]
        if not checks:
            continue
        header = section + (f" ({report.headers[section]})" if section in report.headers else "")
        lines += ["", header]
        for c in checks:
            lines.append(f"  {c.verdict:<4}  {escape(c.message)}")  # names, errors, stderr: from servers
            lines += [f"          {escape(d)}" for d in c.details]
    register = report.data.get("register")
    if register is not None:
        lines += ["", f"register in {register['where']}:", "", register["snippet"]]
        if register.get("note"):
            lines += ["", register["note"]]
        if register.get("variables"):
            optional = register.get("optional") or []
            required = [name for name in register["variables"] if name not in optional]
            lines.append("")
            if required:
                lines += [
                    "the environment the client starts prefixgate in must carry: " + ", ".join(required),
                    "(the enabled servers' ${VAR} references; a server whose variable is unset fails alone)",
                ]
            if optional:
                lines.append("it may carry (each has a default for when it is unset or empty): " + ", ".join(optional))
            lines.append(register["passes"] + ", ".join(register["variables"]))
    counts = report.counts()
    verdict = "needs attention" if report.status else "all is well"
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    lines += ["", f"summary: {summary or 'nothing checked'}: {verdict}"]
    return printable("\n".join(lines)) + "\n"


def to_json(report: Report) -> dict[str, Any]:
    return {
        "version": __version__,
        "config": report.config,
        "client": report.client,
        "status": report.status,
        "summary": report.counts(),
        "checks": [c.as_json() for c in report.checks],
        **report.data,
    }


async def diagnose(config: Config, report: Report) -> None:
    # The directories as the user left them: the discoveries below leave the warm-start record.
    directories = Report(report.config, report.client)
    check_directories(directories, config)
    first = await discover_once(config)
    # The second round repeats the first: its log lines (the same warnings again) would
    # only be noise on stderr; what differs is in the report.
    logger = logging.getLogger("prefixgate")
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        second = await discover_once(config)
    finally:
        logger.setLevel(level)
    report.data["servers"] = [
        {
            "id": s.id,
            "status": s.status,
            "required": s.required,
            "error": s.error,
            "startup_ms": s.startup_ms,
            "listed": s.listed,
            "stderr_tail": s.stderr_tail,
        }
        for s in first.servers
    ]
    report.data["discovery_ms"] = [first.discovery_ms, second.discovery_ms]
    report.data["warm_record"] = second.warm
    check_servers(report, first)
    await check_auth(report, config, first)
    check_tools(report, first)
    check_policy(report, config, first)
    check_view(report, config, first)
    check_wrapped_names(report, config, first)
    check_declarations(report, config, first)
    report.checks += directories.checks
    report.data.update(directories.data)
    await check_store(report, config)
    check_stability(report, first, second)
    check_lock(report, config, first)
    check_profiles(report, first, second)


def check_profiles(report: Report, first: Round, second: Round) -> None:
    """A line a ``[profiles.NAME]``: what it publishes and whether both discoveries agree
    (``doctor --profile NAME`` checks one in full)."""
    for name, one in first.profiles.items():
        other = second.profiles.get(name, {})
        if "error" in one:
            report.add("profiles", "FAIL", f"{name}: {one['error']}")
            continue
        what = profile_summary(name, one)
        pending = (one.get("lock") or {}).get("pending") or []
        if other.get("fingerprint") != one["fingerprint"]:
            report.add("profiles", "FAIL", f"{what}, {other.get('fingerprint', '-')[:16]} in the second discovery")
        elif pending:  # (its clients are refused those tools: as the default's in "catalog lock")
            report.add(
                "profiles",
                "warn",
                f"{what}, the same in both discoveries{profile_pending(one)}, the locked declarations are served "
                f"(review: prefixgate catalog diff --lock; accept: {approve_hint(name)} NAME)",
                [line for p in pending for line in p["message"].splitlines()],
            )
        elif (locked := (one.get("lock") or {}).get("fingerprint")) and locked != one["fingerprint"]:
            report.add(
                "profiles",
                "warn",
                f"{what}, the same in both discoveries; {_stale(one['lock']['path'])}",
                [f"lock {locked}", f"now  {one['fingerprint']}"],
            )
        else:
            report.add("profiles", "ok", f"{what}, the same in both discoveries")
        for key, patterns in one.get("profile_unmatched", {}).items():
            for pattern in patterns:
                report.add("profiles", "warn", f"{name}: {key} pattern {pattern!r} {view_unmatched(key)}")


def check_lock(report: Report, config: Config, first: Round) -> None:
    """A catalog lock that does not match the live catalog: each pending change, with its JSON paths."""
    path = lock_path(config)
    if path is None:
        return  # no lock is a choice, not a problem
    if first.epoch is None:
        if first.error is not None and first.error.startswith("catalog lock"):
            report.add("catalog lock", "FAIL", escape(first.error))
        return
    pending = first.epoch.pending
    if pending:
        details = [line for p in pending for line in p.lines()]
        report.add(
            "catalog lock",
            "warn",
            f"{escape(str(path))}: the live catalog differs from the lock in {plural(len(pending), 'tool')}; "
            "the locked declarations are served (review: prefixgate catalog diff --lock; "
            f"accept: {approve_hint(config.profile)} NAME)",
            details,
        )
        return
    try:
        locked = read_lock(path).fingerprint
    except LockError as exc:
        report.add("catalog lock", "FAIL", escape(str(exc)))
        return
    if locked != first.epoch.fingerprint:
        report.add("catalog lock", "warn", _stale(str(path)), [f"lock {locked}", f"now  {first.epoch.fingerprint}"])
        return
    report.add("catalog lock", "ok", f"{escape(str(path))}: the live catalog matches the lock")


def _stale(path: str) -> str:
    """A lock whose tools match but whose recorded fingerprint is not what is published now."""
    return (
        f"{escape(path)}: the tools match, but the published fingerprint is not the lock's "
        "(the config changed the declarations?): run prefixgate catalog lock"
    )


def run(config_path: str | None, args: argparse.Namespace) -> int:
    """Run every check, print the report on stdout; 0 all is well, 1 something needs attention."""
    client = getattr(args, "client", None) or "claude-code"
    as_json = bool(getattr(args, "json", False))
    path: Path | None = None
    try:
        path = find_config(config_path)
        config = load_config(path).view(getattr(args, "profile", None))
    except ConfigError as exc:
        report = Report(os.path.abspath(path) if path is not None else None, client)
        report.add("config", "FAIL", f"config error: {exc}")
        _emit(report, as_json)
        return report.status
    report = Report(os.path.abspath(path), client)
    enabled = len(config.enabled_servers)
    total = len(config.servers)
    report.add(
        "config",
        "ok",
        f"parsed: {total} server{'s' if total != 1 else ''} ({enabled} enabled)"
        + (f" as [profiles.{config.profile}] sees them" if config.profile else "")
        + f", profile {config.client.profile}, "
        f"declarations {config.client.declarations}, spill {'on' if config.spill.enabled else 'off'}",
    )
    run_until_stopped(diagnose, config, report)
    call_time = max((s.max_call_time for s in config.enabled_servers), default=None)
    sources: list[GatewayConfig | ServerConfig] = [config.gateway, *config.enabled_servers]
    variables = sorted({name for source in sources for name in source.variables})
    # A default stands in for a variable only if every reference of it has one.
    optional = [n for n in variables if all(n in s.defaulted for s in sources if n in s.variables)]
    warm = bool(report.data.get("warm_record"))
    report.data["register"] = snippet(
        client,
        str(config.path or path),
        config.client.entry,
        variables,
        config.profile,
        warm=warm,
        call_time=call_time,
        optional=optional,
    )
    _emit(report, as_json)
    return report.status


def _emit(report: Report, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json_text(to_json(report)) + "\n")
    else:
        sys.stdout.write(render(report))
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="prefixgate doctor",
        description="Check a prefixgate setup: config, servers, tools, declarations, directories, "
        "catalog stability; print the registration snippet for a client.",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $PREFIXGATE_CONFIG, ./prefixgate.toml, $XDG_CONFIG_HOME/prefixgate/config.toml)",
    )
    parser.add_argument(
        "--log-level", choices=logs.LEVELS, default="warning", help="stderr log level (default warning)"
    )
    doctor_arguments(parser)
    args = parser.parse_args(argv)
    logs.setup(args.log_level)
    return run(args.config, args)


if __name__ == "__main__":
    sys.exit(main())
