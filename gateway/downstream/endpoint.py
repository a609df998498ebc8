"""An SSE server's ``endpoint`` event, checked before the SDK's SSE client reads it.

The SDK's client (mcp 2.3.0, ``mcp.client.sse``) refuses an endpoint on another origin than
the SSE URL's (scheme and ``host:port`` as written), rightly: every message would be posted
there. But it refuses from inside the task it has not yet reported started, by logging a
traceback and handing the error to a stream nobody reads yet, so the connection hangs: the
server was ``late`` at ``startup_timeout`` and never retried. Here the same rule is applied
to the event stream's first ``endpoint`` event on its way to the SDK: a foreign one ends the
stream there (the SDK's client then fails its start without a word) and is kept, so the
transport fails the start with it.
"""

from __future__ import annotations

import codecs
import urllib.parse
from collections.abc import AsyncIterator

import httpx2

from gateway.sdk import sse_parser

MAX_EVENT_BYTES = 1 << 20
"""The SDK's own cap on one event of an SSE connection (``sse_within_origin``'s default)."""


class ForeignEndpoint(Exception):
    """The server's ``endpoint`` event names another origin; ``str()`` names both, never a path or query."""


def _origin(parsed: urllib.parse.ParseResult) -> str:
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}"  # (no user:password@)


def foreign_endpoint(url: str, data: str) -> ForeignEndpoint | None:
    """The refusal of an ``endpoint`` event's ``data`` for the SSE connection at ``url``, by
    the SDK client's rule (the endpoint resolved against ``url``, then its scheme and netloc
    compared); None when the SDK's client accepts it."""
    ours, theirs = urllib.parse.urlparse(url), urllib.parse.urlparse(urllib.parse.urljoin(url, data))
    if (ours.scheme, ours.netloc) == (theirs.scheme, theirs.netloc):
        return None
    return ForeignEndpoint(
        f"its endpoint event names another origin, {_origin(theirs)}, than its URL's, {_origin(ours)}; "
        "messages are posted only to the URL's origin"
    )


class EndpointCheck:
    """An SSE connection's HTTP client's response hook: its event streams end at a foreign
    ``endpoint`` event, and ``refused`` then says why (a hook, not a transport of ours, so
    the client keeps its own, and the environment's proxies with it)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.refused: ForeignEndpoint | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        # (a compressed stream, which no SSE server sends, is left to the SDK's check)
        if kind == "text/event-stream" and "content-encoding" not in response.headers:
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Watched(response.stream, self)


class _Watched(httpx2.AsyncByteStream):
    """The stream's bytes unchanged, read as events only until the first ``endpoint`` event."""

    def __init__(self, inner: httpx2.AsyncByteStream, check: EndpointCheck) -> None:
        self.inner, self.check = inner, check

    async def __aiter__(self) -> AsyncIterator[bytes]:
        parser = sse_parser(MAX_EVENT_BYTES)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        watching = True
        async for chunk in self.inner:
            if watching:
                try:
                    events = list(parser.decode(decoder.decode(chunk)))
                except httpx2.SSEError:  # (the SDK's parser refuses the same event)
                    events, watching = [], False
                endpoint = next((e.data for e in events if e.event == "endpoint"), None)
                if endpoint is not None:
                    watching = False
                    if (refused := foreign_endpoint(self.check.url, endpoint)) is not None:
                        self.check.refused = refused
                        return
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
