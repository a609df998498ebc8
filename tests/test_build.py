"""build(): one deterministic catalog for a set of servers, with every loss reported."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import canonicaljson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.build import build, fingerprint
from catalog.model import Catalog, ServerTools
from catalog.names import PROFILES
from tests.helpers import shuffled, wire

OPENAI = PROFILES["openai"]
META = frozenset({"tool_search", "tool_call", "artifact_read"})


def tool(name: str, **extra: Any) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["q", "n"],
    }
    return {"name": name, "description": f"does {name}", "inputSchema": schema, **extra}


def server(id_: str, *tools: Any, prefix: str | None = None, **kw: Any) -> ServerTools:
    return ServerTools(id=id_, prefix=id_ if prefix is None else prefix, tools=tuple(tools), **kw)


def snapshot(catalog: Catalog) -> tuple[Any, ...]:
    return (
        wire([e.declaration for e in catalog.entries]),
        catalog.fingerprint,
        catalog.warnings,
        [(e.name, e.server, e.original, e.deferred) for e in catalog.entries],
    )


def test_fingerprint_is_sha256_of_canonical_json() -> None:
    decls = [{"name": "b", "a": 1}]
    assert fingerprint(decls) == hashlib.sha256(b'[{"a":1,"name":"b"}]').hexdigest()
    assert fingerprint(tuple(decls)) == fingerprint(decls)
    assert fingerprint([]) == hashlib.sha256(b"[]").hexdigest()


def test_basic_catalog() -> None:
    cat = build([server("srv", tool("b"), tool("a"))], OPENAI, reserved=META)
    assert [e.name for e in cat.entries] == ["srv__a", "srv__b"]
    entry = cat.entries[0]
    assert (entry.server, entry.original, entry.deferred) == ("srv", "a", False)
    assert entry.declaration["name"] == "srv__a"
    assert entry.declaration["inputSchema"]["required"] == ["n", "q"]
    assert cat.get("srv__b") is cat.entries[1] and cat.get("b") is None
    assert cat.fingerprint == fingerprint([e.declaration for e in cat.entries])
    assert cat.warnings == ()


def test_entries_in_utf16_code_unit_order() -> None:
    tools = [tool(n) for n in ["b", "B", "a.x", "_", "-", "a", "0"]]
    cat = build([server("s", *tools, prefix="")], PROFILES["mcp"])
    assert [e.name for e in cat.entries] == ["-", "0", "B", "_", "a", "a.x", "b"]


def test_shuffled_keys_and_required_give_the_same_fingerprint() -> None:
    a = tool("t", annotations={"readOnlyHint": True, "title": "T"}, _meta={"z": 1, "a": {"y": 2, "b": 3}})
    b = shuffled(a, random.Random(7))
    b["inputSchema"]["required"] = ["q", "n", "q"]
    first = build([server("s", a)], OPENAI)
    second = build([server("s", b)], OPENAI)
    assert wire([e.declaration for e in first.entries]) == wire([e.declaration for e in second.entries])
    assert first.fingerprint == second.fingerprint
    # A real change does change it.
    c = dict(a, description="changed")
    assert build([server("s", c)], OPENAI).fingerprint != first.fingerprint


def test_declaration_keys_sorted_and_everything_passed_through() -> None:
    raw = tool(
        "t",
        title="Title",
        annotations={"readOnlyHint": True, "destructiveHint": False},
        _meta={"vendor/x": {"k": [3, 1, 2]}},
        outputSchema={"type": "object", "properties": {"r": {"type": "string"}}, "required": ["r", "r"]},
        icons=[{"src": "https://e/x.png", "mimeType": "image/png"}],
        execution={"taskSupport": "optional"},
        unknownKey={"b": 1, "a": 2},
    )
    decl = build([server("s", raw)], OPENAI).entries[0].declaration
    assert list(decl) == sorted(decl)
    assert decl["name"] == "s__t"
    assert decl["title"] == "Title"
    assert list(decl["annotations"]) == ["destructiveHint", "readOnlyHint"]
    assert decl["_meta"] == {"vendor/x": {"k": [3, 1, 2]}}
    assert decl["outputSchema"]["required"] == ["r"]
    assert decl["icons"] == [{"mimeType": "image/png", "src": "https://e/x.png"}]
    assert decl["execution"] == {"taskSupport": "optional"}
    assert list(decl["unknownKey"]) == ["a", "b"]
    assert raw["name"] == "t" and raw["outputSchema"]["required"] == ["r", "r"]  # input untouched


def test_output_schemas_false_publishes_none_and_checks_none() -> None:
    """Unpublished output schemas are not in the declarations (nor the fingerprint), so an
    invalid one no longer quarantines its tool; the rest is unchanged."""
    out = {"type": "object", "properties": {"r": {"type": "string"}}}
    servers = [server("s", tool("t", outputSchema=out), tool("badout", outputSchema={"type": "array"}))]
    published, omitted = build(servers, OPENAI), build(servers, OPENAI, output_schemas=False)
    assert [e.name for e in published.entries] == ["s__t"]
    assert [e.name for e in omitted.entries] == ["s__badout", "s__t"]
    assert all("outputSchema" not in e.declaration for e in omitted.entries)
    full = published.by_name["s__t"].declaration
    assert omitted.by_name["s__t"].declaration == {k: v for k, v in full.items() if k != "outputSchema"}
    assert omitted.fingerprint != published.fingerprint
    assert build(servers, OPENAI, output_schemas=False).fingerprint == omitted.fingerprint


@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False))
def test_server_and_tool_order_do_not_matter(rnd: random.Random) -> None:
    servers = [
        server("x", tool("y__z"), tool("a.b"), tool("a b"), tool("ok"), {"bad": 1}),
        server("x__y", tool("z"), tool("ok", inputSchema={"type": "string"}), deferred=True),
        server("plain", tool("tool_search"), tool("dup"), tool("dup", description="other"), prefix=""),
        server("solo", tool("t" * 80), tool("\U0001f600"), exclude=("hidden*",), include=()),
    ]
    expected = snapshot(build(servers, OPENAI, "__", META))
    mixed = [
        ServerTools(s.id, s.prefix, tuple(rnd.sample(s.tools, len(s.tools))), s.include, s.exclude, s.deferred)
        for s in rnd.sample(servers, len(servers))
    ]
    assert snapshot(build(mixed, OPENAI, "__", META)) == expected


def test_quarantine_reports_reason_and_keeps_the_rest() -> None:
    cat = build(
        [
            server(
                "s",
                tool("good"),
                tool("badtype", inputSchema={"type": "object", "properties": {"x": {"type": "strin"}}}),
                tool("notobject", inputSchema={"type": "string"}),
                {"name": "noschema", "description": "x"},
                tool("badout", outputSchema={"type": "array"}),
                tool("badout2", outputSchema={"type": "object", "properties": {"p": {"minimum": "0"}}}),
                tool("nan", inputSchema={"type": "object", "default": float("nan")}),
                {"description": "no name"},
                "not a dict",
                {"name": 3, "inputSchema": {"type": "object"}},
            ),
            server("t", tool("good")),
        ],
        OPENAI,
    )
    assert [e.name for e in cat.entries] == ["s__good", "t__good"]
    quarantined = {w.tool: w.detail for w in cat.warnings if w.kind == "quarantined"}
    assert quarantined["badtype"].startswith("inputSchema.properties.x.type: ")
    assert quarantined["notobject"] == "inputSchema.type: root must have type 'object', got 'string'"
    assert quarantined["noschema"] == "missing inputSchema"
    assert quarantined["badout"] == "outputSchema.type: root must have type 'object', got 'array'"
    assert quarantined["badout2"].startswith("outputSchema.properties.p.minimum: ")
    assert quarantined["nan"].startswith("not canonical JSON")
    assert quarantined["<unnamed>"] == "missing 'name'"
    assert quarantined["<str>"] == "tool is not an object (got str)"
    assert quarantined["<name 3>"] == "'name' is not a string (got int)"
    assert all(w.server == "s" for w in cat.warnings)


def test_schema_defect_removed_by_canonical_form_does_not_cost_the_tool() -> None:
    raw = tool(
        "t", inputSchema={"type": "object", "required": ["a", "a"], "properties": {"a": {"type": ["string", "string"]}}}
    )
    cat = build([server("s", raw)], OPENAI)
    assert [e.name for e in cat.entries] == ["s__t"] and cat.warnings == ()


def test_include_and_exclude() -> None:
    srv = server(
        "s",
        tool("read_file"),
        tool("read_dir"),
        tool("write_file"),
        tool("Read_x"),
        include=("read_*", "write_*"),
        exclude=("*_dir",),
    )
    cat = build([srv], OPENAI)
    assert [e.original for e in cat.entries] == ["read_file", "write_file"]
    excluded = {w.tool: w.detail for w in cat.warnings if w.kind == "excluded"}
    assert excluded == {"read_dir": "matches exclude pattern '*_dir'", "Read_x": "matches no include pattern"}
    # Globs see the server's own names, not the qualified ones.
    assert build([server("s", tool("a"), include=("s__*",))], OPENAI).entries == ()
    # An excluded tool with a broken schema is excluded, not quarantined.
    cat = build([server("s", tool("bad", inputSchema=[]), exclude=("bad",))], OPENAI)
    assert [w.kind for w in cat.warnings] == ["excluded"]


def test_a_tool_that_needs_tasks_is_published_for_plain_calls_when_its_server_runs_tasks() -> None:
    """``taskSupport: "required"``: the gateway offers its clients no tasks, so it runs each
    call of such a tool as a task at its server (gateway/downstream/tasks.py) and publishes
    it without ``taskSupport``; other ``execution`` members and an ``optional`` stay."""
    needs = tool("research", execution={"taskSupport": "required", "other": 1})
    only = tool("only", execution={"taskSupport": "required"})
    may = tool("maybe", execution={"taskSupport": "optional"})
    cat = build([server("s", needs, only, may, tool("plain"), tasks=True)], OPENAI)
    assert [(e.original, e.declaration.get("execution")) for e in cat.entries] == [
        ("maybe", {"taskSupport": "optional"}),
        ("only", None),
        ("plain", None),
        ("research", {"other": 1}),
    ]
    assert "execution" not in cat.by_name["s__only"].declaration
    assert cat.warnings == ()


def test_a_tool_that_needs_tasks_of_a_server_without_them_is_published_with_a_warning() -> None:
    """A server that lists a task-only tool but declares no tasks for ``tools/call``: no call
    can run it, so it is published as listed (never dropped silently) and the build says so."""
    needs = tool("research", execution={"taskSupport": "required"})
    cat = build([server("s", needs, tool("plain"))], OPENAI)
    assert [e.declaration.get("execution") for e in cat.entries] == [None, {"taskSupport": "required"}]
    assert [(w.kind, w.tool) for w in cat.warnings] == [("task-only", "research")]
    assert "declares no tasks for tools/call" in cat.warnings[0].detail


def test_duplicates_keep_one_deterministically() -> None:
    a, b = tool("d"), tool("d", description="other")
    for order in ([a, b, a], [b, a, a], [a, a, b]):
        cat = build([server("s", *order)], OPENAI)
        assert len(cat.entries) == 1
        dups = [w for w in cat.warnings if w.kind == "duplicate"]
        assert len(dups) == 2 and all(w.tool == "d" for w in dups)
        assert snapshot(cat) == snapshot(build([server("s", a, b, a)], OPENAI))
    # A valid duplicate beats an invalid one whatever the order.
    bad = tool("d", inputSchema={"type": "string"})
    for order in ([bad, b], [b, bad]):
        cat = build([server("s", *order)], OPENAI)
        assert cat.entries[0].declaration["description"] == "other"
        assert [w.kind for w in cat.warnings] == ["duplicate"]
        assert "invalid" in cat.warnings[0].detail


def test_renames_and_reserved_names_are_reported() -> None:
    cat = build(
        [server("x", tool("y__z")), server("x__y", tool("z")), server("m", tool("tool_call"), prefix="")],
        OPENAI,
        reserved=META,
    )
    names = {e.original: e.name for e in cat.entries}
    assert names["tool_call"].startswith("tool_call_") and names["y__z"] != names["z"]
    assert sorted(w.server for w in cat.warnings if w.kind == "renamed") == ["m", "x", "x__y"]
    assert all(OPENAI.valid(e.name) and e.declaration["name"] == e.name for e in cat.entries)


def test_quarantined_tools_take_no_names() -> None:
    cat = build([server("a", tool("t"), prefix=""), server("b", tool("t", inputSchema=3), prefix="")], OPENAI)
    assert [e.name for e in cat.entries] == ["t"]
    assert [w.kind for w in cat.warnings] == ["quarantined"]


def test_deferred_and_duplicate_server_ids() -> None:
    cat = build([server("s", tool("t"), deferred=True), server("u", tool("t"))], OPENAI)
    assert {e.name: e.deferred for e in cat.entries} == {"s__t": True, "u__t": False}
    with pytest.raises(ValueError):
        build([server("s", tool("t")), server("s", tool("u"))], OPENAI)


def test_warnings_sorted_by_kind_server_tool() -> None:
    cat = build(
        [
            server("b", tool("x", inputSchema=1), tool("e"), exclude=("e",)),
            server("a", tool("y", inputSchema=1), tool("a.b")),
        ],
        OPENAI,
    )
    keys = [(w.kind, w.server, w.tool) for w in cat.warnings]
    assert keys == [
        ("excluded", "b", "e"),
        ("quarantined", "a", "y"),
        ("quarantined", "b", "x"),
        ("renamed", "a", "a.b"),
    ]


def test_published_bytes_are_canonical_json() -> None:
    cat = build([server("s", shuffled(tool("t", annotations={"b": 1, "a": 2}), random.Random(1)))], OPENAI)
    decls = [e.declaration for e in cat.entries]
    assert json.dumps(decls, separators=(",", ":"), ensure_ascii=False).encode() == canonicaljson.encode_canonical_json(
        decls
    )


def test_extra_check_quarantines_with_its_reason() -> None:
    tools = (
        {"name": "ok", "inputSchema": {"type": "object"}},
        {"name": "odd", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": "yes"}},
    )

    def wire(decl: dict, members: object) -> str | None:  # type: ignore[type-arg]
        hint = decl.get("annotations", {}).get("readOnlyHint")
        return None if hint is None or isinstance(hint, bool) else "readOnlyHint must be a boolean"

    catalog = build([ServerTools("s", "s", tools)], PROFILES["openai"], extra_check=wire)
    assert [e.name for e in catalog.entries] == ["s__ok"]
    assert [(w.kind, w.tool, w.detail) for w in catalog.warnings] == [
        ("quarantined", "odd", "readOnlyHint must be a boolean")
    ]


def test_what_says_a_tool_runs_only_as_a_task_and_a_server_runs_them() -> None:
    """Peers' values of any shape: only the exact ones count, nothing raises."""
    from catalog.tasks import runs_tool_tasks, task_only

    assert runs_tool_tasks({"tasks": {"requests": {"tools": {"call": {}}}}})
    for caps in ({}, {"tasks": {}}, {"tasks": {"requests": {"tools": {"call": True}}}}, {"tasks": []}, {"tasks": "x"}):
        assert not runs_tool_tasks(caps), caps
    assert task_only({"name": "t", "execution": {"taskSupport": "required"}})
    for execution in (None, [], "required", {"taskSupport": "optional"}, {"taskSupport": ["required"]}):
        assert not task_only({"name": "t", "execution": execution}), execution
