"""A remote server's answers, bounded by ``max_message_bytes`` as a stdio server's lines are.

On stdio a line over ``max_message_bytes`` fails its request (stdio.py). Over streamable
HTTP a message is either a whole answer (a JSON body, an error page) or one event of an
event stream: the body is read to ``max_message_bytes`` at most, counted once decoded when
it is compressed (``bound_answer``, on the HTTP client's transport and on the gateway's own
connections), and each event is bounded
by the SDK transport's ``max_sse_event_size``, set to the same limit (transports.py). The
error raised is an ``httpx2.StreamError``: the SDK's transport and ``httpcalls.py`` answer
that request with "Failed to parse JSON response: ..." and the connection goes on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

import httpx2


class MessageTooLarge(httpx2.StreamError):
    """An answer over ``max_message_bytes``: not read any further."""


def encodings_taken(response: httpx2.Response) -> list[str]:
    """The answer's ``Content-Encoding``, taken off it: whatever bounds its body decodes it
    (``decoded``), so what is counted is what is read. Counted on the wire, 300 KB of gzip
    made a 300 MB answer, in the gateway's memory at once, past a 32 MiB limit."""
    encodings = response.headers.get_list("content-encoding")
    if encodings:
        del response.headers["content-encoding"]
    return encodings


@contextlib.asynccontextmanager
async def decoded(stream: httpx2.AsyncByteStream, encodings: list[str]) -> AsyncIterator[AsyncIterator[bytes]]:
    """``stream``'s bytes decoded by httpx's own decoders for ``encodings``, as the response
    would have decoded them (the decoder closed on the way out)."""
    if not encodings:
        yield stream.__aiter__()
        return
    chunks = httpx2.Response(200, headers=[("content-encoding", e) for e in encodings], stream=stream).aiter_bytes()
    assert isinstance(chunks, AsyncGenerator)
    async with contextlib.aclosing(chunks):
        yield chunks


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, declared: int | None, encodings: list[str]) -> None:
        self.inner, self.limit, self.declared = inner, limit, declared
        self.encodings = encodings

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.declared is not None:
            raise MessageTooLarge(f"an answer of {self.declared} bytes exceeds max_message_bytes {self.limit}")
        seen = 0
        async with decoded(self.inner, self.encodings) as chunks:
            async for chunk in chunks:
                seen += len(chunk)
                if seen > self.limit:
                    raise MessageTooLarge(
                        f"an answer of over {self.limit} bytes exceeds max_message_bytes {self.limit}"
                    )
                yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def bound_answer(response: httpx2.Response, limit: int | None) -> httpx2.Response:
    """``response``, its body read to ``limit`` bytes at most unless it is an event stream
    (whose events are bounded one by one); a declared length over it is refused unread.
    ``limit`` None: unbounded (as the SDK transport's ``max_sse_event_size`` may be)."""
    if limit is None or response.headers.get("content-type", "").lower().startswith("text/event-stream"):
        return response
    if isinstance(response.stream, _Bounded):
        return response
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    length = response.headers.get("content-length", "")
    declared = int(length) if length.isdigit() and int(length) > limit else None
    response.stream = _Bounded(response.stream, limit, declared, encodings_taken(response))
    return response


class BoundedAnswers(httpx2.AsyncBaseTransport):
    """An HTTP transport whose answers are bounded by ``bound_answer``."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return bound_answer(await self.inner.handle_async_request(request), self.limit)

    async def aclose(self) -> None:
        await self.inner.aclose()
