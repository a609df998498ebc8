"""Token estimate and the fixed / on-demand declaration decision."""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import canonicaljson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.activation import identity
from catalog.budget import (
    FEATURES,
    TOKEN_DENOMINATOR,
    TOOL_OVERHEAD,
    WEIGHTS,
    ClientPolicy,
    DecisionError,
    decide,
    estimate_tokens,
    token_features,
)
from catalog.model import Catalog, Entry
from catalog.search import tool_call_declaration, tool_search_declaration

META = {"tool_search": tool_search_declaration(), "tool_call": tool_call_declaration()}
ARTIFACT = {
    "name": "artifact_read",
    "description": "Read a spilled result by id.",
    "inputSchema": {"properties": {"id": {"type": "string"}}, "required": ["id"], "type": "object"},
}


def entry(name: str, deferred: bool = False, description: str = "does a thing") -> Entry:
    server, _, original = name.partition("__")
    decl = {"description": description, "inputSchema": {"type": "object"}, "name": name}
    return Entry(name, server, original or name, decl, deferred)


def catalog(n: int, deferred: frozenset[int] = frozenset(), prefix: str = "srv") -> Catalog:
    entries = tuple(entry(f"{prefix}__tool{i:04d}", i in deferred) for i in range(n))
    return Catalog(entries, by_name={e.name: e for e in entries})


def names(entries: Catalog) -> set[str]:
    return {e.name for e in entries.entries}


# -- estimate -------------------------------------------------------------------------

CORPUS = Path(__file__).parent / "fixtures" / "tokens" / "corpus.jsonl"
"""Declarations with their real cl100k_base / o200k_base counts (tests/fixtures/tokens/)."""
MEAN_BOUND = 1.20
"""Mean of estimate / the larger real count that the estimate must stay within."""


def load_corpus() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


SAMPLES = load_corpus()


def larger(sample: dict[str, Any]) -> int:
    return max(sample["tokens"]["cl100k_base"], sample["tokens"]["o200k_base"])


def test_corpus_is_real_varied_and_has_a_held_out_part() -> None:
    assert len(SAMPLES) >= 150 and len({s["id"] for s in SAMPLES}) == len(SAMPLES)
    groups = {s["group"] for s in SAMPLES}
    assert {"real", "digits", "cyrillic", "greek", "latin", "cjk", "indic-semitic-thai", "emoji"} <= groups
    real = [s for s in SAMPLES if s["group"] == "real"]
    assert len(real) >= 100 and len({s["id"].split("/")[1] for s in real}) >= 10
    held = [s for s in SAMPLES if s["heldout"]]
    assert len(held) >= 50 and any(s["group"] == "real" for s in held)
    for s in SAMPLES:
        data = canonicaljson.encode_canonical_json(s["declaration"])
        for n in s["tokens"].values():
            # a byte-level BPE spends 1 to len(data) tokens; no JSON averages 12 bytes a token
            assert isinstance(n, int) and len(data) / 12 < n <= len(data), s["id"]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["id"] for s in SAMPLES])
def test_estimate_is_never_under_either_real_count(sample: dict[str, Any]) -> None:
    # without the per-tool overhead, which is for the provider's framing, not our JSON
    assert estimate_tokens(sample["declaration"]) - TOOL_OVERHEAD >= larger(sample)


@pytest.mark.parametrize("part", ["all", "fit", "held-out"])
def test_mean_estimate_is_within_the_bound_of_the_larger_count(part: str) -> None:
    chosen = [s for s in SAMPLES if part == "all" or s["heldout"] == (part == "held-out")]
    ratios = [estimate_tokens(s["declaration"]) / larger(s) for s in chosen]
    assert statistics.mean(ratios) <= MEAN_BOUND


def test_estimate_is_tighter_on_real_declarations_than_chars_per_3() -> None:
    real = [s["declaration"] for s in SAMPLES if s["group"] == "real"]
    chars = sum(len(canonicaljson.encode_canonical_json(d)) for d in real)
    assert sum(estimate_tokens(d) - TOOL_OVERHEAD for d in real) < chars / 3.5


def test_estimate_counts_the_canonical_json_plus_overhead() -> None:
    decl = {"name": "a", "description": "Read a file.", "inputSchema": {"type": "object"}}
    assert estimate_tokens(decl) > TOOL_OVERHEAD
    longer = dict(decl, description="Read a file. " * 20)
    assert estimate_tokens(longer) > estimate_tokens(decl) + 40


