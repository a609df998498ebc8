"""``serve``'s telemetry: metrics, the audit log and traces, set up from ``[telemetry]`` and ``OTEL_*``.

Metrics are kept when ``serve --http`` runs (``/metrics`` at its own address) or when
``[telemetry] metrics`` names a loopback listener (for a stdio gateway); the audit log when
``[telemetry] audit`` is true; spans when the ``OTEL_*`` variables ask for them
(``gateway.tracing``). With none of these, every router keeps ``telemetry = None``.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import anyio.abc

from gateway import tracing
from gateway.config import Config, parse_listen
from gateway.engine.hub import Hub
from gateway.engine.telemetry import Telemetry
from gateway.state.audit import AuditLog

if TYPE_CHECKING:
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
    """``/metrics`` on a loopback listener of its own (a thread: the event loop never serves it)."""
    from prometheus_client import start_http_server

    host, port = parse_listen(listen)  # checked when the config was read
    try:
        start_http_server(port, host, registry=metrics.registry)
    except OSError as exc:
        log.error("telemetry.metrics: cannot listen on %s: %s; no metrics listener", listen, exc.strerror or exc)
        return
    log.info("metrics: http://%s/metrics", listen)


def flush() -> None:
    """Write what the audit logs hold and export the spans batched (the gateway is about to exit)."""
    for audit in _AUDITS:
        audit.flush()
    tracing.flush()
