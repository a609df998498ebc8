"""The benchmark harness keeps working: a tiny run of each benchmark (not a timing test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.run import BENCHMARKS

ROOT = Path(__file__).resolve().parent.parent


def test_spill_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "spill.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.spill", "--mib", "1", "--rounds", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert set(rows) == {"text", "cjk-text", "image"}
    assert all(r["peak_ratio"] > 0 and r["median_s"] > 0 for r in rows.values())
    assert "| text |" in proc.stdout


def test_http_client_benchmark_smoke() -> None:
    """``python -m bench.httpclient``: every client answers the same call, each measured."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.httpclient", "--calls", "5", "--rounds", "1", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout)
    assert set(results) == {"sdk", "gateway-sdk", "gateway", "httpx", "raw"}
    assert all(r["wall_per_call_s"] > 0 and r["cpu_per_call_s"] >= 0 for r in results.values()), results
    assert results["raw"]["wall_ratio_to_raw"] == 1.0


SMOKE_HALVES = {
    "calls-to-bigresult": ("calls", "http", "startup", "catalog", "bigresult"),
    "flood-to-stall": ("flood", "stores", "warm", "telemetry", "stall"),
}
"""Every benchmark, in two runs of about the same length: the suite's workers share them."""


def _smoke(tmp_path: Path, names: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", ",".join(names), "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "latest.json").read_text())
    for name in names:
        assert "error" not in results[name], results[name].get("error")
    assert results["_quick"] is True
    statuses = {t["id"]: t["status"] for t in results["_targets"]}
    assert len(statuses) == 37 and set(statuses.values()) <= {"met", "MISSED", "n/a", "context"}
    table = (tmp_path / "latest.md").read_text()
    assert "| target | measured | limit | spread | status |" in table
    assert table in proc.stdout
    return results, table


def test_full_harness_smoke_later_half(tmp_path: Path) -> None:
    """``python -m bench.run --quick --only flood,...``: see ``test_full_harness_smoke``."""
    results, _ = _smoke(tmp_path, SMOKE_HALVES["flood-to-stall"])
    assert all(
        results["stall"][window]["n"] > 0 for window in ("quiet", "changing", "first_search", "posting", "long_calls")
    )
    assert all(p["next_call"] == "ok" for p in results["flood"]["phases"])
    assert results["stores"]["ratios"]["redis/file tool_search_s"]["n"] == results["stores"]["settings"]["rounds"]
    assert results["telemetry"]["ratios"]["prefixgate-traced/prefixgate"]["n"] == 2  # two quick rounds
    assert results["warm"]["bytes_identical"] is True  # the warm start published the first start's bytes


def test_full_harness_smoke(tmp_path: Path) -> None:
    """``python -m bench.run --quick``: every benchmark runs, the table and JSON come out (the
    first half here, the rest in ``test_full_harness_smoke_later_half``).

    FastMCP contenders run when ``fastmcp`` is installed (the ``bench`` extra) and are
    reported n/a otherwise. Targets are reported, not asserted: this is not a timing test.
    """
    assert set(SMOKE_HALVES["calls-to-bigresult"]) | set(SMOKE_HALVES["flood-to-stall"]) == set(BENCHMARKS)
    results, _ = _smoke(tmp_path, SMOKE_HALVES["calls-to-bigresult"])
    seq = results["calls"]["sequential"]
    assert seq["contenders"]["direct"]["per_call_s"]["median"] > 0
    assert seq["ratios"]["prefixgate/direct"]["n"] == seq["settings"]["rounds"]
    assert seq["ratios"]["prefixgate-2026-07-28/direct-2026-07-28"]["n"] == seq["settings"]["rounds"]  # both eras
    for era in ("", "-2026-07-28"):  # the zero-work relay ran in both eras, beside prefixgate
        assert seq["ratios"][f"relay{era}/direct{era}"]["n"] == seq["settings"]["rounds"], era
        assert seq["ratios"][f"prefixgate{era}/relay{era}"]["n"] == seq["settings"]["rounds"], era
    spaced = results["calls"]["spaced"]
    for name in ("prefixgate", "relay", "prefixgate-2026-07-28", "relay-2026-07-28"):  # calls 50 ms apart
        base = "direct-2026-07-28" if name.endswith("2026-07-28") else "direct"
        assert spaced["ratios"][f"{name}/{base}"]["n"] == spaced["settings"]["rounds"], name
    assert results["startup"]["ratios"]["prefixgate/single"]["median"] > 0
    assert results["catalog"]["gateway"]["tool_search_raw_s"]["n"] > 0
    assert results["bigresult"]["contenders"]["prefixgate"]["answer_bytes"] <= 65536
    statuses = {t["id"]: t["status"] for t in results["_targets"]}
    http_context = {
        f"http-{what}-{era}"
        for what in ("per-call-relay", "throughput-relay", "per-call-over-relay", "throughput-over-relay")
        for era in ("2025-11-25", "2026-07-28")
    }
    assert {i for i, s in statuses.items() if s == "context"} == {
        "per-call-relay",
        "per-call-relay-2026-07-28",
        "per-call-over-relay",
        "per-call-over-relay-2026-07-28",
        *(f"spaced-{who}{era}" for who in ("prefixgate", "relay") for era in ("", "-2026-07-28")),
        *http_context,
    }
    for era, data in results["http"]["eras"].items():  # both eras over HTTP, every call answered
        assert data["ratios"]["prefixgate/direct per call"]["n"] == results["http"]["settings"]["rounds"], era
        assert data["ratios"]["prefixgate/relay per call"]["n"] == results["http"]["settings"]["rounds"], era
        assert all(c["failed_calls"] == 0 for c in data["contenders"].values()), (era, data["contenders"])
        sides = data["contenders"]
        assert all(c["client_cpu_s_per_1000_calls"] > 0 for c in sides.values()), (era, sides)  # the client's side
        assert sides["prefixgate"]["downstream_switches_per_call"] > 0, (era, sides)  # a stdio server behind, threads
        assert sides["direct"]["downstream_switches_per_call"] is None, (era, sides)  # nothing behind direct
    fastmcp = "fastmcp-1" in seq["contenders"]
    assert (statuses["per-call-vs-fastmcp"] == "n/a") is not fastmcp


def test_no_bench_module_shadows_the_standard_library() -> None:
    """``bench/fastmcp_proxy.py`` runs as a script, so ``bench/`` is first on its path: a
    ``bench/http.py`` once hid the standard ``http`` package and FastMCP's client with it."""
    names = {p.stem for p in (ROOT / "bench").glob("*.py")} | {p.name for p in (ROOT / "bench").iterdir() if p.is_dir()}
    assert not names & sys.stdlib_module_names, sorted(names & sys.stdlib_module_names)
