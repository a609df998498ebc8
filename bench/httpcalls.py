"""Calls over streamable HTTP: prefixgate ``serve --http`` against an SDK server under uvicorn.

The direct baseline is the demo server's HTTP mode (an SDK low-level server's
``streamable_http_app`` under uvicorn, with ``TCP_NODELAY`` on its connections as every
server should have: without it both sides stall ~40 ms a response and every ratio reads
1.0x). Contenders, each its own process, reached with the SDK's ``Client`` in both eras
("legacy": the 2025-11-25 handshake; "auto": stateless 2026-07-28):

- ``direct``: the demo server over HTTP;
- ``prefixgate``: ``serve --http`` with the demo server behind it on stdio;
- ``prefixgate-http-downstream``: ``serve --http`` with a second demo HTTP server behind it;
- ``relay``: the demo server behind a near-zero-work HTTP-to-stdio relay (bench/httprelay.py,
  one per era): the floor of any HTTP process in front of an ordinary SDK stdio server, so
  relay/direct is that hop's own cost and prefixgate/relay prefixgate's share (context).

Per era, round by round in a rotating order: sequential ``echo`` calls, then batches of 8
and 32 concurrent callers (each caller a task making its calls one after another on the
one client). Reported: per-call medians, throughput (calls/s) per batch, calls refused or
failed (there must be none), and each server process's CPU time per 1,000 calls over the
concurrent batches (user + system, from ``/proc``): the gateway's own process, and apart
from it the demo server behind it, which the direct contender does not run.

Beside them, the client's side over the same batches (context, no targets): this process's
CPU per 1,000 calls (only the contender's client runs during its batch) and how often a
call saw it preempted (involuntary context switches), and the context switches of the
server behind, all threads. The client is one Python process on one core, so when it is
busy, every CPU-second the processes behind the endpoint take from it is throughput lost.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio

from bench.common import PYTHON, demo_args, gateway_config, http_client, ratio_summary, rotated, summary, url_process

TEXT = "hello over http"
ERAS = ("legacy", "auto")
ERA_NAMES = {"legacy": "2025-11-25", "auto": "2026-07-28"}
CONTENDERS = ("direct", "prefixgate", "prefixgate-http-downstream", "relay")
CALLERS = (8, 32)
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def context_switches(pid: int) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every thread of ``pid`` so far."""
    voluntary = involuntary = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def child_pid(pid: int) -> int:
    """The one child process of ``pid`` (a gateway's stdio server, once it is up), but the
    warden (gateway/downstream/warden.py), which the gateway starts beside its servers."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                warden = b"warden.py" in (entry / "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            if ppid == pid and not warden:
                children.append(int(entry.name))
    if len(children) != 1:
        raise RuntimeError(f"process {pid} has {len(children)} children, expected its one stdio server")
    return children[0]


@contextmanager
def servers(tmp: Path, errlog: Path) -> Iterator[dict[str, tuple[str, int]]]:
    """Every contender started: name -> (URL, pid of the process that serves it)."""
    demo_http = [PYTHON, *demo_args("--tools", 3, "--name", "d", "--transport", "http")]
    gateway = [PYTHON, "-m", "gateway", "serve", "--log-level", "warning", "--http", "127.0.0.1:0", "--config"]
    with ExitStack() as stack, errlog.open("a", encoding="utf-8") as err:
        found: dict[str, tuple[str, int]] = {}
        url, proc = stack.enter_context(url_process(demo_http, stderr=err))
        found["direct"] = (url, proc.pid)
        stdio_cfg = gateway_config(tmp / "http-stdio", {"d": demo_args("--tools", 3, "--name", "d")})
        url, proc = stack.enter_context(url_process([*gateway, str(stdio_cfg)], stderr=err))
        found["prefixgate"] = (url, proc.pid)
        behind, behind_proc = stack.enter_context(url_process(demo_http, stderr=err))
        found["behind-http"] = (behind, behind_proc.pid)
        http_cfg = tmp / "http-http" / "prefixgate.toml"
        http_cfg.parent.mkdir(parents=True, exist_ok=True)
        state = json.dumps(str(tmp / "http-http" / "state"))
        http_cfg.write_text(f"[gateway]\nstate_dir = {state}\n\n[servers.d]\nurl = {json.dumps(behind)}\n", "utf-8")
        url, proc = stack.enter_context(url_process([*gateway, str(http_cfg)], stderr=err))
        found["prefixgate-http-downstream"] = (url, proc.pid)
        relay = [PYTHON, "-m", "bench.httprelay", PYTHON, *demo_args("--tools", 3, "--name", "d")]
        for era in ERAS:  # one each: a handshake-era client initializes the server behind it
            url, proc = stack.enter_context(url_process(relay, stderr=err))
            found[f"relay-{era}"] = (url, proc.pid)
        yield found


@asynccontextmanager
async def client(url: str, mode: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with http_client() as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
            yield c


async def _call(c: Any, tool: str) -> float:
    started = time.perf_counter()
    result = await c.call_tool(tool, {"text": TEXT})
    elapsed = time.perf_counter() - started
    if result.is_error or result.content[0].text != TEXT:
        raise RuntimeError(f"{tool}: unexpected result {result!r}"[:300])
    return elapsed


async def run(ctx: Any) -> dict[str, Any]:
    quick = ctx.quick
    rounds = 2 if quick else 8
    per_round = 10 if quick else 150
    conc_rounds = 1 if quick else 5
    calls_per_caller = 3 if quick else 12
    results: dict[str, Any] = {
        "settings": {
            "rounds": rounds,
            "calls_per_round": per_round,
            "concurrent_rounds": conc_rounds,
            "callers": list(CALLERS),
            "calls_per_caller": calls_per_caller,
        },
        "eras": {},
    }
    tools = {"direct": "echo", "prefixgate": "d__echo", "prefixgate-http-downstream": "d__echo", "relay": "echo"}
    with servers(ctx.tmp, ctx.errlog) as everything:
        for era in ERAS:
            found = {**everything, "relay": everything[f"relay-{era}"]}
            seq: dict[str, list[list[float]]] = {n: [] for n in CONTENDERS}
            throughput: dict[str, dict[int, list[float]]] = {n: {k: [] for k in CALLERS} for n in CONTENDERS}
            cpu: dict[str, float] = dict.fromkeys(CONTENDERS, 0.0)
            behind_cpu: dict[str, float] = dict.fromkeys(CONTENDERS, 0.0)
            client: dict[str, dict[str, float]] = {n: dict.fromkeys(_CLIENT_SIDE, 0.0) for n in CONTENDERS}
            counted: dict[str, int] = dict.fromkeys(CONTENDERS, 0)
            failed: dict[str, list[str]] = {n: [] for n in CONTENDERS}
            async with _clients(found, era) as clients:
                for name in CONTENDERS:  # warm-up: the first listing, lazy caches
                    for _ in range(20):
                        await _call(clients[name], tools[name])
                behind = {
                    "prefixgate": child_pid(found["prefixgate"][1]),
                    "prefixgate-http-downstream": found["behind-http"][1],
                    "relay": child_pid(found["relay"][1]),
                }
                for r in range(rounds):
                    for name in rotated(CONTENDERS, r):
                        seq[name].append([await _call(clients[name], tools[name]) for _ in range(per_round)])
                    ctx.progress(f"http {ERA_NAMES[era]}: sequential round {r + 1}/{rounds}")
                for r in range(conc_rounds):
                    for callers in CALLERS:
                        for name in rotated(CONTENDERS, r):
                            pid, server = found[name][1], behind.get(name)
                            before = cpu_seconds(pid), (cpu_seconds(server) if server else 0.0)
                            sides = _client_side(server)
                            wall = await _batch(clients[name], tools[name], callers, calls_per_caller, failed[name])
                            cpu[name] += cpu_seconds(pid) - before[0]
                            behind_cpu[name] += (cpu_seconds(server) if server else 0.0) - before[1]
                            for key, value in _client_side(server).items():
                                client[name][key] += value - sides[key]
                            counted[name] += callers * calls_per_caller
                            throughput[name][callers].append(callers * calls_per_caller / wall)
                    ctx.progress(f"http {ERA_NAMES[era]}: concurrent round {r + 1}/{conc_rounds}")
            results["eras"][ERA_NAMES[era]] = _summarise(seq, throughput, cpu, behind_cpu, client, counted, failed)
    return results


_CLIENT_SIDE = ("client_cpu", "client_preempted", "downstream_switches")


def _client_side(server: int | None) -> dict[str, float]:
    """This process's CPU time and involuntary switches, and the server behind's switches."""
    times = os.times()
    behind = sum(context_switches(server)) if server else 0
    return {
        "client_cpu": times.user + times.system,
        "client_preempted": context_switches(os.getpid())[1],
        "downstream_switches": behind,
    }


@asynccontextmanager
async def _clients(found: dict[str, tuple[str, int]], mode: str) -> AsyncIterator[dict[str, Any]]:
    async with client(found["direct"][0], mode) as a, client(found["prefixgate"][0], mode) as b:
        async with client(found["prefixgate-http-downstream"][0], mode) as c, client(found["relay"][0], mode) as d:
            yield {"direct": a, "prefixgate": b, "prefixgate-http-downstream": c, "relay": d}


async def _batch(c: Any, tool: str, callers: int, calls: int, failed: list[str]) -> float:
    """``callers`` tasks, each making ``calls`` calls in turn; the batch's wall time."""

    async def caller() -> None:
        for _ in range(calls):
            try:
                await _call(c, tool)
            except Exception as exc:  # noqa: BLE001 - counted: a refused call is a result here
                failed.append(str(exc)[:200])

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(callers):
            tg.start_soon(caller)
    return time.perf_counter() - started


