"""canonicalize() and check(): the canonical form may only remove differences that
cannot change what a schema accepts, and check() must explain what it rejects."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from catalog.schema import canonicalize, check
from tests.helpers import keys_sorted_everywhere, shuffled

SETTINGS = settings(max_examples=100, deadline=None)

# ---------------------------------------------------------------- strategies

PROP_NAMES = ["a", "b", "required", "default", "enum", "const", "type", "items", "x-v"]
TYPES = ["string", "integer", "number", "boolean", "null", "array", "object"]
PATTERNS = ["^a", "b$", "^[a-c]*$", "\\d"]

scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "a", "b", "é", "\U0001F600"])
json_values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=3)
    | st.dictionaries(st.sampled_from(PROP_NAMES + ["z", "A"]), c, max_size=4),
    max_leaves=8,
)
# Literals that look like schemas: a canonicaliser that walks into them would change them.
schema_like_literals = st.fixed_dictionaries(
    {},
    optional={
        "required": st.lists(st.sampled_from(["b", "a", "a"]), min_size=2, max_size=4),
        "type": st.lists(st.sampled_from(["string", "null"]), min_size=2, max_size=3),
        "properties": st.dictionaries(st.sampled_from(["q", "p"]), json_values, max_size=2),
    },
)
literals = json_values | schema_like_literals

type_value = st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=4)
required_value = st.lists(st.sampled_from(PROP_NAMES), max_size=5)  # duplicates on purpose

_LEAF_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "type": type_value,
    "required": required_value,
    "dependentRequired": st.dictionaries(st.sampled_from(PROP_NAMES), required_value, max_size=2),
    "enum": st.lists(json_values, min_size=1, max_size=4),
    "const": literals,
    "default": literals,
    "examples": st.lists(literals, max_size=3),
    "x-vendor": literals,
    "minimum": st.integers(-2, 2),
    "maxLength": st.integers(0, 3),
    "minItems": st.integers(0, 2),
    "pattern": st.sampled_from(PATTERNS),
}
_ONE = ["additionalProperties", "items", "not", "if", "then", "else"]
_MANY = ["prefixItems", "anyOf", "allOf", "oneOf"]
_NAMED = {"properties": PROP_NAMES, "patternProperties": PATTERNS, "dependentSchemas": PROP_NAMES}
KEYWORDS = sorted(_LEAF_VALUES) + _ONE + _MANY + sorted(_NAMED)


@st.composite
def schemas(draw: st.DrawFn, depth: int = 0, with_ref: bool = True) -> Any:
    """A random schema; a composite keeps generation cheap (st.recursive was slow here)."""
    if depth >= 3 or draw(st.integers(0, 5)) == 0:
        return draw(st.booleans())
    keywords = KEYWORDS + (["$ref"] if with_ref else [])
    out: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(keywords), max_size=5 - depth, unique=True)):
        sub = schemas(depth + 1, with_ref)
        if key in _LEAF_VALUES:
            out[key] = draw(_LEAF_VALUES[key])
        elif key == "$ref":
            out[key] = "#/$defs/d"
        elif key in _ONE:
            out[key] = draw(sub)
        elif key in _MANY:
            out[key] = draw(st.lists(sub, min_size=1, max_size=3))
        else:
            out[key] = draw(st.dictionaries(st.sampled_from(_NAMED[key]), sub, max_size=3))
    return out


# A root with $defs that subschemas may $ref; the definitions themselves have no refs.
root_schemas = st.builds(
    lambda body, d: {**body, "$defs": {"d": d}} if isinstance(body, dict) else body,
    schemas(),
    schemas(with_ref=False),
)

instances = st.recursive(
    scalars | st.integers(-100, 100),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(PROP_NAMES), c, max_size=4),
    max_leaves=12,
)

# ---------------------------------------------------------------- helpers

_SINGLE = {"additionalProperties", "items", "not", "if", "then", "else"}
_LISTS = {"prefixItems", "anyOf", "allOf", "oneOf"}
_MAPS = {"properties", "patternProperties", "dependentSchemas", "$defs"}
_LITERAL = {"enum", "const", "default", "examples", "x-vendor"}


def perturb(schema: Any, rnd: random.Random) -> Any:
    """An equivalent schema: `required`/`type` sets shuffled and duplicated, keys shuffled.

    Independent oracle of where sets live in the generated schemas (literals untouched).
    """
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("required", "type") and isinstance(value, list) and value:
            value = value + [rnd.choice(value)]
            rnd.shuffle(value)
        elif key == "dependentRequired":
            value = {k: perturb({"required": v}, rnd)["required"] for k, v in value.items()}
        elif key in _SINGLE:
            value = perturb(value, rnd)
        elif key in _LISTS:
            value = [perturb(v, rnd) for v in value]
        elif key in _MAPS:
            value = {k: perturb(v, rnd) for k, v in value.items()}
        out[key] = value
    return shuffled(out, rnd)


def dump(value: Any) -> str:
    """Byte-exact rendering that keeps insertion order (so order differences show)."""
    return json.dumps(value, ensure_ascii=False)


def walk_schemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Yield every schema object reachable through the generated applicator keywords."""
    if isinstance(schema, dict):
        yield schema
        for key, value in schema.items():
            if key in _SINGLE:
                yield from walk_schemas(value)
            elif key in _LISTS and isinstance(value, list):
                for v in value:
                    yield from walk_schemas(v)
            elif key in _MAPS and isinstance(value, dict):
                for v in value.values():
                    yield from walk_schemas(v)


