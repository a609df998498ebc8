"""``gateway.downstream.httpcalls.events_of`` reads an event stream off its body's chunks; it
must give what ``httpx2.EventSource`` (the SDK's reader) gives for the same response: the same
events, or the same error, however the bytes are cut into chunks."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from gateway.downstream.httpcalls import events_of
from tests.test_related import Chunks

pytestmark = pytest.mark.anyio

BODIES = [
    b'event: message\ndata: {"jsonrpc":"2.0","id":"pg-1","result":{}}\n\n',
    b"id: e1\nretry: 10\nevent: message\ndata: \n\nevent: message\ndata: second\n\n",
    b"data: one\r\ndata: two\r\n\r\n: a comment\r\ndata: three\r\r",
    b"data: no blank line at the end",
    b"\xef\xbb\xbfdata: after a BOM\n\n",
    b"data: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n\n",
    b"data: broken \xff\xfe bytes\n\ndata: \xc3\n\n",
    b"event: other\ndata: x\nid: 7\nretry: soon\nfield without colon\ndata\n\n",
    b"data: " + b"x" * 300 + b"\n\n",
]
"""Line endings of every kind, comments, fields with and without values, a priming event, a
BOM, multi-byte characters (to be cut mid-character), bytes that are not UTF-8, an event
past the size cap below."""
SILENT = (BODIES[3], BODIES[4])
"""No event: one without the blank line that dispatches it, and one after a BOM (which the
SDK's reader keeps in its first field's name, so the field is not ``data``)."""


def response(body: bytes, size: int, content_type: str) -> httpx2.Response:
    chunks = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    request = httpx2.Request("POST", "http://127.0.0.1/mcp")
    return httpx2.Response(200, headers=[("content-type", content_type)], stream=Chunks(chunks), request=request)


async def outcome(events: Any) -> list[Any]:
    seen: list[Any] = []
    try:
        async for sse in events:
            seen.append((sse.event, sse.data, sse.id, sse.retry))
    except Exception as exc:  # noqa: BLE001 - the error is part of what must agree
        seen.append((type(exc).__name__, str(exc)))
    return seen


@pytest.mark.parametrize("content_type", ["text/event-stream", "text/event-stream; charset=iso-8859-1"])
@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
async def test_the_events_are_event_sources_however_the_body_is_cut(body: bytes, content_type: str) -> None:
    for size in (1, 2, 3, 7, len(body) or 1):
        want = await outcome(httpx2.EventSource(response(body, size, content_type), max_event_size=256))
        got = await outcome(events_of(response(body, size, content_type), 256))
        assert got == want, (size, got, want)
        assert bool(want) is (body not in SILENT), want  # the comparison is not of nothing


async def test_a_stream_event_source_refuses_is_refused_alike() -> None:
    body = BODIES[0]
    for content_type in ("text/event-streamer", "application/json"):
        want = await outcome(httpx2.EventSource(response(body, 5, content_type)))
        got = await outcome(events_of(response(body, 5, content_type), None))
        assert got == want and want[0][0] == "SSEError", (got, want)
