"""The metaschema verdict table (issue 16, item 2): ``catalog.schema.check`` gives exactly the
verdicts and reasons python-jsonschema's ``check_schema`` gives, its ``regex`` format read as JSON
Schema means it (ECMA-262, by jsonschema-rs's engine: ``catalog.metaschema.format_checker``). The
fast path only *certifies* valid schemas (``catalog.metaschema.certified``: jsonschema-rs against
the same metaschema documents, every pattern checked the same way) and leaves every rejection, and
everything it cannot certify, to python-jsonschema.

The table's expected reasons were recorded from the implementation before the fast path (it
passes there too); the other tests fail there (no fast path to certify anything).
"""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from catalog.metaschema import MAX_DEPTH, certified, format_checker
from catalog.schema import canonicalize, check

D4 = "http://json-schema.org/draft-04/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D19 = "https://json-schema.org/draft/2019-09/schema"
D20 = "https://json-schema.org/draft/2020-12/schema"


def p(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def nest(levels: int) -> dict[str, Any]:
    """An object schema with ``levels`` nested properties (two containers a level)."""
    schema: dict[str, Any] = {"type": "object"}
    cur = schema
    for _ in range(levels):
        cur["properties"] = {"a": {"type": "object"}}
        cur = cur["properties"]["a"]
    return schema


CASES: dict[str, Any] = {
    # valid
    "plain": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    "empty object": {"type": "object"},
    "python regex ok": p(a={"type": "string", "pattern": "^[a-z]+(?:-[a-z]+)*$"}),
    "inline flag": p(a={"pattern": "(?i)x"}),
    "patternProperties ok": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
    "a property named pattern": p(pattern={"type": "string"}),
    "pattern in a literal": {"type": "object", "default": {"pattern": "("}},
    "pattern in an unknown keyword": {"type": "object", "x-vendor": {"pattern": "("}},
    "integral float": {"type": "object", "minProperties": 1.0},
    "huge integer": p(a={"type": "string", "maxLength": 10**30}),
    "draft-07": {"$schema": D7, "type": "object", "definitions": {"x": {"type": "string"}}},
    "draft-07 enum []": {"$schema": D7, "type": "object", "enum": []},
    "2020-12 enum []": {"type": "object", "enum": []},
    "draft-04 exclusiveMinimum bool": {"$schema": D4, "type": "object", "minimum": 1, "exclusiveMinimum": True},
    "draft-04 enum [1, true]": {"$schema": D4, "type": "object", "enum": [1, True]},
    "2019-09": {"$schema": D19, "type": "object", "$defs": {"x": {"type": "string"}}},
    "unknown $schema is 2020-12": {"$schema": "https://example.invalid/schema", "type": "object"},
    "draft-03": {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"},
    "local $ref": {"type": "object", "$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s"}}},
    "32 containers": nest(15),
    "2020-12 keywords": {
        "type": "object",
        "$schema": D20,
        "$defs": {"s": {"$anchor": "s", "type": "string"}},
        "allOf": [{"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {}}],
        "properties": {"a": {"$ref": "#s"}, "b": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "additionalProperties": False,
        "dependentRequired": {"a": ["b"]},
    },
    # invalid
    "bad type": p(x={"type": "strin"}),
    "type list with a number": p(x={"type": ["string", 1]}),
    "duplicate type": p(x={"type": ["string", "string"]}),
    "required not a list": {"type": "object", "required": "a"},
    "required with a number": {"type": "object", "required": ["a", 1]},
    "duplicate required": {"type": "object", "required": ["a", "a"]},
    "minLength -1": p(x={"type": "string", "minLength": -1}),
    "minLength 1.5": p(x={"type": "string", "minLength": 1.5}),
    "minLength true": p(x={"type": "string", "minLength": True}),
    "draft-04 minLength 1.0": {"$schema": D4, "type": "object", "minProperties": 1.0},
    "multipleOf 0": p(x={"type": "number", "multipleOf": 0}),
    "bad pattern": p(x={"type": "string", "pattern": "("}),
    "bad pattern, odd path": {"type": "object", "properties": {"a b": {"pattern": "["}}},
    "pattern ECMA only: \\p{L}": p(x={"pattern": "\\p{L}"}),
    "pattern ECMA only: named group": p(x={"pattern": "(?<name>x)"}),
    "pattern ECMA only: \\cA": p(x={"pattern": "\\cA"}),
    "pattern ECMA only: \\p{Extended_Pictographic}": p(
        x={"pattern": "^(\\p{Extended_Pictographic}|\\p{Emoji_Component})+$"}
    ),
    "pattern Python only: \\Z": p(x={"pattern": "a\\Z"}),
    "pattern Python only: (?P<n>x)": p(x={"pattern": "(?P<n>x)"}),
    "pattern inverted range": p(x={"pattern": "a{2,1}"}),
    "pattern not a string": p(x={"pattern": 5}),
    "bad patternProperties key": {"type": "object", "patternProperties": {"(": {}}},
    "bad pattern in $defs": {"type": "object", "$defs": {"x": {"pattern": "("}}},
    "bad pattern deep in items": p(x={"type": "array", "items": {"anyOf": [{"pattern": "+"}]}}),
    "draft-04 enum []": {"$schema": D4, "type": "object", "enum": []},
    "draft-04 enum [1, 1.0]": {"$schema": D4, "type": "object", "enum": [1, 1.0]},
    "draft-04 exclusiveMinimum without minimum": {"$schema": D4, "type": "object", "exclusiveMinimum": True},
    "draft-06 exclusiveMinimum bool": {"$schema": D6, "type": "object", "exclusiveMinimum": True},
    "draft-07 pattern in definitions": {"$schema": D7, "type": "object", "definitions": {"x": {"pattern": "("}}},
    "2019-09 $recursiveAnchor": {"$schema": D19, "type": "object", "$recursiveAnchor": 1},
    "$anchor syntax": {"type": "object", "$anchor": "1bad"},
    "dependentRequired item": {"type": "object", "dependentRequired": {"a": [1]}},
    "format not a string": {"type": "object", "format": 5},
    "$ref to nowhere": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    "remote $ref": {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/s.json"}}},
    "bad $id": {"type": "object", "$id": "not a uri ::"},
    "$schema not a string": {"type": "object", "$schema": 7},
    "root not an object": {"type": "string"},
    "root without type": {"properties": {}},
    "deep": nest(130),
}

# What check() answered for each case before the fast path (None: valid).
VERDICTS: dict[str, str | None] = {
    "plain": None,
    "empty object": None,
    "python regex ok": None,
    "inline flag": None,
    "patternProperties ok": None,
    "a property named pattern": None,
    "pattern in a literal": None,
    "pattern in an unknown keyword": None,
    "integral float": None,
    "huge integer": None,
    "draft-07": None,
    "draft-07 enum []": None,
    "2020-12 enum []": None,
    "draft-04 exclusiveMinimum bool": None,
    "draft-04 enum [1, true]": None,
    "2019-09": None,
    "unknown $schema is 2020-12": None,
    "draft-03": None,
    "local $ref": None,
    "32 containers": None,
    "2020-12 keywords": None,
    "bad type": "inputSchema.properties.x.type: 'strin' is not valid under any of the given schemas",
    "type list with a number": (
        "inputSchema.properties.x.type: ['string', 1] is not valid under any of the given schemas"
    ),
    "duplicate type": "inputSchema.properties.x.type: ['string', 'string'] is not valid under any of the given schemas",
    "required not a list": "inputSchema.required: 'a' is not of type 'array'",
    "required with a number": "inputSchema.required[1]: 1 is not of type 'string'",
    "duplicate required": "inputSchema.required: ['a', 'a'] has non-unique elements",
    "minLength -1": "inputSchema.properties.x.minLength: -1 is less than the minimum of 0",
    "minLength 1.5": "inputSchema.properties.x.minLength: 1.5 is not of type 'integer'",
    "minLength true": "inputSchema.properties.x.minLength: True is not of type 'integer'",
    "draft-04 minLength 1.0": "inputSchema.minProperties: 1.0 is not of type 'integer'",
    "multipleOf 0": "inputSchema.properties.x.multipleOf: 0 is less than or equal to the minimum of 0",
    "bad pattern": "inputSchema.properties.x.pattern: '(' is not a 'regex'",
    "bad pattern, odd path": "inputSchema.properties['a b'].pattern: '[' is not a 'regex'",
    # ECMA-262 (zod's .emoji() is the last): Python's re refused these, and so quarantined tools
    # a direct client lists and their servers validate.
    "pattern ECMA only: \\p{L}": None,
    "pattern ECMA only: named group": None,
    "pattern ECMA only: \\cA": None,
    "pattern ECMA only: \\p{Extended_Pictographic}": None,
    "pattern Python only: \\Z": "inputSchema.properties.x.pattern: 'a\\\\Z' is not a 'regex'",
    "pattern Python only: (?P<n>x)": None,
    "pattern inverted range": "inputSchema.properties.x.pattern: 'a{2,1}' is not a 'regex'",
    "pattern not a string": "inputSchema.properties.x.pattern: 5 is not of type 'string'",
    "bad patternProperties key": "inputSchema.patternProperties: '(' is not a 'regex'",
    "bad pattern in $defs": "inputSchema.$defs.x.pattern: '(' is not a 'regex'",
    "bad pattern deep in items": "inputSchema.properties.x.items.anyOf[0].pattern: '+' is not a 'regex'",
    "draft-04 enum []": "inputSchema.enum: [] should be non-empty",
    "draft-04 enum [1, 1.0]": "inputSchema.enum: [1, 1.0] has non-unique elements",
    "draft-04 exclusiveMinimum without minimum": "inputSchema: 'minimum' is a dependency of 'exclusiveMinimum'",
    "draft-06 exclusiveMinimum bool": "inputSchema.exclusiveMinimum: True is not of type 'number'",
    "draft-07 pattern in definitions": "inputSchema.definitions.x.pattern: '(' is not a 'regex'",
    "2019-09 $recursiveAnchor": "inputSchema.$recursiveAnchor: 1 is not of type 'boolean'",
    "$anchor syntax": "inputSchema.$anchor: '1bad' does not match '^[A-Za-z_][-A-Za-z0-9._]*$'",
    "dependentRequired item": "inputSchema.dependentRequired.a[0]: 1 is not of type 'string'",
    "format not a string": "inputSchema.format: 5 is not of type 'string'",
    "$ref to nowhere": (
        "inputSchema.properties.a: $ref '#/$defs/missing' cannot be resolved: no such location in the schema"
    ),
    "remote $ref": (
        "inputSchema.properties.a: $ref 'https://example.invalid/s.json' cannot be resolved: "
        "remote references are never fetched"
    ),
    "bad $id": "inputSchema: Invalid URI reference 'not a uri ::': unexpected character at index 3",
    "$schema not a string": "inputSchema.$schema: must be a string, got int",
    "root not an object": "inputSchema.type: root must have type 'object', got 'string'",
    "root without type": "inputSchema.type: root must have type 'object', got no type",
    "deep": "inputSchema: nested too deeply",
}


def dialect(schema: dict[str, Any]) -> Any:
    return validator_for(schema, default=Draft202012Validator)


def test_table_is_complete() -> None:
    assert list(CASES) == list(VERDICTS)


@pytest.mark.parametrize("name", list(CASES))
def test_verdict_and_reason_unchanged(name: str) -> None:
    assert check(CASES[name]) == VERDICTS[name]


@pytest.mark.parametrize("name", [n for n, s in CASES.items() if isinstance(s.get("$schema", ""), str)])
def test_certified_only_what_check_schema_accepts(name: str) -> None:
    """The fast path's one promise: a certified schema passes python-jsonschema's check."""
    schema = CASES[name]
    if certified(schema, dialect(schema)):
        dialect(schema).check_schema(schema, format_checker=format_checker(dialect(schema)))


VALID_CERTIFIED = [
    "plain",
    "empty object",
    "python regex ok",
    "inline flag",
    "patternProperties ok",
    "a property named pattern",
    "integral float",
    "huge integer",
    "draft-07",
    "draft-07 enum []",
    "2020-12 enum []",
    "draft-04 exclusiveMinimum bool",
    "draft-04 enum [1, true]",
    "2019-09",
    "unknown $schema is 2020-12",
    "local $ref",
    "32 containers",
    "2020-12 keywords",
]


@pytest.mark.parametrize("name", VALID_CERTIFIED)
def test_valid_schemas_take_the_fast_path(name: str) -> None:
    """Valid schemas of every dialect jsonschema-rs implements are certified without
    python-jsonschema (its check costs milliseconds a schema: 14 s for 5,000 tools)."""
    assert certified(CASES[name], dialect(CASES[name]))


@pytest.mark.parametrize(
    "name",
    ["draft-03", "pattern in a literal", "pattern in an unknown keyword", "bad pattern", "bad patternProperties key"],
)
def test_what_the_fast_path_cannot_vouch_for_goes_to_python_jsonschema(name: str) -> None:
    """Draft 3 (not in jsonschema-rs), and any pattern string that is not a regex, wherever it is."""
    assert not certified(CASES[name], dialect(CASES[name]))


def test_depth_bound() -> None:
    """python-jsonschema reports a deep schema as nested too deeply (it recurses ~8 frames a
    level); jsonschema-rs would accept it, so depth beyond MAX_DEPTH is never certified."""
    assert certified(nest((MAX_DEPTH - 2) // 2), Draft202012Validator)
    assert not certified(nest(MAX_DEPTH // 2 + 1), Draft202012Validator)


def test_an_unknown_dialect_url_is_never_resolved() -> None:
    """jsonschema-rs's own ``meta`` API would fetch an unknown ``$schema`` URL; the fast path
    validates against the dialect python-jsonschema picked (2020-12), offline."""
    schema = {"$schema": "http://127.0.0.1:9/never", "type": "object"}
    assert certified(schema, dialect(schema))


def test_generated_tools_agree_with_python_jsonschema() -> None:
    """The demo server's generated tools (the bench's 5,000-tool catalog is made of them):
    every one certified, and python-jsonschema agrees."""
    import random

    from gateway.commands.demo import generated_tool

    rng = random.Random(7)
    schemas = [canonicalize(generated_tool(i, rng, "s")["inputSchema"]) for i in range(150)]
    for schema in schemas:
        assert certified(schema, Draft202012Validator), schema
        Draft202012Validator.check_schema(schema)