def _summarise(
    seq: dict[str, list[list[float]]],
    throughput: dict[str, dict[int, list[float]]],
    cpu: dict[str, float],
    behind_cpu: dict[str, float],
    client: dict[str, dict[str, float]],
    counted: dict[str, int],
    failed: dict[str, list[str]],
) -> dict[str, Any]:
    medians = {n: [summary(b)["median"] for b in seq[n]] for n in CONTENDERS}
    out: dict[str, Any] = {"contenders": {}, "ratios": {}}
    for name in CONTENDERS:
        out["contenders"][name] = {
            "per_call_s": summary([t for b in seq[name] for t in b]),
            "throughput_per_s": {str(k): summary(v) for k, v in throughput[name].items()},
            "cpu_s_per_1000_calls": 1000 * cpu[name] / counted[name] if counted[name] else None,
            "downstream_cpu_s_per_1000_calls": (
                1000 * behind_cpu[name] / counted[name] if counted[name] and name != "direct" else None
            ),
            "client_cpu_s_per_1000_calls": 1000 * client[name]["client_cpu"] / counted[name] if counted[name] else None,
            "client_preempted_per_call": client[name]["client_preempted"] / counted[name] if counted[name] else None,
            "downstream_switches_per_call": (
                client[name]["downstream_switches"] / counted[name] if counted[name] and name != "direct" else None
            ),
            "failed_calls": len(failed[name]),
            "failures": sorted(set(failed[name]))[:5],
        }
        if name != "direct":
            out["ratios"][f"{name}/direct per call"] = ratio_summary(medians[name], medians["direct"])
            for callers in CALLERS:
                out["ratios"][f"{name}/direct throughput {callers}"] = ratio_summary(
                    throughput[name][callers], throughput["direct"][callers]
                )
    out["ratios"]["prefixgate/relay per call"] = ratio_summary(medians["prefixgate"], medians["relay"])
    for callers in CALLERS:
        out["ratios"][f"prefixgate/relay throughput {callers}"] = ratio_summary(
            throughput["prefixgate"][callers], throughput["relay"][callers]
        )
    return out


