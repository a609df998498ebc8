"""The catalog lock: the approved declarations, and how the live catalog differs from them.

A lock is to the published tool list what a package lock is to dependencies: the bytes a
team reviewed and committed. Under a lock the gateway publishes the locked declarations,
not the live ones, so a server that rewrites a description (a server upgrade, or "tool
poisoning") changes no published byte and ends no cache epoch; the difference becomes a
*pending change* that a person approves. Pure: the gateway reads, applies and writes it.

The file is TOML (``tomllib`` reads it), written by :func:`dumps` only: a header (version,
the published list's fingerprint, the declaration mode and route), then one ``[[tools]]``
block per tool in published-name order, so a reviewed change is a few-line diff. Each
declaration is kept verbatim (its key order is the published byte order) as one JSON line,
with the SHA-256 of its canonical JSON, so the lock alone reproduces the published bytes.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import canonicaljson

from catalog.build import fingerprint
from catalog.diff import Change, json_changes
from catalog.model import JSON, Catalog, Entry
from catalog.names import code_unit_key, qualify, renamed_only
from catalog.text import escape

LOCK_VERSION = 1
FILE_NAME = "prefixgate.lock"

PendingKind = Literal["changed", "new", "removed"]


class LockError(ValueError):
    """A lock file that is not exactly what :func:`dumps` writes: the message says where."""


def declaration_sha(declaration: JSON) -> str:
    """SHA-256 hex of a declaration's canonical JSON (name, description, schemas, annotations)."""
    return hashlib.sha256(canonicaljson.encode_canonical_json(declaration)).hexdigest()


@dataclass(frozen=True)
class LockedTool:
    """One approved tool: its published name, its route downstream and its declaration."""

    name: str
    server: str
    original: str
    declaration: dict[str, JSON]
    sha256: str = ""

    def __post_init__(self) -> None:
        if not self.sha256:
            object.__setattr__(self, "sha256", declaration_sha(self.declaration))

    @classmethod
    def of(cls, entry: Entry) -> LockedTool:
        return cls(entry.name, entry.server, entry.original, entry.declaration)


@dataclass(frozen=True)
class Lock:
    """The approved catalog; ``fingerprint``, ``mode`` and ``route`` describe what it published."""

    tools: tuple[LockedTool, ...]
    fingerprint: str = ""
    mode: str = ""
    route: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", tuple(sorted(self.tools, key=lambda t: code_unit_key(t.name))))

    def by_route(self) -> dict[tuple[str, str], LockedTool]:
        return {(t.server, t.original): t for t in self.tools}


# --- the file --------------------------------------------------------------------------


