"""The ``prefixgate`` command: ``serve``, ``catalog`` and ``demo-server``.

Exit status: 0 on success, 2 for a bad config or usage (before anything starts), 1 when
a ``required`` server failed or the gateway could not run.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from catalog.budget import DecisionError
from catalog.text import escape, json_text, printable
from spill import ArtifactStore, StoreError

from gateway import __version__, artifacts_cmd, diff_cmd, doctor, importer, logs
from gateway.barrier import required_failures, wait_for_discovery
from gateway.config import Config, ConfigError, find_config, load_config
from gateway.downstream import Downstream
from gateway.epoch import Epoch, build_epoch
from gateway.hub import Hub
from gateway.journal import Journal, session_key
from gateway.router import collect
from gateway.session import Session

log = logging.getLogger("prefixgate")


class Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _load(path: str | None) -> Config:
    try:
        return load_config(find_config(path))
    except ConfigError as exc:
        raise Exit(2, f"prefixgate: config error: {exc}") from None


@asynccontextmanager
async def running(config: Config, *, supervise: bool = False, persist: bool = True) -> AsyncIterator[Hub]:
    """Start every server concurrently; stop them all on exit.

    ``persist=False`` (doctor) writes nothing to the state directory.
    """
    hub = Hub(config, persist=persist)
    async with anyio.create_task_group() as tg:
        hub.start(tg, supervise=supervise)
        try:
            yield hub
        finally:
            tg.cancel_scope.cancel()


async def discover(config: Config, hub: Hub) -> Epoch:
    """Wait for the barrier, build and decide the first epoch, publish it.

    Raises Exit(1) when no declaration plan fits the client (``declarations = "fixed"``
    over the function limit).
    """
    downstreams = hub.downstreams
    started = anyio.current_time()
    await wait_for_discovery([d for d in downstreams if d.config.enabled], config.gateway.discovery_deadline)
    try:
        epoch = build_epoch(config, downstreams, hub.checks)
    except DecisionError as exc:
        raise Exit(1, f"prefixgate: {exc}") from None
    epoch.discovery_ms = round((anyio.current_time() - started) * 1000)
    for warning in epoch.catalog.warnings:
        log.warning("%s", warning.line())
    ready = sum(1 for d in downstreams if d.status == "ready")
    decision = epoch.decision
    log.info(
        "catalog: %d tools from %d of %d servers; %s, %d declared, %d deferred; fingerprint %s",
        len(epoch.catalog.entries),
        ready,
        len(config.enabled_servers),
        decision.mode,
        decision.function_count,
        len(decision.deferred_names),
        epoch.fingerprint[:16],
    )
    if decision.fallback is not None:
        log.warning("declarations fell back to %s (%s): %s", decision.mode, decision.fallback, decision.detail)
    await hub.first_epoch(epoch)
    return epoch


# --- serve -----------------------------------------------------------------------------


async def _serve(config: Config, session_id: str | None, http: str | None, tokens: Sequence[str]) -> None:
    from gateway.server import build_server

    async with running(config, supervise=True) as hub:
        if http is None:
            journal = Journal(config.gateway.state_dir, session_id) if session_id else None
            stdio_session = Session(journal, await _artifact_store(config, session_id))
            server, options = build_server(hub, lambda ctx: stdio_session)
        else:
            from gateway.http import principal_of_scope

            await _artifact_store(config, None)  # retention at start
            server, options = build_server(
                hub, lambda ctx: hub.principal_session(principal_of_scope(getattr(ctx.request, "scope", None)))
            )

        async def barrier() -> None:
            try:
                await discover(config, hub)
            except Exit as exc:
                await _exit_now(hub.downstreams, str(exc))
            failures = required_failures(hub.downstreams)
            if failures:
                await _exit_now(hub.downstreams, "prefixgate: " + failures[0])

        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signals, hub.downstreams)
            tg.start_soon(barrier)
            if http is None:
                from gateway.upstream_stdio import stdio_streams

                async with stdio_streams(config.gateway.max_message_bytes) as (read, write):
                    await server.run(read, write, options)
            else:
                from gateway.http import serve_http

                await serve_http(server, http, tokens)
            tg.cancel_scope.cancel()


async def _artifact_store(config: Config, session_id: str | None) -> ArtifactStore | None:
    """The session's artifact store (one per process without a session id), after retention.

    A store that cannot be used is logged, not fatal: results are still bounded, with a
    non-retention warning instead of an artifact id.
    """
    if not config.spill.enabled:
        return None
    key = session_key(session_id) if session_id else secrets.token_hex(16)
    store = ArtifactStore(config.gateway.state_dir / "artifacts", key)
    try:
        await anyio.to_thread.run_sync(store.ensure)
    except StoreError as exc:
        log.error("artifact store unusable, outputs over the ceiling will not be retained: %s", exc)
    await anyio.to_thread.run_sync(collect, store, config.spill)
    return store


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each stops the gateway the same way; the exit status is 128 + the signal number."""


