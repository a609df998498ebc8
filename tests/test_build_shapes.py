"""A first-ever build does its expensive work once per schema shape, not once per tool
(issue 16 item 2), and the decision estimates only the tokens it reports."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from canonicaljson import encode_canonical_json

import catalog.budget
import catalog.build
import gateway.published
from catalog.budget import ClientPolicy, decide, estimate_members, estimate_tokens
from catalog.build import build
from catalog.canonical import members
from catalog.model import ServerTools
from catalog.names import PROFILES
from gateway.engine.epoch import META_TOOLS, meta_declarations
from gateway.published import wire_problem
from tests.helpers import shuffled
from tests.varied_catalog import servers

CORPUS = Path(__file__).parent / "fixtures" / "tokens" / "corpus.jsonl"


def _tools(n: int, shapes: int, seed: int = 0) -> tuple[dict[str, Any], ...]:
    """``n`` tools over ``shapes`` schemas, each with its own name, description and key order."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        schema = {
            "type": "object",
            "properties": {"q": {"type": "string", "maxLength": 10 + i % shapes}, "n": {"type": "integer"}},
            "required": ["q", "n"],
        }
        tool = {"name": f"t{i}", "description": f"tool number {i}", "inputSchema": schema, "annotations": {}}
        out.append(shuffled(tool, rng))
    return tuple(out)


def test_each_schema_shape_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    check = catalog.build.check
    monkeypatch.setattr(catalog.build, "check", lambda schema, where: calls.append(1) or check(schema, where))
    catalog_ = build([ServerTools("s", "s", _tools(60, 3))], PROFILES["openai"])
    assert len(catalog_.entries) == 60
    assert len(calls) == 3  # was once per tool


def test_the_wire_model_is_validated_once_per_shape_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    serialize = gateway.published.serialize_server_result

    def counting(method: str, version: str, data: Any) -> Any:
        calls.append(version)
        return serialize(method, version, data)

    monkeypatch.setattr(gateway.published, "serialize_server_result", counting)
    gateway.published._verdicts.clear()
    tools = _tools(40, 2, seed=1)
    catalog_ = build([ServerTools("s", "s", tools)], PROFILES["openai"], extra_check=wire_problem)
    assert len(catalog_.entries) == 40
    assert len(calls) == 2  # was 4 protocol versions (one model) x 40 tools
    # the same verdicts as without the shape memo, for good and bad tools
    bad = {"name": "b", "title": 5, "inputSchema": {"type": "object"}}
    for decl in [*(e.declaration for e in catalog_.entries), bad, dict(bad, title="ok", description=None)]:
        assert wire_problem(decl, members(decl)) == wire_problem(decl)


def test_a_count_fallback_estimates_only_the_declared_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    estimated: list[int] = []
    estimate = catalog.budget.estimate_members
    monkeypatch.setattr(catalog.budget, "estimate_members", lambda m: estimated.append(1) or estimate(m))
    catalog_ = build([ServerTools("s", "s", _tools(300, 5))], PROFILES["openai"], reserved=META_TOOLS)
    decision = decide(catalog_, ClientPolicy(), meta_declarations(True))
    assert (decision.mode, decision.fallback, len(decision.declared)) == ("on-demand", "tool-count", 3)
    assert estimated == []  # the 300 tools are not declared: their tokens are never reported
    budgeted = decide(catalog_, ClientPolicy(max_functions=None, context_window=10**6), meta_declarations(True))
    assert budgeted.mode == "fixed" and len(estimated) == 300


def _declarations() -> list[dict[str, Any]]:
    decls = [json.loads(line)["declaration"] for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    for s in servers(2):
        cat = build([s], PROFILES["mcp"], reserved=META_TOOLS)
        decls += [e.declaration for e in cat.entries]
    return decls


def test_counting_by_members_is_the_same_estimate() -> None:
    decls = _declarations()
    assert len(decls) > 500
    for decl in decls:
        parts = members(decl)
        assert parts is not None
        assert estimate_members(parts) == estimate_tokens(decl), encode_canonical_json(decl)[:200]
        # with a shape already remembered, and with an output schema too
        assert estimate_members(parts) == estimate_tokens(decl)
        out = dict(decl, outputSchema={"type": "object", "properties": {"n": {"type": "number"}}})
        out_parts = members(out)
        assert out_parts is not None and estimate_members(out_parts) == estimate_tokens(out)
