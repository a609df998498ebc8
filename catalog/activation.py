"""Activation identity, the strict activation record, and the in-memory activation state.

Declaring a tool does not grant execution: a deferred tool runs only after a
``tool_search`` in the current epoch returned it. The grant is tied to an identity that
changes with anything that changes what the model sees (route, mode, declarations, the
deferred tools' schemas), and every doubtful record grants nothing: fail closed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import canonicaljson

from catalog.canonical import encode, join_array, join_values
from catalog.model import JSON
from catalog.names import code_unit_key

IDENTITY_VERSION = 1
RECORD_VERSION = 1
ROUTE_KEYS = ("account", "model", "api", "endpoint")
_HEX64 = re.compile(r"[0-9a-f]{64}")



def identity(
    route: Mapping[str, str | None],
    mode: str,
    declarations: Sequence[JSON],
    deferred: Sequence[JSON],
) -> str:
    """SHA-256 hex of the canonical ``{"v", "route", "mode", "declarations", "deferred"}``.

    ``deferred`` holds the full declarations of the deferred tools (sorted here by name),
    so a deferred tool's schema change invalidates activation even when the published
    list (which may not carry it) is unchanged. Missing route keys count as ``None``.
    """
    return identity_encoded(
        route, mode, [encode(d) for d in declarations], [(str(d.get("name", "")), encode(d)) for d in deferred]
    )


def identity_encoded(
    route: Mapping[str, str | None],
    mode: str,
    declarations: Sequence[bytes],
    deferred: Sequence[tuple[str, bytes]],
) -> str:
    """:func:`identity` from the declarations' canonical JSON (``deferred``: name and bytes),
    so a decision over thousands of tools encodes none of them again."""
    ordered = sorted(deferred, key=lambda d: code_unit_key(d[0]))
    doc = {
        "declarations": join_array(declarations),
        "deferred": join_array(b for _, b in ordered),
        "mode": encode(mode),
        "route": encode({k: route.get(k) for k in ROUTE_KEYS}),
        "v": encode(IDENTITY_VERSION),
    }
    return hashlib.sha256(join_values(doc)).hexdigest()


class RecordError(ValueError):
    """An activation record that is not exactly the documented shape; grants nothing."""


@dataclass(frozen=True)
class Record:
    """``{"version":1,"snapshot":"<identity>","active":[sorted unique names]}``."""

    version: int
    snapshot: str
    active: tuple[str, ...]


def _check_snapshot(snapshot: object) -> str:
    if not isinstance(snapshot, str):
        raise RecordError(f"snapshot is {type(snapshot).__name__}, not a string")
    if not _HEX64.fullmatch(snapshot):
        raise RecordError("snapshot is not 64 lowercase hex digits")
    return snapshot


def _check_names(active: object) -> tuple[str, ...]:
    if not isinstance(active, list):
        raise RecordError(f"active is {type(active).__name__}, not a list")
    for n in active:
        if not isinstance(n, str):
            raise RecordError(f"active holds a {type(n).__name__}, not a name")
        if not n:
            raise RecordError("active holds an empty name")
    keys = [code_unit_key(n) for n in active]
    for a, b in itertools.pairwise(keys):
        if a == b:
            raise RecordError("active holds a duplicate name")
        if a > b:
            raise RecordError("active is not sorted in code-unit order")
    return tuple(active)


def encode_record(snapshot: str, active: Iterable[str]) -> bytes:
    """The canonical record line, newline included; ``active`` is sorted and de-duplicated."""
    names = sorted(set(active), key=code_unit_key)
    _check_snapshot(snapshot)
    _check_names(names)
    doc = {"version": RECORD_VERSION, "snapshot": snapshot, "active": names}
    return canonicaljson.encode_canonical_json(doc) + b"\n"


def _no_duplicate_keys(pairs: list[tuple[str, JSON]]) -> dict[str, JSON]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise RecordError("duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> JSON:
    raise RecordError(f"non-JSON constant {name}")


def parse_record(line: bytes) -> Record:
    """Parse one journal line (one trailing ``\\n`` allowed), or raise ``RecordError``.

    Strict beyond the shape: the bytes must be the canonical encoding, so duplicate keys,
    extra whitespace or escapes that a lenient parser would accept are refused.
    """
    body = line[:-1] if line.endswith(b"\n") else line
    if b"\n" in body:
        raise RecordError("more than one line")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError("not UTF-8") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise RecordError(f"not JSON ({e.msg} at {e.pos})") from None
    except RecursionError:  # (a shared store's line may be anyone's bytes: nested past the parser)
        raise RecordError("not JSON (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise RecordError(f"record is {type(doc).__name__}, not an object")
    fields = set(doc)
    if fields != {"version", "snapshot", "active"}:
        unknown = sorted(fields - {"version", "snapshot", "active"})
        missing = sorted({"version", "snapshot", "active"} - fields)
        raise RecordError(f"fields: unknown {unknown}, missing {missing}")
    version = doc["version"]
    if type(version) is not int:
        raise RecordError(f"version is {type(version).__name__}, not an integer")
    if version != RECORD_VERSION:
        raise RecordError(f"unknown version {version}")
    record = Record(version, _check_snapshot(doc["snapshot"]), _check_names(doc["active"]))
    if body != canonicaljson.encode_canonical_json(doc):
        raise RecordError("not in canonical form")
    return record


def restore(journal: bytes, snapshot: str) -> tuple[frozenset[str], str | None]:
    """Active names granted by the journal's LAST line for identity ``snapshot``.

    Returns ``(names, None)`` on success (an empty journal grants nothing, with no
    reason), or ``(frozenset(), reason)`` when the last line is torn, invalid, of an
    unknown version or for another identity; the caller then appends a record saying so
    (e.g. ``encode_record(snapshot, ())``) so the journal ends on a valid state again.
    """
    if not journal:
        return frozenset(), None
    if not journal.endswith(b"\n"):
        return frozenset(), "last record is torn (no trailing newline)"
    last = journal[:-1].rsplit(b"\n", 1)[-1]
    try:
        record = parse_record(last)
    except RecordError as e:
        return frozenset(), f"last record is invalid: {e}"
    if record.snapshot != snapshot:
        return frozenset(), (
            f"last record is for identity {record.snapshot[:12]}, not the current {snapshot[:12]}"
        )
    return frozenset(record.active), None


class ActivationState:
    """The current epoch's identity and the deferred tools activated in it.

    ``activate`` only computes the new set and its record: the caller persists the
    record (fsync) and then ``commit``s, so a failed write grants nothing. Hold one lock
    across activate -> write -> commit so the journal's last line matches memory.
    """

    def __init__(self, snapshot: str, active: Iterable[str] = ()) -> None:
        self._snapshot = _check_snapshot(snapshot)
        self._active = frozenset(_check_names(sorted(set(active), key=code_unit_key)))

    @property
    def snapshot(self) -> str:
        return self._snapshot

    @property
    def active(self) -> frozenset[str]:
        return self._active

    def allows(self, name: str) -> bool:
        """Whether a deferred tool ``name`` was activated in this epoch."""
        return name in self._active

    def activate(self, names: Iterable[str]) -> tuple[frozenset[str], bytes]:
        """The active set with ``names`` added and its record; nothing is changed yet."""
        new = self._active | frozenset(names)
        return new, encode_record(self._snapshot, new)

    def commit(self, new_active: Iterable[str], snapshot: str | None = None) -> bool:
        """Grant ``new_active`` (added to, never replacing, the active set).

        With ``snapshot`` (the identity ``activate`` ran under), a commit that arrives
        after an identity change is refused and returns ``False``: an old epoch's
        search must not grant anything in the new one.
        """
        if snapshot is not None and snapshot != self._snapshot:
            return False
        names = frozenset(new_active)
        _check_names(sorted(names, key=code_unit_key))
        self._active = self._active | names
        return True

    def reset(self, snapshot: str) -> bool:
        """Enter epoch ``snapshot``; a different identity clears the active set.

        Returns whether it cleared. The same identity keeps the grants: re-deciding an
        unchanged catalog is not a new epoch.
        """
        _check_snapshot(snapshot)
        if snapshot == self._snapshot:
            return False
        self._snapshot = snapshot
        self._active = frozenset()
        return True
