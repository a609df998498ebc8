"""BM25 tool search: tokenising, ranking, paging, rendering, meta tool schemas."""

from __future__ import annotations

import json
from typing import Any

import canonicaljson
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.model import Entry
from catalog.search import (
    TOOL_SEARCH_SCHEMA,
    SearchIndex,
    SearchResult,
    excerpt,
    render,
    tokens,
    tool_call_declaration,
    tool_search_declaration,
)


def tool(name: str, description: str = "", params: dict[str, Any] | None = None, original: str | None = None) -> Entry:
    server, _, rest = name.partition("__")
    schema = {"properties": params or {}, "type": "object"}
    decl = {"description": description, "inputSchema": schema, "name": name}
    return Entry(name, server if rest else "", original or rest or name, decl, True)


ENTRIES = [
    tool("github__create_issue", "Create a new issue in a GitHub repository.",
         {"owner": {"type": "string", "description": "Repository owner"}, "title": {"type": "string"}}),
    tool("github__list_issues", "List issues in a GitHub repository.",
         {"state": {"type": "string", "enum": ["open", "closed"]}}),
    tool("jira__createIssue", "Open a ticket in Jira.", {"project": {"type": "string"}}),
    tool("fs__read_file", "Read the complete contents of a file from disk.",
         {"path": {"type": "string", "description": "Absolute path"}}),
    tool("pg__query", "Run a read-only statement against the configured database.",
         {"sql": {"type": "string", "description": "A single SELECT statement"}}),
    tool("k8s__kubectlGet", "Fetch cluster resources.",
         {"filter": {"type": "object", "properties": {"labelSelector": {"type": "string",
                                                                         "description": "Matches pods by tag"}}}}),
    tool("mail__send", "Deliver a message.", original="send"),
    tool("chat__send", "Deliver a message.", original="send"),
]
INDEX = SearchIndex(ENTRIES)


def names(result: SearchResult) -> list[str]:
    return [e.name for e in result.matches]


# -- tokens ---------------------------------------------------------------------------


def test_tokens_split_separators_camel_case_and_digits() -> None:
    assert tokens("github__createIssue") == ["github", "create", "issue"]
    assert tokens("HTTPServer get-v2.url") == ["http", "server", "get", "v", "2", "url"]
    assert tokens("listURLs parseJSONBody") == ["list", "url", "parse", "json", "body"]
    assert tokens("Files, status; CLASS") == ["file", "status", "class"]
    assert tokens("搜索代码 Größe") == ["搜", "索", "代", "码", "grösse"]


def test_a_non_ascii_capital_splits_as_an_ascii_one_does() -> None:
    """``[A-Z]`` alone was a capital: ``getÜbersicht`` was one word (its Ü began no part) and
    ``ÉTAT`` two (its É ended one), where ``getUbersicht`` and ``ETAT`` split as camelCase."""
    unicode = tokens("getÜbersicht HTTPÜber ÉTAT ÉcoleNormale")
    assert unicode == ["get", "übersicht", "http", "über", "état", "école", "normale"]
    ascii_ = tokens("getUbersicht HTTPUber ETAT EcoleNormale")
    assert ascii_ == ["get", "ubersicht", "http", "uber", "etat", "ecole", "normale"]
    index = SearchIndex([
        *ENTRIES,
        tool("de__getÜbersicht", "Zeigt die Übersicht."),
        tool("fr__lireFichier", "Lit l'ÉTAT du fichier."),
    ])
    assert names(index.query("übersicht"))[0] == "de__getÜbersicht"
    assert names(index.query("get übersicht"))[0] == "de__getÜbersicht"
    assert names(index.query("état"))[0] == "fr__lireFichier"


# -- ranking --------------------------------------------------------------------------


def test_exact_name_match_ranks_first_case_insensitively() -> None:
    result = INDEX.query("GITHUB__LIST_ISSUES")
    assert names(result)[0] == "github__list_issues"
    # without the exact rule "create issue" terms would not promote list_issues
    assert names(INDEX.query("github__create_issue"))[0] == "github__create_issue"


