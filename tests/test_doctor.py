"""``prefixgate doctor``: real processes, real demo servers, a server whose tools drift."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gateway.config import DEFAULT_MAX_CALL_TIME
from tests.helpers import GATEWAY, PYTHON, demo, run_cli, stopped_while_a_server_starts, write_config

DOCTOR = [PYTHON, "-m", "gateway.commands.doctor"]

# A stdio MCP server (mcp 2.x low-level SDK) whose tool list changes every time it starts:
# a counter file says how often it has been started, and the tool's description and a
# second tool depend on it.
DRIFTING_SERVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    counter = Path(sys.argv[1])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))

    async def list_tools(ctx, params):
        tools = [types.Tool(name="status", description=f"Status, generation {n}.", input_schema={"type": "object"})]
        if n % 2 == 0:
            tools.append(types.Tool(name="extra", input_schema={"type": "object"}))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
        return types.CallToolResult(content=[types.TextContent(type="text", text=str(n))])

    async def main():
        server = Server("drifting", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    """
)

FAILING = ["-c", "import sys; sys.stderr.write('starting\\nboom: DEMO_TOKEN is not set\\n'); sys.exit(3)"]


def _argv(config: Path | None, args: tuple[str, ...]) -> list[str]:
    return [*DOCTOR, *(["--config", str(config)] if config is not None else []), *args]


def doctor(config: Path | None, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(config, args), capture_output=True, text=True, timeout=timeout, cwd="/")


