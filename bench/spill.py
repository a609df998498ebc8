"""Cost of bounding and spilling one large result: time and peak extra memory.

    python -m bench.spill [--mib 16] [--rounds 5]

The target (issue: spill) is one pass with peak extra memory under ~3x the result size.
Memory is measured with tracemalloc (Python allocations: the result itself is allocated
before tracing starts, so the peak is what bounding adds). Time is the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from spill import ArtifactStore, bound_result


def results(mib: int) -> dict[str, dict[str, Any]]:
    size = mib * 1024 * 1024
    line = "2026-11-30T08:00:00Z INFO request served in 3 ms path=/api/v1/items?page=7\n"
    text = (line * (size // len(line) + 1))[:size]
    cjk = ("日志条目：请求已处理。" * (size // 30 + 1))[: size // 3]
    image = "iVBORw0KGgo" * (size // 11)
    return {
        "text": {"content": [{"type": "text", "text": text}]},
        "cjk-text": {"content": [{"type": "text", "text": cjk}]},
        "image": {"content": [{"type": "image", "data": image, "mimeType": "image/png"}]},
    }


def measure(result: dict[str, Any], store: ArtifactStore, rounds: int) -> dict[str, float]:
    payload = sum(len(json.dumps(b, ensure_ascii=False).encode()) for b in result["content"])
    times, peaks = [], []
    for _ in range(rounds):
        tracemalloc.start()
        started = time.perf_counter()
        bounded = bound_result(result, store=store)
        times.append(time.perf_counter() - started)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert bounded is not result
    return {
        "result_bytes": payload,
        "median_s": statistics.median(times),
        "spread_s": max(times) - min(times),
        "peak_extra_bytes": max(peaks),
        "peak_ratio": max(peaks) / payload,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(Path(tmp) / "artifacts", "bench")
        rows = {name: measure(result, store, args.rounds) for name, result in results(args.mib).items()}
    print("| result | size | median time | peak extra memory | peak / size |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in rows.items():
        print(
            f"| {name} | {r['result_bytes'] / 2**20:.1f} MiB | {r['median_s'] * 1000:.0f} ms "
            f"(±{r['spread_s'] * 500:.0f}) | {r['peak_extra_bytes'] / 2**20:.1f} MiB | {r['peak_ratio']:.2f}x |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    worst = max(r["peak_ratio"] for r in rows.values())
    print(f"worst peak/size: {worst:.2f}x (target <= 3x)", file=sys.stderr)
    return 0 if worst <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
