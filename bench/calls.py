"""Per-call latency of the demo server's ``echo``: sequential, 50 concurrent, and spaced calls.

Every contender is started once and connected with the same mcp SDK client
(``ClientSession.call_tool``); then, round by round, each contender (in a rotating
order) makes its batch of sequential calls, so slow phases of a noisy machine hit every
contender alike. Ratios are taken per round (round medians), then summarised. Back-to-back
calls keep every process on the path busy; spaced calls (a pause before each, as an
agent's calls come) meet processes that went idle, whose wake-ups then count.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from bench.common import (
    PYTHON,
    Conn,
    Contender,
    connect_all,
    demo_args,
    direct,
    fastmcp_config,
    gateway_config,
    ratio_summary,
    rotated,
    summary,
    via_fastmcp,
    via_prefixgate,
)

TEXT = "hello from the benchmark"
MODERN = "2026-07-28"
"""The other protocol era: the SDK's ``Client`` in its default mode, against its own direct baseline."""


SPACING = 0.05
"""Seconds of pause before each spaced call (an agent's calls are seconds apart; 50 ms already
lets every process on the path go idle)."""
SPACED = ("direct", "prefixgate", "relay", f"direct-{MODERN}", f"prefixgate-{MODERN}", f"relay-{MODERN}")


def baseline(name: str) -> str:
    """The direct contender a contender is compared with: the one of its protocol era."""
    return f"direct-{MODERN}" if name.endswith(MODERN) else "direct"


async def _call(conn: Conn, tool: str) -> float:
    started = time.perf_counter()
    result = await conn.session.call_tool(tool, {"text": TEXT})
    elapsed = time.perf_counter() - started
    if result.is_error or result.content[0].text != TEXT:
        raise RuntimeError(f"{tool}: unexpected result {result!r}"[:300])
    return elapsed


def medians(rounds: list[list[float]]) -> list[float]:
    """Each round's median (what per-round ratios are taken of)."""
    return [summary(b)["median"] for b in rounds]


def relay(name: str) -> Contender:
    """The demo server behind a zero-work relay (bench/relay.py): the extra hop's own cost."""
    argv = [PYTHON, "-m", "bench.relay", PYTHON, *demo_args("--tools", 3, "--name", "d")]
    return Contender(name, argv, "echo", "mcp SDK client -> zero-work relay -> demo server")


def contenders(ctx: Any) -> tuple[list[Contender], list[Contender]]:
    """(sequential contenders, slow ones that get fewer calls per round)."""
    tmp = ctx.tmp / "calls"
    one = {"d": demo_args("--tools", 3, "--name", "d")}
    two = {"a": demo_args("--tools", 3, "--name", "a"), "b": demo_args("--tools", 3, "--seed", 1, "--name", "b")}
    sdk_path = via_prefixgate("prefixgate-sdk-path", gateway_config(tmp / "pg-sdk", one))
    sdk_path.env["PREFIXGATE_FAST_PATH"] = "0"  # every call through the SDK: the fast path's "before"
    sdk_path.note += " (PREFIXGATE_FAST_PATH=0)"
    modern_direct = direct(f"direct-{MODERN}", "--tools", 3, "--name", "d")
    modern_pg = via_prefixgate(f"prefixgate-{MODERN}", gateway_config(tmp / "pg-modern", one))
    modern_relay = relay(f"relay-{MODERN}")
    for c in (modern_direct, modern_pg, modern_relay):
        c.mode = "auto"
        c.note = c.note.replace("mcp SDK client", 'mcp SDK Client(mode="auto")')
    fast = [
        direct("direct", "--tools", 3, "--name", "d"),
        via_prefixgate("prefixgate", gateway_config(tmp / "pg", one)),
        sdk_path,
        relay("relay"),
        modern_direct,
        modern_pg,
        modern_relay,
    ]
    slow: list[Contender] = []
    if ctx.fastmcp_python:
        fast.append(via_fastmcp("fastmcp-1", ctx.fastmcp_python, fastmcp_config(tmp, "one", one)))
    if ctx.fastmcp_python and not ctx.quick:  # the smoke run keeps one FastMCP contender
        two_cfg = fastmcp_config(tmp, "two", two)
        fast.append(via_fastmcp("fastmcp-2-reuse", ctx.fastmcp_python, two_cfg, reuse=True, echo="a_echo"))
        slow.append(via_fastmcp("fastmcp-2", ctx.fastmcp_python, two_cfg, echo="a_echo"))
    return fast, slow


