"""Every benchmark in one run: prefixgate vs a direct connection vs FastMCP's proxy.

    python -m bench.run [--quick] [--out DIR] [--fastmcp-python PATH]
                        [--only calls,http,startup,catalog,bigresult,flood,stores,warm,telemetry,stall]

Each benchmark interleaves its contenders round by round and reports medians, spreads
and per-round ratios, all from this one run. Writes ``bench-<time>.json`` and
``bench-<time>.md`` (plus ``latest.json`` / ``latest.md``) to ``--out`` (default
``bench/results/``, git-ignored) and prints the Markdown table. Exit status 0 when
every benchmark ran (missed targets are reported, not failures), 1 when one crashed.

``--quick`` is the smoke run of the test suite: a handful of iterations, smaller sizes.
FastMCP comes from the ``bench`` extra (``pip install -e '.[bench]'``); without it the
FastMCP contenders are skipped and their targets marked n/a.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from bench import bigresult, calls, catalog5k, flood, stall, startup, stores, telemetry, warm
from bench import httpcalls as http_bench
from bench.common import ROOT, fastmcp_python
from gateway.upstream.heads import parser_name

BENCHMARKS: dict[str, Callable[[Any], Any]] = {
    "calls": calls.run,
    "http": http_bench.run,
    "startup": startup.run,
    "catalog": catalog5k.run,
    "bigresult": bigresult.run,
    "flood": flood.run,
    "stores": stores.run,
    "warm": warm.run,
    "telemetry": telemetry.run,
    "stall": stall.run,
}


@dataclass
class Context:
    quick: bool
    tmp: Path
    errlog: Path
    fastmcp_python: str | None
    fastmcp_note: str
    started: float = field(default_factory=time.perf_counter)

    def progress(self, message: str) -> None:
        print(f"[bench {time.perf_counter() - self.started:6.1f} s] {message}", file=sys.stderr, flush=True)


# --- targets --------------------------------------------------------------------------


@dataclass
class Target:
    id: str
    what: str
    limit: str
    value: float | None
    spread: str
    met: bool | None
    shown: str
    note: str = ""
    context: bool = False
    """Measured for what it explains, with no target of its own."""

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "what": self.what,
            "limit": self.limit,
            "value": self.value,
            "shown": self.shown,
            "spread": self.spread,
            "status": "context" if self.context else "n/a" if self.met is None else ("met" if self.met else "MISSED"),
            "note": self.note,
        }


def _get(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _ratio_target(tid: str, what: str, ratio: dict[str, Any] | None, limit: float, strict: bool = False) -> Target:
    if not ratio or not ratio.get("n"):
        return Target(tid, what, f"<= {limit:g}x", None, "", None, "n/a", "contender not run")
    value = ratio["median"]
    met = value < limit if strict else value <= limit
    return Target(
        tid, what, f"{'<' if strict else '<='} {limit:g}x", value, f"rounds {ratio['min']:.2f}-{ratio['max']:.2f}x",
        met, f"{value:.2f}x",
    )


def _context_ratio(tid: str, what: str, ratio: dict[str, Any] | None) -> Target:
    """A ratio shown beside the targets to explain them (no limit of its own)."""
    if not ratio or not ratio.get("n"):
        return Target(tid, what, "none", None, "", None, "n/a", "contender not run")
    value = ratio["median"]
    spread = f"rounds {ratio['min']:.2f}-{ratio['max']:.2f}x"
    return Target(tid, what, "none", value, spread, None, f"{value:.2f}x", context=True)


def _time_target(tid: str, what: str, s: dict[str, Any] | None, limit_s: float, note: str = "") -> Target:
    if not s or not s.get("n"):
        return Target(tid, what, f"<= {_ms(limit_s)}", None, "", None, "n/a", "not run")
    value = s["median"]
    return Target(
        tid, what, f"<= {_ms(limit_s)}", value, f"p10-p90 {_ms(s['p10'])}-{_ms(s['p90'])}", value <= limit_s,
        _ms(value), note,
    )


def targets(results: dict[str, Any]) -> list[Target]:
    seq = _get(results, "calls", "sequential", "ratios") or {}
    spaced = _get(results, "calls", "spaced", "ratios") or {}
    n_servers = _get(results, "startup", "settings", "servers") or "N"
    n_build = f"{_get(results, 'catalog', 'in_process', 'tools') or 5000:,}"
    n_gw = f"{_get(results, 'catalog', 'gateway', 'tools') or 5035:,}"
    out = [
        _ratio_target(
            "per-call-vs-direct", "stdio per-call median, prefixgate / direct", seq.get("prefixgate/direct"), 1.2
        ),
        _ratio_target(
            "per-call-vs-direct-2026-07-28",
            "stdio per-call median, prefixgate / direct, 2026-07-28 client (SDK Client, mode auto)",
            seq.get("prefixgate-2026-07-28/direct-2026-07-28"),
            1.2,
        ),
        _context_ratio(
            "per-call-relay",
            "(context) stdio per-call median, a zero-work relay / direct: the extra process hop alone",
            seq.get("relay/direct"),
        ),
        _context_ratio(
            "per-call-relay-2026-07-28",
            "(context) stdio per-call median, a zero-work relay / direct, 2026-07-28 client",
            seq.get("relay-2026-07-28/direct-2026-07-28"),
        ),
        _context_ratio(
            "per-call-over-relay",
            "(context) stdio per-call median, prefixgate / the relay: prefixgate's own work",
            seq.get("prefixgate/relay"),
        ),
        _context_ratio(
            "per-call-over-relay-2026-07-28",
            "(context) stdio per-call median, prefixgate / the relay, 2026-07-28 client",
            seq.get("prefixgate-2026-07-28/relay-2026-07-28"),
        ),
        *(
            _context_ratio(
                f"spaced-{who}{suffix}",
                f"(context) stdio per-call median, calls 50 ms apart (as an agent's), {label} / direct{era}",
                spaced.get(f"{who}{suffix}/direct{suffix}"),
            )
            for suffix, era in (("", ""), ("-2026-07-28", ", 2026-07-28 client"))
            for who, label in (("prefixgate", "prefixgate"), ("relay", "a zero-work relay"))
        ),
        _ratio_target(
            "per-call-vs-fastmcp",
            "per-call median, prefixgate / FastMCP single-server proxy",
            seq.get("prefixgate/fastmcp-1"),
            0.6,
        ),
        _ratio_target(
            "startup",
            f"start-up to first tools/list, {n_servers} servers x 0.5 s: "
            "prefixgate / prefixgate with the slowest alone",
            _get(results, "startup", "ratios", "barrier"),
            1.3,
        ),
        _ratio_target(
            "startup-demo",
            f"(context) start-up, {n_servers} Python demo servers on 2 cores: prefixgate / one demo server direct",
            _get(results, "startup", "ratios", "prefixgate/single"),
            1.3,
        ),
        _time_target(
            "catalog-build",
            f"{n_build}-tool catalog: build + decide, checks remembered (every start after the first, every rebuild)",
            _get(results, "catalog", "in_process", "build_plus_decide_remembered_s"),
            0.25,
        ),
        _time_target(
            "catalog-build-cold",
            f"{n_build}-tool catalog: first-ever build + decide (every schema checked)",
            _get(results, "catalog", "in_process", "build_plus_decide_s"),
            0.25,
        ),
        _time_target(
            "tools-list",
            f"tools/list through the gateway, {n_gw} tools all declared (wire)",
            _get(results, "catalog", "gateway", "tools_list_raw_s", "fixed"),
            0.005,  # issue 16: <= 5 ms gateway-side; the wire time here also counts the client's read
        ),
        _time_target(
            "tool-search",
            f"tool_search median through the gateway, {n_gw} tools (wire)",
            _get(results, "catalog", "gateway", "tool_search_raw_s"),
            0.002,
        ),
        _ratio_target(
            "big-result-time",
            "large result: prefixgate bounded answer / direct full answer (SDK client)",
            _get(results, "bigresult", "ratios", "prefixgate/direct"),
            1.0,
            strict=True,
        ),
    ]
    out += http_targets(results)
    out += warm_targets(results)
    mem = _get(results, "bigresult", "contenders", "prefixgate", "gateway_memory") or {}
    if "peak_added_over_size" in mem:
        value = mem["peak_added_over_size"]
        out.append(
            Target(
                "big-result-memory",
                "large result: gateway peak memory added by the call / result size",
                "<= 3x",
                value,
                f"peak RSS {mem['peak_rss_bytes']['max'] / 2**20:.0f} MiB = {mem['peak_rss_over_size']:.1f}x size",
                value <= 3,
                f"{value:.2f}x",
                "" if mem.get("peak_mark_reset") else "peak mark could not be reset: process-lifetime peak",
            )
        )
    else:
        out.append(
            Target(
                "big-result-memory", "large result: gateway peak memory / result size", "<= 3x", None, "", None, "n/a"
            )
        )
    if results.get("_quick"):
        for t in out:
            t.note = (t.note + "; " if t.note else "") + "quick run: sizes and counts reduced"
    return out


def http_targets(results: dict[str, Any]) -> list[Target]:
    """Issue 25: ``serve --http`` near an SDK server under uvicorn, in both eras."""
    out: list[Target] = []
    for era in ("2025-11-25", "2026-07-28"):
        data = _get(results, "http", "eras", era) or {}
        ratios = data.get("ratios") or {}
        out.append(_ratio_target(
            f"http-per-call-{era}", f"HTTP per-call median, prefixgate / direct SDK server, {era} client",
            ratios.get("prefixgate/direct per call"), 1.5,
        ))
        throughput = ratios.get("prefixgate/direct throughput 32")
        failed = sum(c.get("failed_calls", 0) for c in (data.get("contenders") or {}).values())
        if throughput and throughput.get("n"):
            value = throughput["median"]
            out.append(Target(
                f"http-throughput-{era}", f"HTTP throughput, 32 concurrent callers, prefixgate / direct, {era} client",
                ">= 0.8x, none refused", value, f"rounds {throughput['min']:.2f}-{throughput['max']:.2f}x",
                value >= 0.8 and failed == 0, f"{value:.2f}x, {failed} refused",
            ))
        else:
            out.append(Target(f"http-throughput-{era}", f"HTTP throughput, 32 callers, {era} client",
                              ">= 0.8x, none refused", None, "", None, "n/a", "not run"))
        out.append(_ratio_target(
            f"http-downstream-{era}",
            f"HTTP per-call median, prefixgate with an HTTP downstream / direct, {era} client",
            ratios.get("prefixgate-http-downstream/direct per call"), 2.0,
        ))
        hop = "a near-zero-work HTTP-to-stdio relay"
        out += [
            _context_ratio(f"http-per-call-relay-{era}", f"(context) HTTP per-call median, {hop} / direct, "
                           f"{era} client: the process hop alone", ratios.get("relay/direct per call")),
            _context_ratio(f"http-throughput-relay-{era}", f"(context) HTTP throughput, 32 callers, {hop} / direct, "
                           f"{era} client", ratios.get("relay/direct throughput 32")),
            _context_ratio(f"http-per-call-over-relay-{era}", f"(context) HTTP per-call median, prefixgate / "
                           f"the relay, {era} client: prefixgate's own share", ratios.get("prefixgate/relay per call")),
            _context_ratio(f"http-throughput-over-relay-{era}", f"(context) HTTP throughput, 32 callers, prefixgate / "
                           f"the relay, {era} client", ratios.get("prefixgate/relay throughput 32")),
        ]
    return out


def warm_targets(results: dict[str, Any]) -> list[Target]:
    """Issue 23: the first complete tools/list of a warm start, and of a first-ever one."""
    servers = _get(results, "warm", "settings", "servers") or 3
    slowest = _get(results, "warm", "settings", "slowest_s") or 1.5
    what = f"spawn to first complete tools/list, {servers} real servers, the slowest {slowest:g} s"
    identical = _get(results, "warm", "bytes_identical")
    return [
        _time_target("warm-start", f"{what}: warm start", _get(results, "warm", "contenders", "warm", "time_to_list_s"),
                     0.5),
        _time_target(
            "warm-start-2026-07-28",
            f"{what}: warm start, 2026-07-28 client (server/discover, tools/list)",
            _get(results, "warm", "contenders", "warm-2026-07-28", "time_to_list_s"),
            0.5,
        ),
        _ratio_target(
            "first-start",
            f"{what}: first-ever start / the slowest server alone",
            _get(results, "warm", "ratios", "first-start/slowest"),
            1.1,
        ),
        Target(
            "warm-bytes",
            "published bytes of the warm and the first-ever start, every round",
            "identical",
            None if identical is None else float(identical),
            "",
            identical,
            "n/a" if identical is None else ("identical" if identical else "DIFFERENT"),
        ),
    ]


# --- the Markdown ---------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.01:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds * 1000:.2f} ms"


def _spread(s: dict[str, Any] | None) -> str:
    if not s or not s.get("n"):
        return "-"
    if s["n"] < 5:
        return f"{_ms(s['min'])}-{_ms(s['max'])} (n={s['n']})"
    return f"{_ms(s['p10'])}-{_ms(s['p90'])} (n={s['n']})"


def _ratio(r: dict[str, Any] | None) -> str:
    if not r or not r.get("n"):
        return ""
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def measurement_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str]] = []
    seq = _get(results, "calls", "sequential")
    if seq:
        st = seq["settings"]
        label = f"echo, sequential ({st['rounds']}x{st['calls_per_round']} calls)"
        for name, c in seq["contenders"].items():
            r = seq["ratios"].get(f"{name}/{calls.baseline(name)}")
            extra = f" ({st['rounds']}x{st['slow_calls_per_round']} calls)" if name in st["slow"] else ""
            rows.append((label, name + extra, _ms(c["per_call_s"]["median"]), _spread(c["per_call_s"]), _ratio(r)))
    conc = _get(results, "calls", "concurrent")
    if conc:
        label = f"echo, {conc['settings']['concurrency']} concurrent (batch wall time)"
        for name, c in conc["contenders"].items():
            rows.append(
                (
                    label,
                    name,
                    _ms(c["batch_wall_s"]["median"]),
                    _spread(c["batch_wall_s"]),
                    _ratio(conc["ratios"].get(f"{name}/direct")),
                )
            )
    su = results.get("startup")
    if isinstance(su, dict) and "contenders" in su:
        st = su["settings"]
        label = f"start-up to tools/list, {st['servers']} servers x {st['startup_delay_s']} s"
        for name, c in su["contenders"].items():
            rows.append(
                (
                    label,
                    name,
                    _ms(c["time_to_list_s"]["median"]),
                    _spread(c["time_to_list_s"]),
                    _ratio(su["ratios"].get(f"{name}/single")),
                )
            )
    cat = results.get("catalog")
    if isinstance(cat, dict) and "in_process" in cat:
        ip = cat["in_process"]
        label = f"catalog, {ip['tools']} tools in process ({ip['mode']})"
        for key, what in (
            ("build_plus_decide_s", "build + decide"),
            ("build_s", "build"),
            ("schema_check_s", "schema checks alone (metaschema + compile), every tool"),
            ("decide_s", "decide"),
            ("search_index_build_s", "SearchIndex build"),
            ("tool_search_cold_s", "query+render, first use of terms"),
            ("tool_search_warm_s", "query+render, warm"),
        ):
            rows.append((label, what, _ms(ip[key]["median"]), _spread(ip[key]), ""))
    gw = _get(results, "catalog", "gateway")
    if gw:
        label = f"catalog, {gw['tools']} tools via prefixgate ({gw['servers']} servers)"
        for name, s in gw["tools_list_raw_s"].items():
            size = gw["tools_list_bytes"].get(name, 0)
            rows.append((label, f"tools/list, {name} ({size / 1024:.0f} KiB, wire)", _ms(s["median"]), _spread(s), ""))
        rows.append(
            (
                label,
                "tool_search (on-demand, wire)",
                _ms(gw["tool_search_raw_s"]["median"]),
                _spread(gw["tool_search_raw_s"]),
                "",
            )
        )
        rows.append(
            (
                label,
                "tools/list, fixed, SDK client list_tools()",
                _ms(gw["tools_list_sdk_client_s"]["median"]),
                _spread(gw["tools_list_sdk_client_s"]),
                "",
            )
        )
    big = results.get("bigresult")
    if isinstance(big, dict) and "contenders" in big:
        size = big["settings"]["result_bytes"]
        label = f"{size // 2**20} MiB result, time to answer"
        for name, c in big["contenders"].items():
            base = "direct-raw" if name.endswith("-raw") else "direct"
            r = big["ratios"].get(f"{name}/{base}")
            rows.append(
                (
                    label,
                    f"{name} ({c['answer_bytes'] / 1024:.0f} KiB answer)",
                    _ms(c["time_to_answer_s"]["median"]),
                    _spread(c["time_to_answer_s"]),
                    _ratio(r),
                )
            )
            mem = c.get("gateway_memory")
            if mem:
                rows.append(
                    (
                        f"{size // 2**20} MiB result, gateway memory",
                        f"{name}: peak RSS / RSS before / added",
                        f"{mem['peak_rss_bytes']['median'] / 2**20:.0f} / "
                        f"{mem['rss_before_bytes']['median'] / 2**20:.0f} / "
                        f"{mem['peak_added_bytes']['median'] / 2**20:.0f} MiB",
                        f"added max {mem['peak_added_bytes']['max'] / 2**20:.0f} MiB",
                        f"{mem['peak_added_over_size']:.2f}x size added",
                    )
                )
    wm = results.get("warm")
    if isinstance(wm, dict) and "contenders" in wm:
        ws = wm["settings"]
        label = f"spawn to first complete tools/list, {ws['servers']} servers (slowest {ws['slowest_s']:g} s)"
        for name, c in wm["contenders"].items():
            r = wm["ratios"].get(f"{name}/slowest")
            rows.append((label, name, _ms(c["time_to_list_s"]["median"]), _spread(c["time_to_list_s"]), _ratio(r)))
    hb = results.get("http")
    if isinstance(hb, dict) and "eras" in hb:
        rows += http_bench.rows(hb, _ms, _spread, _ratio)
    fl = results.get("flood")
    if isinstance(fl, dict) and "phases" in fl:
        rows += flood.rows(fl)
    st = results.get("stores")
    if isinstance(st, dict) and "contenders" in st:
        steps = {"tool_search_s": "tool_search with a grant", "spill_s": "1 MiB result spilled",
                 "read_s": "1 MiB artifact read back"}
        for step, label in steps.items():
            for name, c in st["contenders"].items():
                ratio = st["ratios"].get(f"redis/file {step}") if name == "redis" else None
                rows.append((f"state store: {label}", f"{name} store", _ms(c[step]["median"]),
                             _spread(c[step]), _ratio(ratio)))
    tm = results.get("telemetry")
    if isinstance(tm, dict) and "contenders" in tm:
        rows += telemetry.rows(tm, _ms, _spread, _ratio)
    sl = results.get("stall")
    if isinstance(sl, dict) and "quiet" in sl:
        rows += stall.rows(sl, _ms, _spread)
    return rows


def markdown(results: dict[str, Any], target_rows: list[dict[str, Any]]) -> str:
    m = results["_machine"]
    lines = [
        f"prefixgate benchmarks, {m['when']}{' (quick)' if results.get('_quick') else ''}: "
        f"{m['cpus']} cores ({m['cpu']}), Python {m['python']}, mcp {m['mcp']}, {m['fastmcp']}"
        f"{', HTTP parser ' + m['http_parser'] if 'http_parser' in m else ''}; "
        f"load average {m['loadavg_start']} at start, {m['loadavg_end']} at end.",
        "",
        "| target | measured | limit | spread | status |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for t in target_rows:
        note = f" ({t['note']})" if t["note"] else ""
        lines.append(f"| {t['what']}{note} | {t['shown']} | {t['limit']} | {t['spread']} | {t['status']} |")
    lines += [
        "",
        "| benchmark | contender | median | spread (p10-p90, or min-max) "
        "| ratio to reference (per-round median, range) |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for row in measurement_rows(results):
        lines.append("| " + " | ".join(row) + " |")
    errors = {k: v["error"] for k, v in results.items() if isinstance(v, dict) and "error" in v}
    if errors:
        lines += ["", "Errors: " + "; ".join(f"{k}: {v.splitlines()[-1]}" for k, v in errors.items())]
    return "\n".join(lines) + "\n"


# --- the run ----------------------------------------------------------------------------


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def machine(fastmcp_note: str) -> dict[str, Any]:
    """Where and when this run happens (call it before the benchmarks start)."""
    from importlib.metadata import version

    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mcp": version("mcp"),
        "fastmcp": fastmcp_note.split(" (")[0] if fastmcp_note.startswith("fastmcp ") else "no FastMCP",
        "http_parser": parser_name(),  # what serve --http reads with (and, installed here, every uvicorn contender)
        "loadavg_start": _loadavg(),
    }


async def run_all(ctx: Context, only: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in only:
        ctx.progress(f"{name}: start")
        try:
            results[name] = await BENCHMARKS[name](ctx)
        except Exception:  # noqa: BLE001 - one broken benchmark must not lose the others
            results[name] = {"error": traceback.format_exc()}
            ctx.progress(f"{name}: FAILED\n{results[name]['error']}")
        ctx.progress(f"{name}: done")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: a handful of iterations, smaller sizes")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results", help="directory for the JSON and Markdown"
    )
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {','.join(BENCHMARKS)}"
    )
    parser.add_argument("--fastmcp-python", help="interpreter with fastmcp installed (default: this one if it has it)")
    parser.add_argument("--no-fastmcp", action="store_true", help="skip the FastMCP contenders")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temporary configs, state and logs")
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    if args.no_fastmcp:
        fm_python, fm_note = None, "FastMCP contenders skipped (--no-fastmcp)"
    else:
        fm_python, fm_note = fastmcp_python(args.fastmcp_python)
    tmp = Path(tempfile.mkdtemp(prefix="prefixgate-bench-"))
    ctx = Context(args.quick, tmp, tmp / "children-stderr.log", fm_python, fm_note)
    ctx.progress(f"{fm_note}; temporary files in {tmp}")
    where = machine(fm_note)
    try:
        results = anyio.run(run_all, ctx, only)
    finally:
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    results["_machine"] = where | {"loadavg_end": _loadavg()}
    results["_quick"] = args.quick
    results["_wall_s"] = time.perf_counter() - ctx.started
    target_rows = [t.row() for t in targets(results)]
    results["_targets"] = target_rows
    table = markdown(results, target_rows)

    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    for stem in (f"bench-{stamp}", "latest"):
        (args.out / f"{stem}.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        (args.out / f"{stem}.md").write_text(table, encoding="utf-8")
    print(table)
    ctx.progress(f"wrote {args.out / f'bench-{stamp}.json'} and .md ({results['_wall_s']:.0f} s)")
    failed = [k for k, v in results.items() if isinstance(v, dict) and "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
