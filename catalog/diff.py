"""Compare two ``prefixgate catalog --json`` reports: what changed, and did the bytes?

The question this answers first is "why did my prompt cache miss?": the published
``tools/list`` bytes are the ``declarations`` array of each report (order, content and
key order all count) plus its ``fingerprint``. Everything else (tools added, removed,
renamed or moved, the JSON path of every schema difference, mode and fallback, servers,
declared/deferred flags, warnings) explains why.

Pure: two parsed JSON values in, a :class:`CatalogDiff` out. Reports from older or
partial runs are fine: a missing or mistyped key is treated as absent, never an error.
Output is deterministic: names, ids and object keys in UTF-16 code-unit order.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from catalog.names import code_unit_key

JSON = Any


class _Absent:
    """A key that is not there (distinct from JSON ``null``); one instance, kept by copies."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __copy__(self) -> _Absent:
        return self

    def __deepcopy__(self, memo: object) -> _Absent:
        return self

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

ChangeKind = Literal["added", "removed", "changed", "reordered"]

SETTINGS = ("mode", "fallback", "detail", "functions", "tokens", "deferred", "identity", "catalog_fingerprint")
"""Top-level report keys compared as settings (``fingerprint`` is compared separately;
``discovery_ms`` is timing noise and ignored)."""

SERVER_FIELDS = ("status", "tools", "listed", "error", "required", "transport")
"""Per-server keys compared (``startup_ms`` is timing noise and ignored)."""

FLAGS = ("declared", "deferred")

VALUE_LIMIT = 80
"""Longest value shown in text output (compact JSON); longer ones are cut with ``…``."""

NAMES_IN_SUMMARY = 3


def dumps(value: JSON) -> str:
    """Compact JSON, key order kept: equal strings mean equal published bytes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)


# --- result types -------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One difference at a JSON path: ``old``/``new`` are ABSENT for added/removed keys.

    ``reordered`` is an object whose common keys come in another order (``old`` and
    ``new`` are the key lists): the same value, different published bytes.
    """

    path: str
    kind: ChangeKind
    old: JSON = ABSENT
    new: JSON = ABSENT

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"path": self.path, "kind": self.kind}
        if self.old is not ABSENT:
            out["old"] = self.old
        if self.new is not ABSENT:
            out["new"] = self.new
        return out

    def line(self) -> str:
        where = self.path or "(whole value)"
        if self.kind == "added":
            return f"{where}: added {_show(self.new)}"
        if self.kind == "removed":
            return f"{where}: removed {_show(self.old)}"
        old, new = _show_pair(self.old, self.new)
        if self.kind == "reordered":
            return f"{where}: key order {old} -> {new}"
        return f"{where}: {old} -> {new}"


@dataclass(frozen=True)
class ToolRef:
    """A tool of one report. ``gateway`` is True for a gateway tool (``tool_search``,
    ``tool_call``, ``artifact_read``: declared, not in the catalog's ``tools``) and None
    when the report has no ``tools`` list; None elsewhere means unknown."""

    name: str
    server: str | None = None
    original: str | None = None
    declared: bool | None = None
    deferred: bool | None = None
    gateway: bool | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "server": self.server,
            "original": self.original,
            "declared": self.declared,
            "deferred": self.deferred,
            "gateway": self.gateway,
        }

    def line(self) -> str:
        text = _name(self.name)
        if self.server is not None:
            text += f"  <- {_name(self.server)}/{_name(self.original or '?')}"
        notes = []
        if self.gateway:
            notes.append("gateway tool")
        if self.declared is not None:
            notes.append("declared" if self.declared else "not declared")
        if self.deferred:
            notes.append("deferred")
        return text + (f"  ({', '.join(notes)})" if notes else "")


@dataclass(frozen=True)
class Rename:
    """Same ``server`` + ``original``, another published name (e.g. a collision suffix)."""

    server: str
    original: str
    old_name: str
    new_name: str

    def to_json(self) -> dict[str, JSON]:
        return {"server": self.server, "original": self.original, "old": self.old_name, "new": self.new_name}

    def line(self) -> str:
        return f"{_name(self.old_name)} -> {_name(self.new_name)}  <- {_name(self.server)}/{_name(self.original)}"


