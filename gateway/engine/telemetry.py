"""What each tool call tells the operators: metrics, the audit log and (with OpenTelemetry) spans.

The router fills one :class:`CallNote` per ``tools/call`` as the gate decides (``decision``:
allowed, or why it refused) and hands it to :class:`Telemetry` when the call ends. With no
telemetry configured the router has none and a call pays one attribute check. Nothing a
client or server sent becomes a label value or an audit field unbounded: a tool name
outside the catalog is recorded as ``(unknown)``, reasons are the gate's own words, and
arguments reach the audit log only when ``[telemetry] audit_arguments`` asks, bounded and
redacted as logs are.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from mcp.shared.exceptions import MCPError
from mcp_types.methods import is_input_required
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.downstream.connection import Downstream
from gateway.eras import DEFAULT_VERSION
from gateway.redact import MASK, redact, secret_key

if TYPE_CHECKING:
    from gateway.state.audit import AuditLog

Decision = str
"""allowed, or why the gate refused: unknown, invalid (tool_call's own arguments), lock,
policy, activation, arguments."""

UNKNOWN_TOOL = "(unknown)"
"""A name the catalog does not hold, as metrics and the audit log record it."""
MAX_AUDITED_ARGUMENTS = 4096
"""Characters of a call's arguments an audit line may carry (with ``audit_arguments``)."""
MAX_AUDITED_DEPTH = 64
"""Levels of a call's arguments an audit line shows, deeper ones as ``"..."``: a client may nest
them past what ``json`` writes (the stdio fast path parses 3,000 levels), and the call's
answer must not depend on its audit line."""
_ARTIFACT = re.compile(r"saved as artifact ([0-9A-Za-z_-]{1,64})[;.]")
_OVER = re.compile(r"result of (\d{1,15}) bytes of JSON exceeds")


@dataclass(slots=True)
class CallNote:
    """One ``tools/call`` as the gate saw it."""

    tool: str
    """The catalog tool asked for (``tool_call`` unwrapped), or ``UNKNOWN_TOOL``."""
    server: str | None
    version: str = DEFAULT_VERSION
    decision: Decision = "allowed"
    reason: str | None = None
    """The refusal the client was given (the gate's words), when it refused."""
    spilled: bool = False
    spilled_bytes: int = 0
    """The bounded result's size before bounding (as its trailer says)."""
    granted: int = 0
    """Tools a ``tool_search`` activated."""
    error: str | None = None
    """What the call ended in instead of a result, when not a cancellation: the JSON-RPC
    error's code the client is given (a server's ``-32042``, say), or an exception's type name."""
    started: float = field(default_factory=time.perf_counter)

    def refuse(self, decision: Decision, reason: str | None) -> None:
        self.decision = decision
        # An unknown name is the client's own text, a schema violation may quote a value: neither is kept.
        self.reason = reason if decision not in ("arguments", "unknown") else None


def outcome_of(note: CallNote, result: Mapping[str, Any] | None) -> str:
    """ok, error (an ``isError`` result or an error answer), refused, input_required, or
    cancelled (no result and no error)."""
    if result is None:
        return "cancelled" if note.error is None else "error"
    if note.decision != "allowed":
        return "refused"
    if is_input_required(result):
        return "input_required"
    return "error" if result.get("isError") else "ok"


def _trailer(result: Mapping[str, Any]) -> str:
    """The end of a bounded result's text, where ``spill.bound`` says what it kept."""
    blocks = [b for b in result.get("content") or () if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return blocks[-1]["text"][-2048:] if blocks else ""


def artifacts_in(result: Mapping[str, Any]) -> list[str]:
    """The artifact ids a bounded result's trailer names."""
    return _ARTIFACT.findall(_trailer(result))


def spilled_size(result: Mapping[str, Any]) -> int:
    """The size a bounded result had before bounding, as its trailer says (0 if it does not)."""
    found = _OVER.search(_trailer(result))
    return int(found.group(1)) if found else 0


def error_type(exc: Exception) -> str:
    """An error answer as telemetry names it (as the SDK's spans do): its JSON-RPC code, or
    the exception's type name; never its message, which a server may have written."""
    return str(exc.error.code) if isinstance(exc, MCPError) else type(exc).__qualname__


class CallCounter(Protocol):
    """What counts finished calls (``gateway.engine.metrics.Metrics``)."""

    def call(self, profile: str | None, note: CallNote, outcome: str, seconds: float) -> None: ...


class Telemetry:
    """Where a call is recorded: the metrics and the audit log when it ends, a span while it runs."""

    def __init__(
        self,
        profile: str | None,
        metrics: CallCounter | None,
        audit: AuditLog | None,
        *,
        audit_arguments: bool = False,
        servers: Mapping[str, Downstream] | None = None,
        tracer: Any = None,
    ) -> None:
        self.profile = profile
        self.metrics = metrics
        self.audit = audit
        self.tracer = tracer
        """The OpenTelemetry tracer of the gate's spans (None: no spans)."""
        self.audit_arguments = audit_arguments
        self._servers = servers or {}
        """The servers by id (the hub's own map, so a reload's are in it), whose configured
        secrets an audited argument is masked of (``gateway.redact``)."""

    def span(self, note: CallNote) -> AbstractContextManager[Any]:
        """The gate's span of one call (beneath the SDK's server span; the downstream request's
        client span beneath it), or nothing."""
        if self.tracer is None:
            return contextlib.nullcontext()
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": note.tool}
        if note.server:
            attributes["prefixgate.server"] = note.server
        if self.profile:
            attributes["prefixgate.profile"] = self.profile
        # Not the exception an error answer is raised as: its message (a server's text) and a
        # traceback would be the span's event and status; ``_annotate`` notes its code instead.
        span = self.tracer.start_as_current_span(
            f"gate {note.tool}", attributes=attributes, record_exception=False, set_status_on_exception=False
        )
        return cast(AbstractContextManager[Any], span)

    def finished(
        self,
        note: CallNote,
        state: Any,
        result: Mapping[str, Any] | None,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        seconds = time.perf_counter() - note.started
        outcome = outcome_of(note, result)
        if self.tracer is not None:
            _annotate(note, outcome)
        if outcome == "input_required" and note.version in HANDSHAKE_PROTOCOL_VERSIONS:
            # Not the call's answer: a handshake-era client is asked over its back-channel and
            # the server retried; the call is counted and audited once, as its last round ends
            # (or ``Router.ended``).
            return
        if self.metrics is not None:
            self.metrics.call(self.profile, note, outcome, seconds)
        if self.audit is not None:
            self.audit.record(self._line(note, state, result, arguments, outcome, seconds))

    def _line(
        self,
        note: CallNote,
        state: Any,
        result: Mapping[str, Any] | None,
        arguments: Mapping[str, Any] | None,
        outcome: str,
        seconds: float,
    ) -> dict[str, Any]:
        line: dict[str, Any] = {
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "principal": getattr(state, "principal", None),
            "session": getattr(state, "session", None),
            "profile": self.profile,
            "tool": note.tool,
            "server": note.server,
            "era": note.version,
            "decision": note.decision,
            "reason": note.reason,
            "outcome": outcome,
            "ms": round(seconds * 1000, 3),
        }
        if result is not None:
            line["result_bytes"] = _size(result)
            if note.spilled:
                line["artifacts"] = artifacts_in(result)
        if self.audit_arguments and arguments is not None:
            server = self._servers.get(note.server or "")
            text = _json(_shallow(arguments))
            shown = text if server is None else redact(text, server.config)
            line["arguments"] = shown[:MAX_AUDITED_ARGUMENTS] + ("..." if len(shown) > MAX_AUDITED_ARGUMENTS else "")
        return line


def _annotate(note: CallNote, outcome: str) -> None:
    """The gate's decision and the call's outcome on the current (the gate's) span."""
    from opentelemetry import trace

    span = trace.get_current_span()
    span.set_attribute("prefixgate.decision", note.decision)
    span.set_attribute("prefixgate.outcome", outcome)
    if outcome in ("error", "refused"):
        # (an error answer: its code, as the SDK's spans name it)
        kind = f"refused:{note.decision}" if outcome == "refused" else note.error or "tool_error"
        span.set_attribute("error.type", kind)
        span.set_status(trace.StatusCode.ERROR)


def _shallow(value: Any, depth: int = 0) -> Any:
    """``value`` with what lies past ``MAX_AUDITED_DEPTH`` levels as ``"..."`` and the value of
    every key that names a credential (``token``, ``Authorization``, ``api_key``, at any level)
    as ``***``: a model passes a credential the server does not hold in its config."""
    if not isinstance(value, dict | list):
        return value
    if depth >= MAX_AUDITED_DEPTH:
        return "..."
    if isinstance(value, list):
        return [_shallow(item, depth + 1) for item in value]
    return {key: MASK if secret_key(str(key)) else _shallow(item, depth + 1) for key, item in value.items()}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _size(result: Mapping[str, Any]) -> int:
    """The result's size as JSON (UTF-8), what the client is sent give or take the envelope."""
    return len(_json(result).encode("utf-8", "surrogatepass"))