async def _stop_on_signals(downstreams: Sequence[Downstream]) -> None:
    """SIGTERM, SIGHUP and SIGINT stop every server (none is left running) and exit.

    Without this a SIGTERM or SIGHUP killed the gateway at once and left the servers
    that ignore EOF on stdin running; clients send SIGTERM a second after closing stdin.
    """
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            log.info("%s received: stopping every server", name)
            await _exit_now(downstreams, f"prefixgate: stopped by {name}", 128 + signum)


async def _exit_now(downstreams: Sequence[Downstream], message: str, code: int = 1) -> None:
    """Stop every server (concurrently: each in its own task) and exit with ``code`` at once.

    Stdin may be read in a worker thread that cancellation cannot interrupt (the SDK's
    fallback transport), so a gateway that must stop while its client is still
    connected cannot rely on unwinding normally.
    """
    for downstream in downstreams:
        downstream.stop()
    with anyio.move_on_after(10):
        for downstream in downstreams:
            await downstream.closed.wait()
    logs.flush()
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(code)


# --- catalog ---------------------------------------------------------------------------


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


async def _catalog(config: Config, as_json: bool) -> int:
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


# --- entry point -----------------------------------------------------------------------


def _tokens(args: argparse.Namespace) -> list[str]:
    """The HTTP bearer tokens, each its own principal; required off loopback.

    ``--token-file`` holds one token per line (blank lines and lines starting with ``#``
    are skipped); ``$PREFIXGATE_TOKEN`` holds one.
    """
    from gateway.http import is_loopback, parse_listen

    try:
        host, _ = parse_listen(args.http)
    except ValueError as exc:
        raise Exit(2, f"prefixgate: --http: {exc}") from None
    tokens: list[str] = []
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as handle:
                lines = [line.strip() for line in handle]
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise Exit(2, f"prefixgate: --token-file: cannot read {args.token_file}: {reason}") from None
        tokens = list(dict.fromkeys(line for line in lines if line and not line.startswith("#")))
        if not tokens:
            raise Exit(2, f"prefixgate: --token-file: {args.token_file} is empty or only whitespace")
        for number, line in enumerate(lines, 1):
            if any(c.isspace() for c in line) and not line.startswith("#"):
                raise Exit(2, f"prefixgate: --token-file: {args.token_file} line {number}: a token cannot contain spaces")
    elif os.environ.get("PREFIXGATE_TOKEN"):
        token = os.environ["PREFIXGATE_TOKEN"].strip()
        if not token:
            raise Exit(2, "prefixgate: $PREFIXGATE_TOKEN is only whitespace; set a real token or unset it")
        tokens = [token]
    if not tokens and not is_loopback(host):
        raise Exit(2, f"prefixgate: --http {args.http}: a non-loopback address requires --token-file or $PREFIXGATE_TOKEN")
    return tokens