def test_estimate_is_key_order_independent() -> None:
    a = {"name": "t", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}
    b = {"inputSchema": {"properties": {"q": {"type": "string"}}, "type": "object"}, "name": "t"}
    assert estimate_tokens(a) == estimate_tokens(b)


def features(text: str) -> dict[str, int]:
    return dict(zip(FEATURES, token_features(text.encode("utf-8")), strict=True))


def test_features_follow_the_pre_tokenizer_pieces() -> None:
    f = features('{"maxCount":1234567,"id":"a-b c"}')
    assert f["numbers"] == 3  # 123 456 7: every 1-3 digits are one piece
    assert f["digits"] == 7 and f["humps"] == 1 and f["upper"] == 1
    assert f["words"] == 5  # maxCount id a b c
    assert f["spaces"] == 1 and f["quotes"] == 6
    assert features("000")["numbers"] == 1 and features("0000 12")["numbers"] == 3


def test_features_count_characters_per_script_class() -> None:
    f = features("é ạ 中 😀 ж α ש ա ก ம ქ")
    expected = {"latin": 1, "latin_additional": 1, "han": 1, "astral": 1, "cyrillic": 1, "greek": 1,
                "hebrew": 1, "armenian": 1, "devanagari_thai": 1, "u0800": 1, "u1000": 1}
    assert {k: f[k] for k in expected} == expected
    assert f["spaces"] == 10 and f["lower"] == f["upper"] == 0


def test_uncalibrated_scripts_are_charged_their_utf8_byte_count() -> None:
    weight = dict(zip(FEATURES, WEIGHTS, strict=True))
    # no corpus sample (or too few) for these: a byte-level BPE spends at most a token a byte
    assert weight["marks"] >= 2 * TOKEN_DENOMINATOR and weight["syriac"] >= 2 * TOKEN_DENOMINATOR
    assert weight["armenian"] >= 2 * TOKEN_DENOMINATOR and weight["u1000"] >= 3 * TOKEN_DENOMINATOR
    assert weight["numbers"] >= TOKEN_DENOMINATOR  # each 1-3 digit piece is a token


def test_digit_heavy_ascii_is_charged_more_than_prose() -> None:
    prose = {"name": "t", "description": "abcdefghij" * 50}
    digits = {"name": "t", "description": "0123456789" * 50}
    assert estimate_tokens(digits) > estimate_tokens(prose) * 2


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_estimate_is_deterministic_and_counts_any_text(text: str) -> None:
    decl = {"name": "t", "description": text, "inputSchema": {"type": "object"}}
    estimate = estimate_tokens(decl)
    assert estimate == estimate_tokens(dict(reversed(list(decl.items()))))
    assert TOOL_OVERHEAD < estimate <= 3 * len(canonicaljson.encode_canonical_json(decl)) + TOOL_OVERHEAD


# -- decide: function count -----------------------------------------------------------


def test_127_tools_one_deferred_plus_tool_search_is_exactly_128_fixed() -> None:
    cat = catalog(127, deferred=frozenset({5}))
    d = decide(cat, ClientPolicy(), META)
    assert d.mode == "fixed" and d.fallback is None
    assert d.function_count == 128 == len(d.declared) == d.function_limit
    assert "tool_search" in d.declared_names and "tool_call" not in d.declared_names
    assert d.deferred_names == ("srv__tool0005",)
    assert "srv__tool0005" in d.declared_names  # fixed: declared, but still needs activation


def test_fixed_without_deferred_tools_declares_no_meta_tool() -> None:
    d = decide(catalog(128), ClientPolicy(), META)
    assert d.mode == "fixed" and d.function_count == 128
    assert d.deferred_names == () and not {"tool_search", "tool_call"} & set(d.declared_names)
    assert list(d.declared) == [e.declaration for e in catalog(128).entries]


def test_129_tools_fall_back_to_on_demand_for_tool_count() -> None:
    cat = catalog(129, deferred=frozenset(range(10)))
    d = decide(cat, ClientPolicy(), META)
    assert d.mode == "on-demand" and d.fallback == "tool-count"
    assert d.function_count <= 128
    assert d.function_count == 119 + 2
    assert "130 functions > limit 128" in d.detail
    assert set(d.deferred_names) == {f"srv__tool{i:04d}" for i in range(10)}


def test_129_always_loaded_tools_defer_everything() -> None:
    cat = catalog(129)
    d = decide(cat, ClientPolicy(), META)
    assert d.mode == "on-demand" and d.fallback == "tool-count"
    assert d.declared_names == ("tool_call", "tool_search")
    assert set(d.deferred_names) == names(cat)
    assert "all 129 tools deferred" in d.detail


