"""Resumable SSE streams: the bounded, session-keyed event store (unit) and a real resumption
through `prefixgate serve --http` with raw HTTP (the SDK client does not expose Last-Event-ID)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.server.streamable_http import EventMessage

from gateway.upstream import events
from gateway.upstream.events import BoundedEventStore, Owner
from tests.helpers import ACCEPT, INIT, demo, http_gateway, write_config

pytestmark = pytest.mark.anyio


def note(n: int) -> Any:
    return types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": n})


async def store_as(store: BoundedEventStore, owner: Owner | None, stream: str, message: Any) -> str:
    token = events._owner.set(owner)
    try:
        return await store.store_event(stream, message)
    finally:
        events._owner.reset(token)


async def replay_as(store: BoundedEventStore, owner: Owner | None, last: str) -> tuple[str | None, list[Any]]:
    got: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        got.append(event)

    token = events._owner.set(owner)
    try:
        stream = await store.replay_events_after(last, collect)
    finally:
        events._owner.reset(token)
    return stream, [e.message.params["n"] for e in got]


async def test_replays_only_later_events_of_the_same_stream_and_session() -> None:
    store = BoundedEventStore()
    a, b = Owner("session-a"), Owner("session-b")
    prime = await store_as(store, a, "1", None)
    await store_as(store, b, "1", note(100))  # same stream name, other session
    await store_as(store, a, "2", note(200))  # same session, other stream
    await store_as(store, a, "1", note(1))
    await store_as(store, a, "1", note(2))
    assert await replay_as(store, Owner("session-a"), prime) == ("1", [1, 2])
    assert await replay_as(store, b, prime) == (None, [])  # another session's id replays nothing
    assert await replay_as(store, None, prime) == (None, [])
    assert await replay_as(store, a, "no-such-id") == (None, [])


async def test_a_session_known_only_later_is_matched_and_an_unknown_one_never() -> None:
    store = BoundedEventStore()
    creating = Owner(None)  # the initialize request: its session id is issued with the response
    first = await store_as(store, creating, "1", None)
    await store_as(store, creating, "1", note(1))
    assert await replay_as(store, Owner(None), first) == (None, [])
    creating.session_id = "issued"
    assert await replay_as(store, Owner("issued"), first) == ("1", [1])
    orphan = await store_as(store, None, "1", None)
    assert await replay_as(store, Owner("issued"), orphan) == (None, [])


async def test_bounded_by_count_bytes_and_age() -> None:
    now = [0.0]
    store = BoundedEventStore(max_events=3, max_bytes=400, max_age=10, clock=lambda: now[0])
    a = Owner("s")
    ids = [await store_as(store, a, "1", note(i)) for i in range(5)]
    assert store.events == 3 and await replay_as(store, a, ids[0]) == (None, [])
    assert await replay_as(store, a, ids[2]) == ("1", [3, 4])
    big = types.JSONRPCNotification(jsonrpc="2.0", method="x", params={"n": 9, "pad": "x" * 300})
    await store_as(store, a, "1", big)
    assert store.bytes <= 400 and store.events < 3
    huge = types.JSONRPCNotification(jsonrpc="2.0", method="x", params={"n": 9, "pad": "x" * 1000})
    gone = await store_as(store, a, "1", huge)  # sent, never kept
    assert await replay_as(store, a, gone) == (None, [])
    now[0] = 11.0
    await store_as(store, a, "2", None)
    assert store.events == 1


async def test_one_principals_flood_evicts_its_own_events_first() -> None:
    """Past the count or the size, the principal holding the most loses its oldest events:
    Bob's stream, older than all of Alice's flood, can still be resumed."""
    store = BoundedEventStore(max_events=10, max_bytes=10_000)
    alice, bob = Owner("alice-1", "alice"), Owner("bob-1", "bob")
    prime = await store_as(store, bob, "1", None)
    await store_as(store, bob, "1", note(-1))
    flood = [await store_as(store, alice, "1", note(i)) for i in range(50)]
    assert store.events == 10
    assert await replay_as(store, bob, prime) == ("1", [-1])
    assert await replay_as(store, alice, flood[-3]) == ("1", [48, 49])  # her newest are kept
    assert await replay_as(store, alice, flood[0]) == (None, [])
    big = types.JSONRPCNotification(jsonrpc="2.0", method="x", params={"n": 7, "pad": "x" * 3000})
    for _ in range(4):  # by size too: her 12,000 bytes go before his few
        await store_as(store, Owner("alice-2", "alice"), "2", big)
    assert store.bytes <= 10_000
    assert await replay_as(store, bob, prime) == ("1", [-1])


def _sse(text: str) -> list[dict[str, str]]:
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(":")
            if key:
                fields[key] = value.removeprefix(" ")
        if fields:
            found.append(fields)
    return found


async def test_a_lost_post_stream_is_resumed_with_last_event_id_by_its_own_session_only(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config) as (url, _stderr):
        async with httpx2.AsyncClient(timeout=30) as http:

            async def session() -> dict[str, str]:
                r = await http.post(url, json=INIT, headers=ACCEPT)
                sid = r.headers["mcp-session-id"]
                headers = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
                await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
                return headers

            mine, other = await session(), await session()
            params = {"name": "d__slow", "arguments": {"seconds": 1}}
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
            async with http.stream("POST", url, json=call, headers=mine) as response:
                lines = response.aiter_lines()
                first = [await anext(lines) for _ in range(3)]  # the priming event: id, retry, data
            priming = _sse("\n".join(first))[0]
            assert priming.get("retry") == str(events.RETRY_MS) and priming["id"]
            await anyio.sleep(2)  # the result arrives while no stream is open

            foreign = await http.get(url, headers={**other, "last-event-id": priming["id"]}, timeout=5)
            assert "d__slow" not in foreign.text and '"id":7' not in foreign.text

            async with http.stream("GET", url, headers={**mine, "last-event-id": priming["id"]}) as resumed:
                assert resumed.status_code == 200
                text = ""
                with anyio.fail_after(10):
                    async for chunk in resumed.aiter_text():
                        text += chunk
                        if '"id":7' in text:
                            break
            replies = [json.loads(e["data"]) for e in _sse(text) if e.get("data")]
            assert [r["id"] for r in replies if "id" in r] == [7]
            assert not replies[-1]["result"].get("isError")