async def run(ctx: Any) -> dict[str, Any]:
    quick = ctx.quick
    rounds = 2 if quick else 10
    per_round = 10 if quick else 200
    slow_per_round = 1 if quick else 2
    conc_rounds = 2 if quick else 10
    concurrency = 10 if quick else 50
    spaced_rounds = 2 if quick else 6
    spaced_per_round = 2 if quick else 10
    fast, slow = contenders(ctx)
    everyone = fast + slow
    samples: dict[str, list[list[float]]] = {c.name: [] for c in everyone}
    conc_names = [c.name for c in fast if c.name in ("direct", "prefixgate", "fastmcp-1")]
    wall: dict[str, list[float]] = {n: [] for n in conc_names}
    conc_calls: dict[str, list[float]] = {n: [] for n in conc_names}
    spaced_names = [c.name for c in fast if c.name in SPACED]
    spaced: dict[str, list[list[float]]] = {n: [[] for _ in range(spaced_rounds)] for n in spaced_names}

    by_name = {c.name: c for c in everyone}
    async with connect_all(everyone, ctx.errlog) as conns:
        for c in everyone:  # warm-up: first listing (call_tool lists once), lazy caches
            for _ in range(1 if c in slow else 20):
                await _call(conns[c.name], c.echo)

        for r in range(rounds):
            for c in rotated(everyone, r):
                n = slow_per_round if c in slow else per_round
                samples[c.name].append([await _call(conns[c.name], c.echo) for _ in range(n)])
            ctx.progress(f"sequential round {r + 1}/{rounds}")

        for r in range(conc_rounds):
            for name in rotated(conc_names, r):
                conn, tool = conns[name], by_name[name].echo
                times: list[float] = []

                async def one(conn: Conn = conn, tool: str = tool, times: list[float] = times) -> None:
                    times.append(await _call(conn, tool))

                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for _ in range(concurrency):
                        tg.start_soon(one)
                wall[name].append(time.perf_counter() - started)
                conc_calls[name] += times
            ctx.progress(f"concurrent round {r + 1}/{conc_rounds}")

        # Calls as an agent makes them: seconds apart, so every process on the path has gone
        # idle before each one. A pause before every call, contenders alternating call by call.
        for r in range(spaced_rounds):
            for i in range(spaced_per_round):
                for name in rotated(spaced_names, r + i):
                    await anyio.sleep(SPACING)
                    spaced[name][r].append(await _call(conns[name], by_name[name].echo))
            ctx.progress(f"spaced round {r + 1}/{spaced_rounds}")

    def stats(name: str) -> dict[str, Any]:
        flat = [t for batch in samples[name] for t in batch]
        return {
            "per_call_s": summary(flat),
            "round_medians_s": summary([summary(b)["median"] for b in samples[name]]),
            "note": by_name[name].note,
        }

    def round_medians(name: str) -> list[float]:
        return medians(samples[name])

    sequential: dict[str, Any] = {
        "settings": {
            "rounds": rounds,
            "calls_per_round": per_round,
            "slow_calls_per_round": slow_per_round,
            "slow": [c.name for c in slow],
        },
        "contenders": {c.name: stats(c.name) for c in everyone},
        "ratios": {},
    }
    for name in samples:
        if not name.startswith("direct"):
            base = baseline(name)
            sequential["ratios"][f"{name}/{base}"] = ratio_summary(round_medians(name), round_medians(base))
    for gateway, floor in (("prefixgate", "relay"), (f"prefixgate-{MODERN}", f"relay-{MODERN}")):
        # What prefixgate adds over the bare process hop: its own work on the call's path.
        sequential["ratios"][f"{gateway}/{floor}"] = ratio_summary(round_medians(gateway), round_medians(floor))
    if "fastmcp-1" in samples:
        sequential["ratios"]["prefixgate/fastmcp-1"] = ratio_summary(
            round_medians("prefixgate"), round_medians("fastmcp-1")
        )

    concurrent: dict[str, Any] = {
        "settings": {"rounds": conc_rounds, "concurrency": concurrency},
        "contenders": {
            n: {"batch_wall_s": summary(wall[n]), "per_call_s": summary(conc_calls[n]), "note": by_name[n].note}
            for n in conc_names
        },
        "ratios": {f"{n}/direct": ratio_summary(wall[n], wall["direct"]) for n in conc_names if n != "direct"},
    }
    if "fastmcp-1" in wall:
        concurrent["ratios"]["prefixgate/fastmcp-1"] = ratio_summary(wall["prefixgate"], wall["fastmcp-1"])

    spaced_out: dict[str, Any] = {
        "settings": {"rounds": spaced_rounds, "calls_per_round": spaced_per_round, "pause_s": SPACING},
        "contenders": {n: {"per_call_s": summary([t for b in spaced[n] for t in b])} for n in spaced_names},
        "ratios": {
            f"{n}/{baseline(n)}": ratio_summary(medians(spaced[n]), medians(spaced[baseline(n)]))
            for n in spaced_names
            if not n.startswith("direct")
        },
    }
    return {"sequential": sequential, "concurrent": concurrent, "spaced": spaced_out}
