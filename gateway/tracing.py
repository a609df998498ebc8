"""OpenTelemetry traces, configured the standard way: the ``OTEL_*`` environment variables.

Tracing is on when an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``), ``OTEL_TRACES_EXPORTER`` is unset or ``otlp``, and
``OTEL_SDK_DISABLED`` is not true. Then ``serve`` installs the OpenTelemetry SDK's tracer
provider with a batching OTLP/HTTP exporter (``pip install 'prefixgate[otel]'``), which reads
the rest of the ``OTEL_*`` variables itself (headers, timeouts, sampling, resource
attributes; ``OTEL_SERVICE_NAME`` defaults to ``prefixgate``).

The spans: the SDK's own server span per client request (``tools/call NAME``, ``tools/list``,
``resources/read``, ..., continuing the trace a client's ``params._meta`` carries, as
SEP-414 describes), the gateway's gate span beneath a ``tools/call``, and the SDK's client
span per downstream request, whose context goes to the server in that request's ``_meta``.
While tracing is on, the gateway's direct paths are off (``gateway.fastpath``): every request
takes the SDK's instrumented path. An error's status is described by its code, never by
its message, a peer's text (``gateway.spanexport``). Off, nothing here is imported by a
call and a client's ``traceparent`` still reaches the server untouched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("prefixgate")

_provider: Any = None


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporter not in ("", "otlp"):
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def start() -> bool:
    """Install the tracer provider and its exporter when tracing is configured; False (and one
    log line saying why, when it was asked for) otherwise."""
    global _provider
    if _provider is not None:
        return True
    if not configured():
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanLimits, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.error(
            "tracing: an OTLP endpoint is set, but the OpenTelemetry SDK is not installed (%s): "
            "pip install 'prefixgate[otel]'; no traces",
            exc.name,
        )
        return False
    from gateway import __version__

    resource = Resource.create({"service.version": __version__})  # and OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "prefixgate"}))
    provider = TracerProvider(resource=resource, span_limits=_span_limits(SpanLimits))
    from gateway.spanexport import CodedStatus

    provider.add_span_processor(BatchSpanProcessor(CodedStatus(OTLPSpanExporter())))
    trace.set_tracer_provider(provider)
    _provider = provider
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    log.info("tracing: spans go to %s (OTLP over HTTP)", endpoint)
    return True


MAX_ATTRIBUTE_LENGTH = 1024
"""Characters of a span attribute's value kept (``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` or
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` sets another): the SDK's spans carry values a client
chose, a request's string id as ``jsonrpc.request.id`` among them, as long as it sent them."""
_LENGTH_LIMITS = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")


def _span_limits(limits: Any) -> Any:
    """The SDK's ``SpanLimits`` (given, imported with the SDK), attribute values bounded unless
    the environment bounds them itself."""
    if any(os.environ.get(name) for name in _LENGTH_LIMITS):
        return limits()
    return limits(max_span_attribute_length=MAX_ATTRIBUTE_LENGTH)


NAMED_BY = {"tools/call": "gen_ai.tool.name", "prompts/get": "gen_ai.prompt.name"}
"""The requests whose server span the SDK names after ``params.name``, and the attribute it sets."""


def unknown_name(method: str, unknown: str) -> None:
    """Rename the current server span of a ``NAMED_BY`` request whose name is outside the
    catalog: the SDK named it (and set its attribute) after the client's own text, which would
    put any string, as many distinct ones as a client likes, into the team's trace backend."""
    from opentelemetry import trace

    span = trace.get_current_span()
    span.update_name(f"{method} {unknown}")
    span.set_attribute(NAMED_BY[method], unknown)


def tracer() -> Any:
    """The gateway's tracer (a no-op one until ``start``)."""
    from opentelemetry import trace

    return trace.get_tracer("prefixgate")


FLUSH_MILLIS = 2000
"""How long an exit waits for batched spans to be exported."""


def flush() -> None:
    """Export what is batched, for at most ``FLUSH_MILLIS`` (the gateway is about to exit)."""
    if _provider is not None:
        _provider.force_flush(FLUSH_MILLIS)
