"""``prefixgate catalog diff``: what changed between two ``catalog --json`` reports, and
whether the published ``tools/list`` bytes (the prompt cache) are affected."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.diff import ABSENT, Change, diff, json_changes, name_changes, render
from gateway.commands import diff as diff_cmd
from tests.helpers import PYTHON, demo, run_cli, write_config

Report = dict[str, Any]

# --- real reports from the bundled demo server, generated once, concurrently ---------------

VARIANTS: dict[str, tuple[dict[str, dict[str, Any]], dict[str, Any]]] = {
    "base": ({"github": demo("--tools", 3, "--seed", 1)}, {}),
    # Another seed shuffles every key, `required` and the listing order: same bytes.
    "reseeded": ({"github": demo("--tools", 3, "--seed", 2)}, {}),
    # get.issue sanitises to get_issue: both collide and get a hash suffix.
    "collision": ({"github": demo("--tools", 3, "--seed", 1, "--extra-tool", "get.issue")}, {}),
    "on_demand": ({"github": demo("--tools", 3, "--seed", 1)}, {"client": {"max_functions": 5}}),
    "failed": ({"github": {"command": "/nonexistent/prefixgate-test-binary"}}, {}),
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Report]:
    procs = {}
    for name, (servers, tables) in VARIANTS.items():
        directory = tmp_path_factory.mktemp(name)
        config = write_config(directory, servers, **tables)
        procs[name] = subprocess.Popen(
            [PYTHON, "-m", "gateway", "catalog", "--config", str(config), "--json", "--log-level", "error"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    reports = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        reports[name] = json.loads(out)
    return reports


@pytest.fixture
def base(real: dict[str, Report]) -> Report:
    return copy.deepcopy(real["base"])


def decl(report: Report, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(d for d in report["declarations"] if d["name"] == name)
    return found


def without(report: Report, name: str) -> Report:
    """The report as it was before the server offered ``name`` (a realistic older run)."""
    old = copy.deepcopy(report)
    old["declarations"] = [d for d in old["declarations"] if d["name"] != name]
    old["tools"] = [t for t in old["tools"] if t["name"] != name]
    old["fingerprint"] = "f" * 64
    old["servers"][0]["tools"] -= 1
    return old


def lines(report_text: str) -> list[str]:
    return [line.strip() for line in report_text.splitlines()]


# --- identical bytes ---------------------------------------------------------------------


def test_identical_reports(real: dict[str, Report]) -> None:
    d = diff(real["base"], copy.deepcopy(real["base"]))
    assert d.identical is True and d.causes == () and d.empty
    text = render(d)
    fp = real["base"]["fingerprint"]
    assert text.splitlines()[0] == (
        f"published tools/list bytes are identical (fingerprint {fp[:16]}): the prompt cache is unaffected"
    )
    assert f"fingerprint: {fp}" in text


def test_another_seed_reorders_the_source_but_not_the_bytes(real: dict[str, Report]) -> None:
    """Key order, `required` order and listing order differ downstream; timings differ."""
    old, new = real["base"], real["reseeded"]
    assert old["fingerprint"] == new["fingerprint"]
    d = diff(old, new)
    assert d.identical is True
    # discovery_ms and startup_ms are timing noise, never reported.
    assert d.empty, render(d)
    assert render(d).startswith("published tools/list bytes are identical")


def test_deferred_tool_added_in_on_demand_mode_keeps_the_bytes(real: dict[str, Report]) -> None:
    old = copy.deepcopy(real["on_demand"])
    new = copy.deepcopy(old)
    new["tools"].append(
        {"name": "github__zz_new", "server": "github", "original": "zz_new", "declared": False, "deferred": True}
    )
    new["servers"][0]["tools"] += 1
    d = diff(old, new)
    assert d.identical is True
    assert [t.name for t in d.added] == ["github__zz_new"] and d.declarations_added == ()
    text = render(d)
    assert "+ github__zz_new  <- github/zz_new  (not declared, deferred)" in text
    assert "github: tools: 10 -> 11" in text


# --- tools added, removed, renamed, moved ------------------------------------------------------


def test_tool_added(base: Report) -> None:
    old = without(base, "github__list_issue")
    d = diff(old, base)
    assert d.identical is False
    assert [(t.name, t.server, t.original, t.declared) for t in d.added] == [
        ("github__list_issue", "github", "list_issue", True)
    ]
    assert d.removed == () and d.renamed == () and d.changed == () and d.moved == ()
    first = render(d).splitlines()[0]
    fps = f"ffffffffffffffff -> {base['fingerprint'][:16]}"
    assert first == f"published tools/list bytes differ (fingerprint {fps}): 1 tool added (github__list_issue)"
    text = lines(render(d))
    assert "+ github__list_issue  <- github/list_issue  (declared)" in text
    assert "github: tools: 9 -> 10" in text


def test_tool_removed(base: Report) -> None:
    d = diff(base, without(base, "github__list_issue"))
    assert [t.name for t in d.removed] == ["github__list_issue"] and d.added == ()
    assert d.causes == ("1 tool removed (github__list_issue)",)
    assert "- github__list_issue  <- github/list_issue  (declared)" in lines(render(d))


def test_collision_suffix_is_a_rename(real: dict[str, Report]) -> None:
    d = diff(real["base"], real["collision"])
    assert d.identical is False
    assert [(r.server, r.original, r.old_name, r.new_name) for r in d.renamed] == [
        ("github", "get_issue", "github__get_issue", "github__get_issue_673888f8")
    ]
    assert [(t.name, t.original) for t in d.added] == [("github__get_issue_5c8beb61", "get.issue")]
    assert d.removed == () and d.changed == () and d.moved == ()  # the name is not a content change
    assert d.causes == (
        "1 tool added (github__get_issue_5c8beb61)",
        "1 tool renamed (github__get_issue -> github__get_issue_673888f8)",
    )
    text = lines(render(d))
    assert "github__get_issue -> github__get_issue_673888f8  <- github/get_issue" in text
    assert len(d.warnings_added) == 2 and all(w.startswith("renamed: github/") for w in d.warnings_added)
    # And back: the suffix disappears.
    back = diff(real["collision"], real["base"])
    assert [(r.old_name, r.new_name) for r in back.renamed] == [("github__get_issue_673888f8", "github__get_issue")]
    assert len(back.warnings_removed) == 2


def test_order_change_without_content_change(base: Report) -> None:
    new = copy.deepcopy(base)
    names = [d["name"] for d in new["declarations"]]
    i = names.index("github__echo")
    new["declarations"].insert(0, new["declarations"].pop(i))
    d = diff(base, new)
    assert d.identical is False and d.changed == ()
    assert [(m.name, m.old_index, m.new_index) for m in d.moved] == [("github__echo", i, 0)]
    assert d.causes == ("order changed: 1 tool moved (github__echo)",)
    assert f"github__echo: position {i} -> 0" in lines(render(d))


# --- content changes, with paths ----------------------------------------------------------------


def test_schema_change_paths(base: Report) -> None:
    new = copy.deepcopy(base)
    tool = decl(new, "github__create_issue")
    schema = tool["inputSchema"]
    schema["properties"]["options"]["properties"]["labels"]["items"]["type"] = "integer"
    assert schema["required"] == ["owner", "repo"]
    schema["required"].insert(1, "limit")
    del schema["properties"]["repo"]["minLength"]
    schema["properties"]["limit"]["maximum"] = 100.0  # another number text: other bytes
    schema["properties"]["since"] = {"type": "string"}
    tool["annotations"]["title"] = "Create issue"
    tool["description"] = tool["description"].replace("lacks access", "lacks write access")
    d = diff(base, new)
    assert d.identical is False
    assert [c.name for c in d.changed] == ["github__create_issue"]
    assert [(c.path, c.kind) for c in d.changed[0].changes] == [
        ("annotations.title", "added"),
        ("description", "changed"),
        ("inputSchema.properties.limit.maximum", "changed"),
        ("inputSchema.properties.options.properties.labels.items.type", "changed"),
        ("inputSchema.properties.repo.minLength", "removed"),
        ("inputSchema.properties.since", "added"),
        ("inputSchema.required[1]", "added"),
    ]
    text = lines(render(d))
    for expected in [
        'github__create_issue: annotations.title: added "Create issue"',
        'github__create_issue: description: …aller lacks access." -> …aller lacks write access."',
        "github__create_issue: inputSchema.properties.limit.maximum: 100 -> 100.0",
        'github__create_issue: inputSchema.properties.options.properties.labels.items.type: "string" -> "integer"',
        "github__create_issue: inputSchema.properties.repo.minLength: removed 1",
        'github__create_issue: inputSchema.properties.since: added {"type":"string"}',
        'github__create_issue: inputSchema.required[1]: added "limit"',
    ]:
        assert expected in text
    assert d.causes == ("1 declaration changed (github__create_issue)",)


def test_key_order_only_change_differs_in_bytes(base: Report) -> None:
    new = copy.deepcopy(base)
    tool = decl(new, "github__echo")
    tool["inputSchema"] = dict(reversed(list(tool["inputSchema"].items())))
    d = diff(base, new)
    assert d.identical is False
    (change,) = d.changed
    assert change.key_order_only
    assert d.causes == ("key order changed in 1 declaration (github__echo)",)
    assert 'github__echo: inputSchema: key order ["properties","required","type"] -> ' in render(d)


def test_declarations_identical_but_fingerprint_differs(base: Report) -> None:
    new = copy.deepcopy(base)
    new["fingerprint"] = "0" * 64
    d = diff(base, new)
    assert d.identical is False and d.compared == ("declarations", "fingerprint")
    assert d.causes == (
        "the fingerprint changed although the declarations are identical (another prefixgate version?)",
    )


# --- mode, fallback, servers, flags --------------------------------------------------------


def test_mode_fallback_change(real: dict[str, Report]) -> None:
    d = diff(real["base"], real["on_demand"])
    assert d.identical is False
    assert d.causes[0] == "mode fixed -> on-demand (fallback tool-count)"
    assert "2 tools added (tool_call, tool_search)" in d.causes
    assert any(c.startswith("10 tools no longer declared (github__crash, github__create_issue, github__echo, +7 more)")
               for c in d.causes)  # fmt: skip
    assert [(t.name, t.server) for t in d.added] == [("tool_call", None), ("tool_search", None)]
    settings = {c.path: (c.old, c.new) for c in d.settings}
    assert settings["mode"] == ("fixed", "on-demand")
    assert settings["fallback"] == (None, "tool-count")
    assert settings["functions.limit"] == (128, 5)
    assert settings["deferred"] == (0, 10)
    flags = {(f.name, f.flag): (f.old, f.new) for f in d.flags}
    assert flags[("github__echo", "declared")] == (True, False)
    assert flags[("github__echo", "deferred")] == (False, True)
    text = lines(render(d))
    assert "github__echo: declared true -> false, deferred false -> true" in text
    assert "+ tool_search  (gateway tool, declared)" in text
    assert 'fallback: null -> "tool-count"' in text


def test_server_failed(real: dict[str, Report]) -> None:
    d = diff(real["base"], real["failed"])
    assert d.identical is False
    assert d.causes[0] == "server github ready -> failed"
    (server,) = d.servers
    assert server.kind == "changed"
    assert [c.path for c in server.changes] == ["status", "tools", "listed", "error"]
    assert len(d.removed) == 10 and d.removed[0].name == "github__crash"
    text = lines(render(d))
    assert 'github: status: "ready" -> "failed"' in text
    missing = "/nonexistent/prefixgate-test-binary"
    assert f'github: error: null -> "cannot start \'{missing}\': No such file or directory"' in text


def test_server_added_and_removed() -> None:
    old = {"declarations": [], "servers": [{"id": "a", "status": "ready", "tools": 0}]}
    new = {"declarations": [], "servers": [{"id": "b", "status": "late", "tools": 0, "error": "startup timeout"}]}
    d = diff(old, new)
    assert d.identical is True
    assert [(s.id, s.kind) for s in d.servers] == [("a", "removed"), ("b", "added")]
    text = lines(render(d))
    assert '- a: status "ready", tools 0' in text
    assert '+ b: status "late", tools 0, error "startup timeout"' in text


def test_a_change_only_a_profile_sees_is_a_difference(tmp_path: Path) -> None:
    """A config change that reaches one profile's clients only (its exclude taken out): diff
    compared the default profile's report alone, said the bytes were identical and exited 0,
    though that profile's clients got a new tool (and a prompt cache miss)."""
    reports = []
    for exclude in (["d__echo"], []):
        config = write_config(tmp_path, {"d": demo("--tools", 1)}, profiles={"codex": {"exclude": exclude}, "same": {}})
        proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "error")
        assert proc.returncode == 0, proc.stderr
        reports.append(save(tmp_path / f"{len(reports)}.json", json.loads(proc.stdout)))
    proc = run_cli("catalog", "diff", *reports)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first, *rest = proc.stdout.splitlines()
    assert first.startswith("published tools/list bytes are identical (fingerprint ")
    assert first.endswith(": the prompt cache is unaffected (profiles whose bytes differ: codex)")
    section = rest[rest.index("") + 1 :]
    assert section[0].startswith("profile codex: published tools/list bytes differ (fingerprint ")
    assert section[0].endswith("): 1 tool added (d__echo)")
    assert "    + d__echo  <- d/echo  (declared)" in section
    assert not any(line.startswith("profile same") for line in rest)
    as_json = json.loads(run_cli("catalog", "diff", "--json", *reports).stdout)
    assert (as_json["identical"], list(as_json["profiles"])) == (True, ["codex"])
    assert as_json["profiles"]["codex"]["kind"] == "changed" and as_json["profiles"]["codex"]["identical"] is False
    assert run_cli("catalog", "diff", reports[1], reports[1]).returncode == 0


