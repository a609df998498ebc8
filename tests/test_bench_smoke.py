"""The benchmark harness keeps working: a tiny run of each benchmark (not a timing test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