# ---------------------------------------------------------------- properties


def containers(value: Any) -> list[int]:
    """ids of every dict/list inside a value: output sharing one with the input aliases it."""
    if isinstance(value, dict):
        return [id(value)] + [i for v in value.values() for i in containers(v)]
    if isinstance(value, list):
        return [id(value)] + [i for v in value for i in containers(v)]
    return []


@SETTINGS
@given(root_schemas)
def test_idempotent_sorted_and_input_untouched(schema: Any) -> None:
    before = copy.deepcopy(schema)
    before_dump = dump(schema)
    once = canonicalize(schema)
    assert schema == before and dump(schema) == before_dump
    assert not set(containers(once)) & set(containers(schema))
    assert dump(canonicalize(once)) == dump(once)
    assert keys_sorted_everywhere(once)


@SETTINGS
@given(root_schemas, st.randoms(use_true_random=False))
def test_invariant_under_key_order_and_required_order(schema: Any, rnd: random.Random) -> None:
    assert dump(canonicalize(perturb(schema, rnd))) == dump(canonicalize(schema))


@SETTINGS
@given(root_schemas)
def test_order_sensitive_and_literal_values_kept(schema: Any) -> None:
    canon = canonicalize(schema)
    originals = list(walk_schemas(schema))
    canonicals = list(walk_schemas(canon))
    # The walk visits keys in a different order; match schema nodes by their canonical form.
    by_canon = {dump(canonicalize(s)): s for s in originals}
    assert len(canonicals) == len(originals)
    for node in canonicals:
        orig = by_canon[dump(node)]
        for key in _LITERAL:
            if key in orig:
                # == on dicts ignores key order only; lists must match element by element.
                assert node[key] == orig[key]
                assert keys_sorted_everywhere(node[key])
        for key in ("prefixItems", "anyOf", "allOf", "oneOf"):
            if key in orig:
                assert [dump(canonicalize(v)) for v in orig[key]] == [dump(v) for v in node[key]]
        for key in ("required", "type"):
            if isinstance(orig.get(key), list):
                assert node[key] == sorted(set(orig[key]))
        for name in orig.get("properties", {}):
            assert dump(node["properties"][name]) == dump(canonicalize(orig["properties"][name]))


@settings(max_examples=120, deadline=None)
@given(root_schemas, st.lists(instances, min_size=1, max_size=8))
def test_accepts_exactly_what_the_original_accepts(schema: Any, samples: list[Any]) -> None:
    original = Draft202012Validator(schema)
    canonical = Draft202012Validator(canonicalize(schema))
    for instance in samples:
        assert canonical.is_valid(instance) == original.is_valid(instance), instance


# ---------------------------------------------------------------- examples


def test_keyword_named_properties_stay_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "required": {"type": "object", "required": ["b", "a", "b"]},
            "default": {"type": ["string", "null", "string"], "default": {"z": 1, "a": [3, 1]}},
            "enum": {"enum": ["z", "a"]},
            "const": {"properties": {"type": {"type": "string"}}},
            "type": True,
        },
        "required": ["type", "enum", "enum"],
    }
    canon = canonicalize(schema)
    props = canon["properties"]
    assert list(props) == ["const", "default", "enum", "required", "type"]
    assert props["required"]["required"] == ["a", "b"]
    assert props["default"]["type"] == ["null", "string"]
    assert props["default"]["default"] == {"a": [3, 1], "z": 1}
    assert props["enum"]["enum"] == ["z", "a"]
    assert props["const"]["properties"]["type"] == {"type": "string"}
    assert props["type"] is True
    assert canon["required"] == ["enum", "type"]
    assert check(canon) is None


