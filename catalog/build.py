"""Build the deterministic catalog of one epoch from the servers' raw tool lists.

The catalog is a function of the *set* of servers and tools only: neither the order
servers answered in nor the order a server lists its tools may change a byte, so the
published ``tools/list`` (and the provider's prompt cache) stays stable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import canonicaljson

from catalog.canonical import encode, join_array, join_object, member, members
from catalog.model import JSON, Catalog, CatalogWarning, Entry, ServerTools
from catalog.names import Profile, assign_names, code_unit_key, qualify
from catalog.policy import matches
from catalog.schema import canonicalize, check, sort_keys
from catalog.tasks import TASK_ONLY, as_plain, task_only
from catalog.text import quote

_SCHEMA_KEYS = ("inputSchema", "outputSchema")


def fingerprint(declarations: Sequence[JSON]) -> str:
    """SHA-256 hex of the canonical JSON of the declaration list: the epoch's identity."""
    return hashlib.sha256(canonicaljson.encode_canonical_json(list(declarations))).hexdigest()


def fingerprint_encoded(encoded: Iterable[bytes]) -> str:
    """:func:`fingerprint` of the declarations whose canonical JSON is ``encoded``."""
    return hashlib.sha256(join_array(encoded)).hexdigest()


@dataclass(frozen=True, slots=True)
class _Tool:
    """A tool that passed every check, before its public name is known."""

    server: str
    name: str
    declaration: dict[str, JSON]
    encoded: bytes
    """Canonical JSON of the declaration with its original name: a total order key."""
    members: dict[str, bytes]
    """Its members' canonical bytes (``catalog.canonical.members``; empty if unknown)."""


def _label(raw: JSON) -> str:
    """A short, order-independent label for a tool that has no usable name."""
    if isinstance(raw, dict) and "name" in raw:
        return "<name " + _short(repr(raw["name"])) + ">"
    if isinstance(raw, dict):
        return "<unnamed>"
    return f"<{type(raw).__name__}>"


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name_problem(raw: JSON) -> str | None:
    if not isinstance(raw, dict):
        return f"tool is not an object (got {type(raw).__name__})"
    name = raw.get("name")
    if not isinstance(name, str):
        if name is None:
            return "missing 'name'"
        return f"'name' is not a string (got {type(name).__name__})"
    return "empty 'name'" if name == "" else None


def _exclusion(name: str, server: ServerTools) -> str | None:
    """Why the config hides this tool, or None; exclude wins over include."""
    for pattern in server.exclude:
        if matches(name, pattern):
            return f"matches exclude pattern {quote(pattern)}"
    if server.include and not any(matches(name, p) for p in server.include):
        return "matches no include pattern"
    return None


def _view_exclusion(name: str, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    """Why a profile does not see the tool published as ``name``, or None; exclude wins."""
    for pattern in exclude:
        if matches(name, pattern):
            return f"published as {quote(name)}, which matches the profile's exclude pattern {quote(pattern)}"
    if include and not any(matches(name, p) for p in include):
        return f"published as {quote(name)}, which matches none of the profile's include patterns"
    return None


class Memo(Protocol):
    """Remembers declarations that passed every check (keyed by their canonical bytes).

    The metaschema check costs milliseconds per tool; a caller that rebuilds catalogs
    (or restarts) can skip it for declarations it has already seen pass. Failures are
    never remembered, so a quarantine reason is always computed fresh.
    """

    def passed(self, encoded: bytes) -> bool: ...

    def add(self, encoded: bytes) -> None: ...


def _canonical(raw: dict[str, JSON], output_schemas: bool) -> dict[str, JSON]:
    """Canonical copy of the whole tool dict: schemas canonicalised, all keys sorted;
    without ``outputSchema`` unless ``output_schemas``."""
    return {
        k: canonicalize(raw[k]) if k in _SCHEMA_KEYS else sort_keys(raw[k])
        for k in sorted(raw)
        if output_schemas or k != "outputSchema"
    }


def _problem(decl: dict[str, JSON], parts: Mapping[str, bytes], schemas: _Schemas) -> str | None:
    """Why a canonical declaration is unpublishable, or None."""
    if "inputSchema" not in decl:
        return "missing inputSchema"
    problem = schemas.check(decl, parts, "inputSchema")
    if problem is None and decl.get("outputSchema") is not None:
        problem = schemas.check(decl, parts, "outputSchema")
    return problem


_RAW_TEXT = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True, check_circular=False
)
"""A raw schema's text (keys sorted, nothing canonicalised): the cheap lookup key of its shape.
A cycle (never parsed from JSON) raises RecursionError, and the reference path words it."""