@dataclass(frozen=True)
class Move:
    """A declaration whose place in the published order changed (0-based indices)."""

    name: str
    old_index: int
    new_index: int

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "old_index": self.old_index, "new_index": self.new_index}

    def line(self) -> str:
        return f"{_name(self.name)}: position {self.old_index} -> {self.new_index}"


@dataclass(frozen=True)
class ToolChange:
    """A tool published in both reports whose declaration differs (``name`` is the new
    name; a rename alone is not a change, it is reported as a :class:`Rename`)."""

    name: str
    changes: tuple[Change, ...]

    @property
    def key_order_only(self) -> bool:
        return all(c.kind == "reordered" for c in self.changes)

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "key_order_only": self.key_order_only,
            "changes": [c.to_json() for c in self.changes],
        }


@dataclass(frozen=True)
class FlagChange:
    """A catalog tool's ``declared`` or ``deferred`` flag flipped."""

    name: str
    flag: str
    old: bool
    new: bool

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "flag": self.flag, "old": self.old, "new": self.new}

    def line(self) -> str:
        return f"{_name(self.name)}: {self.flag} {dumps(self.old)} -> {dumps(self.new)}"


@dataclass(frozen=True)
class ServerChange:
    """A server added, removed, or with a changed status, tool count, error, ..."""

    id: str
    kind: Literal["added", "removed", "changed"]
    changes: tuple[Change, ...]

    def to_json(self) -> dict[str, JSON]:
        return {"id": self.id, "kind": self.kind, "changes": [c.to_json() for c in self.changes]}

    def status(self) -> tuple[JSON, JSON]:
        for c in self.changes:
            if c.path == "status":
                return c.old, c.new
        return ABSENT, ABSENT


@dataclass(frozen=True)
class CatalogDiff:
    identical: bool | None
    """Published ``tools/list`` bytes identical (True), different (False), or the two
    reports share neither ``declarations`` nor ``fingerprint`` (None: assume a miss)."""
    old_fingerprint: str | None
    new_fingerprint: str | None
    causes: tuple[str, ...]
    """Why the bytes differ, most important first (empty when identical)."""
    added: tuple[ToolRef, ...] = ()
    removed: tuple[ToolRef, ...] = ()
    renamed: tuple[Rename, ...] = ()
    moved: tuple[Move, ...] = ()
    changed: tuple[ToolChange, ...] = ()
    flags: tuple[FlagChange, ...] = ()
    declarations_added: tuple[str, ...] = ()
    """Names newly in the published list (new tools, or tools that became declared)."""
    declarations_removed: tuple[str, ...] = ()
    settings: tuple[Change, ...] = ()
    servers: tuple[ServerChange, ...] = ()
    warnings_added: tuple[str, ...] = ()
    warnings_removed: tuple[str, ...] = ()
    compared: tuple[str, ...] = field(default=())
    """What the byte verdict rests on: ``declarations`` and/or ``fingerprint``."""
    profiles: tuple[ProfileDiff, ...] = ()
    """Each ``[profiles.NAME]`` (the reports' ``profiles``) that differs: its clients' bytes
    are its own, and a config change can reach them and not the default profile's."""

    @property
    def summary(self) -> str:
        return _summary(self)

    @property
    def every_identical(self) -> bool:
        """The default profile's bytes and every profile's are identical (no profile came or went)."""
        return bool(self.identical) and not any(p.diff is None or not p.diff.identical for p in self.profiles)

    @property
    def empty(self) -> bool:
        """Nothing but (possibly) the byte verdict to report."""
        return not any(
            (
                self.added, self.removed, self.renamed, self.moved, self.changed, self.flags,
                self.declarations_added, self.declarations_removed, self.settings, self.servers,
                self.warnings_added, self.warnings_removed, self.profiles,
            )
        )  # fmt: skip

    def to_json(self) -> dict[str, JSON]:
        return {
            "identical": self.identical,
            "summary": self.summary,
            "causes": list(self.causes),
            "compared": list(self.compared),
            "fingerprint": {"old": self.old_fingerprint, "new": self.new_fingerprint},
            "tools": {
                "added": [t.to_json() for t in self.added],
                "removed": [t.to_json() for t in self.removed],
                "renamed": [r.to_json() for r in self.renamed],
                "moved": [m.to_json() for m in self.moved],
                "changed": [c.to_json() for c in self.changed],
                "flags": [f.to_json() for f in self.flags],
            },
            "declarations": {"added": list(self.declarations_added), "removed": list(self.declarations_removed)},
            "settings": [c.to_json() for c in self.settings],
            "servers": [s.to_json() for s in self.servers],
            "warnings": {"added": list(self.warnings_added), "removed": list(self.warnings_removed)},
            "profiles": {p.name: p.to_json() for p in self.profiles},
        }


