"""Public names: valid for the client, unique, reported, and independent of answer order."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.names import PROFILES, Profile, assign_names, code_unit_key, qualify, suffix_hash

OPENAI = PROFILES["openai"]
META = frozenset({"tool_search", "tool_call", "artifact_read"})

FULL_RULES = {
    "openai": r"^[a-zA-Z0-9_-]{1,64}$",
    "deepseek": r"^[a-zA-Z0-9_-]{1,64}$",
    "anthropic": r"^[a-zA-Z0-9_-]{1,128}$",
    "mcp": r"^[A-Za-z0-9._-]{1,128}$",
    # 64 less "mcp__prefixgate__": a profile that still carries its wrapper counts the default entry
    "claude-code": r"^[a-zA-Z0-9_-]{1,47}$",
    "claude-desktop": r"^[a-zA-Z0-9_-]{1,47}$",
    # 63 less "mcp_prefixgate_"; Gemini's ':' is left out, MCP's SEP-986 has none
    "gemini": r"^[A-Za-z0-9._-]{1,48}$",
}


def h8(server: str, tool: str) -> str:
    return hashlib.sha256((server + "\x00" + tool).encode()).hexdigest()[:8]


def assert_valid(names: dict[tuple[str, str], str], profile: Profile) -> None:
    rule = re.compile(FULL_RULES[profile.name])
    for name in names.values():
        assert rule.fullmatch(name), name
        assert profile.valid(profile.wrapped(name, "prefixgate"))
    assert len(set(names.values())) == len(names)


def test_profiles() -> None:
    assert {p: (PROFILES[p].max_len, PROFILES[p].max_functions) for p in PROFILES} == {
        "openai": (64, 128),
        "deepseek": (64, 128),
        "anthropic": (128, None),
        "mcp": (128, None),
        "claude-code": (64, None),  # mcp__<entry>__ counted in the 64: see test_names_wrapped
        "claude-desktop": (64, None),
        "gemini": (63, 448),  # the Gemini API's 512 less 64 for Gemini CLI's own tools
    }
    assert PROFILES["mcp"].valid("a.b") and not OPENAI.valid("a.b")
    assert PROFILES["gemini"].valid("a.b-c_d") and not PROFILES["gemini"].valid("a:b")
    assert not OPENAI.valid("") and not OPENAI.valid("a\n") and not OPENAI.valid("a" * 65)


def test_qualify() -> None:
    assert qualify("srv", "t", "__") == "srv__t"
    assert qualify("", "t", "__") == "t"


def test_code_unit_order_matches_javascript() -> None:
    # JS: ["\uffff", "\u{1F600}"].sort() puts the emoji (0xD83D 0xDE00) first.
    assert sorted(["\uffff", "\U0001F600"], key=code_unit_key) == ["\U0001F600", "\uffff"]
    assert sorted(["\uffff", "\U0001F600"]) == ["\uffff", "\U0001F600"]  # Python differs
    assert sorted(["b", "a", "B"], key=code_unit_key) == ["B", "a", "b"]
    assert code_unit_key("\ud800") == b"\xd8\x00"  # lone surrogates do not crash


def test_untouched_names_produce_no_warning() -> None:
    names, warnings = assign_names([("s", "s", "read"), ("t", "", "write")], OPENAI, "__", META)
    assert names == {("s", "read"): "s__read", ("t", "write"): "write"}
    assert warnings == []


def test_cross_server_collision_suffixes_every_member() -> None:
    requests = [("x", "x", "y__z"), ("x__y", "x__y", "z")]
    names, warnings = assign_names(requests, OPENAI, "__")
    assert names == {
        ("x", "y__z"): "x__y__z_" + h8("x", "y__z"),
        ("x__y", "z"): "x__y__z_" + h8("x__y", "z"),
    }
    assert [(w.kind, w.server, w.tool) for w in warnings] == [("renamed", "x", "y__z"), ("renamed", "x__y", "z")]
    assert warnings[0].detail == (
        f"'x__y__z' -> 'x__y__z_{h8('x', 'y__z')}' (collides with 'x__y__z' (server 'x__y'))"
    )


def test_a_large_colliding_group_names_a_few_others_and_counts_the_rest() -> None:
    """Every member's reason named every other member: a server listing 4,000 tools whose
    names sanitise alike (two CJK characters each) took 12 s and 1.4 GB to name, its warnings
    350 MB. Each reason now names the first 3 others in canonical order and counts the rest."""
    requests = [("s", "s", chr(0x4E00 + i) * 2) for i in range(1000)]
    names, warnings = assign_names(requests, OPENAI, "__")
    assert len(set(names.values())) == 1000 and len(warnings) == 1000
    assert all(len(w.detail) < 200 for w in warnings), max(len(w.detail) for w in warnings)
    rest = "'s__丂丂' (server 's'), 's__七七' (server 's') and 996 more)"
    assert warnings[0].detail.endswith(f"collides with 's__丁丁' (server 's'), {rest}")
    assert warnings[1].detail.endswith(f"collides with 's__一一' (server 's'), {rest}")
    # two members: the other is named, nothing more
    _, pair = assign_names(requests[:2], OPENAI, "__")
    assert pair[0].detail.endswith("collides with 's__丁丁' (server 's'))")


def test_same_server_collision_after_sanitising() -> None:
    names, warnings = assign_names([("s", "s", "a.b"), ("s", "s", "a b")], OPENAI, "__")
    assert names[("s", "a.b")] == "s__a_b_" + h8("s", "a.b")
    assert names[("s", "a b")] == "s__a_b_" + h8("s", "a b")
    details = {w.tool: w.detail for w in warnings}
    assert details["a.b"].startswith(
        f"'s__a.b' -> '{names[('s', 'a.b')]}' (disallowed characters; collides with 's__a b'"
    )
    # The mcp profile allows '.', so only the space is sanitised and nothing collides.
    mcp_names, _ = assign_names([("s", "s", "a.b"), ("s", "s", "a b")], PROFILES["mcp"], "__")
    assert mcp_names == {("s", "a.b"): "s__a.b", ("s", "a b"): "s__a_b"}


def test_non_bmp_character_becomes_one_underscore() -> None:
    names, warnings = assign_names([("s", "s", "smile\U0001f600x")], OPENAI, "__")
    assert names == {("s", "smile\U0001f600x"): "s__smile_x"}
    assert warnings[0].detail == "'s__smile\U0001f600x' -> 's__smile_x' (disallowed characters)"


def test_too_long_is_cut_and_suffixed() -> None:
    tool = "t" * 100
    names, warnings = assign_names([("s", "s", tool)], OPENAI, "__")
    name = names[("s", tool)]
    assert len(name) == 64
    assert name == ("s__" + tool)[:55] + "_" + h8("s", tool)
    assert "(too long)" in warnings[0].detail
    # Anthropic allows 128: the same name passes unchanged.
    assert assign_names([("s", "s", tool)], PROFILES["anthropic"], "__")[0][("s", tool)] == "s__" + tool


def test_reserved_meta_tool_names_are_never_taken() -> None:
    names, warnings = assign_names([("s", "", "tool_search"), ("s", "", "other")], OPENAI, "__", META)
    assert names[("s", "tool_search")] == "tool_search_" + h8("s", "tool_search")
    assert names[("s", "other")] == "other"
    assert "collides with reserved name 'tool_search'" in warnings[0].detail


def test_empty_qualified_name_gets_a_valid_name() -> None:
    names, warnings = assign_names([("s", "", "")], OPENAI, "__")
    assert names[("s", "")] == "_" + h8("s", "")
    assert "empty" in warnings[0].detail


def test_suffix_clash_with_a_literal_tool_name_is_rehashed() -> None:
    # Two servers publish "dup" unprefixed; a third has a tool literally named like the
    # suffix the first one would receive.
    squatter = "dup_" + h8("a", "dup")
    requests = [("a", "", "dup"), ("b", "", "dup"), ("c", "", squatter)]
    names, warnings = assign_names(requests, OPENAI, "__")
    assert names[("c", squatter)] == squatter  # the plain name keeps its name
    assert names[("a", "dup")] == "dup_" + suffix_hash("a", "dup", 1)
    assert names[("b", "dup")] == "dup_" + h8("b", "dup")
    assert_valid(names, OPENAI)
    details = {(w.server, w.tool): w.detail for w in warnings}
    assert "suffix clashed, rehashed" in details[("a", "dup")]
    assert "suffix clashed" not in details[("b", "dup")]
    assert ("c", squatter) not in details


def test_identical_round_zero_hash_inputs_still_get_distinct_names() -> None:
    # server "s\0t" + tool "u" and server "s" + tool "t\0u" hash the same bytes in round 0,
    # and with separator "_" both sanitise to "p_t_u".
    requests = [("s\x00t", "p_t", "u"), ("s", "p", "t\x00u")]
    assert h8("s\x00t", "u") == h8("s", "t\x00u")
    names, _ = assign_names(requests, OPENAI, "_")
    assert_valid(names, OPENAI)
    assert all(n.startswith("p_t_u_") for n in names.values())


def test_conflicting_prefixes_for_one_tool_are_rejected() -> None:
    with pytest.raises(ValueError):
        assign_names([("s", "a", "t"), ("s", "b", "t")], OPENAI, "__")


# ------------------------------------------------------------------ properties

ALPHABET = st.sampled_from(["a", "b", "_", "-", ".", " ", "é", "\U0001f600", "\uffff", "x"])
tool_names = st.one_of(
    st.text(ALPHABET, max_size=6),
    st.sampled_from(["tool_search", "tool_call", "a_b", "a.b", "a b", "x__y"]),
    st.text(ALPHABET, min_size=60, max_size=70),
)
SERVERS = {"s1": "s1", "s1__a": "s1__a", "s2": "", "s3": "", "s\U0001f600": "s\U0001f600"}


@st.composite
def request_sets(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    pairs = draw(st.lists(st.tuples(st.sampled_from(sorted(SERVERS)), tool_names), max_size=12, unique=True))
    return [(server, SERVERS[server], tool) for server, tool in pairs]


@settings(max_examples=120, deadline=None)
@given(
    request_sets(),
    st.sampled_from(sorted(PROFILES)),
    st.sampled_from(["__", ".", "_"]),
    st.data(),
)
def test_valid_unique_reported_and_order_independent(
    requests: list[tuple[str, str, str]], profile_name: str, separator: str, data: st.DataObject
) -> None:
    profile = PROFILES[profile_name]
    names, warnings = assign_names(requests, profile, separator, META)
    assert set(names) == {(s, t) for s, _, t in requests}
    assert_valid(names, profile)
    assert not set(names.values()) & META
    renamed = {(w.server, w.tool) for w in warnings}
    for server, prefix, tool in requests:
        changed = names[(server, tool)] != qualify(prefix, tool, separator)
        assert changed == ((server, tool) in renamed)
    for _ in range(3):
        shuffled = data.draw(st.permutations(requests))
        assert assign_names(shuffled, profile, separator, META) == (names, warnings)
