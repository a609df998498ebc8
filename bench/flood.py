"""A flooding downstream: the gateway's peak memory against an idle gateway, side by side.

Two gateways run at once, each in front of ``tests/rogue_wire.py`` (a raw misbehaving
server), each spoken to by :class:`RawClient`:

- ``idle``: initialised, answers one ``ok`` call per phase, otherwise does nothing;
- ``flooded``: the same server floods it, phase by phase: log notifications while the
  client is not reading (a slow client), stderr without a newline, and a result line over
  ``max_message_bytes`` (default 32 MiB).

Reported per gateway: peak RSS (``VmHWM`` from ``/proc/<pid>/status``, never reset) after
every phase, and the flooded gateway's peak minus the idle one's. The phases' own results
(how many notifications got through, the over-limit call's error) are shown too.

    python -m bench.flood [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import PYTHON, ROOT, RawClient, gateway_config, proc_status

ROGUE = str(ROOT / "tests" / "rogue_wire.py")
MIB = 1 << 20


def _phases(quick: bool) -> list[tuple[str, str, dict[str, int], float]]:
    """(label, tool, arguments, seconds the client does not read)."""
    if quick:
        return [
            ("20k log notifications, client not reading for 2 s", "rogue__flood_logs", {"n": 20_000}, 2.0),
            ("64 MiB stderr without a newline", "rogue__flood_stderr", {"n": 64 * MIB}, 0.0),
            ("40 MiB result line (limit 32 MiB)", "rogue__big", {"n": 40 * MIB}, 0.0),
        ]
    return [
        ("300k log notifications, client not reading for 10 s", "rogue__flood_logs", {"n": 300_000}, 10.0),
        ("600 MiB stderr without a newline", "rogue__flood_stderr", {"n": 600 * MIB}, 0.0),
        ("256 MiB result line (limit 32 MiB)", "rogue__big", {"n": 256 * MIB}, 0.0),
    ]


def _text(line: bytes) -> str:
    message = json.loads(line)
    if "error" in message:
        return "error: " + str(message["error"].get("message", ""))[:120]
    content = message.get("result", {}).get("content") or [{}]
    text = str(content[0].get("text", ""))
    return ("isError: " if message["result"].get("isError") else "") + text[:120]


def _count_notifications(client: RawClient, ident: int) -> tuple[bytes, int]:
    """The answer to ``ident`` and how many notifications arrived before it."""
    assert client.proc.stdout is not None
    seen = 0
    while True:
        line = client.proc.stdout.readline()
        if not line:
            raise EOFError("gateway closed its stdout")
        if b'"method"' in line[:80]:
            seen += 1
            continue
        if json.loads(line).get("id") == ident:
            return line, seen


def run_sync(quick: bool, tmp: Path, errlog: Path) -> dict[str, Any]:
    config = gateway_config(tmp / "flood", {"rogue": [ROGUE]})
    argv = [PYTHON, "-m", "gateway", "serve", "--config", str(config)]
    idle, flooded = RawClient(argv, errlog), RawClient(argv, errlog)
    phases: list[dict[str, Any]] = []
    try:
        for client in (idle, flooded):
            client.initialize()
            client.request("logging/setLevel", {"level": "debug"})
            client.request("tools/call", {"name": "rogue__ok", "arguments": {}})
        start = {"idle": proc_status(idle.pid)["VmHWM"], "flooded": proc_status(flooded.pid)["VmHWM"]}
        for label, tool, arguments, pause in _phases(quick):
            started = time.perf_counter()
            ident = flooded.send("tools/call", {"name": tool, "arguments": arguments})
            assert ident is not None
            time.sleep(pause)
            line, notifications = _count_notifications(flooded, ident)
            elapsed = time.perf_counter() - started
            idle.request("tools/call", {"name": "rogue__ok", "arguments": {}})
            after_ok = _text(flooded.request("tools/call", {"name": "rogue__ok", "arguments": {}}))
            peaks = {"idle": proc_status(idle.pid)["VmHWM"], "flooded": proc_status(flooded.pid)["VmHWM"]}
            phases.append({
                "phase": label,
                "answer": _text(line),
                "notifications_delivered": notifications,
                "next_call": after_ok,
                "seconds": elapsed,
                "peak_rss_bytes": peaks,
                "flooded_minus_idle_bytes": peaks["flooded"] - peaks["idle"],
            })
    finally:
        idle.close()
        flooded.close()
    return {
        "settings": {"quick": quick, "max_message_bytes": 32 * MIB},
        "start_peak_rss_bytes": start,
        "phases": phases,
    }


async def run(ctx: Any) -> dict[str, Any]:
    """The ``bench.run`` entry (blocking pipes: fine, nothing else runs meanwhile)."""
    ctx.progress("flood: idle and flooded gateway side by side")
    return run_sync(ctx.quick, ctx.tmp, ctx.errlog)


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Measurement rows for ``bench.run``'s table: peak RSS after each phase, side by side."""
    out: list[tuple[str, str, str, str, str]] = []
    for p in result.get("phases", []):
        peaks = p["peak_rss_bytes"]
        out.append((
            f"flood: {p['phase']}",
            "peak RSS flooded / idle",
            f"{peaks['flooded'] / MIB:.0f} / {peaks['idle'] / MIB:.0f} MiB",
            f"{p['seconds']:.1f} s; {p['notifications_delivered']} notifications delivered",
            f"+{p['flooded_minus_idle_bytes'] / MIB:.0f} MiB; answer: {p['answer'][:60]}",
        ))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller floods")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prefixgate-flood-") as tmp:
        result = run_sync(args.quick, Path(tmp), Path(tmp) / "children-stderr.log")
    print("| phase | peak RSS flooded / idle | time, notifications | added, answer |")
    print("| --- | ---: | --- | --- |")
    for row in rows(result):
        print("| " + " | ".join(row[i] for i in (0, 2, 3, 4)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