@dataclass
class _Schemas:
    """What a build learns once per distinct schema, for every tool of that shape.

    Tools of one server often share a shape (and a first-ever build of thousands of tools
    spent most of its time canonicalising, encoding and checking equal schemas). By a raw
    schema's sorted text: its canonical object and canonical member bytes
    (``"inputSchema":{...}``); by those bytes: the one shared (read-only) object, which spares
    the garbage collector thousands of equal copies, and the ``check`` verdict, a function
    of those bytes (as for ``Memo``). Other objects and arrays (annotations) by their ``repr``.
    """

    by_text: dict[tuple[str, str], tuple[JSON, bytes]] = field(default_factory=dict)
    objects: dict[bytes, JSON] = field(default_factory=dict)
    verdicts: dict[bytes, str | None] = field(default_factory=dict)

    def canonical(self, raw: dict[str, JSON], output_schemas: bool) -> tuple[dict[str, JSON], dict[str, bytes]] | None:
        """``_canonical(raw, ...)`` and its members' bytes, or None: then (or when this
        raises) the caller takes the reference path, which words any error."""
        keys = sorted(raw)
        if not all(isinstance(k, str) for k in keys):
            return None
        decl: dict[str, JSON] = {}
        parts: dict[str, bytes] = {}
        for k in keys:
            if k == "outputSchema" and not output_schemas:
                continue
            value = raw[k]
            if k in _SCHEMA_KEYS:
                text = (k, _RAW_TEXT.encode(value))
                known = self.by_text.get(text)
                if known is None:
                    schema = canonicalize(value)
                    part = member(k, schema)
                    known = self.by_text[text] = (self.objects.setdefault(part, schema), part)
                decl[k], parts[k] = known
            elif isinstance(value, (dict, list)):  # annotations, _meta, icons: few distinct values
                text = (k, repr(value))  # exact for JSON values, cheaper than encoding; order-sensitive
                known = self.by_text.get(text)
                if known is None:
                    value = sort_keys(value)
                    known = self.by_text[text] = (value, member(k, value))
                decl[k], parts[k] = known
            else:
                decl[k] = value
                parts[k] = member(k, value)
        return decl, parts

    def share(self, decl: dict[str, JSON], parts: Mapping[str, bytes]) -> None:
        for where in _SCHEMA_KEYS:
            key = parts.get(where)
            if key is not None:
                decl[where] = self.objects.setdefault(key, decl[where])

    def check(self, decl: dict[str, JSON], parts: Mapping[str, bytes], where: str) -> str | None:
        key = parts.get(where)
        if key is None:
            return check(decl[where], where)
        if key not in self.verdicts:
            self.verdicts[key] = check(decl[where], where)
        return self.verdicts[key]


Check = Callable[[dict[str, JSON], Mapping[str, bytes]], str | None]
"""An extra publishability check supplied by the caller (the gateway's wire model): the
canonical declaration and its members' canonical bytes (empty when unknown)."""


def _encoded(decl: dict[str, JSON]) -> tuple[bytes, dict[str, bytes]]:
    """The declaration's canonical JSON and its members' (each encoded once, reused later)."""
    try:
        parts = members(decl)
    except (ValueError, TypeError):
        parts = None  # encode() below raises the same error, worded for the reason
    if parts is None:
        return encode(decl), {}
    return join_object(parts), parts


