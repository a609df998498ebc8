"""What of a span leaves the process: ``gateway.tracing.start`` wraps the OTLP exporter in
:class:`CodedStatus` (this module needs the ``otel`` extra; nothing else imports it).

docs/telemetry.md: no span carries a peer's text. The spans' makers do not all keep to it:
the mcp SDK describes an error status by the JSON-RPC error's message, which for a
downstream request's client span, and for the client request's server span when the
gateway relays the error, is a server's own text (a refused URI is quoted there:
"Resource not found: demo://..."); and by ``str()`` of an unexpected exception. Those spans
are made inside the SDK, where the gateway has no hook; every span passes the exporter. So
an error's description becomes its ``error.type`` (the JSON-RPC code, or the exception's
type name, as the SDK sets it), which a trace backend shows in its place.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from mcp_types.methods import MONOLITH_NOTIFICATIONS, MONOLITH_REQUESTS
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

log = logging.getLogger("prefixgate")

EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http")
"""Where the OTLP exporter logs each failed try of each batch."""


class OncePerRun(logging.Filter):
    """The exporter's lines after the first of a run of failures, dropped: it logs each try
    of each batch and each batch given up, four lines every few seconds for as long as a
    collector is down."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        shown = not self.failing
        self.failing = True
        return shown


class CodedStatus(SpanExporter):
    """``exporter``, given each span with its status described by its code (:func:`coded`);
    its failures logged once per run of them (:class:`OncePerRun`, on ``EXPORTER_LOGGERS``)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.quiet = OncePerRun()
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self.quiet)
        self._dropped = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.exporter.export([coded(span) for span in spans])
        if result is SpanExportResult.SUCCESS:
            if self._dropped:
                log.info("tracing: spans are exported again")
            self.quiet.failing = self._dropped = False
        elif not self._dropped:
            self._dropped = True
            log.warning("tracing: spans not exported (dropped until the endpoint takes them; logged again then)")
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


NAMED_BY = ("tools/call", "prompts/get")
"""The requests whose spans name their target (``gateway.tracing.NAMED_BY``'s keys; that
module imports this one, which needs the ``otel`` extra, only once tracing starts)."""
UNKNOWN_METHOD = "(unknown)"
"""A method no MCP revision defines, as a span names it."""
METHODS = frozenset(
    (*MONOLITH_REQUESTS, *MONOLITH_NOTIFICATIONS, "tasks/get", "tasks/result", "tasks/cancel", "tasks/list")
)
"""Every method the protocol defines (``mcp.method.name`` of the SDK's spans): another is a
peer's own text."""


def _named(span: ReadableSpan) -> tuple[str, dict[str, Any] | None]:
    """The name of an SDK span (``METHOD`` or ``MCP send METHOD``, then ``params.name`` of any
    request that has one) without a peer's text, and its attributes when they change too. The
    SDK names a span after any ``params.name`` (``resources/read`` with a made-up ``name``) and
    after the method a client sent (a made-up one, answered -32601): only ``NAMED_BY``'s
    requests keep their name (``gateway.tracing.unknown_name`` bounds it), a method no revision
    defines is ``UNKNOWN_METHOD``, in the name and in ``mcp.method.name``."""
    attributes = span.attributes or {}
    method = attributes.get("mcp.method.name")
    if not isinstance(method, str):
        return span.name, None  # (not the SDK's: the gateway's own spans name nothing of a peer's)
    prefix = "MCP send " if span.name.startswith("MCP send ") else ""
    if method not in METHODS:
        return prefix + UNKNOWN_METHOD, {**attributes, "mcp.method.name": UNKNOWN_METHOD}
    return (span.name if method in NAMED_BY else prefix + method), None


def coded(span: ReadableSpan) -> ReadableSpan:
    """``span`` itself when its status has no description and its name nothing of a peer's
    (``_named``); else a copy whose description is its ``error.type`` attribute (none without
    one) and whose name is bounded. (Spans are read-only once ended: the SDK hands each
    processor a new ``ReadableSpan`` too.)"""
    status = span.status
    name, attributes = _named(span)
    if status.description is None and name == span.name and attributes is None:
        return span
    if status.description is not None:
        code = (span.attributes or {}).get("error.type")
        status = Status(status.status_code, None if code is None else str(code))
    return ReadableSpan(
        name=name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes if attributes is None else attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