def _exit_in(exc: BaseException) -> Exit | None:
    """The Exit inside (possibly nested) task-group exception groups."""
    if isinstance(exc, Exit):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _exit_in(inner)) is not None:
                return found
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="prefixgate",
        description="One MCP server entry for many downstream MCP servers, with one deterministic catalog.",
    )
    p.add_argument("--version", action="version", version=f"prefixgate {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", metavar="PATH", help="config file (default: $PREFIXGATE_CONFIG, ./prefixgate.toml, "
                        "$XDG_CONFIG_HOME/prefixgate/config.toml)")
        sp.add_argument("--log-level", choices=logs.LEVELS, default="info", help="stderr log level (default info)")

    serve = sub.add_parser("serve", help="serve MCP over stdio", description="Serve the gateway over stdio.")
    common(serve)
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free port; "
        "the URL is printed on stdout); a non-loopback HOST requires a bearer token",
    )
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="file of bearer tokens HTTP clients must send, one per line, each its own principal (activation and artifacts); default: $PREFIXGATE_TOKEN",
    )
    serve.add_argument(
        "--session",
        metavar="ID",
        default=os.environ.get("PREFIXGATE_SESSION") or None,
        help="persist tool activation for this session id across restarts (default: $PREFIXGATE_SESSION)",
    )
    cat = sub.add_parser(
        "catalog",
        help="discover every server and print the catalog",
        description="Run the same discovery and build as serve, print the catalog, and exit.",
    )
    common(cat)
    cat.add_argument("--json", action="store_true", help="print one JSON object")
    cat_sub = cat.add_subparsers(dest="catalog_action", metavar="[diff]")
    diff = cat_sub.add_parser(
        "diff",
        help="compare two 'catalog --json' outputs: why did my prompt cache miss?",
        description="Compare two 'prefixgate catalog --json' outputs. Exit 0 when the published "
        "tools/list bytes are identical, 1 when they differ, 2 when a file is unusable.",
    )
    diff_cmd.add_arguments(diff)
    imp = sub.add_parser(
        "import",
        help="turn the MCP servers another client has configured into a prefixgate config",
        description="Read Claude Desktop, Claude Code, Cursor, VS Code or Codex MCP server "
        "configurations and print a complete prefixgate config.",
    )
    importer.add_arguments(imp)
    doc = sub.add_parser(
        "doctor",
        help="check the config, every server, the catalog's stability and the directories",
        description="Check, in one run: the config parses; each server starts; renamed and quarantined "
        "tools; the declaration decision with its numbers; state and artifact directory ownership and "
        "modes; whether the published catalog is byte-stable across two discoveries. Ends with the "
        "snippet to register prefixgate in the chosen client. Exit 0 when all is well, 1 otherwise.",
    )
    doc.add_argument("--config", metavar="PATH", help="config file (same discovery as the other commands)")
    doc.add_argument("--log-level", choices=logs.LEVELS, default="warning", help="stderr log level (default warning)")
    doctor.add_arguments(doc)
    arts = sub.add_parser(
        "artifacts",
        help="list, read or clean up spilled tool outputs",
        description="The full outputs of results that were bounded (spilled), kept under <state_dir>/artifacts.",
    )
    artifacts_cmd.add_arguments(arts, common)
    sub.add_parser("demo-server", help="run the bundled demo MCP server (stdio)", add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo-server"]:
        from gateway import demo

        return demo.main(argv[1:])
    args = parser().parse_args(argv)
    logs.setup(getattr(args, "log_level", "info"))
    if args.command == "import":
        return importer.run(args)
    if args.command == "doctor":
        return doctor.run(args.config, args)
    if args.command == "catalog" and args.catalog_action == "diff":
        return diff_cmd.run(args)
    try:
        config = _load(args.config)
        if args.command == "serve":
            tokens = _tokens(args) if args.http else []
            anyio.run(_serve, config, args.session, args.http, tokens)
            return 0
        if args.command == "catalog":
            return anyio.run(_catalog, config, args.json)
        if args.command == "artifacts":
            return artifacts_cmd.run(config, args)
    except (Exit, BaseExceptionGroup) as exc:
        found = _exit_in(exc)
        if found is None:
            raise
        sys.stderr.write(f"{found}\n")
        return found.code
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
