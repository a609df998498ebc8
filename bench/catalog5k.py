"""A 5,000-tool catalog: build + decision, the search index, and serving it.

In process (no I/O): 50 servers x 100 generated tools (``gateway.commands.demo.generated_tool``, the
demo server's own tools, with per-server key and ``required`` order), then exactly what
``gateway.engine.epoch.build_epoch`` does: ``catalog.build.build`` + ``catalog.budget.decide``
(profile openai: 5,000 tools are over its 128-function limit, so the decision falls back
to on-demand), never remembering a check (a first-ever build), and the schema check alone
(``catalog.schema.check`` on every input schema). Then ``SearchIndex`` construction and
``query`` + ``render`` (what ``tool_search`` runs).

Through a running gateway: 5 demo servers x 1,000 generated tools (+7 fixed each: 5,035
tools; 50 Python servers would cost ~40 s of CPU to start on 2 cores), read with
:class:`bench.common.RawClient` so the time is the gateway's, not the client's:

- ``fixed``: profile ``mcp`` (no function limit), ``declarations = "fixed"``: ``tools/list``
  carries all 5,035 declarations (the heaviest list); ``*__sync_*`` deferred so
  ``tool_search`` is declared too;
- ``on-demand``: the default profile (openai): ``tools/list`` is the small on-demand list
  and every tool is found through ``tool_search``.

The SDK client's ``list_tools()`` on the full list is reported for context (it validates
5,035 ``Tool`` models and re-joins the multi-megabyte line).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import anyio

from bench.common import PYTHON, RawClient, connect, demo_args, gateway_config, rotated, summary, via_prefixgate

QUERIES = [
    "create issue",
    "list pull requests",
    "delete webhook",
    "sync milestone",
    "archive the release",
    "export dashboard metrics",
    "search customers by owner",
    "describe deployment",
    "update invoice",
    "labels since date",
    "repository name without the owner",
    "get_issue",
    "s07__get_issue",
    "fine-grained options for update team",
    "commit",
    "alert",
    "kubernetes pod logs",  # no match: the closest-names fallback
    "order_3",
]


def raw_tools(servers: int, per_server: int) -> list[Any]:
    from catalog.model import ServerTools
    from gateway.commands.demo import generated_tool

    out = []
    for s in range(servers):
        sid = f"s{s:02d}"
        rng = random.Random(s)
        tools = tuple(generated_tool(i, rng, sid) for i in range(per_server))
        out.append(ServerTools(id=sid, prefix=sid, tools=tools))
    return out


def build_and_decide(servers: list[Any], memo: Any = None) -> tuple[Any, Any, float, float]:
    from catalog.budget import ClientPolicy, decide
    from catalog.build import build
    from catalog.names import PROFILES
    from gateway.engine.epoch import META_TOOLS, meta_declarations
    from gateway.published import wire_problem

    started = time.perf_counter()
    catalog = build(servers, PROFILES["openai"], "__", reserved=META_TOOLS, extra_check=wire_problem, memo=memo)
    built = time.perf_counter()
    decision = decide(catalog, ClientPolicy(), meta_declarations(True))
    return catalog, decision, built - started, time.perf_counter() - built


def in_process(rounds: int, servers: int, per_server: int, budget_s: float) -> dict[str, Any]:
    """Up to ``rounds`` rounds; after two, stop once ``budget_s`` is spent (a slow build)."""
    from catalog.search import SearchIndex, render

    raw = raw_tools(servers, per_server)
    totals: list[float] = []
    builds: list[float] = []
    decides: list[float] = []
    indexes: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    tools = mode = None
    began = time.perf_counter()
    for r in range(rounds):
        if r >= 2 and time.perf_counter() - began > budget_s:
            break
        catalog, decision, b, d = build_and_decide(raw)
        builds.append(b)
        decides.append(d)
        totals.append(b + d)
        tools, mode = len(catalog.entries), f"{decision.mode} ({decision.fallback})"
        started = time.perf_counter()
        index = SearchIndex(catalog.entries)
        indexes.append(time.perf_counter() - started)
        deferred = set(decision.deferred_names)
        for bucket in (cold, warm):  # first pass computes each term's postings; second reuses them
            for q in QUERIES:
                started = time.perf_counter()
                result = index.query(q, 5, 0)
                render(result, [e.name for e in result.matches if e.name in deferred])
                bucket.append(time.perf_counter() - started)
    # The schema check alone (metaschema + compile for argument validation), every tool, no
    # memo: what a first-ever build spends in catalog.schema.check.
    from catalog.schema import canonicalize, check

    schemas = [canonicalize(tool["inputSchema"]) for server in raw for tool in server.tools]
    checks: list[float] = []
    for _ in range(max(len(totals), 3)):
        started = time.perf_counter()
        for schema in schemas:
            check(schema)
        checks.append(time.perf_counter() - started)
    # What the gateway does on every start after the first and on every rebuild: the
    # expensive checks are remembered (gateway.engine.checks.CheckCache, here in memory only).
    from gateway.engine.checks import CheckCache

    memo = CheckCache()
    build_and_decide(raw, memo)
    remembered = []
    for _ in range(max(len(totals), 3)):
        _, _, b, d = build_and_decide(raw, memo)
        remembered.append(b + d)
    return {
        "tools": tools,
        "mode": mode,
        "build_plus_decide_s": summary(totals),
        "build_plus_decide_remembered_s": summary(remembered),
        "build_s": summary(builds),
        "schema_check_s": summary(checks),
        "decide_s": summary(decides),
        "search_index_build_s": summary(indexes),
        "tool_search_cold_s": summary(cold),
        "tool_search_warm_s": summary(warm),
    }


def _serve_measure(client: RawClient, kind: str, calls: int) -> tuple[list[float], int]:
    times: list[float] = []
    size = 0
    for i in range(calls):
        if kind == "list":
            started = time.perf_counter()
            line = client.request("tools/list", {})
        else:
            q = QUERIES[i % len(QUERIES)]
            started = time.perf_counter()
            line = client.request("tools/call", {"name": "tool_search", "arguments": {"query": q}})
        times.append(time.perf_counter() - started)
        size = len(line)
        if b'"error"' in line[:100] or b'"isError":true' in line[-200:]:
            raise RuntimeError(f"{kind}: error answer {line[:300]!r}")
    return times, size


async def through_gateway(ctx: Any, rounds: int, servers: int, per_server: int) -> dict[str, Any]:
    tmp = ctx.tmp / "catalog"
    demo = {f"s{s:02d}": demo_args("--tools", per_server, "--seed", s, "--name", f"s{s:02d}") for s in range(servers)}
    configs = {
        "fixed": gateway_config(
            tmp / "fixed", demo, client={"profile": "mcp", "declarations": "fixed", "defer": ["*__sync_*"]}
        ),
        "on-demand": gateway_config(tmp / "on-demand", demo),
    }
    clients: dict[str, RawClient] = {}
    try:
        started = time.perf_counter()
        for name, cfg in configs.items():
            argv = [PYTHON, "-m", "gateway", "serve", "--config", str(cfg), "--log-level", "warning"]
            clients[name] = RawClient(argv, ctx.errlog)
        for name, c in clients.items():
            c.initialize()
            first = c.request("tools/list", {})  # waits for the discovery barrier
            declared = len(json.loads(first)["result"]["tools"])
            ctx.progress(f"{name} gateway up: {declared} declared, {time.perf_counter() - started:.1f} s")
            _serve_measure(c, "list", 3)  # warm-up
            _serve_measure(c, "search", len(QUERIES))  # first query of each term: postings built
        list_times: dict[str, list[float]] = {n: [] for n in clients}
        sizes: dict[str, int] = {}
        search_times: list[float] = []
        for r in range(rounds):
            for name in rotated(list(clients), r):
                t, sizes[name] = await anyio.to_thread.run_sync(_serve_measure, clients[name], "list", 5)
                list_times[name] += t
            t, _ = await anyio.to_thread.run_sync(_serve_measure, clients["on-demand"], "search", len(QUERIES))
            search_times += t
    finally:
        for c in clients.values():
            c.close()

    # The SDK client on the full list, for context.
    sdk_times: list[float] = []
    async with connect(via_prefixgate("sdk", configs["fixed"]), ctx.errlog) as conn:
        for _ in range(max(2, rounds // 2)):
            started = time.perf_counter()
            listed = await conn.session.list_tools()
            sdk_times.append(time.perf_counter() - started)
    return {
        "servers": servers,
        "tools": servers * (per_server + 7),
        "tools_list_raw_s": {n: summary(t) for n, t in list_times.items()},
        "tools_list_bytes": sizes,
        "tool_search_raw_s": summary(search_times),
        "tools_list_sdk_client_s": summary(sdk_times),
        "sdk_listed": len(listed.tools),
    }


async def run(ctx: Any) -> dict[str, Any]:
    quick = ctx.quick
    servers, per_server = (5, 50) if quick else (50, 100)
    result = {"in_process": await anyio.to_thread.run_sync(in_process, 2 if quick else 7, servers, per_server, 60.0)}
    ctx.progress("in-process catalog done")
    servers, per_server = (1, 150) if quick else (5, 1000)
    result["gateway"] = await through_gateway(ctx, 2 if quick else 6, servers, per_server)
    return result