def _prepare(
    server: str, raw: dict[str, JSON], extra: Check | None, memo: Memo | None, output_schemas: bool,
    schemas: _Schemas,
) -> _Tool | str:
    """A checked tool, or the reason it is quarantined (an unpublished outputSchema is not checked)."""
    try:
        try:
            fast = schemas.canonical(raw, output_schemas)
        except (RecursionError, ValueError, TypeError):
            fast = None
        if fast is not None:
            decl, parts = fast
            encoded = join_object(parts)
        else:  # the reference path: raises the error to report, in its words
            decl = _canonical(raw, output_schemas)
            encoded, parts = _encoded(decl)
            schemas.share(decl, parts)
        if memo is not None and memo.passed(encoded):
            return _Tool(server, raw["name"], decl, encoded, parts)
        problem = _problem(decl, parts, schemas)
        if problem is None and extra is not None:
            problem = extra(decl, parts)
        if problem is not None:
            return problem
    except RecursionError:
        return "nested too deeply"
    except (ValueError, TypeError) as err:  # NaN/Infinity, lone surrogates, non-str keys
        return "not canonical JSON: " + _short(str(err), 120)
    if memo is not None:
        memo.add(encoded)
    return _Tool(server, raw["name"], decl, encoded, parts)


def _server_tools(
    server: ServerTools, extra: Check | None, memo: Memo | None, output_schemas: bool,
    schemas: _Schemas,
) -> tuple[list[_Tool], list[CatalogWarning]]:
    """The publishable tools of one server, and what happened to the rest."""
    warnings: list[CatalogWarning] = []
    # name -> its tool, or its tools when listed more than once (a list per name would
    # be thousands more objects for the garbage collector to walk during the build)
    by_name: dict[str, dict[str, JSON] | list[dict[str, JSON]]] = {}
    for raw in server.tools:
        problem = _name_problem(raw)
        if problem is not None:
            warnings.append(CatalogWarning("quarantined", server.id, _label(raw), problem))
            continue
        reason = _exclusion(raw["name"], server)
        if reason is not None:
            warnings.append(CatalogWarning("excluded", server.id, raw["name"], reason))
            continue
        if server.tasks and task_only(raw):
            raw = as_plain(raw)  # the gateway runs its calls as tasks (catalog/tasks.py)
        seen = by_name.get(raw["name"])
        if seen is None:
            by_name[raw["name"]] = raw
        elif isinstance(seen, list):
            seen.append(raw)
        else:
            by_name[raw["name"]] = [seen, raw]
    tools: list[_Tool] = []
    for name, held in by_name.items():
        raws = held if isinstance(held, list) else [held]
        kept, more = _keep_one(server.id, name, raws, extra, memo, output_schemas, schemas)
        tools.extend(kept)
        warnings.extend(more)
        if any(task_only(t.declaration) for t in kept):
            warnings.append(CatalogWarning("task-only", server.id, name, TASK_ONLY))
    return tools, warnings


def _keep_one(
    server: str, name: str, raws: list[dict[str, JSON]], extra: Check | None, memo: Memo | None,
    output_schemas: bool, schemas: _Schemas,
) -> tuple[list[_Tool], list[CatalogWarning]]:
    """Resolve one name of one server: at most one tool survives.

    Among duplicates, "the first" is defined by content, not listing order (so the
    listing order cannot matter): valid declarations beat invalid ones, then the
    smallest canonical encoding wins.
    """
    if len(raws) == 1:  # the common case, without the sorting below
        one = _prepare(server, raws[0], extra, memo, output_schemas, schemas)
        return ([one], []) if isinstance(one, _Tool) else ([], [CatalogWarning("quarantined", server, name, one)])
    prepared = [_prepare(server, raw, extra, memo, output_schemas, schemas) for raw in raws]
    valid = sorted((p for p in prepared if isinstance(p, _Tool)), key=lambda t: t.encoded)
    problems = sorted(p for p in prepared if isinstance(p, str))
    if not valid:
        return [], [CatalogWarning("quarantined", server, name, p) for p in problems]
    warnings = []
    n = len(raws)
    for other in valid[1:]:
        same = "identical" if other.encoded == valid[0].encoded else "different definition"
        detail = f"name listed {n} times; kept one, dropped this {same}"
        warnings.append(CatalogWarning("duplicate", server, name, detail))
    for p in problems:
        detail = f"name listed {n} times; kept a valid one, dropped this invalid one ({p})"
        warnings.append(CatalogWarning("duplicate", server, name, detail))
    return [valid[0]], warnings