# --- robustness, determinism --------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new",
    [
        ({}, {}),
        ({"fingerprint": "x"}, {"declarations": []}),
        ([], "not even an object"),
        (
            {"declarations": "x", "tools": [1, None, {"name": 3}], "servers": {"a": 1}, "warnings": [None, 3, {}]},
            {"declarations": [[], {}, {"name": None}, {"name": "a"}], "mode": {"a": [1]}, "tools": "no"},
        ),
        ({"declarations": [{"name": "a", "x": [1, {"y": None}]}]}, {"declarations": [{"name": "a", "x": 5}]}),
        ({"profiles": {"a": 1, "b": {}, "d": {"profiles": 3}}}, {"profiles": {"a": [], "c": None, "d": {}}}),
    ],
)
def test_partial_or_malformed_reports_never_crash(old: Any, new: Any) -> None:
    d = diff(old, new)
    assert render(d).endswith("\n")
    json.dumps(d.to_json())


def test_cannot_tell_without_a_common_basis() -> None:
    d = diff({"fingerprint": "x"}, {"declarations": []})
    assert d.identical is None
    assert render(d).startswith("cannot tell whether the published tools/list bytes differ")


def test_old_report_without_tools_list(base: Report) -> None:
    """An older report with only declarations and a fingerprint still compares."""
    old = {"fingerprint": base["fingerprint"], "declarations": base["declarations"][:-1]}
    d = diff(old, base)
    last = base["declarations"][-1]["name"]
    assert d.identical is False
    assert [t.name for t in d.added] == [last]
    assert d.causes == (f"1 tool added ({last})",)
    assert d.flags == ()  # unknown flags are not reported as changes


