"""Start-up to the first complete ``tools/list`` with N servers that each take 0.5 s to start.

Timed from just before the process is spawned until the client holds a ``tools/list``
answer that has every server's tools (the mcp SDK client: initialize, then list_tools).
Contenders, interleaved round by round:

- ``single``: the reference, one slow demo server reached directly;
- ``prefixgate``: prefixgate with the N slow servers;
- ``fastmcp`` / ``fastmcp-reuse``: FastMCP's proxy with the N slow servers (``create_proxy``
  default, and a connected ``Client`` that it reuses);
- ``prefixgate-1`` (context): prefixgate with the one slow server: the gateway's own cost;
- ``direct-xN`` (context): N direct clients spawning the N slow servers at once, until all
  have listed: what N Python servers cost to start on this machine, gateway or not.

Every start here is a first-ever one (``warm_start = false``): this measures the barrier;
``bench/warm.py`` measures a start that answers from the last verified catalog.

The barrier itself is measured with ``bench/slow_server.py`` (standard library only, so
ten of them do not fight over two cores importing the SDK): ``light-N`` is prefixgate
with N such servers, ``light-1`` prefixgate with the slowest of them alone; their ratio
is what the barrier costs over the slowest server (target <= 1.3).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import (
    Contender,
    connect,
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

TOOLS = 3  # generated tools per server; each demo server also has 7 fixed ones
LIGHT = Path(__file__).resolve().parent / "slow_server.py"
PER_SERVER = TOOLS + 7
COLD = {"warm_start": False}
"""No warm-start record: every start waits for its barrier, which is what this measures."""


async def _time_to_list(contender: Contender, ctx: Any, expect: int) -> float:
    async with connect(contender, ctx.errlog) as conn:
        listed = await conn.session.list_tools()
        elapsed = time.perf_counter() - conn.started
    if len(listed.tools) < expect:
        raise RuntimeError(f"{contender.name}: {len(listed.tools)} tools listed, expected at least {expect}")
    return elapsed


async def _time_parallel(contender: Contender, ctx: Any, count: int) -> float:
    """``count`` direct clients at once: time until the last one has listed."""
    started = time.perf_counter()
    done: list[float] = []

    async def one() -> None:
        await _time_to_list(contender, ctx, PER_SERVER)
        done.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return max(done)


async def run(ctx: Any) -> dict[str, Any]:
    quick = ctx.quick
    count = 2 if quick else 10
    delay = 0.5
    rounds = 1 if quick else 3
    slow_rounds = 2  # fastmcp (default) rebuilds its backends per request: ~1 min a round
    tmp = ctx.tmp / "startup"
    servers = {f"s{i:02d}": demo_args("--tools", TOOLS, "--startup-delay", delay, "--seed", i) for i in range(count)}
    single = direct("single", "--tools", TOOLS, "--startup-delay", delay)
    runs: dict[str, tuple[Contender, Any]] = {
        "single": (single, lambda c: _time_to_list(c, ctx, PER_SERVER)),
        "prefixgate": (
            via_prefixgate("prefixgate", gateway_config(tmp / "pg", servers, gateway=COLD)),
            lambda c: _time_to_list(c, ctx, count * PER_SERVER),
        ),
    }
    if ctx.fastmcp_python:
        cfg = fastmcp_config(tmp, "fastmcp", servers)
        runs["fastmcp"] = (
            via_fastmcp("fastmcp", ctx.fastmcp_python, cfg),
            lambda c: _time_to_list(c, ctx, count * PER_SERVER),
        )
    if ctx.fastmcp_python and not quick:
        runs["fastmcp-reuse"] = (
            via_fastmcp("fastmcp-reuse", ctx.fastmcp_python, cfg, reuse=True),
            lambda c: _time_to_list(c, ctx, count * PER_SERVER),
        )
    light = {f"l{i:02d}": [str(LIGHT), str(delay), f"l{i:02d}"] for i in range(count)}
    runs[f"light-{count}"] = (
        via_prefixgate(f"light-{count}", gateway_config(tmp / "light", light, gateway=COLD)),
        lambda c: _time_to_list(c, ctx, count * 3),
    )
    runs["light-1"] = (
        via_prefixgate("light-1", gateway_config(tmp / "light1", {"l00": light["l00"]}, gateway=COLD)),
        lambda c: _time_to_list(c, ctx, 3),
    )
    if not quick:  # context rows
        one_server = {"s00": servers["s00"]}
        runs["prefixgate-1"] = (
            via_prefixgate("prefixgate-1", gateway_config(tmp / "pg1", one_server, gateway=COLD)),
            lambda c: _time_to_list(c, ctx, PER_SERVER),
        )
        runs[f"direct-x{count}"] = (single, lambda c: _time_parallel(c, ctx, count))

    times: dict[str, list[float | None]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in rotated(list(runs), r):
            if name == "fastmcp" and r >= slow_rounds:
                times[name].append(None)
                continue
            contender, measure = runs[name]
            times[name].append(await measure(contender))
            await anyio.sleep(0.5)  # let the previous contender's processes finish exiting
        ctx.progress(f"start-up round {r + 1}/{rounds}")

    def ratio(a: str, b: str) -> dict[str, Any]:
        pairs = [(x, y) for x, y in zip(times[a], times[b], strict=True) if x is not None and y is not None]
        return ratio_summary([x for x, _ in pairs], [y for _, y in pairs])

    result: dict[str, Any] = {
        "settings": {
            "servers": count,
            "startup_delay_s": delay,
            "rounds": rounds,
            "fastmcp_rounds": min(rounds, slow_rounds),
            "tools_per_server": PER_SERVER,
        },
        "contenders": {
            name: {"time_to_list_s": summary([x for x in t if x is not None]), "note": runs[name][0].note}
            for name, t in times.items()
        },
        "ratios": {f"{name}/single": ratio(name, "single") for name in times if name != "single"},
    }
    if f"direct-x{count}" in result["contenders"]:
        note = f"{count} mcp SDK clients, each spawning one slow demo server"
        result["contenders"][f"direct-x{count}"]["note"] = note
    if "fastmcp" in times:
        result["ratios"]["prefixgate/fastmcp"] = ratio("prefixgate", "fastmcp")
    result["ratios"]["barrier"] = ratio(f"light-{count}", "light-1")
    return result