def _toml_str(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except DEL must be escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_json(text: str) -> str:
    """JSON text as a TOML literal string (read verbatim: no escapes to double) when it can be one."""
    if "'" in text or "\x7f" in text:
        return _toml_str(text)
    return "'" + text + "'"


def _json_line(declaration: JSON) -> str:
    """The declaration as compact JSON in its own key order (the published byte order)."""
    return json.dumps(declaration, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps(lock: Lock) -> str:
    """The lock file's text: a function of the lock only, so an unchanged catalog rewrites the same bytes."""
    lines = [
        "# prefixgate.lock: the approved tool catalog. Commit it; do not edit it by hand.",
        "# Review live changes with `prefixgate catalog diff --lock`, accept them with",
        "# `prefixgate catalog approve NAME`, write it afresh with `prefixgate catalog lock`.",
        f"version = {LOCK_VERSION}",
        f"fingerprint = {_toml_str(lock.fingerprint)}",
        f"mode = {_toml_str(lock.mode)}",
        "",
        "[route]",
    ]
    lines += [f"{key} = {_toml_str(value)}" for key, value in sorted(lock.route.items()) if value is not None]
    for tool in lock.tools:
        lines += [
            "",
            "[[tools]]",
            f"name = {_toml_str(tool.name)}",
            f"server = {_toml_str(tool.server)}",
            f"original = {_toml_str(tool.original)}",
            f"sha256 = {_toml_str(tool.sha256)}",
            f"declaration = {_toml_json(_json_line(tool.declaration))}",
        ]
    return "\n".join(lines) + "\n"


def _string(where: str, table: Mapping[str, object], key: str) -> str:
    value = table.get(key)
    if not isinstance(value, str):
        raise LockError(f"{where}: '{key}' must be a string")
    return value


def loads(text: str, where: str = FILE_NAME) -> Lock:
    """Parse and check a lock: every declaration must match its SHA-256 and name, names and routes unique."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{where}: not valid TOML: {exc}") from None
    if type(data.get("version")) is not int or data.get("version") != LOCK_VERSION:  # (true == 1.0 == 1)
        raise LockError(f"{where}: unknown lock version {data.get('version')!r} (expected {LOCK_VERSION})")
    route = data.get("route", {})
    if not isinstance(route, dict) or not all(isinstance(v, str) for v in route.values()):
        raise LockError(f"{where}: [route] must hold strings")
    raw_tools = data.get("tools", [])
    if not isinstance(raw_tools, list):
        raise LockError(f"{where}: 'tools' must be an array of tables")
    tools: list[LockedTool] = []
    names: set[str] = set()
    routes: set[tuple[str, str]] = set()
    for i, raw in enumerate(raw_tools):
        at = f"{where}: tools[{i}]"
        if not isinstance(raw, dict):
            raise LockError(f"{at}: not a table")
        name, server, original = (_string(at, raw, k) for k in ("name", "server", "original"))
        sha = _string(at, raw, "sha256")
        try:
            declaration = json.loads(_string(at, raw, "declaration"))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise LockError(f"{at} ({escape(name)}): declaration is not valid JSON: {exc}") from None
        if not isinstance(declaration, dict) or declaration.get("name") != name:
            raise LockError(f"{at} ({escape(name)}): declaration must be an object named {escape(name)}")
        try:
            actual = declaration_sha(declaration)
        except (ValueError, TypeError) as exc:
            raise LockError(f"{at} ({escape(name)}): declaration is not canonical JSON: {exc}") from None
        if actual != sha:
            raise LockError(f"{at} ({escape(name)}): sha256 does not match its declaration (edited by hand?)")
        if name in names or (server, original) in routes:
            raise LockError(f"{at} ({escape(name)}): listed twice")
        names.add(name)
        routes.add((server, original))
        tools.append(LockedTool(name, server, original, declaration, sha))
    return Lock(
        tools=tuple(tools),
        fingerprint=_string(where, data, "fingerprint"),
        mode=_string(where, data, "mode"),
        route=dict(route),
    )


# --- live against locked ---------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """A difference between the live catalog and the lock that waits for approval.

    ``changed``: a locked tool whose live declaration differs (the locked one is published
    and calls are refused); ``new``: a live tool the lock does not have (not published,
    unless new tools are allowed); ``removed``: a locked tool its (ready) server no longer
    lists (the locked declaration is published and calls are refused).
    """

    kind: PendingKind
    name: str
    server: str
    original: str
    locked: dict[str, JSON] | None
    live: dict[str, JSON] | None

    @property
    def changes(self) -> list[Change]:
        """The JSON path of every difference (the whole declaration for new and removed tools)."""
        if self.kind == "changed":
            return json_changes(self.locked, self.live)
        return []

    def lines(self) -> list[str]:
        """The pending change as printable lines: a head line, then one line per JSON path."""
        route = f"{escape(self.server)}/{escape(self.original)}"
        head = {
            "changed": f"changed: {escape(self.name)} <- {route}",
            "new": f"new: {escape(self.name)} <- {route} (not in the lock)",
            "removed": f"removed: {escape(self.name)} <- {route} (no longer listed by its server)",
        }[self.kind]
        return [head, *(f"  {escape(c.line())}" for c in self.changes)]

    def to_json(self) -> dict[str, JSON]:
        return {
            "kind": self.kind,
            "name": self.name,
            "server": self.server,
            "original": self.original,
            "changes": [c.to_json() for c in self.changes],
            "message": "\n".join(self.lines()),
        }


def refusal(pending: Pending, approve: str = "prefixgate catalog approve") -> str:
    """What a call to a pending tool answers: the reason and the command that resolves it
    (``approve``: that command for the profile served, ``--profile NAME`` included)."""
    command = f"{approve} {pending.name}"
    if pending.kind == "removed":
        return (
            f"Tool {pending.name!r} is no longer available: its server no longer lists it "
            f"(run {command} to drop it from the lock)."
        )
    if pending.kind == "new":
        return f"Tool {pending.name!r} is new since the lock and not yet approved: run {command}"
    return f"Tool {pending.name!r} changed since the lock: run {command}"


@dataclass(frozen=True)
class Applied:
    """The catalog to publish under a lock, what is pending, and the calls to refuse."""

    catalog: Catalog
    pending: tuple[Pending, ...]
    refusals: Mapping[str, str]
    """Published or held name -> the refusal text (changed, removed and held new tools)."""


def _sorted_catalog(entries: Iterable[Entry], live: Catalog) -> Catalog:
    ordered = tuple(sorted(entries, key=lambda e: code_unit_key(e.name)))
    return Catalog(
        entries=ordered,
        warnings=live.warnings,
        fingerprint=fingerprint([e.declaration for e in ordered]),
        by_name={e.name: e for e in ordered},
        unmatched=live.unmatched,
    )


def apply(
    live: Catalog,
    lock: Lock,
    ready: frozenset[str],
    deferred_servers: frozenset[str] = frozenset(),
    allow_new: bool = False,
    prefixes: Mapping[str, str] | None = None,
    separator: str = "__",
    approve: str = "prefixgate catalog approve",
    *,
    servers: frozenset[str] | None = None,
) -> Applied:
    """The catalog under ``lock``: locked declarations only, whatever the servers list now.

    Tools are matched by route (server, original name). A locked tool of a server that is
    not ready (or not started yet) stays published and unflagged (the call reports the
    server down, or waits for it); its server's live listing is the only evidence of a
    change. Such a tool's other identities, which deny rules match too, come from the
    route (``prefixes``: each server's prefix), as ``catalog.build`` derives them. With
    ``allow_new`` a new tool is published as it is (a new epoch), unless its name is taken
    by a locked tool. A locked tool the config now excludes (``excluded`` warnings of
    ``live``) is not published and not pending: the config decides what is offered, the lock
    only what a tool offered may declare (it was published, and said "no longer listed").
    ``approve``: the command a refusal tells the user to run (the served profile's).
    ``servers``: the ids of the servers the config has (None: every one a locked tool names);
    a locked tool of any other server (removed from the config, or from the profile's
    ``servers``) is likewise not published and not pending: no call could reach it.
    """
    live_by_route = {(e.server, e.original): e for e in live.entries}
    excluded = {(w.server, w.tool) for w in live.warnings if w.kind == "excluded"}
    entries: list[Entry] = []
    pending: list[Pending] = []
    for tool in lock.tools:
        entry = live_by_route.pop((tool.server, tool.original), None)
        if entry is None and (tool.server, tool.original) in excluded:
            continue
        if servers is not None and tool.server not in servers:
            continue
        deferred = entry.deferred if entry is not None else tool.server in deferred_servers
        # (A live tool renamed back from its locked, suffixed name has that unrenamed name as
        # its own, not as an alias: it is one of its identities all the same.)
        aliases = (
            tuple(sorted(set(entry.identities) - {tool.name}, key=code_unit_key))
            if entry is not None
            else _aliases(tool, prefixes or {}, separator)
        )
        entries.append(Entry(tool.name, tool.server, tool.original, tool.declaration, deferred, aliases))
        if entry is not None and declaration_sha(entry.declaration) != tool.sha256 and not _renamed_only(tool, entry):
            live_decl = entry.declaration
            pending.append(Pending("changed", tool.name, tool.server, tool.original, tool.declaration, live_decl))
        elif entry is None and tool.server in ready:
            pending.append(Pending("removed", tool.name, tool.server, tool.original, tool.declaration, None))
    taken = {e.name for e in entries}
    for entry in live_by_route.values():
        pending.append(Pending("new", entry.name, entry.server, entry.original, None, entry.declaration))
        if allow_new and entry.name not in taken:
            entries.append(entry)
            taken.add(entry.name)
    pending.sort(key=lambda p: code_unit_key(p.name))
    published = {e.name for e in entries}
    refusals = {p.name: refusal(p, approve) for p in pending if p.kind != "new" or p.name not in published}
    return Applied(_sorted_catalog(entries, live), tuple(pending), refusals)


def _renamed_only(tool: LockedTool, entry: Entry) -> bool:
    """The live tool is the locked one, renamed only because another tool of its name came or
    went (a collision's suffix): it stays published under its locked name, not "changed"."""
    if entry.name == tool.name or not renamed_only(tool.name, entry.name, tool.server, tool.original):
        return False
    return declaration_sha({**entry.declaration, "name": tool.name}) == tool.sha256


def _aliases(tool: LockedTool, prefixes: Mapping[str, str], separator: str) -> tuple[str, ...]:
    prefix = prefixes.get(tool.server, tool.server)
    identities = {qualify(prefix, tool.original, separator), tool.server + separator + tool.original}
    return tuple(sorted(identities - {tool.name}, key=code_unit_key))


def approve(lock: Lock, chosen: Iterable[Pending]) -> Lock:
    """The lock with the chosen pending changes accepted (fingerprint and mode still to fill in)."""
    tools = {(t.server, t.original): t for t in lock.tools}
    for p in chosen:
        if p.kind == "removed":
            tools.pop((p.server, p.original), None)
        elif p.live is not None:
            tools[(p.server, p.original)] = LockedTool(str(p.live["name"]), p.server, p.original, p.live)
    return replace(lock, tools=tuple(tools.values()))