def test_words_no_tool_has_are_not_kept_by_the_index() -> None:
    """One index serves its epoch's every tool_search, for days: a query word no tool has
    matches nothing and is not kept (every such word was cached, one entry each, so what
    clients asked grew the gateway without bound). The catalog's own terms still are."""
    index = SearchIndex(ENTRIES)
    unheard = ["qz" + "".join(chr(ord("a") + int(d)) for d in str(i)) for i in range(2000)]  # qza, qzb, ...
    for word in unheard:
        assert index.query(word).total == 0
    assert names(index.query("issue")) == names(index.query("issue qzb"))
    assert index._scored and set(index._scored) <= set(index._docs)  # noqa: SLF001 - the cache is what is bounded


def test_the_word_cache_keeps_no_long_word_and_stays_bounded() -> None:
    """Every word a query holds is analysed through one process-wide cache: 131,072 words of
    500 characters (a client's queries) held some 150 MB. A long word is analysed but never
    kept, and the cache is cleared at its limit; results are the same either way."""
    from catalog.search import _WORDS  # noqa: PLC0415 - the cache is what is bounded

    index = SearchIndex(ENTRIES)
    long_word = "q" * 400
    assert index.query(f"issue {long_word}").total == index.query("issue").total
    assert long_word not in _WORDS
    for i in range(_WORDS.LIMIT + 10):
        _WORDS[f"w{i}"]
    assert len(_WORDS) <= _WORDS.LIMIT


def test_exact_match_beats_a_higher_bm25_score() -> None:
    idx = SearchIndex([
        tool("s__list", "Shows every entry of the inventory with all of its fields and history."),
        tool("t__list_list", "list list list: list things"),
    ])
    assert names(idx.query("list list"))[0] == "t__list_list"  # BM25 alone prefers t__
    assert names(idx.query(" LIST "))[0] == "s__list"  # whole query == original name


def test_exact_original_name_matches_every_server_in_code_unit_order() -> None:
    assert names(INDEX.query("send"))[:2] == ["chat__send", "mail__send"]


def test_camel_case_name_is_found_by_words() -> None:
    assert "jira__createIssue" in names(INDEX.query("create issue"))
    assert names(INDEX.query("kubectl get"))[0] == "k8s__kubectlGet"
    assert names(INDEX.query("readfile"))[0] == "fs__read_file"  # compound of the name


def test_a_plural_name_is_found_by_its_words_written_together() -> None:
    """The query's word is plural-stripped (``listissues`` -> ``listissue``), so the name's
    compound must be too: ``list_issues`` written together found nothing at all."""
    index = SearchIndex([*ENTRIES, tool("fs__read_files", "Read several at once.")])
    assert names(index.query("listissues"))[0] == "github__list_issues"
    assert names(index.query("ListIssues"))[0] == "github__list_issues"
    assert "fs__read_files" in names(index.query("readfiles"))


def test_description_and_parameter_matches() -> None:
    assert names(INDEX.query("database statement"))[0] == "pg__query"
    assert names(INDEX.query("sql"))[0] == "pg__query"  # parameter name
    assert names(INDEX.query("pods"))[0] == "k8s__kubectlGet"  # nested parameter description
    assert names(INDEX.query("labelSelector"))[0] == "k8s__kubectlGet"  # nested parameter name
    assert names(INDEX.query("absolute"))[0] == "fs__read_file"


def test_name_terms_outrank_description_terms() -> None:
    idx = SearchIndex([tool("a__other", "mentions the word widget"), tool("b__widget", "does things")])
    assert names(idx.query("widget")) == ["b__widget", "a__other"]


def test_ties_in_code_unit_order() -> None:
    same = [tool(n, "identical text") for n in ("b__x", "\uff5a__x", "a__x", "\U0001d41a__x")]
    result = SearchIndex(same).query("identical", limit=10)
    assert names(result) == ["a__x", "b__x", "\U0001d41a__x", "\uff5a__x"]  # not code-point order
    assert sorted(names(result)) != names(result)


def test_limit_and_offset_are_clamped_and_page() -> None:
    many = SearchIndex([tool(f"s__tool{i:03d}", "common word") for i in range(80)])
    result = many.query("common", limit=1000)
    assert len(result.matches) == 50 and result.limit == 50 and result.total == 80
    assert len(many.query("common", limit=0).matches) == 1
    assert len(many.query("common", limit=-3).matches) == 1
    assert many.query("common", limit="7").limit == 5  # type: ignore[arg-type]
    assert many.query("common", offset=-5).offset == 0
    page = many.query("common", limit=5, offset=75)
    assert names(page) == [f"s__tool{i:03d}" for i in range(75, 80)]
    assert many.query("common", limit=5, offset=500).matches == ()
    first = names(many.query("common", limit=10))
    assert names(many.query("common", limit=5)) + names(many.query("common", limit=5, offset=5)) == first


