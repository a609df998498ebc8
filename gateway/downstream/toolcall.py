"""``tools/call`` toward a server, and every way it can fail as an ``isError`` result.

A JSON-RPC error from the server (an offline server's ``-32603 fetch failed``) becomes an
``isError`` result naming the server: the model can act on one, while a protocol error
ends its turn. Only the spec's own codes (-32020..-32099: a header mismatch, a client
capability the request lacked, an unsupported version) stay JSON-RPC errors: they are
about the client's request, which a client acts on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, HEADER_MISMATCH, PARSE_ERROR, REQUEST_TIMEOUT

from catalog.text import escape
from gateway.downstream.calltime import CallTimedOut
from gateway.downstream.connection import Downstream
from gateway.downstream.errors import GAVE_UP_RESUMING, DownstreamUnavailable
from gateway.downstream.link import ProgressFn
from gateway.downstream.modern import ENVELOPE, relayable, relayed_meta
from gateway.downstream.rawcalls import UNSENDABLE_REQUEST
from gateway.downstream.stdio import MESSAGE_TOO_LARGE, UNPARSABLE_REPLY
from gateway.downstream.tasks import call_as_task, runs_as_task
from gateway.results import error_result

SPEC_ERRORS = (-32099, -32020)
"""Error codes the 2026-07-28 spec allocates (about the request itself, not the tool)."""
MAX_ERROR_CHARS = 500
"""A server's error message kept in a tool's ``isError`` text (one line)."""


async def call_tool(
    downstream: Downstream,
    tool: str,
    arguments: Mapping[str, Any] | None,
    *,
    meta: Mapping[str, Any] | None = None,
    on_progress: ProgressFn | None = None,
    answers: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Forward ``tools/call``; errors become ``isError`` results naming the server.

    ``answers`` (``inputResponses``, ``requestState``) retry a call the server answered
    with ``input_required`` (2026-07-28).
    """
    params: dict[str, Any] = {"name": tool}
    # A modern client's per-request log opt-in holds for this call's hop too.
    wanted_level = (meta or {}).get(ENVELOPE + "logLevel")
    # ... and so do the capabilities it declared: the server asks only for what it can answer.
    capabilities = relayable((meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY))
    if arguments is not None:
        params["arguments"] = dict(arguments)
    if meta and (forwarded := relayed_meta(meta)):
        params["_meta"] = forwarded
    if answers:
        params.update(answers)
    server = downstream.id
    timeout, max_time = downstream.config.call_timeout, downstream.config.max_call_time
    oauth = downstream.oauth
    mark = oauth.problems.mark() if oauth is not None else 0
    level = wanted_level if isinstance(wanted_level, str) else None
    try:
        if runs_as_task(downstream, tool):
            return await call_as_task(
                downstream,
                params,
                timeout=timeout,
                max_time=max_time,
                on_progress=on_progress,
                log_level=level,
                capabilities=capabilities,
            )
        return await downstream.request(
            "tools/call",
            params,
            timeout=timeout,
            on_progress=on_progress,
            log_level=level,
            capabilities=capabilities,
            max_time=max_time,
        )
    except DownstreamUnavailable as exc:
        return error_result(str(exc))
    except MCPError as exc:
        if isinstance(exc, CallTimedOut):
            return error_result(f"{server}: tool {tool!r} {exc.detail}")
        if exc.code == REQUEST_TIMEOUT:  # (the server's own error of that code)
            return error_result(f"{server}: tool {tool!r} timed out: no answer or progress in {timeout:g} s")
        if exc.code == CONNECTION_CLOSED and connection_gone(downstream, exc):
            return error_result(await _closed_reason(downstream, tool))
        if exc.code in (MESSAGE_TOO_LARGE, UNPARSABLE_REPLY, PARSE_ERROR, UNSENDABLE_REQUEST) or (
            exc.code == CONNECTION_CLOSED and exc.message == GAVE_UP_RESUMING
        ):
            # The reply never arrived whole: refused by our transport, or (remote) by the
            # SDK's, whose JSON parser rejects lone surrogates (``\ud800``) outright; or the
            # request never left (its arguments would not encode). Not the server's answer.
            # One line: the SDK's parse errors go on with pydantic's lines quoting the reply's bytes.
            first = exc.message.splitlines()[0] if exc.message else ""
            return error_result(f"{server}: tool {tool!r}: {one_line(first)}")
        if exc.code == HEADER_MISMATCH and downstream.modern:
            # Its tools changed without a word (a renamed x-mcp-header): the refused headers
            # were the gateway's, made from the schema it listed, not the client's. They are
            # listed again (as the spec asks of a client told -32020), for the next call.
            await downstream.events.server_notification(downstream, "notifications/tools/list_changed", {})
            refused = f"the server refused the call's headers ({exc.code}: {one_line(exc.message)})"
            return error_result(f"{server}: tool {tool!r}: {refused}; its tools are being listed again: call again")
        if SPEC_ERRORS[0] <= exc.code <= SPEC_ERRORS[1]:
            raise
        if (problem := downstream.login_problem(since=mark)) is not None:
            # The server refused the token for this call (a step-up, or a login gone).
            return error_result(f"Server {server!r} refused tool {tool!r}: {problem}")
        return error_result(server_error(server, tool, exc.code, exc.message))


def connection_gone(downstream: Downstream, exc: MCPError) -> bool:
    """Whether -32000 is the SDK's own "connection closed" rather than a server's error
    (the code is also a common implementation-defined one, e.g. "Internal error")."""
    if (child := downstream.transport.child) is not None:
        return child.stdout_closed.is_set()
    return exc.message == "Connection closed" and exc.error.data is None


async def _closed_reason(downstream: Downstream, tool: str) -> str:
    server = downstream.id
    if downstream.stopping and downstream.stop_reason:
        return f"server {server!r} was stopped by a {downstream.stop_reason} during the call to {tool!r}"
    if (child := downstream.transport.child) is not None:
        await child.wait_exit(2.0)
        return f"server {server!r} {child.ending()} during the call to {tool!r} ({child.exit_description()})"
    if (problem := downstream.login_problem()) is not None:
        return f"Server {server!r}: {problem}"
    return f"connection to server {server!r} closed during the call to {tool!r}"


def one_line(message: str) -> str:
    """``message`` as one bounded, printable line."""
    text = escape(" ".join(message.split()))
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return text or "(no message)"


def server_error(server: str, tool: str, code: int, message: str) -> str:
    """A server's JSON-RPC error as one bounded, printable line naming server, tool and code."""
    return f"Server {server!r} answered tool {tool!r} with JSON-RPC error {code}: {one_line(message)}"