def test_literals_are_not_walked() -> None:
    literal = {"required": ["b", "a", "a"], "type": ["z", "a"], "properties": {"p": {"required": ["y", "x"]}}}
    schema = {
        "type": "object",
        "default": literal,
        "const": literal,
        "examples": [literal, 2, 1],
        "enum": [literal, "b", "a"],
        "x-vendor": literal,
        "unknownKeyword": [literal, {"b": 1, "a": 2}],
    }
    canon = canonicalize(schema)
    for key in ("default", "const", "x-vendor"):
        assert canon[key] == literal
        assert canon[key]["required"] == ["b", "a", "a"]
    assert canon["examples"] == [literal, 2, 1]
    assert canon["enum"] == [literal, "b", "a"]
    assert dump(canon["unknownKeyword"]) == dump([
        {"properties": {"p": {"required": ["y", "x"]}}, "required": ["b", "a", "a"], "type": ["z", "a"]},
        {"a": 2, "b": 1},
    ])


def test_every_subschema_keyword_is_walked() -> None:
    s = {"required": ["b", "a", "a"]}
    c = {"required": ["a", "b"]}
    schema = {
        "type": "object",
        **{k: s for k in [
            "items", "additionalItems", "additionalProperties", "unevaluatedItems",
            "unevaluatedProperties", "contains", "propertyNames", "not", "if", "then",
            "else", "contentSchema",
        ]},
        **{k: [s, True] for k in ["allOf", "anyOf", "oneOf", "prefixItems"]},
        **{k: {"n": s, "m": False} for k in [
            "properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
        ]},
        "dependencies": {"n": s, "m": ["y", "x", "y"]},
        "dependentRequired": {"n": ["y", "x", "x"]},
    }
    canon = canonicalize(schema)
    for k in ["items", "additionalItems", "not", "if", "then", "else", "contentSchema", "contains"]:
        assert canon[k] == c
    for k in ["allOf", "anyOf", "oneOf", "prefixItems"]:
        assert canon[k] == [c, True]
    for k in ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"]:
        assert canon[k] == {"m": False, "n": c}
    assert canon["dependencies"] == {"m": ["x", "y"], "n": c}
    assert canon["dependentRequired"] == {"n": ["x", "y"]}
    # Draft-07 array-form items keeps its order.
    tup = canonicalize({"items": [{"type": "string"}, {"required": ["b", "a"]}]})
    assert tup == {"items": [{"type": "string"}, {"required": ["a", "b"]}]}


def test_malformed_values_left_for_check() -> None:
    schema = {"type": "object", "required": ["a", 1, "a"], "properties": [1, 2], "items": 3}
    canon = canonicalize(schema)
    assert canon == schema
    assert check(canon) is not None
    assert canonicalize(True) is True and canonicalize(False) is False


def test_check_accepts_a_plain_object_schema() -> None:
    assert check({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}) is None
    assert check({"type": "object"}) is None


def test_check_rejects_non_object_root() -> None:
    assert check([]) == "inputSchema: root must be an object schema, got list"
    assert check(True) is not None
    assert check({"type": "string"}) == "inputSchema.type: root must have type 'object', got 'string'"
    assert check({"properties": {}}) == "inputSchema.type: root must have type 'object', got no type"
    assert check({"type": ["object", "null"]}) is not None


def test_check_names_the_path_of_a_bad_keyword() -> None:
    reason = check({"type": "object", "properties": {"x": {"type": "strin"}}})
    assert reason is not None
    assert reason.startswith("inputSchema.properties.x.type: ")
    assert "strin" in reason and "\n" not in reason
    reason = check({"type": "object", "properties": {"a b": {"pattern": "["}}}, where="outputSchema")
    assert reason == "outputSchema.properties['a b'].pattern: '[' is not a 'regex'"


def test_check_runs_after_canonicalize_so_duplicates_do_not_cost_the_tool() -> None:
    schema = {"type": "object", "required": ["a", "a"], "properties": {"a": {"type": ["string", "string"]}}}
    assert check(schema) is not None
    assert check(canonicalize(schema)) is None


def test_check_uses_the_declared_dialect() -> None:
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"t": {"type": "array", "items": [{"type": "string"}], "additionalItems": False}},
        "definitions": {"d": {"type": "integer"}},
    }
    assert check(draft7) is None
    assert check(canonicalize(draft7)) is None
    # Under 2020-12 (the default) array-form items is invalid.
    no_dialect = {k: v for k, v in draft7.items() if k != "$schema"}
    assert check(no_dialect) is not None
    # draft-04 has boolean exclusiveMinimum; draft-07 does not.
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"minimum": 0, "exclusiveMinimum": True}},
    }
    assert check(draft4) is None
    reason = check({**draft4, "$schema": draft7["$schema"]})
    assert reason is not None and reason.startswith("inputSchema.properties.n.exclusiveMinimum:")
    assert check({"type": "object", "$schema": 7}) == "inputSchema.$schema: must be a string, got int"