@dataclass(frozen=True)
class ProfileDiff:
    """A profile whose report differs: ``diff`` compares its two reports (None: it is in one only)."""

    name: str
    kind: Literal["changed", "added", "removed"]
    diff: CatalogDiff | None = None

    def to_json(self) -> dict[str, JSON]:
        return {"kind": self.kind, **(self.diff.to_json() if self.diff is not None else {})}

    def lines(self) -> list[str]:
        if self.diff is None:
            return [
                f"profile {_name(self.name)}: {self.kind} ({'in NEW only' if self.kind == 'added' else 'in OLD only'})"
            ]
        head, *rest = render(self.diff).splitlines()
        return [f"profile {_name(self.name)}: {head}", *(f"  {line}" if line else line for line in rest)]


# --- structural diff of JSON values -------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


def join_path(parent: str, key: str | int) -> str:
    """``a.b``, ``a[2]``, or ``a["odd key"]`` for a key that is not a plain identifier."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"


def json_changes(old: JSON, new: JSON, path: str = "") -> list[Change]:
    """Every difference between two JSON values, as paths, in a deterministic order.

    Objects: keys in code-unit order (plus a ``reordered`` change when the common keys'
    order differs, since that changes the bytes). Arrays: aligned on their longest
    common subsequence, so one inserted element is one ``added`` change. Scalars are
    compared by their JSON text, so ``1`` vs ``1.0`` and ``true`` vs ``1`` differ.
    ABSENT on either side means the key is missing there.
    """
    out: list[Change] = []
    _walk(old, new, path, out)
    return out


def _walk(old: JSON, new: JSON, path: str, out: list[Change]) -> None:
    if old is ABSENT and new is ABSENT:
        return
    if old is ABSENT:
        out.append(Change(path, "added", new=new))
        return
    if new is ABSENT:
        out.append(Change(path, "removed", old=old))
        return
    if isinstance(old, dict) and isinstance(new, dict):
        old_common = [k for k in old if k in new]
        new_common = [k for k in new if k in old]
        if old_common != new_common:
            out.append(Change(path, "reordered", old=old_common, new=new_common))
        for key in sorted(set(old) | set(new), key=lambda k: code_unit_key(str(k))):
            _walk(old.get(key, ABSENT), new.get(key, ABSENT), join_path(path, str(key)), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        _walk_list(old, new, path, out)
        return
    if dumps(old) != dumps(new):
        out.append(Change(path, "changed", old=old, new=new))


def _walk_list(old: list[JSON], new: list[JSON], path: str, out: list[Change]) -> None:
    if len(old) == len(new):
        # Same length: element by element (a changed item keeps its index).
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _walk(a, b, join_path(path, i), out)
        return
    matcher = difflib.SequenceMatcher(None, [dumps(v) for v in old], [dumps(v) for v in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(pairs):
            _walk(old[i1 + k], new[j1 + k], join_path(path, i1 + k), out)
        for i in range(i1 + pairs, i2):
            out.append(Change(join_path(path, i), "removed", old=old[i]))
        for j in range(j1 + pairs, j2):
            out.append(Change(join_path(path, j), "added", new=new[j]))


# --- reading a report (leniently) ---------------------------------------------------------


@dataclass
class _Item:
    name: str
    server: str | None = None
    original: str | None = None
    declared: bool | None = None
    deferred: bool | None = None
    in_catalog: bool = False
    gateway: bool | None = None
    index: int | None = None
    """Position in ``declarations`` (None: not published, or unknown)."""
    declaration: JSON = ABSENT

    def ref(self) -> ToolRef:
        return ToolRef(self.name, self.server, self.original, self.declared, self.deferred, self.gateway)

    @property
    def key(self) -> tuple[str, str] | None:
        if self.in_catalog and self.server is not None and self.original is not None:
            return self.server, self.original
        return None


@dataclass
class _Side:
    report: dict[str, JSON]
    declarations: list[JSON] | None
    has_tools: bool
    items: dict[str, _Item]
    fingerprint: str | None

    def published(self, item: _Item) -> bool | None:
        """Is this tool in the published list? From ``declarations``, else its flag."""
        if self.declarations is not None:
            return item.index is not None
        return item.declared


def _str(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: JSON) -> bool | None:
    return value if isinstance(value, bool) else None


def _read(report: JSON) -> _Side:
    report = report if isinstance(report, dict) else {}
    raw_decls = report.get("declarations")
    declarations = raw_decls if isinstance(raw_decls, list) else None
    raw_tools = report.get("tools")
    has_tools = isinstance(raw_tools, list)
    items: dict[str, _Item] = {}
    for tool in raw_tools if isinstance(raw_tools, list) else ():
        name = _str(tool.get("name")) if isinstance(tool, dict) else None
        if name is None or name in items:
            continue
        items[name] = _Item(
            name,
            server=_str(tool.get("server")),
            original=_str(tool.get("original")),
            declared=_bool(tool.get("declared")),
            deferred=_bool(tool.get("deferred")),
            in_catalog=True,
            gateway=False,
        )
    for index, decl in enumerate(declarations or ()):
        name = _str(decl.get("name")) if isinstance(decl, dict) else None
        if name is None:
            continue
        item = items.get(name)
        if item is None:
            item = items[name] = _Item(name, declared=True, gateway=True if has_tools else None)
        if item.index is None:
            item.index, item.declaration = index, decl
    return _Side(report, declarations, has_tools, items, _str(report.get("fingerprint")))


def _match(old: _Side, new: _Side) -> tuple[list[tuple[_Item, _Item]], list[_Item], list[_Item]]:
    """Pair tools: same ``server`` + ``original`` first (a rename when names differ),
    then same name; the rest were removed or added."""
    by_key: dict[tuple[str, str], _Item] = {}
    for item in _ordered(old.items.values()):
        if item.key is not None:
            by_key.setdefault(item.key, item)
    pairs: list[tuple[_Item, _Item]] = []
    used_old: set[str] = set()
    used_new: set[str] = set()
    for item in _ordered(new.items.values()):
        match = by_key.get(item.key) if item.key is not None else None
        if match is not None and match.name not in used_old:
            pairs.append((match, item))
            used_old.add(match.name)
            used_new.add(item.name)
    for item in _ordered(new.items.values()):
        match = old.items.get(item.name)
        if item.name in used_new or match is None or match.name in used_old:
            continue
        if match.key is not None and item.key is not None and match.key != item.key:
            continue  # the same name now routes to another tool: one removed, one added
        pairs.append((match, item))
        used_old.add(match.name)
        used_new.add(item.name)
    removed = [i for i in _ordered(old.items.values()) if i.name not in used_old]
    added = [i for i in _ordered(new.items.values()) if i.name not in used_new]
    pairs.sort(key=lambda p: code_unit_key(p[1].name))
    return pairs, removed, added


def _ordered(items: Iterable[_Item]) -> list[_Item]:
    return sorted(items, key=lambda i: code_unit_key(i.name))


# --- the diff ------------------------------------------------------------------------------


def diff(old: JSON, new: JSON) -> CatalogDiff:
    """Compare two ``catalog --json`` reports (OLD first)."""
    a, b = _read(old), _read(new)
    pairs, removed, added = _match(a, b)

    renamed = [Rename(o.server or "", o.original or "", o.name, n.name) for o, n in pairs if o.name != n.name]
    renamed.sort(key=lambda r: (code_unit_key(r.old_name), code_unit_key(r.new_name)))

    changed: list[ToolChange] = []
    for o, n in pairs:
        if o.declaration is ABSENT or n.declaration is ABSENT:
            continue
        changes = json_changes(o.declaration, n.declaration)
        if o.name != n.name:
            changes = [c for c in changes if c.path != "name"]
        if changes:
            changed.append(ToolChange(n.name, tuple(changes)))

    moved = _moves(pairs)

    flags: list[FlagChange] = []
    for o, n in pairs:
        if not (o.in_catalog and n.in_catalog):
            continue
        for flag in FLAGS:
            before, after = getattr(o, flag), getattr(n, flag)
            if before is not None and after is not None and before != after:
                flags.append(FlagChange(n.name, flag, before, after))

    decl_added = [n.name for n in added if b.published(n)]
    decl_added += [n.name for o, n in pairs if b.published(n) and a.published(o) is False]
    decl_removed = [o.name for o in removed if a.published(o)]
    decl_removed += [o.name for o, n in pairs if a.published(o) and b.published(n) is False]

    settings: list[Change] = []
    for key in SETTINGS:
        settings += json_changes(a.report.get(key, ABSENT), b.report.get(key, ABSENT), key)

    warnings_added, warnings_removed = _warnings(a.report, b.report)

    identical, compared = _verdict(a, b)
    result = CatalogDiff(
        identical=identical,
        old_fingerprint=a.fingerprint,
        new_fingerprint=b.fingerprint,
        causes=(),
        added=tuple(i.ref() for i in added),
        removed=tuple(i.ref() for i in removed),
        renamed=tuple(renamed),
        moved=tuple(moved),
        changed=tuple(changed),
        flags=tuple(flags),
        declarations_added=tuple(_sorted(decl_added)),
        declarations_removed=tuple(_sorted(decl_removed)),
        settings=tuple(settings),
        servers=tuple(_servers(a.report, b.report)),
        warnings_added=tuple(warnings_added),
        warnings_removed=tuple(warnings_removed),
        compared=tuple(compared),
    )
    causes = () if identical else tuple(_causes(result, a, b, pairs))
    return dataclasses.replace(result, causes=causes, profiles=tuple(_profiles(a.report, b.report)))


def _profiles(old: dict[str, JSON], new: dict[str, JSON]) -> list[ProfileDiff]:
    """Each profile of either report that differs, by name (a profile's report is a whole
    ``catalog --json --profile NAME`` report, or ``{"profile", "error"}``)."""
    before, after = old.get("profiles"), new.get("profiles")
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    out: list[ProfileDiff] = []
    for name in _sorted(before.keys() | after.keys()):
        if name not in after:
            out.append(ProfileDiff(name, "removed"))
        elif name not in before:
            out.append(ProfileDiff(name, "added"))
        else:
            o, n = (r if isinstance(r, dict) else {} for r in (before[name], after[name]))
            one = diff({**o, "profiles": None}, {**n, "profiles": None})
            if not one.identical or not one.empty or o.get("error") != n.get("error"):
                out.append(ProfileDiff(name, "changed", one))
    return out


def _sorted(names: Iterable[str]) -> list[str]:
    return sorted(names, key=code_unit_key)


def _verdict(a: _Side, b: _Side) -> tuple[bool | None, list[str]]:
    verdicts: list[bool] = []
    compared: list[str] = []
    if a.declarations is not None and b.declarations is not None:
        verdicts.append(dumps(a.declarations) == dumps(b.declarations))
        compared.append("declarations")
    if a.fingerprint is not None and b.fingerprint is not None:
        verdicts.append(a.fingerprint == b.fingerprint)
        compared.append("fingerprint")
    return (all(verdicts) if verdicts else None), compared


def _moves(pairs: Sequence[tuple[_Item, _Item]]) -> list[Move]:
    """Published tools whose relative order changed (renames excluded: a new name is
    expected to sort elsewhere). Tools on the longest common subsequence stay put."""
    both = [(o, n) for o, n in pairs if o.name == n.name and o.index is not None and n.index is not None]
    old_order = [o.name for o, _ in sorted(both, key=lambda p: p[0].index or 0)]
    new_order = [n.name for _, n in sorted(both, key=lambda p: p[1].index or 0)]
    if old_order == new_order:
        return []
    matcher = difflib.SequenceMatcher(None, old_order, new_order, autojunk=False)
    staying = {old_order[blk.a + k] for blk in matcher.get_matching_blocks() for k in range(blk.size)}
    moves = [Move(n.name, o.index or 0, n.index or 0) for o, n in both if n.name not in staying]
    return sorted(moves, key=lambda m: code_unit_key(m.name))


def _records(report: dict[str, JSON], key: str, id_key: str) -> dict[str, dict[str, JSON]]:
    raw = report.get(key)
    out: dict[str, dict[str, JSON]] = {}
    for record in raw if isinstance(raw, list) else ():
        ident = _str(record.get(id_key)) if isinstance(record, dict) else None
        if ident is not None and ident not in out:
            out[ident] = record
    return out


def _servers(old: dict[str, JSON], new: dict[str, JSON]) -> list[ServerChange]:
    if not (isinstance(old.get("servers"), list) and isinstance(new.get("servers"), list)):
        return []  # an older or partial report: unknown, not "no servers"
    a, b = _records(old, "servers", "id"), _records(new, "servers", "id")
    out: list[ServerChange] = []
    for ident in _sorted(set(a) | set(b)):
        before, after = a.get(ident), b.get(ident)
        changes: list[Change] = []
        for key in SERVER_FIELDS:  # status first: the usual explanation
            old_value = before.get(key, ABSENT) if before is not None else ABSENT
            new_value = after.get(key, ABSENT) if after is not None else ABSENT
            if before is not None and after is not None and ABSENT in (old_value, new_value):
                continue  # a field only one version reports (e.g. an older report): unknown
            changes += [c for c in json_changes(old_value, new_value, key) if c.kind != "reordered"]
        kind: Literal["added", "removed", "changed"] = (
            "added" if before is None else "removed" if after is None else "changed"
        )
        if changes or kind != "changed":
            out.append(ServerChange(ident, kind, tuple(changes)))
    return out


def _warning_text(warning: JSON) -> str | None:
    if isinstance(warning, str):
        return warning
    if not isinstance(warning, dict):
        return None
    message = _str(warning.get("message"))
    if message is not None:
        return message
    parts = [warning.get(k) for k in ("kind", "server", "tool", "detail")]
    if all(p is None for p in parts):
        return dumps(warning)
    kind, server, tool, detail = ("" if p is None else str(p) for p in parts)
    return f"{kind}: {server}/{tool}: {detail}"


def _warnings(old: dict[str, JSON], new: dict[str, JSON]) -> tuple[list[str], list[str]]:
    def count(report: dict[str, JSON]) -> Counter[str]:
        raw = report.get("warnings")
        texts = (_warning_text(w) for w in (raw if isinstance(raw, list) else ()))
        return Counter(t for t in texts if t is not None)

    if not (isinstance(old.get("warnings"), list) and isinstance(new.get("warnings"), list)):
        return [], []  # an older or partial report: unknown, not "no warnings"
    a, b = count(old), count(new)
    return _sorted((b - a).elements()), _sorted((a - b).elements())


# --- the summary: why did the prompt cache miss? -----------------------------------------


def _names(names: Sequence[str]) -> str:
    shown = [_name(n) for n in names[:NAMES_IN_SUMMARY]]
    if len(names) > NAMES_IN_SUMMARY:
        shown.append(f"+{len(names) - NAMES_IN_SUMMARY} more")
    return ", ".join(shown)


def name_changes(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """What changed between two ``name -> value`` maps, one part per kind that occurs:
    ``added: a, b``, ``removed: c``, ``changed: d`` (a different value), names in code-unit
    order and cut after a few. The one short "what changed" of the gateway: the log line
    of a new epoch and ``doctor``'s stability check both use it."""
    parts = []
    for label, names in (
        ("added", after.keys() - before.keys()),
        ("removed", before.keys() - after.keys()),
        ("changed", {n for n in before.keys() & after.keys() if before[n] != after[n]}),
    ):
        if names:
            parts.append(f"{label}: {_names(sorted(names, key=code_unit_key))}")
    return parts


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _plain(value: JSON) -> str:
    if value is ABSENT:
        return "(absent)"
    if value is None:
        return "none"
    return value if isinstance(value, str) else dumps(value)


