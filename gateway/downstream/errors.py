"""A server's errors as the gateway reports them: one escaped line, never a credential."""

from __future__ import annotations

from catalog.text import escape, quote

NOT_JSON_RPC_SHOWN = 120
"""Characters of such a line the log shows."""


class DownstreamUnavailable(Exception):
    """The server cannot take calls now; ``str()`` is the model-visible reason."""


class NotJsonRpc(ValueError):
    """A line a stdio server wrote that is no JSON-RPC message and answers no request (a
    banner, a stray print): ignored, as the SDK's client ignores it, and named in the log."""

    def __init__(self, head: bytes) -> None:
        text = head.decode("utf-8", "replace")
        shown = quote(text[:NOT_JSON_RPC_SHOWN]) + (" ..." if len(text) > NOT_JSON_RPC_SHOWN else "")
        super().__init__(f"ignored a line that is not JSON-RPC: {shown}")


def leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups: the one worth reporting."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def short(exc: BaseException) -> str:
    """One line for an error, escaped; a few that would quote what must not be shown are reworded.
    A task group's wrapper around one error is that error: its own words name nothing."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    if isinstance(exc, UnicodeDecodeError):
        text = f"an answer that is not UTF-8 text (byte {exc.start})"
    elif text.startswith("State parameter mismatch"):  # the SDK would print the expected state
        text = "the authorization response's state is not this login's (a stale or forged redirect)"
    elif "Illegal header value" in text:  # the HTTP library would print the header: a credential
        text = "a header value the HTTP library refused (not shown)"
    line = f"{type(exc).__name__}: {escape(text.splitlines()[0][:300])}" if text else type(exc).__name__
    host = host_of(exc)
    return line + f" ({escape(host)})" if host is not None and host.rsplit(":", 1)[0] not in text else line


def host_of(exc: BaseException) -> str | None:
    """``host:port`` of the request an HTTP library error was for ("Name or service not known"
    names no host); never its path or query, which may carry credentials."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]  # httpx's errors; a RuntimeError when unset
    except (AttributeError, RuntimeError):
        return None
    port = url.port or {"https": 443, "http": 80}.get(url.scheme)
    return f"{url.host}:{port}" if url.host else None


GAVE_UP_RESUMING = "SSE stream ended and reconnection attempts were exhausted"
"""The SDK's streamable-HTTP transport's words (and ``httpcalls``') when a call's event stream
was cut and could not be resumed: the transport's, not the server's answer."""