def rows(results: dict[str, Any], ms: Any, spread: Any, ratio: Any) -> list[tuple[str, str, str, str, str]]:
    """The Markdown rows (bench/run.py's formatters passed in)."""
    out: list[tuple[str, str, str, str, str]] = []
    st = results["settings"]
    for era, data in results["eras"].items():
        label = f"HTTP echo, {era}, sequential ({st['rounds']}x{st['calls_per_round']} calls)"
        for name, c in data["contenders"].items():
            r = data["ratios"].get(f"{name}/direct per call")
            out.append((label, name, ms(c["per_call_s"]["median"]), spread(c["per_call_s"]), ratio(r)))
        for callers in st["callers"]:
            label = f"HTTP echo, {era}, {callers} concurrent callers (calls/s)"
            for name, c in data["contenders"].items():
                t = c["throughput_per_s"][str(callers)]
                r = data["ratios"].get(f"{name}/direct throughput {callers}")
                out.append((label, name, f"{t['median']:.0f}/s", f"{t['min']:.0f}-{t['max']:.0f}/s", ratio(r)))
        label = f"HTTP echo, {era}, server CPU per 1,000 concurrent calls"
        for name, c in data["contenders"].items():
            value = c["cpu_s_per_1000_calls"]
            shown = "-" if value is None else f"{value:.2f} s"
            out.append((label, name, shown, f"{c['failed_calls']} failed or refused", ""))
        out += _cpu_rows(
            f"HTTP echo, {era}, CPU per 1,000 concurrent calls of the demo server behind the gateway",
            data["contenders"],
            ("downstream_cpu_s_per_1000_calls", "downstream_switches_per_call"),
            "{:.1f} context switches a call (all threads)",
        )
        out += _cpu_rows(
            f"HTTP echo, {era}, the SDK client's CPU per 1,000 concurrent calls (one process, one core)",
            data["contenders"],
            ("client_cpu_s_per_1000_calls", "client_preempted_per_call"),
            "preempted {:.2f} times a call",
        )
    return out


def _cpu_rows(
    label: str, contenders: dict[str, Any], keys: tuple[str, str], note: str
) -> list[tuple[str, str, str, str, str]]:
    """One row a contender that has the CPU figure ``keys[0]``, with ``keys[1]`` told by ``note``."""
    rows = []
    for name, c in contenders.items():
        value, beside = c.get(keys[0]), c.get(keys[1])
        if value is not None:
            rows.append((label, name, f"{value:.2f} s", "" if beside is None else note.format(beside), ""))
    return rows