def _causes(d: CatalogDiff, a: _Side, b: _Side, pairs: Sequence[tuple[_Item, _Item]]) -> list[str]:
    if a.declarations is not None and b.declarations is not None and dumps(a.declarations) == dumps(b.declarations):
        return ["the fingerprint changed although the declarations are identical (another prefixgate version?)"]
    causes: list[str] = []
    mode = (a.report.get("mode", ABSENT), b.report.get("mode", ABSENT))
    fallback = (a.report.get("fallback", ABSENT), b.report.get("fallback", ABSENT))
    # A key missing from an older or partial report is unknown, not a cause.
    if ABSENT not in mode and _plain(mode[0]) != _plain(mode[1]):
        text = f"mode {_plain(mode[0])} -> {_plain(mode[1])}"
        if fallback[1] not in (None, ABSENT):
            text += f" (fallback {_plain(fallback[1])})"
        causes.append(text)
    elif ABSENT not in fallback and _plain(fallback[0]) != _plain(fallback[1]):
        causes.append(f"fallback {_plain(fallback[0])} -> {_plain(fallback[1])}")
    # A server change explains the miss only when its tools entered or left the list.
    affected = {i.server for i in b.items.values() if i.name in d.declarations_added}
    affected |= {i.server for i in a.items.values() if i.name in d.declarations_removed}
    for server in d.servers:
        if server.id not in affected:
            continue
        before, after = server.status()
        if server.kind == "added":
            causes.append(f"server {_name(server.id)} added ({_plain(after)})")
        elif server.kind == "removed":
            causes.append(f"server {_name(server.id)} removed (was {_plain(before)})")
        elif before is not ABSENT or after is not ABSENT:
            causes.append(f"server {_name(server.id)} {_plain(before)} -> {_plain(after)}")
    new_names = {t.name for t in d.added}
    old_names = {t.name for t in d.removed}
    for names, verb in (
        ([n for n in d.declarations_added if n in new_names], "added"),
        ([n for n in d.declarations_removed if n in old_names], "removed"),
        ([n for n in d.declarations_added if n not in new_names], "newly declared"),
        ([n for n in d.declarations_removed if n not in old_names], "no longer declared"),
    ):
        if names:
            causes.append(f"{_count(len(names), 'tool')} {verb} ({_names(names)})")
    renames = [
        f"{_name(o.name)} -> {_name(n.name)}"
        for o, n in pairs
        if o.name != n.name and a.published(o) and b.published(n)
    ]
    if renames:
        causes.append(f"{_count(len(renames), 'tool')} renamed ({_names(renames)})")
    content = [c.name for c in d.changed if not c.key_order_only]
    if content:
        causes.append(f"{_count(len(content), 'declaration')} changed ({_names(content)})")
    key_order = [c.name for c in d.changed if c.key_order_only]
    if key_order:
        causes.append(f"key order changed in {_count(len(key_order), 'declaration')} ({_names(key_order)})")
    if d.moved:
        causes.append(f"order changed: {_count(len(d.moved), 'tool')} moved ({_names([m.name for m in d.moved])})")
    return causes


