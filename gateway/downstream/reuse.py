"""Keep a streamable-HTTP server's connections for the next call.

The SDK's streamable-HTTP client closes a call's event-stream response as soon as the
answer has arrived, before the stream's end (the chunked body's last chunk, which a server
sends right after). An HTTP connection whose response was not read to its end cannot carry
another request, so every call to an HTTP server opened a new TCP connection: a connect on
this side and an accept on the server's, per call. Here a response closed early
is first read to its end, for a moment and a few bytes at most: a server that ends its
stream with the answer (every SDK server does) leaves its connection in the pool; one that
keeps it open loses the connection, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx2

from gateway.downstream.proxies import EnvironmentRoutes

DRAIN_SECONDS = 0.05
"""How long a closed-early response is read for its end."""
DRAIN_BYTES = 64 << 10
"""How much of it at most (the end of a stream is a few bytes)."""


class _Drained(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self.inner = inner
        self._chunks: AsyncIterator[bytes] | None = None
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._chunks = self.inner.__aiter__()
        async for chunk in self._chunks:
            yield chunk
        self._ended = True

    async def aclose(self) -> None:
        chunks = self._chunks
        if chunks is not None and not self._ended:
            read = 0
            with anyio.move_on_after(DRAIN_SECONDS):
                try:
                    async for chunk in chunks:
                        read += len(chunk)
                        if read > DRAIN_BYTES:
                            break
                except (httpx2.HTTPError, OSError):
                    pass  # the connection is closed below, as it would have been
        await self.inner.aclose()


class ReusedConnections(httpx2.AsyncBaseTransport):
    """An HTTP transport whose event-stream responses, closed before their end, are read to it
    first (see the module docstring); everything else passes through unchanged."""

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or EnvironmentRoutes()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("text/event-stream") and request.method == "POST":
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Drained(response.stream)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