def test_utf16_code_unit_order_and_deterministic_output() -> None:
    """U+1F600 (surrogates D83D DE00) sorts before U+FF01 in code units, after it in code points."""
    names = ["\uff01tool", "\U0001f600tool", "b", "a"]
    new = {"declarations": [{"name": n} for n in names], "tools": []}
    d = diff({"declarations": [], "tools": []}, new)
    assert [t.name for t in d.added] == ["a", "b", "\U0001f600tool", "\uff01tool"]
    shuffled = {"declarations": [{"name": n} for n in reversed(names)], "tools": []}
    assert [t.name for t in diff({"declarations": []}, shuffled).added] == [t.name for t in d.added]
    assert render(d) == render(diff({"declarations": [], "tools": []}, copy.deepcopy(new)))


def test_json_changes_rules() -> None:
    assert json_changes(["a", "b"], ["a", "x", "b"], "r") == [Change("r[1]", "added", new="x")]
    assert json_changes([1, 2, 3], [1, 3], "r") == [Change("r[1]", "removed", old=2)]
    assert json_changes([True], [1], "r") == [Change("r[0]", "changed", old=True, new=1)]
    assert json_changes({"a b": 1, "é": 2}, {"a b": 2}, "") == [
        Change('["a b"]', "changed", old=1, new=2),
        Change('["é"]', "removed", old=2),
    ]
    assert json_changes(ABSENT, None, "fallback") == [Change("fallback", "added", new=None)]
    assert json_changes({"a": 1}, {"a": 1}) == []


