"""A 16 MiB tool result: time until the client holds the answer, and the gateway's memory.

The demo server's ``payload {bytes: 16 MiB}`` (text). Contenders, interleaved:

- ``direct``: mcp SDK client -> demo server: the client holds the full 16 MiB answer;
- ``prefixgate``: mcp SDK client -> prefixgate -> demo server: prefixgate reads the result,
  spills it to an artifact (written and fsynced) and the client holds the bounded
  (64 KiB) preview;
- ``direct-raw`` / ``prefixgate-raw`` (context): the same through :class:`RawClient`, which
  reads lines in linear time and parses nothing: the wire cost without the SDK client's
  line reassembly (quadratic in line length) and typed validation.

Gateway memory: before each call the peak-RSS mark of the gateway process is reset
(``/proc/<pid>/clear_refs``); after it, ``VmHWM`` is the call's peak. Reported: that peak,
the RSS before the call, and peak - before (what the call added) over the result size.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

import anyio

from bench.common import (
    PYTHON,
    Conn,
    RawClient,
    connect,
    demo_args,
    direct,
    gateway_config,
    proc_status,
    ratio_summary,
    reset_peak,
    rotated,
    summary,
    via_prefixgate,
)

PREVIEW_MAX = 65536


async def _sdk_call(conn: Conn, tool: str, size: int) -> tuple[float, dict[str, int]]:
    pid = conn.pid
    before = proc_status(pid) if pid else {}
    peak_reset = reset_peak(pid) if pid else False
    started = time.perf_counter()
    result = await conn.session.call_tool(tool, {"bytes": size})
    elapsed = time.perf_counter() - started
    text = result.content[0].text
    if result.is_error or not text:
        raise RuntimeError(f"{tool}: error result {text[:300]!r}")
    mem = {}
    if pid:
        after = proc_status(pid)
        mem = {"rss_before": before["VmRSS"], "peak": after["VmHWM"], "peak_reset": int(peak_reset)}
    return elapsed, {"answer_bytes": len(text.encode())} | mem


def _raw_call(client: RawClient, tool: str, size: int) -> tuple[float, dict[str, int]]:
    before = proc_status(client.pid)
    peak_reset = reset_peak(client.pid)
    started = time.perf_counter()
    line = client.request("tools/call", {"name": tool, "arguments": {"bytes": size}})
    elapsed = time.perf_counter() - started
    after = proc_status(client.pid)
    return elapsed, {
        "answer_bytes": len(line),
        "rss_before": before["VmRSS"],
        "peak": after["VmHWM"],
        "peak_reset": int(peak_reset),
    }


async def run(ctx: Any) -> dict[str, Any]:
    quick = ctx.quick
    mib = 2 if quick else 16
    size = mib * 1024 * 1024
    rounds = 1 if quick else 5
    tmp = ctx.tmp / "bigresult"
    cfg = gateway_config(tmp / "pg", {"d": demo_args("--tools", 1, "--name", "d")})
    gw_argv = [PYTHON, "-m", "gateway", "serve", "--config", str(cfg), "--log-level", "warning"]
    times: dict[str, list[float]] = {}
    info: dict[str, list[dict[str, int]]] = {}

    async with AsyncExitStack() as stack:
        conns = {
            "direct": await stack.enter_async_context(connect(direct("direct", "--tools", 1), ctx.errlog)),
            "prefixgate": await stack.enter_async_context(connect(via_prefixgate("prefixgate", cfg), ctx.errlog)),
        }
        raws = {
            "direct-raw": RawClient([PYTHON, *demo_args("--tools", 1)], ctx.errlog),
            "prefixgate-raw": RawClient(gw_argv, ctx.errlog),
        }
        for raw in raws.values():
            stack.callback(raw.close)
        for c in raws.values():
            c.initialize()
        tools = {
            "direct": "payload",
            "prefixgate": "d__payload",
            "direct-raw": "payload",
            "prefixgate-raw": "d__payload",
        }
        # Warm-up with a result that also spills (lazy imports, the artifact directory).
        for name, conn in conns.items():
            await _sdk_call(conn, tools[name], 256 * 1024)
        for name, c in raws.items():
            await anyio.to_thread.run_sync(_raw_call, c, tools[name], 256 * 1024)
        names = list(conns) + list(raws)
        times = {n: [] for n in names}
        info = {n: [] for n in names}
        for r in range(rounds):
            for name in rotated(names, r):
                if name in conns:
                    t, i = await _sdk_call(conns[name], tools[name], size)
                else:
                    t, i = await anyio.to_thread.run_sync(_raw_call, raws[name], tools[name], size)
                times[name].append(t)
                info[name].append(i)
            ctx.progress(f"{mib} MiB round {r + 1}/{rounds}")

    def memory(name: str) -> dict[str, Any]:
        rows = info[name]
        if not rows or "peak" not in rows[0]:
            return {}
        added = [i["peak"] - i["rss_before"] for i in rows]
        return {
            "peak_rss_bytes": summary([i["peak"] for i in rows]),
            "rss_before_bytes": summary([i["rss_before"] for i in rows]),
            "peak_added_bytes": summary(added),
            "peak_added_over_size": max(added) / size,
            "peak_rss_over_size": max(i["peak"] for i in rows) / size,
            "peak_mark_reset": all(i["peak_reset"] for i in rows),
        }

    answer = {n: max(i["answer_bytes"] for i in info[n]) for n in names}
    if answer["prefixgate"] > PREVIEW_MAX:
        raise RuntimeError(f"prefixgate answer is {answer['prefixgate']} bytes, not a bounded preview")
    return {
        "settings": {"result_bytes": size, "rounds": rounds},
        "contenders": {
            n: {"time_to_answer_s": summary(times[n]), "answer_bytes": answer[n]}
            | ({"gateway_memory": memory(n)} if n.startswith("prefixgate") else {})
            for n in names
        },
        "ratios": {
            "prefixgate/direct": ratio_summary(times["prefixgate"], times["direct"]),
            "prefixgate-raw/direct-raw": ratio_summary(times["prefixgate-raw"], times["direct-raw"]),
        },
    }
