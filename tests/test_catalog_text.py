"""``prefixgate catalog``'s text output, read at a glance: every number once, resource and
prompt counts, tools refused by ``[policy]`` marked, the fallback's reasons one per line,
and the listed-versus-catalog difference explained (in the table and in the log)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import GATEWAY, PYTHON, demo, run_cli, write_config

ROOT = Path(__file__).resolve().parent.parent


def catalog(config: Path) -> tuple[str, str, dict[str, Any]]:
    text = run_cli("catalog", "--config", str(config), "--log-level", "info")
    as_json = run_cli("catalog", "--config", str(config), "--json", "--log-level", "warning")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    return text.stdout, text.stderr, json.loads(as_json.stdout)


def test_counts_agree_and_say_why(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {"d": {**demo("--tools", 3, "--rich", "--name", "d"), "exclude": ["echo"]}, "e": demo("--tools", 1)},
        policy={"deny": ["d__fail", "D__FAIL"]},
    )
    out, log, report = catalog(config)
    d = next(s for s in report["servers"] if s["id"] == "d")
    assert d["held"] == {"excluded": 1, "quarantined": 0, "duplicate": 0} and d["listed"] == d["tools"] + 1
    total = len(report["tools"])
    listed = sum(s["listed"] for s in report["servers"])
    assert listed == total + 1
    # the server's own log line counts what it listed; the table and the summary say what became of it
    assert f"[d] ready: {d['listed']} tools" in log
    assert f"catalog: {total} tools from 2 of 2 servers ({listed} listed: 1 excluded);" in log
    assert re.search(rf"^  d +ready +{d['tools']} +\d+ ms  \({d['listed']} listed: 1 excluded\)$", out, re.M), out
    assert f"\ncatalog: {total} tools from 2 of 2 servers ({listed} listed: 1 excluded)\n" in out
    # resources, templates and prompts are counted
    assert report["resources"] > 0 and report["prompts"]
    assert (
        f"also: {report['resources']} resources, {report['resource_templates']} resource template, "
        f"{len(report['prompts'])} prompts" in out
    )
    # a denied tool is marked, with the rule, in text and JSON
    policies = {t["name"]: t["policy"] for t in report["tools"]}
    assert policies.pop("d__fail") == "denied by 'd__fail'" and set(policies.values()) == {None}
    (line,) = [ln for ln in out.splitlines() if "<- d/fail" in ln]
    assert line.startswith(" !") and line.endswith("denied by 'd__fail'")
    assert "1 tool refused at call time, marked !" in out
    # a pattern that names no tool (a typo: matching is case-sensitive) denies nothing: said
    assert report["policy_unmatched"] == ["D__FAIL"]
    assert "  policy: deny pattern 'D__FAIL' matches no tool (patterns are case-sensitive globs" in out
    # every number once: the decision's numbers are not repeated by its detail line
    fn, tok = report["functions"], report["tokens"]
    assert out.count(f"~{tok['declared']} tokens") == 1
    assert out.count(f"{fn['declared']} functions") == 1
    assert f"{fn['declared']} functions declared (limit 128): {total} tools + artifact_read" in out


def test_on_demand_fallback_reads_as_reasons(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 6)}, client={"max_functions": 4})
    out, _, report = catalog(config)
    assert (report["mode"], report["fallback"]) == ("on-demand", "tool-count")
    tok = report["tokens"]["declared"]
    assert "declarations: on-demand (fell back: tool-count)\n" in out
    assert "  3 functions declared (limit 4): artifact_read + tool_call + tool_search\n" in out
    deferred_line = f"  ~{tok} tokens (no context window set), {report['deferred']} deferred (reachable through"
    assert deferred_line in out
    assert "\n  why: fixed needs " in out and "\n  then all " in out
    assert out.count(f"~{tok} tokens") == 1
    deferred = [ln for ln in out.splitlines() if "<- d/" in ln]
    assert deferred and all(ln.startswith("  *") for ln in deferred)


def test_json_keeps_every_field_it_had(tmp_path: Path) -> None:
    """--json only grows: servers[].held and tools[].policy are new, nothing renamed."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    _, _, report = catalog(config)
    assert {"fingerprint", "catalog_fingerprint", "identity", "mode", "fallback", "detail", "functions", "tokens",
            "deferred", "discovery_ms", "servers", "tools", "declarations", "warnings", "resources",
            "resource_templates", "prompts"} <= set(report)  # fmt: skip
    assert {"id", "status", "tools", "listed", "error", "startup_ms", "required", "transport", "held"} <= set(
        report["servers"][0]
    )
    assert {"name", "server", "original", "declared", "deferred", "policy"} <= set(report["tools"][0])


def test_a_count_of_one_reads_in_the_singular(tmp_path: Path) -> None:
    """One server with one tool: "1 tools", "of 1 servers" were printed and logged."""
    from tests.test_hardening_schema import rogue, tool

    out, log, _ = catalog(write_config(tmp_path, {"s": rogue(tools=[tool("t")])}))
    assert re.search(r"\[s\] ready: 1 tool in \d+ ms", log), log
    assert "catalog: 1 tool from 1 of 1 server; " in log
    assert "\ncatalog: 1 tool from 1 of 1 server\n" in out
    lock = run_cli("catalog", "lock", "--config", str(tmp_path / "prefixgate.toml"), "--log-level", "info")
    assert lock.returncode == 0 and ": 1 tool, fingerprint " in lock.stdout, lock.stderr


@pytest.mark.parametrize("command", [["catalog"], ["catalog", "--json"], ["doctor"], ["doctor", "--json"]])
def test_a_stdout_that_is_not_utf8_gets_the_text_whole(tmp_path: Path, command: list[str]) -> None:
    """A description or name outside its code page (a Windows pipe's cp1252; here
    ``PYTHONIOENCODING=ascii``) stopped these commands on a traceback: redirected, the output is
    now UTF-8 (``--json`` the same object as anywhere else)."""
    tools = [{"name": "café", "description": "Brews ☕ 😀", "inputSchema": {"type": "object"}}]
    rogue = {"command": PYTHON, "args": [str(ROOT / "tests" / "rogue_schema.py"), json.dumps({"tools": tools})]}
    config = write_config(tmp_path, {"r": rogue})
    proc = subprocess.run(
        [*GATEWAY, *command, "--config", str(config), "--log-level", "error"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        timeout=60,
    )
    assert proc.returncode in ((0, 1) if command[0] == "doctor" else (0,)), proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    out = proc.stdout.decode("utf-8")
    if command == ["catalog", "--json"]:
        assert "Brews ☕ 😀" in {d.get("description") for d in json.loads(out)["declarations"]}
    elif command == ["doctor", "--json"]:
        assert json.loads(out)["version"]
    else:
        assert "café" in out
