"""What telemetry costs a call: off, metrics and the audit log on, traces on (issue 29).

Four contenders behind the same mcp SDK client (handshake era), each started once: the demo
server directly, prefixgate with no telemetry (the default), prefixgate with
``[telemetry] audit = true`` and a metrics listener, and prefixgate exporting traces over
OTLP/HTTP to a sink on loopback (which takes the gateway off its direct paths: the SDK's
instrumented path makes the spans). Rounds rotate the order, and ratios are taken per round
against the telemetry-off gateway and against the direct server.
"""

from __future__ import annotations

import http.server
import socket
from collections.abc import Callable
from typing import Any

from bench.calls import _call
from bench.common import (
    connect_all,
    direct,
    gateway_config,
    loopback_server,
    ratio_summary,
    rotated,
    summary,
    via_prefixgate,
)


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes every export and answers 200 (an empty response)."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def run(ctx: Any) -> dict[str, Any]:
    rounds = 2 if ctx.quick else 10
    per_round = 10 if ctx.quick else 200
    tmp = ctx.tmp / "telemetry"
    one = {"d": ["-m", "gateway", "demo-server", "--tools", "3", "--name", "d"]}
    off = via_prefixgate("prefixgate", gateway_config(tmp / "off", one))
    on = via_prefixgate(
        "prefixgate-metrics-audit",
        gateway_config(tmp / "on", one, telemetry={"audit": True, "metrics": f"127.0.0.1:{_free_port()}"}),
    )
    on.note += " ([telemetry] audit = true, metrics listener)"
    traced = via_prefixgate("prefixgate-traced", gateway_config(tmp / "traced", one))
    traced.note += " (OTEL_EXPORTER_OTLP_ENDPOINT: traces to a loopback sink)"
    everyone = [direct("direct", "--tools", 3, "--name", "d"), off, on, traced]
    samples: dict[str, list[list[float]]] = {c.name: [] for c in everyone}
    with loopback_server(_Sink) as endpoint:
        traced.env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        async with connect_all(everyone, ctx.errlog) as conns:
            for c in everyone:
                for _ in range(20):
                    await _call(conns[c.name], c.echo)
            for r in range(rounds):
                for c in rotated(everyone, r):
                    samples[c.name].append([await _call(conns[c.name], c.echo) for _ in range(per_round)])
                ctx.progress(f"telemetry round {r + 1}/{rounds}")

    def medians(name: str) -> list[float]:
        return [summary(batch)["median"] for batch in samples[name]]

    return {
        "settings": {"rounds": rounds, "calls_per_round": per_round},
        "contenders": {
            c.name: {"per_call_s": summary([t for b in samples[c.name] for t in b]), "note": c.note} for c in everyone
        },
        "ratios": {
            "prefixgate/direct": ratio_summary(medians("prefixgate"), medians("direct")),
            **{
                f"{name}/prefixgate": ratio_summary(medians(name), medians("prefixgate"))
                for name in ("prefixgate-metrics-audit", "prefixgate-traced")
            },
        },
    }


BASE = {
    "direct": None,
    "prefixgate": "direct",
    "prefixgate-metrics-audit": "prefixgate",
    "prefixgate-traced": "prefixgate",
}
"""What each contender's ratio is taken against."""


def rows(
    results: dict[str, Any],
    ms: Callable[[float | None], str],
    spread: Callable[[Any], str],
    ratio: Callable[[Any], str],
) -> list[tuple[str, str, str, str, str]]:
    st = results["settings"]
    label = f"telemetry, echo sequential ({st['rounds']}x{st['calls_per_round']} calls)"
    out = []
    for name, c in results["contenders"].items():
        base = BASE.get(name)
        shown = ratio(results["ratios"].get(f"{name}/{base}")) + (f" of {base}" if base else "")
        out.append((label, name, ms(c["per_call_s"]["median"]), spread(c["per_call_s"]), shown if base else ""))
    return out