def test_no_match_lists_closest_names() -> None:
    result = INDEX.query("githb_craete_isue")
    if result.total:  # the query must not match by terms for this test to be meaningful
        pytest.fail(f"unexpected matches {names(result)}")
    assert result.closest[0] == "github__create_issue" and len(result.closest) <= 5
    assert INDEX.query("githb_craete_isue").closest == result.closest
    assert SearchIndex([]).query("anything").closest == ()
    text = render(result, []).text
    assert "No tools match" in text and "github__create_issue" in text


def test_closest_ties_in_code_unit_order() -> None:
    idx = SearchIndex([tool(n) for n in ("zq", "\uff5aq", "\U0001d41aq", "aq")])
    assert idx.query("bq").total == 0
    assert idx.query("bq").closest == ("aq", "zq", "\U0001d41aq", "\uff5aq")
    assert idx.query("zzq").closest[0] == "zq"


def test_index_does_not_mutate_entries() -> None:
    before = canonicaljson.encode_canonical_json([e.declaration for e in ENTRIES])
    SearchIndex(ENTRIES).query("issue")
    assert canonicaljson.encode_canonical_json([e.declaration for e in ENTRIES]) == before


@settings(max_examples=50, deadline=None)
@given(st.permutations(ENTRIES), st.sampled_from(["issue", "create", "message", "read file", "x"]))
def test_input_order_does_not_matter(entries: list[Entry], q: str) -> None:
    assert SearchIndex(entries).query(q, limit=50) == INDEX.query(q, limit=50)


# -- render ---------------------------------------------------------------------------


def test_render_shows_name_excerpt_schema_activation_and_page() -> None:
    result = INDEX.query("issue", limit=2)
    out = render(result, ["github__list_issues", "github__create_issue", "not_shown"])
    assert out.shown_names == tuple(names(result))
    schema = canonicaljson.encode_canonical_json(result.matches[0].declaration["inputSchema"]).decode()
    assert f"1. {result.matches[0].name}\n" in out.text and schema in out.text
    assert "Activated: " + ", ".join(out.shown_names) + "." in out.text and "not_shown" not in out.text
    assert f"Showing 1-2 of {result.total}" in out.text and "offset 2" in out.text


def test_render_is_deterministic_bytes() -> None:
    a = render(INDEX.query("issue"), ["github__create_issue"]).text.encode()
    b = render(SearchIndex(list(reversed(ENTRIES))).query("issue"), ["github__create_issue"]).text.encode()
    assert a == b


def test_render_is_bounded_and_reports_left_out_matches() -> None:
    big = [tool(f"s__t{i}", "big tool", {f"p{j}": {"type": "string", "description": "x" * 200} for j in range(5)})
           for i in range(10)]
    result = SearchIndex(big).query("big", limit=10)
    full = render(result, names(result))
    assert len(full.shown_names) == 10
    limit = len(full.text.encode()) // 2
    out = render(result, names(result), max_bytes=limit)
    assert len(out.text.encode()) <= limit
    k = len(out.shown_names)
    assert 0 < k < 10 and out.shown_names == tuple(names(result)[:k])
    assert f"{10 - k} more on this page did not fit" in out.text and f"offset {k}" in out.text
    assert f"s__t{names(result)[k][4:]}" not in out.text.split("Activated:")[0]
    tiny = render(result, names(result), max_bytes=200)
    assert len(tiny.text.encode()) <= 200 and tiny.shown_names == ()
    assert len(render(result, [], max_bytes=10).text.encode()) <= 10


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 6000))
def test_render_never_exceeds_max_bytes(max_bytes: int) -> None:
    result = INDEX.query("issue message file", limit=50)
    out = render(result, names(result), max_bytes=max_bytes)
    assert len(out.text.encode("utf-8")) <= max_bytes
    assert all(n in out.text for n in out.shown_names)