def doctors(*runs: tuple[Path, tuple[str, ...]], timeout: float = 60) -> list[subprocess.CompletedProcess[str]]:
    """Several doctor runs at once (each discovery waits mostly on server start-up)."""
    procs = [
        subprocess.Popen(_argv(config, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
        for config, args in runs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def lines_with(text: str, *needles: str) -> list[str]:
    return [line for line in text.splitlines() if all(n in line for n in needles)]


def verdict(text: str, *needles: str) -> str:
    found = lines_with(text, *needles)
    assert len(found) == 1, (needles, text)
    return found[0].split()[0]


def troubled_config(tmp: Path) -> Path:
    """One healthy server, one that fails to start, one with invalid tool schemas, one whose
    tool list drifts, one late, one disabled."""
    script = tmp / "drifting.py"
    script.write_text(DRIFTING_SERVER, encoding="utf-8")
    return write_config(
        tmp,
        {
            "healthy": demo("--tools", 2),
            "broken": {"command": PYTHON, "args": FAILING},
            "badschema": demo("--tools", 2, "--bad-schema", "--name", "bad"),
            "drifting": {"command": PYTHON, "args": [str(script), str(tmp / "counter")]},
            "sleepy": {**demo("--tools", 1, "--startup-delay", 30), "startup_timeout": 0.5},
            "off": {**demo("--tools", 1), "enabled": False},
        },
    )


@pytest.fixture(scope="module")
def troubled(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """One doctor run (text) and one (--json), at once, each over its own copy of the config."""
    text_config = troubled_config(tmp_path_factory.mktemp("doctor-text"))
    json_config = troubled_config(tmp_path_factory.mktemp("doctor-json"))
    text, as_json = doctors((text_config, ()), (json_config, ("--json",)))
    assert as_json.returncode == 1, as_json.stderr
    return text, json.loads(as_json.stdout), text_config


def test_troubled_config_needs_attention(
    troubled: tuple[subprocess.CompletedProcess[str], dict[str, Any], Path],
) -> None:
    proc, _, config = troubled
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr
    assert f"config: {config}" in out
    assert verdict(out, "parsed: 6 servers (5 enabled)") == "ok"
    # servers: ready with time and count; failed with the error and its stderr tail; late; disabled
    healthy = lines_with(out, "healthy: ready in ")
    assert len(healthy) == 1 and healthy[0].split()[0] == "ok" and " ms, 9 tools" in healthy[0]
    assert verdict(out, "broken: failed") == "FAIL"
    assert "exited during start-up (exit status 3)" in out
    assert lines_with(out, "stderr | starting") and lines_with(out, "stderr | boom: DEMO_TOKEN is not set")
    assert verdict(out, "sleepy: late") == "warn"
    assert verdict(out, "off: disabled") == "info"
    assert verdict(out, "badschema: ready in") == "ok"
    assert "(12 listed, 3 quarantined)" in lines_with(out, "badschema: ready in")[0]
    # tools: the invalid schemas are quarantined, with their reasons
    for tool in ("broken", "broken_type", "broken_hint"):
        assert verdict(out, f"quarantined: badschema/{tool}:") == "warn"
    # stability: the drifting server is named as the cache killer, nobody else is
    assert verdict(out, "published tools/list differs between two discoveries") == "FAIL"
    killer = lines_with(out, "drifting: its tool list changed between two listings, a cache killer")
    assert len(killer) == 1 and killer[0].split()[0] == "FAIL", out
    assert "added: extra" in killer[0] and "changed: status" in killer[0]
    assert not lines_with(out, "healthy: its tool list changed")
    assert not lines_with(out, "badschema: its tool list changed")
    # the declaration numbers and the directories are there
    assert verdict(out, "mode fixed (requested auto, profile openai)") == "ok"
    assert lines_with(out, "functions: ", " declared (limit 128)")
    assert lines_with(out, "tokens: ~", " estimated (no budget")
    assert verdict(out, "state directory", "missing; will be created") == "ok"
    assert out.rstrip().endswith("needs attention")
    assert "claude mcp add --scope user prefixgate -- " in out


def test_troubled_config_json(troubled: tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]) -> None:
    _, report, _ = troubled
    assert report["status"] == 1 and report["config"].endswith("/prefixgate.toml")
    servers = {s["id"]: s for s in report["servers"]}
    assert [s["id"] for s in report["servers"]] == sorted(servers)
    assert servers["healthy"]["status"] == "ready" and servers["healthy"]["listed"] == 9
    assert servers["broken"]["status"] == "failed"
    assert servers["broken"]["stderr_tail"] == ["starting", "boom: DEMO_TOKEN is not set"]
    assert servers["sleepy"]["status"] == "late" and servers["off"]["status"] == "disabled"
    stability = report["stability"]
    assert stability["identical"] is False
    assert [c["id"] for c in stability["changed_servers"]] == ["drifting"]
    decision = report["decision"]
    assert decision["mode"] == "fixed" and decision["fallback"] is None
    assert decision["functions"]["limit"] == 128 and decision["functions"]["declared"] > 0
    assert decision["tokens"]["declared"] > 0 and decision["tokens"]["budget"] is None
    assert report["summary"]["FAIL"] >= 3 and report["summary"]["warn"] >= 4


def test_healthy_config_is_all_well_and_deterministic(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"alpha": demo("--tools", 2), "beta": demo("--tools", 3, "--seed", 7)})
    # Made first: the two runs at once would otherwise race to it ("missing" in one of them).
    (tmp_path / "state").mkdir(mode=0o700)
    proc, again = doctors((config, ()), (config, ()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert not [line for line in out.splitlines() if line.split()[:1] in (["FAIL"], ["warn"])], out
    assert verdict(out, "published tools/list is byte-identical across two discoveries") == "ok"
    assert verdict(out, "alpha: ready in") == "ok" and verdict(out, "beta: ready in") == "ok"
    assert out.rstrip().endswith("all is well")
    # the same report twice, timings aside
    assert re.sub(r"\d+ ms", "N ms", out) == re.sub(r"\d+ ms", "N ms", again.stdout)


def test_a_deny_pattern_that_names_no_tool_needs_attention(tmp_path: Path) -> None:
    """``deny = ["D__FAIL"]`` for ``d__fail`` (matching is case-sensitive) denied nothing, and
    nothing said so: the tool ran. Doctor warns of a pattern no tool's name matches, naming
    the servers whose tools are not known (not listed); ``catalog`` says it too."""
    typo, fine = tmp_path / "typo", tmp_path / "fine"
    typo.mkdir()
    fine.mkdir()
    down = {"command": PYTHON, "args": FAILING}
    typo_config = write_config(typo, {"d": demo("--tools", 1), "gone": down}, policy={"deny": ["d__fail", "D__FAIL"]})
    fine_config = write_config(fine, {"d": demo("--tools", 1)}, policy={"deny": ["d__fail", "d__*_issue"]})
    flagged, clean = doctors((typo_config, ()), (fine_config, ()))
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    (line,) = lines_with(flagged.stdout, "deny pattern")
    assert line.split()[0] == "warn" and "[policy] deny pattern 'D__FAIL' matches no tool" in line, line
    assert line.endswith("it denies nothing (not listed: gone, whose tools are not known)"), line
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert verdict(clean.stdout, "every [policy] deny pattern matches a tool (2)") == "ok"
    listed = run_cli("catalog", "--config", str(fine_config), "--json", "--log-level", "warning")
    assert json.loads(listed.stdout)["policy_unmatched"] == []


def test_renames_alone_are_informational(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"dotted": demo("--tools", 1, "--extra-tool", "my.tool")})
    proc = doctor(config)
    assert proc.returncode == 0, proc.stdout
    assert verdict(proc.stdout, "renamed: dotted/my.tool") == "info"


def test_renames_and_exclusions_are_logged_as_information_not_warnings(tmp_path: Path) -> None:
    """Each tool a server's ``exclude`` left out, and each name made provider-safe, was logged
    as a warning at every start, one line a tool, though nothing was wrong (doctor rates them
    as information)."""
    server = {**demo("--tools", 1, "--extra-tool", "my.tool"), "exclude": ["echo"]}
    config = write_config(tmp_path, {"dotted": server})
    proc = run_cli("catalog", "--config", str(config))
    said = {line.split(" ", 2)[2]: line.split(" ", 2)[1] for line in proc.stderr.splitlines() if line.count(" ") >= 2}
    assert said.get("excluded: dotted/echo: matches exclude pattern 'echo'") == "INFO", proc.stderr
    renamed = "renamed: dotted/my.tool: 'dotted__my.tool' -> 'dotted__my_tool' (disallowed characters)"
    assert said.get(renamed) == "INFO", proc.stderr


def test_config_error_is_one_fail_line_and_stops(tmp_path: Path) -> None:
    config = tmp_path / "prefixgate.toml"
    config.write_text('[servers.git]\ncommand = "git-mcp"\nstartup_timeout = "soon"\n', encoding="utf-8")
    proc = doctor(config)
    assert proc.returncode == 1
    fails = lines_with(proc.stdout, "FAIL  ")
    assert fails == ["  FAIL  config error: servers.git.startup_timeout: expected a number"]
    assert "\nservers" not in proc.stdout and "register in" not in proc.stdout


# --- directories --------------------------------------------------------------------------


MISSING = {"command": "/nonexistent/prefixgate-doctor-test-server"}
"""A server that fails at once (nothing to spawn): keeps the tests that need no tools fast."""


def quick_config(tmp_path: Path, state: Path | None = None) -> Path:
    return write_config(tmp_path, {"missing": MISSING}, gateway={"state_dir": str(state or tmp_path / "state")})


def test_private_state_dir_is_ok(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "artifacts" / "abc").mkdir(mode=0o700, parents=True)
    os.chmod(state, 0o700)
    os.chmod(state / "artifacts", 0o700)
    proc = doctor(quick_config(tmp_path, state))
    out = proc.stdout
    assert verdict(out, f"state directory {state}:") == "ok"
    assert "mode 0700, owned by you" in out
    assert verdict(out, "artifact directory", "1 session directory") == "ok"
    assert verdict(out, "activation directory", "missing; will be created") == "ok"


def test_symlinked_or_open_state_dir_needs_attention(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    proc = doctor(quick_config(tmp_path, link))
    assert verdict(proc.stdout, f"state directory {link}: is a symlink") == "FAIL"

    shared = tmp_path / "shared"
    (shared / "artifacts").mkdir(parents=True)
    os.chmod(shared, 0o755)
    os.chmod(shared / "artifacts", 0o777)
    proc = doctor(write_config(tmp_path, {"alpha": demo("--tools", 1)}, gateway={"state_dir": str(shared)}))
    assert proc.returncode == 1, proc.stdout  # the only trouble is the directory modes
    assert verdict(proc.stdout, f"state directory {shared}: mode 0755") == "warn"
    assert verdict(proc.stdout, "artifact directory", "mode 0777") == "warn"
    # Reported, not changed: doctor writes nothing there but the warm-start record (the state
    # store's check made the directory 0700, so a second run said it was fine).
    assert shared.stat().st_mode & 0o777 == 0o755
    assert (shared / "artifacts").stat().st_mode & 0o777 == 0o777


# --- registration snippets ----------------------------------------------------------------


CLIENTS = ["claude-code", "claude-desktop", "cursor", "vscode", "codex", "gemini"]


def check_snippet(
    register: dict[str, Any],
    client: str,
    config: Path,
    variables: dict[str, str] | None = None,
    call_time: float | None = None,
) -> None:
    """The snippet registers ``command`` and ``args``, and passes each of ``variables`` (name ->
    the value the environment holds) on in the client's own way; Gemini CLI's and Codex's clock
    on a call is set past ``call_time`` (the longest ``max_call_time``), when given."""
    variables = variables or {}
    text, command, args = register["snippet"], register["command"], register["args"]
    assert register["client"] == client and register["variables"] == sorted(variables)
    assert os.path.isabs(command) and os.path.exists(command)
    assert args[-3:] == ["serve", "--config", str(config)]
    if command == sys.executable:
        assert args[:2] == ["-m", "gateway"]
    if client == "claude-code":
        assert text.startswith("claude mcp add --scope user prefixgate ")
        # Pasted into a shell: what reaches claude (a stand-in printing its arguments).
        bin_dir = config.parent / "fake-bin"
        bin_dir.mkdir(exist_ok=True)
        fake = bin_dir / "claude"
        fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
        fake.chmod(0o755)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **variables}
        pasted = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env=env, check=True)
        passed = [part for name, value in sorted(variables.items()) for part in ("-e", f"{name}={value}")]
        assert json.loads(pasted.stdout) == [
            "mcp",
            "add",
            "--scope",
            "user",
            "prefixgate",
            *passed,
            "--",
            command,
            *args,
        ]
        return
    env = {name: f"${{env:{name}}}" for name in variables}
    if client == "claude-desktop":
        env = {name: f"<the value of {name}>" for name in variables}
    if client == "gemini":  # expanded from Gemini CLI's own environment, which hides *TOKEN* and the like
        env = {name: f"${{{name}}}" for name in variables}
    table: dict[str, Any] = {"command": command, "args": args, **({"env": env} if env else {})}
    if client == "gemini":
        timeout = {} if call_time is None else {"timeout": (call_time + 30) * 1000}
        assert json.loads(text) == {"mcpServers": {"prefixgate": {**table, **timeout}}}
    elif client in ("claude-desktop", "cursor"):
        assert json.loads(text) == {"mcpServers": {"prefixgate": table}}
    elif client == "vscode":
        assert json.loads(text) == {"servers": {"prefixgate": {"type": "stdio", **table}}}
    else:
        codex = {"command": command, "args": args, **({"env_vars": sorted(variables)} if variables else {})}
        if call_time is not None:
            codex["tool_timeout_sec"] = call_time + 30
        assert tomllib.loads(text) == {"mcp_servers": {"prefixgate": codex}}


@pytest.mark.parametrize("client", CLIENTS)
def test_registration_snippet_is_valid(tmp_path: Path, client: str) -> None:
    from gateway.commands.doctor import snippet

    # awkward characters in the path must survive quoting in every format
    odd = tmp_path / "my configs" / 'it\'s "odd" \\ ü'
    odd.mkdir(parents=True)
    config = odd / "prefixgate.toml"
    check_snippet(snippet(client, str(config)), client, config)


@pytest.mark.parametrize("client", CLIENTS)
def test_the_snippet_passes_the_servers_variables_on(tmp_path: Path, client: str) -> None:
    """Issue 31: a server's ``env = { TZ = "${MY_TZ}" }`` works as pasted in every client."""
    from gateway.commands.doctor import snippet

    config = tmp_path / "prefixgate.toml"
    variables = {"PG_MY_TZ": "Europe/Paris", "PG_TOKEN": "it's a $secret"}
    check_snippet(snippet(client, str(config), variables=["PG_TOKEN", "PG_MY_TZ"]), client, config, variables)


def test_the_codex_note_says_how_to_keep_results_whole(tmp_path: Path) -> None:
    """Codex 0.171.0 cut every tool result to about 12,000 bytes (a model it has no metadata for),
    head and tail kept: the middle of a 64 KiB preview or of a default 16384-byte artifact_read
    page never reached the model (measured with the real agent against a scripted stand-in)."""
    from gateway.commands.doctor import snippet

    note = snippet("codex", str(tmp_path / "prefixgate.toml"))["note"]
    assert "tool_output_token_limit = 20000" in note and "max_visible_bytes = 8192" in note


def test_doctor_prints_the_snippet_for_each_client(tmp_path: Path) -> None:
    config = quick_config(tmp_path)
    runs = doctors(*[(config, ("--client", c, "--json")) for c in CLIENTS], (config, ("--client", "vscode")))
    for client, proc in zip(CLIENTS, runs[: len(CLIENTS)], strict=True):
        check_snippet(json.loads(proc.stdout)["register"], client, config, call_time=DEFAULT_MAX_CALL_TIME)
    register = json.loads(runs[3].stdout)["register"]
    assert register["snippet"] in runs[-1].stdout  # the text report prints exactly the same snippet
    # Codex waits about a second for an optional server: what keeps its first session warm is said
    codex = json.loads(runs[4].stdout)["register"]
    assert "about a second" in codex["note"] and "run doctor or catalog once more" in codex["note"]
    assert all(json.loads(p.stdout)["register"]["note"] is None for p in [*runs[:4], runs[5]])
    # and the registered command really is prefixgate
    proc = subprocess.run([register["command"], *register["args"][:-3], "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("prefixgate ")


def test_a_variable_with_a_default_everywhere_may_be_left_out(tmp_path: Path) -> None:
    """``${VAR:-default}``: doctor says the environment may leave such a variable out, and
    still passes it on (a value set in the shell wins); one also referenced without a default
    must be there."""
    server = {
        **MISSING,
        "args": ["${PG_REQ}", "${PG_OPT:-x}", "${PG_OPT:-y}"],
        "env": {"A": "${PG_BOTH}", "B": "${PG_BOTH:-z}"},
    }
    config = write_config(tmp_path, {"s": server}, gateway={"state_dir": "${PG_STATE:-" + str(tmp_path / "st") + "}"})
    json_run, text_run = doctors((config, ("--client", "codex", "--json")), (config, ("--client", "codex")))
    register = json.loads(json_run.stdout)["register"]
    assert register["variables"] == ["PG_BOTH", "PG_OPT", "PG_REQ", "PG_STATE"]
    assert register["optional"] == ["PG_OPT", "PG_STATE"]
    assert "must carry: PG_BOTH, PG_REQ\n" in text_run.stdout
    assert "may carry (each has a default for when it is unset or empty): PG_OPT, PG_STATE\n" in text_run.stdout
    assert "(env_vars): PG_BOTH, PG_OPT, PG_REQ, PG_STATE\n" in text_run.stdout


def test_gemini_waits_for_a_call_as_long_as_prefixgate_does(tmp_path: Path) -> None:
    """Gemini CLI gives up on a call after its ``timeout`` (10 minutes by default) whatever
    progress it hears; prefixgate lets one run ``max_call_time`` (an hour by default), so the
    snippet sets Gemini's past the longest an enabled server allows (a disabled one's aside)."""
    servers = {
        "a": MISSING,
        "b": {**MISSING, "call_timeout": 900, "max_call_time": 7200},
        "off": {**MISSING, "enabled": False, "max_call_time": 86400},
    }
    config = write_config(tmp_path, servers)
    register = json.loads(doctor(config, "--client", "gemini", "--json").stdout)["register"]
    check_snippet(register, "gemini", config, call_time=7200)


def test_an_unbounded_max_call_time_gives_the_longest_clock_a_client_holds(tmp_path: Path) -> None:
    """``max_call_time = inf`` (a config may say so) stopped doctor on an OverflowError traceback
    writing the snippet; a month-long one set Gemini CLI's ``timeout`` past what Node's timers
    hold (2**31 - 1 ms), where they fire at once, failing every call. Both are capped there."""
    for value in ("inf", "2592000"):  # a month
        config = write_config(tmp_path, {"a": {**MISSING, "call_timeout": 60, "max_call_time": 61}})
        config.write_text(config.read_text().replace("max_call_time = 61", f"max_call_time = {value}"))
        gemini, codex = (doctor(config, "--client", c, "--json") for c in ("gemini", "codex"))
        assert "Traceback" not in gemini.stderr + codex.stderr, gemini.stderr + codex.stderr
        table = json.loads(json.loads(gemini.stdout)["register"]["snippet"])["mcpServers"]["prefixgate"]
        assert table["timeout"] == 2**31 - 1
        entry = tomllib.loads(json.loads(codex.stdout)["register"]["snippet"])["mcp_servers"]["prefixgate"]
        assert entry["tool_timeout_sec"] == 2147484


def test_codex_waits_for_a_call_as_long_as_prefixgate_does(tmp_path: Path) -> None:
    """Codex gives up on a call after the entry's ``tool_timeout_sec`` (300 s by default) whatever
    progress it hears: a server imported from Codex with ``tool_timeout_sec = 900`` (its
    ``call_timeout``) had its 10-minute calls cut off at 300 s behind prefixgate, where Codex
    waited for them directly. The snippet sets Codex's past the longest ``max_call_time``."""
    source = tmp_path / "codex.toml"
    source.write_text('[mcp_servers.build]\ncommand = "/nonexistent/build-server"\ntool_timeout_sec = 900\n')
    config = tmp_path / "prefixgate.toml"
    imported = subprocess.run([*GATEWAY, "import", str(source), "--out", str(config)], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    register = json.loads(doctor(config, "--client", "codex", "--json").stdout)["register"]
    assert tomllib.loads(register["snippet"])["mcp_servers"]["prefixgate"]["tool_timeout_sec"] >= 900
    check_snippet(register, "codex", config, call_time=DEFAULT_MAX_CALL_TIME)


NPM_404 = """npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/@example%2fno-such-server - Not found
npm error 404
npm error 404  '@example/no-such-server@*' is not in this registry.
npm error 404
npm error 404 Note that you can also install from a
npm error 404 tarball, folder, http url, or git url.
npm error A complete log of this run can be found in: /home/u/.npm/_logs/debug-0.log
"""


def test_a_failed_server_is_shown_with_its_informative_stderr_line(tmp_path: Path) -> None:
    """Issue 31: an npx package that 404s is explained by its "404 Not Found" line, not by npm's
    last line (the log file's path), in the reason and in doctor's view of its stderr."""
    script = f"import sys; sys.stderr.write({NPM_404!r}); sys.exit(1)"
    missing = 'import sys; sys.stderr.write(\'starting\\nTraceback (most recent call last):\\n  File "s.py"\\n'
    missing += "ModuleNotFoundError: No module named \\'nope\\'\\nbye\\n'); sys.exit(1)"
    config = write_config(
        tmp_path,
        {"npx": {"command": PYTHON, "args": ["-c", script]}, "py": {"command": PYTHON, "args": ["-c", missing]}},
    )
    proc = doctor(config)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    (failed,) = [line for line in lines if "FAIL" in line and "npx:" in line]
    assert failed.endswith(
        "stderr: npm error 404 Not Found - GET https://registry.npmjs.org/@example%2fno-such-server - Not found"
    )
    at = lines.index(failed)
    shown = [line.strip() for line in lines[at + 1 : at + 6]]
    assert shown[0].startswith("stderr | npm error 404 Not Found - GET") and shown[1] == "stderr | …"
    assert shown[-1] == "stderr | npm error A complete log of this run can be found in: /home/u/.npm/_logs/debug-0.log"
    (failed,) = [line for line in lines if "FAIL" in line and "py:" in line]
    assert failed.endswith("stderr: ModuleNotFoundError: No module named 'nope'"), failed


def test_ctrl_c_stops_doctor_with_130_and_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C while ``doctor`` waited for a slow server ended it by the signal with a
    ``KeyboardInterrupt`` traceback (``catalog`` exits 130 with none); the server is stopped too."""
    code, stderr = stopped_while_a_server_starts(tmp_path, "doctor", signal.SIGINT)
    assert code == 130 and "Traceback" not in stderr, stderr