def test_explicit_on_demand_all_deferred_when_loaded_set_breaks_limit() -> None:
    cat = catalog(127)
    d = decide(cat, ClientPolicy(declarations="on-demand"), META)
    assert d.mode == "on-demand" and d.fallback == "tool-count"  # 127 + 2 meta > 128
    assert d.declared_names == ("tool_call", "tool_search")
    d = decide(catalog(126), ClientPolicy(declarations="on-demand"), META)
    assert d.fallback is None and d.function_count == 128 and d.deferred_names == ()


def test_fixed_over_limit_raises_naming_both_numbers() -> None:
    with pytest.raises(DecisionError, match=r"fixed needs 130 functions but profile openai allows 128"):
        decide(catalog(129, deferred=frozenset({0})), ClientPolicy(declarations="fixed"), META)


def test_no_function_limit() -> None:
    d = decide(catalog(400), ClientPolicy(profile="anthropic", max_functions=None), META)
    assert d.mode == "fixed" and d.function_count == 400 and d.function_limit is None


def test_artifact_read_is_always_declared_and_counted() -> None:
    meta = dict(META, artifact_read=ARTIFACT)
    d = decide(catalog(127), ClientPolicy(), meta)
    assert d.mode == "fixed" and d.function_count == 128 and "artifact_read" in d.declared_names
    d = decide(catalog(128), ClientPolicy(), meta)
    assert d.fallback == "tool-count" and "artifact_read" in d.declared_names
    assert d.declared_tokens == sum(estimate_tokens(x) for x in d.declared)


def test_declared_is_in_code_unit_order_with_meta_tools() -> None:
    entries = tuple(entry(n, deferred=True) for n in ("zeta", "tool_x", "\U0001f600x", "\uff5ay", "Alpha"))
    d = decide(Catalog(entries), ClientPolicy(max_functions=None), META)
    expected = sorted([e.name for e in entries] + ["tool_search"], key=lambda n: n.encode("utf-16-be"))
    assert list(d.declared_names) == expected
    assert expected.index("\U0001f600x") < expected.index("\uff5ay")  # not code-point order
    assert [x["name"] for x in d.declared] == expected
    assert d.deferred_names == tuple(n for n in expected if n != "tool_search")


def test_defer_globs_on_qualified_names() -> None:
    cat = catalog(4, prefix="gh")
    d = decide(cat, ClientPolicy(defer=("gh__tool000[12]",)), META)
    assert d.deferred_names == ("gh__tool0001", "gh__tool0002")
    assert decide(cat, ClientPolicy(defer=("GH__*",)), META).deferred_names == ()  # case-sensitive


# -- decide: context budget -----------------------------------------------------------


def _fixed_tokens(cat: Catalog) -> int:
    return sum(estimate_tokens(e.declaration) for e in cat.entries)


@pytest.mark.parametrize("system", [0, 1234])
def test_context_budget_exact_boundary(system: int) -> None:
    cat = catalog(40, deferred=frozenset())
    tokens = _fixed_tokens(cat)
    reserve, keep = 16384, 20000
    window = reserve + keep + tokens + system  # leaves exactly keep_recent_tokens
    fits = decide(cat, ClientPolicy(context_window=window, system_prompt_tokens=system), META)
    assert fits.mode == "fixed" and fits.fallback is None
    assert fits.declared_tokens == tokens and fits.token_budget == tokens
    over = decide(cat, ClientPolicy(context_window=window - 1, system_prompt_tokens=system), META)
    assert over.mode == "on-demand" and over.fallback == "context-budget"
    assert over.token_budget == tokens - 1
    assert f"~{tokens} tokens > budget {tokens - 1}" in over.detail


def test_tool_count_is_checked_before_budget() -> None:
    d = decide(catalog(200), ClientPolicy(context_window=50000), META)
    assert d.fallback == "tool-count"


def test_budget_fallback_keeps_loaded_tools_that_fit() -> None:
    cat = catalog(20, deferred=frozenset(range(2, 20)))
    tokens = _fixed_tokens(cat) + estimate_tokens(META["tool_search"])
    loaded = sum(estimate_tokens(e.declaration) for e in cat.entries[:2])
    on_demand = loaded + estimate_tokens(META["tool_search"]) + estimate_tokens(META["tool_call"])
    assert on_demand < tokens
    window = 16384 + 20000 + on_demand
    d = decide(cat, ClientPolicy(context_window=window), META)
    assert d.mode == "on-demand" and d.fallback == "context-budget"
    assert d.declared_names == ("srv__tool0000", "srv__tool0001", "tool_call", "tool_search")
    assert d.declared_tokens == on_demand
    d = decide(cat, ClientPolicy(context_window=window - 1), META)
    assert d.declared_names == ("tool_call", "tool_search") and "all 20 tools deferred" in d.detail