def _summary(d: CatalogDiff) -> str:
    if d.identical:
        fp = f" (fingerprint {_short(d.new_fingerprint)})" if d.new_fingerprint else ""
        return f"published tools/list bytes are identical{fp}: the prompt cache is unaffected"
    if d.identical is None:
        return (
            "cannot tell whether the published tools/list bytes differ (the reports share neither "
            "'declarations' nor 'fingerprint'): assume the prompt cache is affected"
        )
    fp = ""
    if d.old_fingerprint and d.new_fingerprint and d.old_fingerprint != d.new_fingerprint:
        fp = f" (fingerprint {_short(d.old_fingerprint)} -> {_short(d.new_fingerprint)})"
    causes = "; ".join(d.causes) if d.causes else "the declarations differ"
    return f"published tools/list bytes differ{fp}: {causes}"


def _profiles_summary(d: CatalogDiff) -> str:
    """The profiles whose bytes differ too (or that came or went), for the first line."""
    names = [p.name for p in d.profiles if p.diff is None or not p.diff.identical]
    return f" (profiles whose bytes differ: {_names(names)})" if names else ""


def _short(fingerprint: str | None) -> str:
    return (fingerprint or "")[:16]


# --- text output ---------------------------------------------------------------------------


def _name(text: str) -> str:
    """A name as is, or as a JSON string when it would not print on one clean line."""
    if text and text.isprintable() and text.strip() == text:
        return text
    return json.dumps(text, ensure_ascii=False)


