"""A varied, deterministic set of servers for checking that build + decide outputs never change.

Everything the fast paths of catalog/build.py and catalog/budget.py must keep byte-identical:
shared and distinct schema shapes, quarantined tools of every kind (metaschema, regex, $ref to
nowhere, remote $ref, wire model, x-mcp-header, NaN, lone surrogates, non-string names),
non-ASCII names and descriptions, $refs, a big schema, duplicates, renames, output schemas,
include/exclude and deferred servers.

``python -m tests.varied_catalog`` prints the digests of the current code
(tests/fixtures/build_outputs.json holds the ones recorded before the fast paths).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from typing import Any

from catalog.model import ServerTools

WORDS = ("issue", "pull", "commit", "файл", "задача", "検索", "リポジトリ", "ملف", "día", "naïve", "🚀", "Ω")


def _shape(rng: random.Random, i: int) -> dict[str, Any]:
    """One of ~40 recurring shapes (many tools share them), some with $refs and drafts."""
    kind = i % 40
    props: dict[str, Any] = {
        "q": {"type": "string", "description": f"query {kind}", "minLength": 1},
        "n": {"type": "integer", "minimum": 0, "maximum": 100 + kind, "default": 10},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    }
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": ["q", "n"] if kind % 2 else ["q"]}
    if kind % 5 == 0:
        schema["$defs"] = {"when": {"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-"}}
        props["since"] = {"$ref": "#/$defs/when"}
    if kind % 7 == 0:
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        schema["definitions"] = {"x": {"type": ["string", "null", "string"]}}
        props["x"] = {"$ref": "#/definitions/x"}
    if kind % 11 == 0:
        props["mode"] = {"enum": ["b", "a", 3, 1.5, None, True], "const": {"z": 1, "a": [3, 2]}}
        schema["additionalProperties"] = False
    if kind % 13 == 0:
        props["score"] = {"type": "number", "exclusiveMinimum": 0.5, "multipleOf": 0.25, "examples": [1e300, -0.0]}
    if kind % 17 == 0:
        schema["patternProperties"] = {"^x-[a-z]+$": {"type": "boolean"}}
        schema["oneOf"] = [{"required": ["q"]}, {"required": ["tags"]}]
    order = list(schema["required"])
    rng.shuffle(order)
    schema["required"] = order + order[:1]  # duplicates: canonicalised away
    return schema


def _big_schema(width: int) -> dict[str, Any]:
    props = {
        f"field_{i:03d}": {"type": "object", "properties": {"v": {"type": "string", "maxLength": i + 1}}}
        for i in range(width)
    }
    return {"type": "object", "properties": props, "required": sorted(props)[:5]}


_DEEP: dict[str, Any] = {}
_node = _DEEP
for _ in range(40):  # deeper than the metaschema certificate goes: python-jsonschema decides
    _node["not"] = {}
    _node = _node["not"]

QUARANTINED: tuple[dict[str, Any], ...] = (
    {"name": "no_schema"},
    {"name": "not_object", "inputSchema": {"type": "string"}},
    {"name": "schema_list", "inputSchema": [1, 2]},
    {"name": "bad_type", "inputSchema": {"type": "object", "properties": {"a": {"type": "strin"}}}},
    {"name": "bad_min", "inputSchema": {"type": "object", "properties": {"a": {"minLength": -1}}}},
    {"name": "bad_regex", "inputSchema": {"type": "object", "properties": {"a": {"pattern": "("}}}},
    {"name": "bad_pattern_key", "inputSchema": {"type": "object", "patternProperties": {"[": {}}}},
    {"name": "dangling_ref", "inputSchema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}},
    {"name": "remote_ref", "inputSchema": {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}},
    {"name": "bad_dialect", "inputSchema": {"type": "object", "$schema": 7}},
    {"name": "nan", "inputSchema": {"type": "object", "properties": {"a": {"default": float("nan")}}}},
    {"name": "surrogate", "description": "bad \ud800 text", "inputSchema": {"type": "object"}},
    {"name": "hint", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": "yes"}},
    {"name": "title_num", "title": 5, "inputSchema": {"type": "object"}},
    {"name": "icons", "icons": [{"sizes": "48x48"}], "inputSchema": {"type": "object"}},
    {"name": "desc_num", "description": 42, "inputSchema": {"type": "object"}},
    {
        "name": "header_root",
        "inputSchema": {"type": "object", "x-mcp-header": "X-Thing"},
    },
    {
        "name": "header_bad",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "bad header"}}},
    },
    {"name": "props_list", "inputSchema": {"type": "object", "properties": {"a": [1]}}},
    {"name": "required_num", "inputSchema": {"type": "object", "required": [1, "a"]}},
    {"name": "bad_output", "inputSchema": {"type": "object"}, "outputSchema": {"type": "array"}},
    {"name": "deep", "inputSchema": {"type": "object", "properties": {"a": _DEEP}}},
    {"name": 7, "inputSchema": {"type": "object"}},
    {"inputSchema": {"type": "object"}},
    {"name": "", "inputSchema": {"type": "object"}},
    "not a tool",
)


def servers(seed: int = 0) -> list[ServerTools]:
    """About 600 tools over 9 servers: the cases above mixed into ordinary ones."""
    rng = random.Random(seed)
    out: list[ServerTools] = []
    for s in range(8):
        tools: list[Any] = []
        for i in range(70):
            word = WORDS[(i + s) % len(WORDS)]
            name = f"{word}_{i}" if i % 9 else f"{word}-{i}.x"
            tool: dict[str, Any] = {
                "name": name,
                "description": f"Does {word} number {i} on server {s}; „quoted“ and\ttabbed\n{word * (i % 4)}",
                "inputSchema": _shape(rng, i * 3 + s),
            }
            if i % 3 == 0:
                tool["annotations"] = {"readOnlyHint": bool(i % 2), "title": f"T{i}"}
            if i % 8 == 0:
                tool["outputSchema"] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            if i % 10 == 0:
                tool["_meta"] = {"vendor/x": [i, {"b": 2, "a": 1}]}
            if i % 23 == 0:
                tool["inputSchema"] = _big_schema(60 + i)
            keys = list(tool)
            rng.shuffle(keys)
            tools.append({k: tool[k] for k in keys})
        tools.append(dict(tools[0]))  # an identical duplicate
        tools.append({**tools[1], "description": "a different definition"})
        tools.append({"name": tools[2]["name"], "inputSchema": {"type": "string"}})  # an invalid duplicate
        tools.append({"name": "x" * 70, "inputSchema": {"type": "object"}})  # too long: renamed
        tools.append({"name": "tool_search", "inputSchema": {"type": "object"}})
        if s == 0:
            tools.extend(QUARANTINED)
        prefix = ("s" if s != 3 else "") + str(s) if s != 5 else "文"
        out.append(
            ServerTools(
                id=f"srv{s}",
                prefix=prefix,
                tools=tuple(tools),
                exclude=("*_7",) if s == 1 else (),
                include=("*issue*", "*файл*", "*🚀*", "*Ω*", "x*") if s == 2 else (),
                deferred=s == 4,
            )
        )
    collide = {"name": WORDS[0] + "_1", "inputSchema": {"type": "object"}}  # s0__issue_1 twice: both renamed
    out.append(ServerTools(id="collide", prefix="s0", tools=(collide,)))
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def outputs(seed: int = 0) -> dict[str, Any]:
    """Digests of everything build + decide + publish produce for ``servers(seed)``."""
    from canonicaljson import encode_canonical_json
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    from catalog.budget import ClientPolicy, DecisionError, decide, estimate_tokens
    from catalog.build import build
    from catalog.names import PROFILES
    from gateway.engine.epoch import META_TOOLS, meta_declarations
    from gateway.published import published_tools, wire_problem

    result: dict[str, Any] = {}
    raw = servers(seed)
    for profile, output_schemas in (("openai", True), ("mcp", False)):
        catalog = build(
            raw, PROFILES[profile], "__", reserved=META_TOOLS, extra_check=wire_problem, output_schemas=output_schemas
        )
        entries = [
            [e.name, e.server, e.original, e.deferred, list(e.aliases), _sha(encode_canonical_json(e.declaration))]
            for e in catalog.entries
        ]
        case: dict[str, Any] = {
            "fingerprint": catalog.fingerprint,
            "entries": _sha(json.dumps(entries, ensure_ascii=False).encode()),
            "count": len(catalog.entries),
            "warnings": _sha("\n".join(w.line() for w in catalog.warnings).encode("utf-8", "backslashreplace")),
            "held": [w.line() for w in catalog.warnings if w.kind in ("quarantined", "duplicate")],
            "tokens": _sha(json.dumps([estimate_tokens(e.declaration) for e in catalog.entries]).encode()),
        }
        decls = [e.declaration for e in catalog.entries]
        case["published"] = {
            v: _sha(published_tools(decls, v).encoded())
            for v in (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
        }
        policies = {
            "auto": ClientPolicy(),
            "fixed": ClientPolicy(profile="mcp", max_functions=None, declarations="fixed", defer=("s1__*",)),
            "budget": ClientPolicy(
                max_functions=None, context_window=137000, reserve_tokens=1000, keep_recent_tokens=1000
            ),
            "tiny": ClientPolicy(max_functions=None, context_window=18000),
        }
        decisions: dict[str, Any] = {}
        for label, policy in policies.items():
            try:
                d = decide(catalog, policy, meta_declarations(label != "tiny"))
            except DecisionError as err:
                decisions[label] = {"error": str(err)}
                continue
            decisions[label] = {
                **d.numbers(),
                "fingerprint": d.fingerprint,
                "identity": d.identity,
                "declared": _sha(json.dumps(d.declared_names, ensure_ascii=False).encode()),
                "deferred_names": _sha(json.dumps(d.deferred_names, ensure_ascii=False).encode()),
                "published": _sha(published_tools(d.declared).encoded()),
            }
        case["decisions"] = decisions
        result[f"{profile}-output_schemas={output_schemas}"] = case
    return result


if __name__ == "__main__":
    json.dump({"seed0": outputs(0), "seed1": outputs(1)}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
