"""The fast first-ever build (issue 16 item 2) changes no output byte.

tests/fixtures/build_outputs.json was recorded with the code before the fast paths
(``python -m tests.varied_catalog``): catalog fingerprints, entries, every warning (the
quarantine and duplicate reasons in full), token estimates, the decision under four
policies (mode, numbers, fingerprint, activation identity) and the published bytes for
every protocol version. The 5,000-tool benchmark catalog is pinned the same way. Re-recorded
once since, when the meta tools were annotated read-only: only the decisions that declare
them changed (their published bytes, fingerprints and token counts), no catalog output.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.varied_catalog import outputs

FIXTURE = Path(__file__).parent / "fixtures" / "build_outputs.json"
BENCH_5K = {
    "fingerprint": "f4b765dc6e6c21ede8d0a3af668d39b34fdcef5ba66930ac234be1bebd71af9a",
    "decision": "19cb3574115481e92e2952f4ef109a84237eb171500788e4ab900a5c0dd2fd2d",
    "identity": "743e67dd1846c73e0ea5123d1b7888b8a734cfc65aa9e1cf8f24298e1e1b932f",
    "tokens": 1142800,
    "warnings": 0,
}
"""Recorded before the fast paths, for bench/catalog5k.py's 50 x 100 generated tools (the decision and
identity again once the meta tools were annotated read-only: only the three meta tools are published)."""


def test_varied_catalog_outputs_are_unchanged() -> None:
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert {"seed0": outputs(0), "seed1": outputs(1)} == recorded


def test_bench_catalog_outputs_are_unchanged() -> None:
    from bench.catalog5k import build_and_decide, raw_tools
    from catalog.budget import estimate_tokens

    catalog, decision, _, _ = build_and_decide(raw_tools(50, 100))
    assert {
        "fingerprint": catalog.fingerprint,
        "decision": decision.fingerprint,
        "identity": decision.identity,
        "tokens": sum(estimate_tokens(e.declaration) for e in catalog.entries),
        "warnings": len(catalog.warnings),
    } == BENCH_5K