def _warning_key(w: CatalogWarning) -> tuple[str, bytes, bytes, bytes]:
    return (w.kind, code_unit_key(w.server), code_unit_key(w.tool), code_unit_key(w.detail))


def build(
    servers: Sequence[ServerTools],
    profile: Profile,
    separator: str = "__",
    reserved: frozenset[str] = frozenset(),
    extra_check: Check | None = None,
    memo: Memo | None = None,
    output_schemas: bool = True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> Catalog:
    """The catalog of one epoch: published entries in UTF-16 code-unit order.

    Bad tools are quarantined and hidden tools excluded, each with a warning, never
    silently dropped; the rest of their server is still published. ``extra_check``
    lets the caller quarantine what its transport could not send (a reason, or None);
    ``memo`` lets it skip the (expensive) checks for declarations that passed before.
    ``output_schemas=False`` publishes no ``outputSchema``: a client that sees one demands
    ``structuredContent`` in every successful result, which a bounded result may lack.
    ``include``/``exclude`` are a profile's globs on published names: applied once every
    tool is named, so a tool a profile keeps has the name it has without the filter.
    """
    ids = [s.id for s in servers]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate server id")
    # The kept tools as parallel lists of what the entries need (not one object per tool
    # kept alive through the build: fewer full passes of the cyclic garbage collector).
    routes: list[tuple[str, str]] = []
    decls: list[dict[str, JSON]] = []
    encodings: list[dict[str, bytes]] = []
    warnings: list[CatalogWarning] = []
    prefixes = {s.id: s.prefix for s in servers}
    deferred = {s.id: s.deferred for s in servers}
    schemas = _Schemas()
    for server in servers:
        kept, more = _server_tools(server, extra_check, memo, output_schemas, schemas)
        for t in kept:
            routes.append((t.server, t.name))
            decls.append(t.declaration)
            encodings.append(t.members)
        warnings.extend(more)
    requests = [(sid, prefixes[sid], name) for sid, name in routes]
    names, renames = assign_names(requests, profile, separator, reserved)
    warnings.extend(renames)
    entries = []
    for (sid, name), decl, parts in zip(routes, decls, encodings, strict=True):
        public = names[(sid, name)]
        decl["name"] = public  # the tool's own canonical copy: "name" keeps its sorted place
        identities = {qualify(prefixes[sid], name, separator), sid + separator + name}
        aliases = tuple(sorted(identities - {public}, key=code_unit_key))
        entry = Entry(public, sid, name, decl, deferred[sid], aliases)
        if parts:  # its own members too
            parts["name"] = member("name", public)
            entry.know_encoding(parts, join_object(parts))
        hidden = _view_exclusion(public, include, exclude)
        if hidden is None:
            entries.append(entry)
        else:
            warnings.append(CatalogWarning("excluded", sid, name, hidden))
    entries.sort(key=lambda e: code_unit_key(e.name))
    published = names.values()
    return Catalog(
        entries=tuple(entries),
        warnings=tuple(sorted(warnings, key=_warning_key)),
        fingerprint=fingerprint_encoded(e.encoded for e in entries),
        by_name={e.name: e for e in entries},
        unmatched=tuple(
            (key, p)
            for key, patterns in (("include", include), ("exclude", exclude))
            for p in dict.fromkeys(patterns)
            if not any(matches(name, p) for name in published)
        ),
    )