def test_fixed_over_budget_is_kept_and_explained() -> None:
    d = decide(catalog(30), ClientPolicy(context_window=37000, declarations="fixed"), META)
    assert d.mode == "fixed" and d.fallback is None and "kept because declarations = fixed" in d.detail


# -- decide: identity, fingerprint, errors --------------------------------------------


def test_fingerprint_and_identity() -> None:
    cat = catalog(3, deferred=frozenset({1}))
    policy = ClientPolicy(model="m", api="openai-completions", endpoint="https://x", account="a")
    d = decide(cat, policy, META)
    blob = canonicaljson.encode_canonical_json(list(d.declared))
    assert d.fingerprint == hashlib.sha256(blob).hexdigest()
    deferred = [cat.entries[1].declaration]
    assert d.identity == identity(policy.route(), "fixed", d.declared, deferred)
    assert decide(cat, ClientPolicy(model="other"), META).identity != d.identity
    assert decide(cat, policy, META) == d  # deterministic


def test_meta_collision_and_missing_meta_are_errors() -> None:
    cat = Catalog((entry("tool_search"),))
    with pytest.raises(DecisionError, match="collides"):
        decide(cat, ClientPolicy(), META)
    with pytest.raises(DecisionError, match="tool_call"):
        decide(catalog(3), ClientPolicy(declarations="on-demand"), {"tool_search": META["tool_search"]})
    with pytest.raises(DecisionError, match="auto, fixed or on-demand"):
        decide(catalog(3), ClientPolicy(declarations="sometimes"), META)  # type: ignore[arg-type]


def test_meta_tools_alone_over_the_limit_raise() -> None:
    # A limit the config sets is named as the config's, not the profile's (openai's is 128).
    with pytest.raises(DecisionError, match="needs 2 functions .* but max_functions is 1$"):
        decide(catalog(3), ClientPolicy(max_functions=1), META)


def test_decide_does_not_mutate_inputs() -> None:
    cat = catalog(130, deferred=frozenset({3}))
    before = canonicaljson.encode_canonical_json([e.declaration for e in cat.entries])
    meta_before = canonicaljson.encode_canonical_json(META)
    decide(cat, ClientPolicy(), META)
    assert canonicaljson.encode_canonical_json([e.declaration for e in cat.entries]) == before
    assert canonicaljson.encode_canonical_json(META) == meta_before


# -- property: never truncated --------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(0, 180),
    deferred=st.sets(st.integers(0, 179), max_size=60),
    limit=st.one_of(st.none(), st.integers(3, 200)),
    window=st.one_of(st.none(), st.integers(30000, 120000)),
    mode=st.sampled_from(["auto", "on-demand"]),
    spill=st.booleans(),
    globs=st.lists(st.sampled_from(["srv__tool00*", "srv__tool01?5", "nothing*"]), max_size=2),
)
def test_catalog_is_never_truncated(n, deferred, limit, window, mode, spill, globs) -> None:  # type: ignore[no-untyped-def]
    cat = catalog(n, deferred=frozenset(deferred))
    meta = dict(META, artifact_read=ARTIFACT) if spill else META
    policy = ClientPolicy(max_functions=limit, context_window=window, declarations=mode, defer=tuple(globs))
    d = decide(cat, policy, meta)
    all_names = names(cat)
    declared_tools = set(d.declared_names) - set(meta)
    assert declared_tools | set(d.deferred_names) == all_names
    assert declared_tools <= all_names and set(d.deferred_names) <= all_names
    if d.mode == "on-demand":
        assert not declared_tools & set(d.deferred_names)
        assert {"tool_search", "tool_call"} <= set(d.declared_names)
    if limit is not None:
        assert d.function_count <= limit
    assert spill == ("artifact_read" in d.declared_names)
    assert d.function_count == len(d.declared) == len(d.declared_names)
    assert d.declared_tokens == sum(estimate_tokens(x) for x in d.declared)
    keys = [x.encode("utf-16-be") for x in d.declared_names]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert list(d.deferred_names) == sorted(d.deferred_names)