def test_long_values_are_truncated(base: Report) -> None:
    new = copy.deepcopy(base)
    decl(new, "github__echo")["description"] = "x" * 500
    text = render(diff(base, new))
    (line,) = [line for line in text.splitlines() if "github__echo: description" in line]
    assert "…" in line and len(line) < 250
    # --json keeps the full value.
    full = diff(base, new).to_json()["tools"]["changed"][0]["changes"][0]
    assert full == {"path": "description", "kind": "changed", "old": decl(base, "github__echo")["description"],
                    "new": "x" * 500}  # fmt: skip


# --- the command ---------------------------------------------------------------------------------


def run_cmd(*argv: str) -> int:
    return diff_cmd.main(list(argv))


def save(path: Path, report: Any) -> str:
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    return str(path)


def test_cmd_exit_status(tmp_path: Path, real: dict[str, Report], capsys: pytest.CaptureFixture[str]) -> None:
    a = save(tmp_path / "a.json", real["base"])
    b = save(tmp_path / "b.json", real["reseeded"])
    c = save(tmp_path / "c.json", without(real["base"], "github__echo"))
    assert run_cmd(a, b) == 0
    assert capsys.readouterr().out.startswith("published tools/list bytes are identical")
    assert run_cmd(a, c) == 1
    assert capsys.readouterr().out.startswith("published tools/list bytes differ")
    assert run_cmd(a, c, "--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["identical"] is False and out["tools"]["removed"][0]["name"] == "github__echo"
    # UTF-16 with a BOM (a PowerShell redirect) loads too.
    (tmp_path / "u16.json").write_bytes(json.dumps(real["base"]).encode("utf-16"))
    assert run_cmd(str(tmp_path / "u16.json"), a) == 0


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "cannot read: No such file or directory"),
        (b"", "not a catalog --json report: the file is empty"),
        (b'{"fingerprint": ', "not valid JSON: Expecting value (line 1, column 17)"),
        (b"\xff\xfe\xfd", "not valid JSON"),
        (b"[1, 2]", "not a catalog --json report: a JSON array, expected an object"),
        (b'{"servers": []}', "not a catalog --json report: it has neither a 'declarations' list nor a 'fingerprint'"),
    ],
)
def test_cmd_bad_input_exits_2(
    tmp_path: Path, real: dict[str, Report], capsys: pytest.CaptureFixture[str], content: bytes | None, problem: str
) -> None:
    good = save(tmp_path / "good.json", real["base"])
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    assert run_cmd(good, str(bad)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"prefixgate: catalog diff: {bad}: {problem}")
    assert run_cmd(str(bad), good) == 2  # OLD is checked the same way