def _cut(text: str, limit: int = VALUE_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(value: JSON) -> str:
    return _cut(dumps(value))


def _show_pair(old: JSON, new: JSON) -> tuple[str, str]:
    """Both values as compact JSON; when long, start both near their first difference."""
    a, b = dumps(old), dumps(new)
    if max(len(a), len(b)) > VALUE_LIMIT:
        common = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            common += 1
        start = common - 12
        if start > 8:
            a, b = "…" + a[start:], "…" + b[start:]
    return _cut(a), _cut(b)


def render(d: CatalogDiff) -> str:
    """The human report: the verdict first, then each kind of change."""
    lines = [d.summary + _profiles_summary(d)]
    if d.old_fingerprint != d.new_fingerprint:
        lines.append(f"fingerprint: {d.old_fingerprint or '(absent)'} -> {d.new_fingerprint or '(absent)'}")
    elif d.new_fingerprint:
        lines.append(f"fingerprint: {d.new_fingerprint}" + ("" if d.identical else " (unchanged)"))

    def section(title: str, body: Sequence[str]) -> None:
        if body:
            lines.extend(["", f"{title}:", *(f"  {line}" for line in body)])

    section("settings", [c.line() for c in d.settings])
    server_lines: list[str] = []
    for s in d.servers:
        if s.kind == "changed":
            server_lines += [f"{_name(s.id)}: {c.line()}" for c in s.changes]
        else:
            fields = ", ".join(f"{c.path} {_show(c.new if s.kind == 'added' else c.old)}" for c in s.changes)
            server_lines.append(
                f"{'+' if s.kind == 'added' else '-'} {_name(s.id)}" + (f": {fields}" if fields else "")
            )
    section("servers", server_lines)
    section(f"tools added ({len(d.added)})", [f"+ {t.line()}" for t in d.added])
    section(f"tools removed ({len(d.removed)})", [f"- {t.line()}" for t in d.removed])
    section(f"tools renamed ({len(d.renamed)})", [r.line() for r in d.renamed])
    section(
        f"declarations changed ({len(d.changed)})",
        [f"{_name(t.name)}: {c.line()}" for t in d.changed for c in t.changes],
    )
    section(f"moved ({len(d.moved)})", [m.line() for m in d.moved])
    flag_lines: dict[str, list[str]] = {}
    for f in d.flags:
        flag_lines.setdefault(f.name, []).append(f"{f.flag} {dumps(f.old)} -> {dumps(f.new)}")
    section("declared/deferred", [f"{_name(n)}: {', '.join(v)}" for n, v in flag_lines.items()])
    # Entering or leaving the published list is usually shown above (added, removed, a
    # flag); list here only what is not, e.g. from reports without a ``tools`` list.
    shown = {t.name for t in (*d.added, *d.removed)} | {f.name for f in d.flags if f.flag == "declared"}
    section("now declared", [_name(n) for n in d.declarations_added if n not in shown])
    section("no longer declared", [_name(n) for n in d.declarations_removed if n not in shown])
    section(f"warnings added ({len(d.warnings_added)})", [f"+ {_one_line(w)}" for w in d.warnings_added])
    section(f"warnings removed ({len(d.warnings_removed)})", [f"- {_one_line(w)}" for w in d.warnings_removed])
    for p in d.profiles:
        lines += ["", *p.lines()]
    if d.empty:
        lines.append("no other differences (tools, servers, settings, warnings and profiles are the same)")
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)
