"""``serve``'s telemetry: metrics, the audit log and traces, set up from ``[telemetry]`` and ``OTEL_*``.

Metrics are kept when ``serve --http`` runs (``/metrics`` at its own address) or when
``[telemetry] metrics`` names a loopback listener (for a stdio gateway); the audit log when
``[telemetry] audit`` is true; spans when the ``OTEL_*`` variables ask for them
(``gateway.tracing``). With none of these, every router keeps ``telemetry = None``.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio.abc

from gateway import tracing
from gateway.config import Config, parse_listen
from gateway.engine.hub import Hub
from gateway.engine.telemetry import Telemetry
from gateway.state.audit import AuditLog

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

    from gateway.engine.metrics import Metrics

log = logging.getLogger("prefixgate")

_AUDITS: list[AuditLog] = []
"""The audit logs of this process, written out by ``flush`` when the gateway exits at once."""


def observe(hub: Hub, tasks: anyio.abc.TaskGroup, *, http: bool) -> Metrics | None:
    """Give every profile's router its telemetry; return the metrics (None: none kept)."""
    config: Config = hub.config
    wanted = config.telemetry
    audit = None
    if wanted.audit:
        audit = AuditLog(config.gateway.state_dir, wanted.audit_max_bytes)
        _AUDITS.append(audit)
        tasks.start_soon(audit.run)
        log.info("audit log: %s", audit.path)
    metrics = None
    if http or wanted.metrics:
        from gateway.engine.metrics import Metrics

        metrics = Metrics()
        disk = getattr(hub.store, "root", None) if hub.store.kind == "file" else None
        metrics.watch(lambda: hub.family, audit, disk)
        if wanted.metrics:
            _listen(metrics, wanted.metrics)
    tracer = tracing.tracer() if tracing.start() else None
    if metrics is None and audit is None and tracer is None:
        return None
    for each in hub.family:
        profile = each.config.profile
        each.router.telemetry = Telemetry(
            profile, metrics, audit, audit_arguments=wanted.audit_arguments, servers=hub.by_id, tracer=tracer
        )
        if metrics is not None:
            each.publisher.on_epoch = functools.partial(metrics.epoch, profile)
    return metrics


def _listen(metrics: Metrics, listen: str) -> None:
    """``/metrics`` on a loopback listener of its own (a thread: the event loop never serves it),
    with ``serve --http``'s Host/Origin rule. prometheus_client's ``start_http_server`` answers
    any Host and takes no app of ours, so this is its server made here around a guarded app
    (imported here: ``http.server`` costs a stdio gateway without the listener 10 ms at start)."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    from gateway.upstream.http import transport_security

    host, port = parse_listen(listen)  # checked when the config was read: loopback
    app = make_wsgi_app(metrics.registry)

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET  # (as gateway/upstream/listen.py)

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Nothing: a scrape is not worth a line on stderr (as prometheus_client's own handler)."""

    try:
        server = make_server(host, port, app, Server, handler_class=Quiet)
    except OSError as exc:
        log.error("telemetry.metrics: cannot listen on %s: %s; no metrics listener", listen, exc.strerror or exc)
        return
    server.set_app(_same_host(app, transport_security(host, server.server_port)))  # (the port bound: 0 is any)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics: http://%s/metrics", listen)


_WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _same_host(app: _WSGIApp, security: TransportSecuritySettings) -> _WSGIApp:
    """``app`` behind the SDK's Host/Origin check (``TransportSecurityMiddleware``'s own rules;
    its ``validate_request`` is async and reads a Starlette request), Host and Origin in any case: a
    DNS-rebinding page gets 421 or 403, as from ``/mcp``."""
    from http import HTTPStatus

    from mcp.server.transport_security import TransportSecurityMiddleware

    from gateway.sdk import rebinding_refusal

    check = TransportSecurityMiddleware(security)

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # Both lower-cased, as the HTTP front does (``host_in_lower_case``).
        host, origin = environ.get("HTTP_HOST"), environ.get("HTTP_ORIGIN")
        refused = rebinding_refusal(check, host and host.lower(), origin and origin.lower())
        if refused is None:
            return app(environ, start_response)
        status, text = refused[0], refused[1].encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(text)))]
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [text]

    return guarded


def flush() -> None:
    """Write what the audit logs hold and export the spans batched (the gateway is about to exit)."""
    for audit in _AUDITS:
        audit.flush()
    tracing.flush()