def test_the_cli_takes_json_before_the_action_and_refuses_stdin_twice(tmp_path: Path, real: dict[str, Report]) -> None:
    a = save(tmp_path / "a.json", real["base"])
    c = save(tmp_path / "c.json", without(real["base"], "github__echo"))
    for argv in (["catalog", "--json", "diff", a, c], ["catalog", "diff", "--json", a, c]):
        proc = run_cli(*argv)
        assert proc.returncode == 1, proc.stderr
        assert json.loads(proc.stdout)["identical"] is False, argv  # JSON either way
    assert run_cli("catalog", "diff", a, c).stdout.startswith("published tools/list bytes differ")
    twice = run_cli("catalog", "diff", "-", "-")
    assert (twice.returncode, twice.stdout) == (2, "")
    assert twice.stderr == "prefixgate: catalog diff: OLD and NEW are both - (stdin holds one report): give a file\n"


def test_cmd_as_module(tmp_path: Path, real: dict[str, Report]) -> None:
    a = save(tmp_path / "a.json", real["base"])
    b = save(tmp_path / "b.json", real["failed"])
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.commands.diff", a, b], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("published tools/list bytes differ (fingerprint ")
    assert "server github ready -> failed" in proc.stdout.splitlines()[0]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)
_decl = st.fixed_dictionaries({"name": st.sampled_from(["a", "b", "\U0001f600", "tool_search"])}, optional={"x": _json})
_tool = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "c"])},
    optional={"server": st.sampled_from(["s", "t"]), "original": st.sampled_from(["a", "b"]), "declared": _json,
              "deferred": st.booleans()},
)  # fmt: skip
_report = st.fixed_dictionaries(
    {},
    optional={
        "fingerprint": st.sampled_from(["f1", "f2"]) | _json,
        "declarations": st.lists(_decl | _json, max_size=4) | _json,
        "tools": st.lists(_tool | _json, max_size=4) | _json,
        "servers": st.lists(st.fixed_dictionaries({"id": st.sampled_from(["s", "t"])}, optional={"status": _json}),
                            max_size=3) | _json,
        "warnings": st.lists(_json, max_size=3),
        "mode": _json,
        "functions": _json,
    },
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(_report, _report)
def test_any_report_shape_diffs_without_crashing(old: Report, new: Report) -> None:
    d = diff(old, new)
    text = render(d)
    assert text == render(diff(copy.deepcopy(old), copy.deepcopy(new)))
    json.dumps(d.to_json())
    assert (d.identical is True) == text.startswith("published tools/list bytes are identical")
    if d.identical is False:
        assert text.startswith("published tools/list bytes differ")


def test_name_changes_is_the_one_short_summary() -> None:
    """The epoch log line and doctor's stability check: kinds in order, names in code-unit order, cut."""
    before = {"\uffff": 1, "\U0001f600": 1, "kept": 1, "same": 1}
    after = {"e": 1, "a": 1, "c": 1, "d": 1, "kept": 2, "same": 1}
    assert name_changes(before, after) == [
        "added: a, c, d, +1 more",
        'removed: \U0001f600, "\uffff"',  # a surrogate pair sorts before U+FFFF; unprintable is quoted
        "changed: kept",
    ]
    assert name_changes(before, before) == []
