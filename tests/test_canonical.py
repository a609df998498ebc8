"""Canonical JSON assembled from parts (catalog/canonical.py) is byte-identical to one encode."""

from __future__ import annotations

import hashlib
from typing import Any

import canonicaljson
import pytest

from catalog.activation import identity, identity_encoded
from catalog.build import fingerprint, fingerprint_encoded
from catalog.canonical import join_array, join_object, join_values, member, members
from catalog.model import Entry
from tests.varied_catalog import servers

VALUES: list[Any] = [
    {},
    {"b": 1, "a": [1, 2.5, None, True], "é": {"z": "日本", "y": "\u2028\t\"\\"}, "🚀": {"x": -0.0}},
    {"name": "x", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"Z": 1, "a": 2, "_": 3, "$schema": 4, "": 5},
]


@pytest.mark.parametrize("value", VALUES)
def test_members_join_to_the_encoding(value: dict[str, Any]) -> None:
    parts = members(value)
    assert parts is not None
    assert join_object(parts) == canonicaljson.encode_canonical_json(value)
    assert join_values({k: canonicaljson.encode_canonical_json(v) for k, v in value.items()}) == join_object(parts)
    assert all(parts[k] == member(k, v) for k, v in value.items())


def test_non_string_keys_and_bad_values_are_left_to_the_encoder() -> None:
    assert members({1: "a"}) is None
    with pytest.raises(ValueError):
        members({"a": float("nan")})
    with pytest.raises(ValueError):
        members({"a": "\ud800"})


def test_arrays_fingerprints_and_identities_from_parts() -> None:
    tools = [t for s in servers(3) for t in s.tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
    tools = [t for t in tools if t["name"] != "surrogate"]
    decls = [{"name": t["name"], "description": str(t.get("description", ""))} for t in tools]
    encoded = [canonicaljson.encode_canonical_json(d) for d in decls]
    assert join_array(encoded) == canonicaljson.encode_canonical_json(decls)
    assert join_array([]) == b"[]"
    assert fingerprint_encoded(encoded) == fingerprint(decls) == hashlib.sha256(join_array(encoded)).hexdigest()
    route = {"account": "a", "model": None, "api": "é", "endpoint": None}
    deferred = list(reversed(decls[:40]))
    assert identity_encoded(
        route, "on-demand", encoded[40:], [(d["name"], canonicaljson.encode_canonical_json(d)) for d in deferred]
    ) == identity(route, "on-demand", decls[40:], deferred)


def test_an_entry_encodes_its_declaration_once_and_replace_forgets_it() -> None:
    import dataclasses

    entry = Entry("s__a", "s", "a", {"name": "s__a", "inputSchema": {"type": "object"}})
    assert entry.encoded == canonicaljson.encode_canonical_json(entry.declaration)
    assert entry.members == members(entry.declaration)
    other = dataclasses.replace(entry, declaration={"name": "s__a", "inputSchema": {"type": "string"}})
    assert other.encoded == canonicaljson.encode_canonical_json(other.declaration) != entry.encoded
    assert other == dataclasses.replace(other)  # the cached bytes take no part in equality
