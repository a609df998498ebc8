"""The scan that tells whose a streamable-HTTP server's request is (gateway/downstream/related.py).

The end-to-end behaviour (two principals, a real server over HTTP) is in
tests/test_principal_requests.py; here the scan meets the streams a server may send: events
split anywhere across chunks, CRLF line ends, data over several lines, responses and
notifications (only log lines are noted, by content), events too big to read, and more notes than are kept.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from gateway.downstream.related import MAX_EVENT, MAX_NOTES, Related, _Scanned

pytestmark = pytest.mark.anyio


class Chunks(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def event(message: dict[str, Any], *, end: bytes = b"\n") -> bytes:
    data = json.dumps(message).encode()
    return b"event: message" + end + b"data: " + data + end + end


async def scanned(stream: bytes, *, size: int) -> tuple[Related, bytes]:
    related = Related()
    name = related.open("the call")
    chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
    passed = b"".join([chunk async for chunk in _Scanned(Chunks(chunks), related, name)])
    return related, passed


ASK = {"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": {"message": "hi"}}
ANSWER = {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": '"method" in text'}]}}
LOG = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}


@pytest.mark.parametrize("size", [1, 5, 64, 1 << 16])
@pytest.mark.parametrize("end", [b"\n", b"\r\n"])
async def test_a_request_is_noted_however_the_stream_is_cut(size: int, end: bytes) -> None:
    stream = event(LOG, end=end) + event(ASK, end=end) + event(ANSWER, end=end)
    related, passed = await scanned(stream, size=size)
    assert passed == stream  # passed on unchanged
    assert related.take(7) == "the call"
    assert related.take(7) is None  # taken once
    assert related.take(3) is None  # a response is not a request


async def test_data_over_several_lines_is_one_event() -> None:
    text = json.dumps({**ASK, "id": "s-1"}, indent=1).encode()
    stream = b"".join(b"data: " + line + b"\n" for line in text.split(b"\n")) + b"\n"
    related, _ = await scanned(stream, size=3)
    assert related.take("s-1") == "the call"


async def test_an_event_over_the_limit_is_passed_on_unread() -> None:
    big = {**ASK, "params": {"message": "x" * MAX_EVENT}}
    stream = event(big) + event({**ASK, "id": 8})
    related, passed = await scanned(stream, size=1 << 16)
    assert passed == stream
    assert related.take(7) is None  # unread: the rule for pipes decides
    assert related.take(8) == "the call"  # the next event is read again


async def test_a_request_after_its_call_ended_is_not_noted() -> None:
    related = Related()
    name = related.open("the call")
    related.close(name)
    stream = _Scanned(Chunks([event(ASK)]), related, name)
    assert [chunk async for chunk in stream]
    assert related.take(7) is None


def test_notes_are_bounded() -> None:
    related = Related()
    name = related.open("the call")
    for request_id in range(MAX_NOTES + 10):
        related.note(name, request_id)
    assert related.take(0) is None and related.take(9) is None  # the oldest were dropped
    assert related.take(10) == "the call" and related.take(MAX_NOTES + 9) == "the call"


async def test_a_log_line_is_noted_by_its_content_for_the_call_it_came_on() -> None:
    """The SDK's dump of the same message (no null ``logger``) finds the note; another line does not."""
    raw = {**LOG, "params": {"level": "info", "logger": None, "data": {"b": [1, None], "a": "é"}}}
    related, _ = await scanned(event(raw) + event(LOG), size=7)
    assert related.take_log({"level": "info", "data": {"a": "é", "b": [1, None]}}) == "the call"
    assert related.take_log({"level": "info", "data": {"a": "é", "b": [1, None]}}) is None  # taken once
    assert related.take_log({"level": "warning", "data": "x"}) is None  # another level: not that line
    assert related.take_log(LOG["params"]) == "the call"


def test_log_notes_are_bounded_and_taken_oldest_first() -> None:
    related = Related()
    first, second = related.open("first"), related.open("second")
    same = {"level": "info", "data": "same words"}
    related.note_log(first, same)
    related.note_log(second, same)
    assert related.take_log(same) == "first" and related.take_log(same) == "second"
    for n in range(MAX_NOTES + 10):
        related.note_log(first, {"level": "info", "data": n})
    assert related.take_log({"level": "info", "data": 9}) is None  # the oldest were dropped
    assert related.take_log({"level": "info", "data": 10}) == "first"
