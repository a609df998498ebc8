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


def coded(span: ReadableSpan) -> ReadableSpan:
    """``span`` itself when its status has no description; else a copy whose description is
    its ``error.type`` attribute (none without one). (Spans are read-only once ended: the
    SDK hands each processor a new ``ReadableSpan`` too.)"""
    status = span.status
    if status.description is None:
        return span
    code = (span.attributes or {}).get("error.type")
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=Status(status.status_code, None if code is None else str(code)),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
