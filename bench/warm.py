"""Spawn to the first complete ``tools/list``: a warm start, a first-ever start, and the slowest server alone.

Three real servers behind one prefixgate: ``mcp-server-time`` (PyPI), the reference
``@modelcontextprotocol/server-everything`` (npm, Node >= 22) and ``bench/slow_server.py``,
a standard-library server that needs ``SLOWEST`` seconds before it answers (a server that
waits on the network). Timed from just before the process is spawned until the client holds
the ``tools/list`` answer that has every server's tools (the raw client: initialize, then
tools/list; the 2026-07-28 row: server/discover, then tools/list). Contenders, interleaved
round by round:

- ``slowest``: the slow server alone, reached directly;
- ``first-start``: prefixgate with no warm-start record (removed before each round): the barrier;
- ``warm``, ``warm-2026-07-28``: prefixgate with the record a previous start left.

The published bytes of the warm and the first-ever start are compared in every round
(``bytes_identical``). Without npm or Node >= 22 (``--quick``, the test suite's smoke run)
server-everything is left out and the rows say so.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import anyio.to_thread

from bench.common import PYTHON, RawClient, ratio_summary, rotated, summary

SLOW = Path(__file__).resolve().parent / "slow_server.py"
SLOWEST = 1.5
MODERN = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }
}


def _everything() -> tuple[list[str] | None, str]:
    """server-everything's command (installed by the conformance runner's pinned npm install)."""
    try:
        from tests.conformance.runner import default_cache_dir, ensure_installed, node_binary

        directory = default_cache_dir()
        ensure_installed(directory)
        script = directory / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
        return [str(node_binary()), str(script), "stdio"], "server-everything (npm)"
    except Exception as exc:  # noqa: BLE001 - the row says why it ran without it
        return None, f"server-everything left out: {exc}"


def _config(directory: Path, everything: list[str] | None) -> Path:
    """The three servers (two without server-everything), each with a generous start-up timeout."""
    directory.mkdir(parents=True, exist_ok=True)
    time_server = shutil.which("mcp-server-time", path=str(Path(PYTHON).parent)) or "mcp-server-time"
    servers: dict[str, list[str]] = {"time": [time_server], "slow": [PYTHON, str(SLOW), str(SLOWEST), "slow"]}
    if everything is not None:
        servers["everything"] = everything
    lines = ["[gateway]", f"state_dir = {json.dumps(str(directory / 'state'))}", "discovery_deadline = 120"]
    lines += ["[client]", 'profile = "mcp"']
    for sid, argv in servers.items():
        lines += [f"[servers.{sid}]", f"command = {json.dumps(argv[0])}", f"args = {json.dumps(argv[1:])}"]
        lines.append("startup_timeout = 60")
    path = directory / "prefixgate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _time_to_list(argv: list[str], errlog: Path, expect: int, modern: bool = False) -> tuple[float, bytes, int]:
    """Seconds from spawn to the tools/list answer, that answer's result bytes, and its tool count."""
    started = time.perf_counter()
    client = RawClient(argv, errlog)
    try:
        if modern:
            client.request("server/discover", MODERN)
            line = client.request("tools/list", MODERN)
        else:
            client.initialize()
            line = client.request("tools/list")
        elapsed = time.perf_counter() - started
    finally:
        client.close()
    tools = json.loads(line)["result"]["tools"]
    if len(tools) < expect:
        raise RuntimeError(f"{argv[:3]}: {len(tools)} tools listed, expected at least {expect}")
    return elapsed, line[line.index(b'"result"') :], len(tools)


def _measure(ctx: Any) -> dict[str, Any]:
    rounds = 1 if ctx.quick else 7
    everything, note = (None, "server-everything left out (--quick)") if ctx.quick else _everything()
    config = _config(ctx.tmp / "warm", everything)
    warm_dir = config.parent / "state" / "warm"
    serve = [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--log-level", "warning"]
    slowest = [PYTHON, str(SLOW), str(SLOWEST), "slow"]
    # What a cold start lists (the barrier): every server's tools, the count the warm rows must match.
    shutil.rmtree(warm_dir, ignore_errors=True)
    _, reference, expect = _time_to_list(serve, ctx.errlog, 1)
    times: dict[str, list[float]] = {"slowest": [], "first-start": [], "warm": [], "warm-2026-07-28": []}
    identical: list[bool] = []
    for r in range(rounds):
        for name in rotated(list(times), r):
            if name == "slowest":
                elapsed, _, _ = _time_to_list(slowest, ctx.errlog, 3)
            elif name == "first-start":
                shutil.rmtree(warm_dir, ignore_errors=True)
                elapsed, cold, _ = _time_to_list(serve, ctx.errlog, expect)
                identical.append(cold == reference)
                time.sleep(1.0)  # the barrier's record is written after the answer: let it land
            else:
                if not any(warm_dir.glob("*.rec")):
                    _time_to_list(serve, ctx.errlog, expect)  # leave the record (as a first start does)
                    time.sleep(1.0)
                elapsed, warm, _ = _time_to_list(serve, ctx.errlog, expect, modern=name == "warm-2026-07-28")
                if name == "warm":
                    identical.append(warm == reference)
            times[name].append(elapsed)
            time.sleep(0.5)  # let the previous contender's processes finish exiting
        ctx.progress(f"warm start round {r + 1}/{rounds}")
    return {
        "settings": {"rounds": rounds, "slowest_s": SLOWEST, "servers": 3 if everything else 2, "note": note},
        "contenders": {name: {"time_to_list_s": summary(t)} for name, t in times.items()},
        "ratios": {
            "first-start/slowest": ratio_summary(times["first-start"], times["slowest"]),
            "warm/slowest": ratio_summary(times["warm"], times["slowest"]),
        },
        "bytes_identical": all(identical),
        "tools": expect,
    }


async def run(ctx: Any) -> dict[str, Any]:
    return await anyio.to_thread.run_sync(_measure, ctx)
