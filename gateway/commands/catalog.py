"""``prefixgate catalog``: the same discovery and build as ``serve``, printed as text or JSON."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from catalog.text import escape, json_text, printable
from gateway import __version__
from gateway.barrier import required_failures
from gateway.commands.startup import discover, running
from gateway.config import Config
from gateway.downstream import Downstream
from gateway.epoch import Epoch

log = logging.getLogger("prefixgate")


def catalog_report(config: Config, downstreams: Sequence[Downstream], epoch: Epoch) -> dict[str, Any]:
    """The ``catalog --json`` object: ``declarations`` is exactly what ``serve`` publishes."""
    catalog = epoch.catalog
    decision = epoch.decision
    counts: dict[str, int] = {}
    for entry in catalog.entries:
        counts[entry.server] = counts.get(entry.server, 0) + 1
    return {
        "fingerprint": epoch.fingerprint,
        "catalog_fingerprint": catalog.fingerprint,
        "identity": epoch.identity,
        "mode": decision.mode,
        "fallback": decision.fallback,
        "detail": decision.detail,
        "functions": {"declared": decision.function_count, "limit": decision.function_limit},
        "tokens": {"declared": decision.declared_tokens, "budget": decision.token_budget},
        "deferred": len(decision.deferred_names),
        "discovery_ms": epoch.discovery_ms,
        "servers": [
            {
                "id": d.config.id,
                "status": d.status,
                "tools": counts.get(d.config.id, 0),
                "listed": len(d.tools),
                "error": d.error,
                "startup_ms": d.startup_ms,
                "required": d.config.required,
                "transport": d.config.transport,
            }
            for d in downstreams
        ],
        "tools": [
            {
                "name": e.name,
                "server": e.server,
                "original": e.original,
                "declared": epoch.declares(e.name),
                "deferred": epoch.is_deferred(e.name),
            }
            for e in catalog.entries
        ],
        "declarations": epoch.published(),
        "warnings": [
            {"kind": w.kind, "server": w.server, "tool": w.tool, "detail": w.detail, "message": w.line()}
            for w in catalog.warnings
        ],
    }


def render_text(report: dict[str, Any], config: Config) -> str:
    lines = [f"prefixgate {__version__}  config: {config.path}", "", "servers:"]
    width = max((len(s["id"]) for s in report["servers"]), default=2)
    for s in report["servers"]:
        ms = f"{s['startup_ms']} ms" if s["startup_ms"] is not None else "-"
        tools = f"{s['tools']} tools" if s["status"] == "ready" else "-"
        line = f"  {s['id']:<{width}}  {s['status']:<8}  {tools:>10}  {ms:>8}"
        if s["error"]:
            line += f"  {escape(s['error'])}"
        lines.append(line.rstrip())
    fn, tok = report["functions"], report["tokens"]
    limit = "no limit" if fn["limit"] is None else f"limit {fn['limit']}"
    budget = "no context window set" if tok["budget"] is None else f"budget {tok['budget']}"
    lines += [
        "",
        f"mode: {report['mode']}" + (f" (fallback: {report['fallback']})" if report["fallback"] else ""),
        f"  {report['detail']}",
        f"functions: {fn['declared']} declared ({limit}); tokens: ~{tok['declared']} ({budget}); "
        f"deferred: {report['deferred']}",
        "",
        f"tools ({len(report['tools'])} in the catalog, in published order; * = deferred, "
        "reachable through tool_search):",
    ]
    for tool in report["tools"]:
        mark = "*" if tool["deferred"] else " "
        lines.append(f" {mark}{escape(tool['name'])}  <- {tool['server']}/{escape(tool['original'])}")
    meta = [d["name"] for d in report["declarations"] if d["name"] in ("tool_search", "tool_call", "artifact_read")]
    if meta:
        lines.append(f"  gateway tools declared: {', '.join(meta)}")
    if report["warnings"]:
        lines += ["", f"warnings ({len(report['warnings'])}):"]
        lines += [f"  {escape(w['message'])}" for w in report["warnings"]]
    lines += ["", f"fingerprint: {report['fingerprint']}", f"identity:    {report['identity']}"]
    return printable("\n".join(lines)) + "\n"


async def run(config: Config, as_json: bool) -> int:
    """Discover, print the catalog, and exit 1 when a ``required`` server failed."""
    async with running(config) as hub:
        epoch = await discover(config, hub)
        report = catalog_report(config, hub.downstreams, epoch)
        report["resources"] = len(hub.surface.resources)
        report["resource_templates"] = len(hub.surface.templates)
        report["prompts"] = [p["name"] for p in hub.surface.prompts]
        report["warnings"] += [
            {"kind": "surface", "server": "", "tool": "", "detail": w, "message": w} for w in hub.surface.warnings
        ]
        downstreams = hub.downstreams
    if as_json:
        sys.stdout.write(json_text(report) + "\n")
    else:
        sys.stdout.write(render_text(report, config))
    failures = required_failures(downstreams)
    for line in failures:
        log.error("%s", line)
    return 1 if failures else 0