def test_the_fixed_text_gives_way_to_the_first_match_and_is_never_cut() -> None:
    """A long echo and a long last line (servers that are down) left a 1 KiB page no room for
    a match ("Showing 0 ... call tool_search again with offset 0", for ever); with no match,
    the closest names and that line were cut mid-word."""
    extra = "Servers down: " + ", ".join(f"server_{i:03d}" for i in range(80)) + "."
    shorter = ["Servers down: server_000 and 79 more.", "Servers down: 80 servers."]
    result = INDEX.query("\x01" * 99 + " issue", limit=1)
    out = render(result, names(result), max_bytes=1024, extra=extra, shorter=shorter)
    assert out.shown_names == tuple(names(result)) and len(out.text.encode()) <= 1024
    assert out.text.endswith("\nServers down: server_000 and 79 more."), out.text
    missing = INDEX.query("githubcreateissuez")
    assert missing.total == 0 and missing.closest
    for max_bytes in range(100, 1200, 20):
        text = render(missing, [], max_bytes=max_bytes, extra=extra, shorter=shorter).text
        assert len(text.encode()) <= max_bytes
        if max_bytes >= 200:
            assert text.endswith("."), text
            said = text.partition("Closest names: ")[2].partition(".\n")[0]
            assert not said or set(said.split(", ")) <= set(missing.closest), text


def test_render_offset_past_end() -> None:
    out = render(INDEX.query("issue", offset=40), [])
    assert out.shown_names == () and "No matches at offset 40" in out.text


def test_excerpt_limits_characters_without_splitting() -> None:
    assert excerpt("short  text\n here") == "short text here"
    cut = excerpt("é" * 400)
    assert len(cut) == 300 and cut.endswith("…")
    assert excerpt("a" * 298 + "e\u0301x", 300) == "a" * 298 + "…"  # no bare combining mark
    assert excerpt("a" * 298 + "\U0001f1fa\U0001f1f8z", 300) == "a" * 298 + "…"  # no half flag
    assert len(excerpt("中" * 1000)) == 300


# -- meta tools -----------------------------------------------------------------------


def _keys_sorted(value: object) -> bool:
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(_keys_sorted(v) for v in value.values())
    if isinstance(value, list):
        return all(_keys_sorted(v) for v in value)
    return True


def test_meta_declarations_are_valid_sorted_and_fresh() -> None:
    for make, name in ((tool_search_declaration, "tool_search"), (tool_call_declaration, "tool_call")):
        decl = make()
        assert decl["name"] == name and _keys_sorted(decl) and decl["description"]
        jsonschema.Draft202012Validator.check_schema(decl["inputSchema"])
        decl["inputSchema"]["properties"].clear()
        assert make()["inputSchema"]["properties"]  # no shared state
    assert json.dumps(tool_search_declaration()) == json.dumps(tool_search_declaration())
    # read-only, so a client that asks before other tools (Codex) runs it at once; tool_call
    # runs whatever tool it names, so it claims nothing
    assert tool_search_declaration()["annotations"] == {"readOnlyHint": True}
    assert "annotations" not in tool_call_declaration()


def test_tool_search_schema_bounds() -> None:
    v = jsonschema.Draft202012Validator(TOOL_SEARCH_SCHEMA)
    assert v.is_valid({"query": "x"}) and v.is_valid({"query": "x" * 500, "limit": 50, "offset": 0})
    for bad in ({}, {"query": ""}, {"query": "x" * 501}, {"query": "x", "limit": 0}, {"query": "x", "offset": -1}):
        assert not v.is_valid(bad), bad
    props = TOOL_SEARCH_SCHEMA["properties"]
    assert props["limit"]["default"] == 5 and props["offset"]["default"] == 0
    call = jsonschema.Draft202012Validator(tool_call_declaration()["inputSchema"])
    assert call.is_valid({"name": "a", "arguments": {"x": 1}}) and not call.is_valid({"arguments": {}})


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("contains", {"description": "quokka"}),
        ("propertyNames", {"description": "quokka"}),
        ("dependentSchemas", {"mode": {"description": "quokka"}}),
        ("dependencies", {"mode": {"description": "quokka"}}),
        ("unevaluatedProperties", {"description": "quokka"}),
        ("items", [{"description": "quokka"}]),  # draft 7's array form
    ],
)
def test_text_under_every_subschema_keyword_is_found(keyword: str, value: Any) -> None:
    """Search walks the same keyword table as canonicalisation (catalog.keywords)."""
    entry = tool("zoo__list", "List the animals.", {"tags": {"type": "array", keyword: value}})
    other = tool("zoo__feed", "Feed the animals.")
    assert names(SearchIndex([entry, other]).query("quokka")) == ["zoo__list"]
