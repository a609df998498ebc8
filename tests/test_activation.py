"""Activation identity, the strict record, restore, and the in-memory state."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.activation import (
    ActivationState,
    Record,
    RecordError,
    encode_record,
    identity,
    parse_record,
    restore,
)

ROUTE = {"account": "acct", "model": "deepseek-flash", "api": "openai-completions", "endpoint": "https://api.example"}
DECL = [{"description": "a", "inputSchema": {"type": "object"}, "name": "a"}]
DEFERRED: list[dict[str, Any]] = [
    {"description": "z", "inputSchema": {"type": "object"}, "name": "z"},
    {"description": "m", "inputSchema": {"properties": {"q": {"type": "string"}}, "type": "object"}, "name": "m"},
]
SNAP = identity(ROUTE, "fixed", DECL, DEFERRED)
OTHER = "0" * 64


# -- identity -------------------------------------------------------------------------


def test_identity_is_stable_hex_and_ignores_deferred_order() -> None:
    assert len(SNAP) == 64 and int(SNAP, 16) >= 0
    assert identity(dict(ROUTE), "fixed", DECL, list(reversed(DEFERRED))) == SNAP


@pytest.mark.parametrize("key", ["account", "model", "api", "endpoint"])
def test_identity_changes_with_each_route_field(key: str) -> None:
    assert identity(dict(ROUTE, **{key: "other"}), "fixed", DECL, DEFERRED) != SNAP
    assert identity({k: v for k, v in ROUTE.items() if k != key}, "fixed", DECL, DEFERRED) != SNAP


def test_identity_changes_with_mode_declarations_and_deferred_schema() -> None:
    assert identity(ROUTE, "on-demand", DECL, DEFERRED) != SNAP
    assert identity(ROUTE, "fixed", [dict(DECL[0], description="b")], DEFERRED) != SNAP
    changed = copy.deepcopy(DEFERRED)
    changed[1]["inputSchema"]["properties"]["q"]["type"] = "integer"
    assert identity(ROUTE, "fixed", DECL, changed) != SNAP
    assert identity(ROUTE, "fixed", DECL, DEFERRED[:1]) != SNAP


def test_identity_does_not_mutate_inputs() -> None:
    deferred = copy.deepcopy(DEFERRED)
    identity(ROUTE, "fixed", DECL, deferred)
    assert deferred == DEFERRED


# -- record ---------------------------------------------------------------------------


def test_encode_record_is_canonical_sorted_unique() -> None:
    line = encode_record(SNAP, ["b", "a", "b", "\U0001f600", "\uff5a"])
    assert line == (
        b'{"active":["a","b","\xf0\x9f\x98\x80","\xef\xbd\x9a"],"snapshot":"' + SNAP.encode() + b'","version":1}\n'
    )
    assert parse_record(line) == Record(1, SNAP, ("a", "b", "\U0001f600", "\uff5a"))


@settings(max_examples=100, deadline=None)
@given(st.sets(st.text(st.characters(codec="utf-8"), min_size=1, max_size=20), max_size=10))
def test_record_round_trip(names: set[str]) -> None:
    record = parse_record(encode_record(SNAP, names))
    assert set(record.active) == names and record.snapshot == SNAP
    assert encode_record(record.snapshot, record.active) == encode_record(SNAP, names)


GOOD = b'{"active":["a","b"],"snapshot":"' + SNAP.encode() + b'","version":1}'
S = SNAP.encode()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"[]", "not an object"),
        (b'{"active":[],"snapshot":"' + S + b'","version":1,"x":1}', "unknown ['x']"),
        (b'{"active":[],"snapshot":"' + S + b'"}', "missing ['version']"),
        (b'{"active":[],"snapshot":"' + S + b'","version":2}', "unknown version 2"),
        (b'{"active":[],"snapshot":"' + S + b'","version":"1"}', "version is str"),
        (b'{"active":[],"snapshot":"' + S + b'","version":true}', "version is bool"),
        (b'{"active":[],"snapshot":"' + S + b'","version":1.0}', "version is float"),
        (b'{"active":[],"snapshot":"' + S.upper() + b'","version":1}', "64 lowercase hex"),
        (b'{"active":[],"snapshot":"' + S[:-1] + b'","version":1}', "64 lowercase hex"),
        (b'{"active":[],"snapshot":"' + S[:-1] + b'g","version":1}', "64 lowercase hex"),
        (b'{"active":[],"snapshot":1,"version":1}', "snapshot is int"),
        (b'{"active":["b","a"],"snapshot":"' + S + b'","version":1}', "not sorted"),
        (b'{"active":["a","a"],"snapshot":"' + S + b'","version":1}', "duplicate name"),
        (b'{"active":["a",1],"snapshot":"' + S + b'","version":1}', "holds a int"),
        (b'{"active":[""],"snapshot":"' + S + b'","version":1}', "empty name"),
        (b'{"active":"a","snapshot":"' + S + b'","version":1}', "active is str"),
        (b'{"active":null,"snapshot":"' + S + b'","version":1}', "active is NoneType"),
        (b'{"active":[],"active":[],"snapshot":"' + S + b'","version":1}', "duplicate key"),
        (b'{"active":[NaN],"snapshot":"' + S + b'","version":1}', "non-JSON constant"),
        (b'{"version":1,"snapshot":"' + S + b'","active":[]}', "canonical"),
        (b'{"active": [],"snapshot":"' + S + b'","version":1}', "canonical"),
        (b'{"active":["\\u00e9"],"snapshot":"' + S + b'","version":1}', "canonical"),
        (b'{"active":[],"snapshot":"' + S + b'","version":1}\n\n', "more than one line"),
        (b'{"active":["\xff"],"snapshot":"' + S + b'","version":1}', "not UTF-8"),
    ],
)
def test_parse_record_rejects_each_malformation(line: bytes, reason: str) -> None:
    assert parse_record(GOOD).active == ("a", "b")
    with pytest.raises(RecordError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        parse_record(line)


def test_encode_record_rejects_bad_input() -> None:
    with pytest.raises(RecordError):
        encode_record("nothex", ["a"])
    with pytest.raises(RecordError):
        encode_record(SNAP, [""])


# -- restore --------------------------------------------------------------------------


def test_restore_round_trip_takes_last_line() -> None:
    journal = encode_record(SNAP, ["a"]) + encode_record(SNAP, ["a", "b"])
    assert restore(journal, SNAP) == (frozenset({"a", "b"}), None)
    assert restore(b"", SNAP) == (frozenset(), None)


@pytest.mark.parametrize(
    ("journal", "reason"),
    [
        (encode_record(SNAP, ["a"]) + encode_record(SNAP, ["a", "b"])[:-1], "torn"),
        (encode_record(SNAP, ["a"]) + encode_record(SNAP, ["a", "b"])[:20], "torn"),
        (encode_record(SNAP, ["a"]) + b"{not json}\n", "invalid"),
        (encode_record(SNAP, ["a"]) + b'{"active":[],"snapshot":"' + S + b'","version":2}\n', "unknown version 2"),
        (encode_record(SNAP, ["a"]) + encode_record(OTHER, ["a"]), "identity 000000000000"),
        (encode_record(SNAP, ["a"]) + b"\n", "invalid"),
        (encode_record(SNAP, ["a"]) + b"[" * 5000 + b"\n", "nested too deeply"),  # (a shared store's bytes)
    ],
)
def test_restore_grants_nothing_on_torn_bad_or_mismatched(journal: bytes, reason: str) -> None:
    granted, why = restore(journal, SNAP)
    assert granted == frozenset()
    assert why is not None and reason in why and "\n" not in why


def test_restore_after_a_reset_record_grants_nothing() -> None:
    journal = encode_record(OTHER, ["a"]) + encode_record(SNAP, [])
    assert restore(journal, SNAP) == (frozenset(), None)


# -- state ----------------------------------------------------------------------------


def test_state_activate_does_not_grant_until_commit() -> None:
    state = ActivationState(SNAP)
    new, record = state.activate(["b", "a"])
    assert new == {"a", "b"} and not state.allows("a")
    assert parse_record(record) == Record(1, SNAP, ("a", "b"))
    assert state.commit(new, SNAP)
    assert state.allows("a") and state.allows("b") and not state.allows("c")
    assert restore(record, SNAP) == (state.active, None)


def test_state_commit_adds_and_refuses_stale_epoch() -> None:
    state = ActivationState(SNAP, ["a"])
    new_b, _ = state.activate(["b"])
    new_c, _ = state.activate(["c"])
    state.commit(new_b)
    state.commit(new_c)
    assert state.active == {"a", "b", "c"}  # interleaved commits lose nothing
    stale, _ = state.activate(["d"])
    assert state.reset(OTHER) is True and state.active == frozenset()
    assert state.commit(stale, SNAP) is False
    assert not state.allows("d") and not state.allows("a")


def test_state_reset_same_identity_keeps_grants() -> None:
    state = ActivationState(SNAP, ["a"])
    assert state.reset(SNAP) is False and state.allows("a")
    with pytest.raises(RecordError):
        state.reset("bad")
