"""A principal holds at most so many handshake-era HTTP sessions (gateway/sdk.py ``PrincipalSessions``).

A client that initializes again and again without ending its sessions (no DELETE) kept
every one of them for the idle timeout, 30 minutes, about 50 KB each: memory grew with
what one client sent, and at the SDK's limit for all principals together (10,000) every
principal's new sessions were refused. Now opening one more than the limit closes that
principal's least recently used idle session, never another principal's, nor one with a
request in flight. Real gateway over HTTP, raw HTTP sessions and the real SDK client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.helpers import ACCEPT, ERAS, INIT, demo, http_gateway, sdk_client, text, wait_for, write_config
from tests.test_principals import tokens_file

pytestmark = pytest.mark.anyio

LIMIT = {"PREFIXGATE_HTTP_SESSIONS_PER_PRINCIPAL": "3"}
LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def _open(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> str:
    opened = await http.post(url, json=INIT, headers=headers)
    assert opened.status_code == 200, opened.text[:300]
    session: str = opened.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=initialized, headers={**headers, "mcp-session-id": session})
    return session


async def _status(http: httpx2.AsyncClient, url: str, headers: dict[str, str], session: str) -> int:
    with_session = {**headers, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    return (await http.post(url, json=LISTING, headers=with_session)).status_code


async def test_opening_one_too_many_closes_the_least_recently_used_idle_session(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env=LIMIT) as (url, stderr):
        async with httpx2.AsyncClient(timeout=30) as http:
            first = [await _open(http, url, ACCEPT) for _ in range(3)]
            assert await _status(http, url, ACCEPT, first[0]) == 200  # the oldest is now the most recent
            assert await _status(http, url, ACCEPT, first[2]) == 200  # (then this one: the second is the least)
            fourth = await _open(http, url, ACCEPT)
            statuses = [await _status(http, url, ACCEPT, s) for s in [*first, fourth]]
            assert statuses == [200, 404, 200, 200]
            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "d__echo", "arguments": {}}}
            for session, status in ((first[1], 404), (fourth, 200)):  # a call, on the session lane while open
                with_session = {**ACCEPT, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
                assert (await http.post(url, json=call, headers=with_session)).status_code == status
            # However many it opens, the principal holds three: the newest.
            more = [await _open(http, url, ACCEPT) for _ in range(12)]
            kept = [s for s in [*first, fourth, *more] if await _status(http, url, ACCEPT, s) == 200]
            assert kept == more[-3:]
    assert "closed: its principal opened more than 3" in stderr.read_text()


@pytest.mark.parametrize("method", ["HEAD", "PUT", "OPTIONS", "GET", "DELETE", "POST"])
async def test_a_request_that_opens_no_session_closes_none(tmp_path: Path, method: str) -> None:
    """The SDK admits a session for every request without a session id, and admission made
    room first: a HEAD, a PUT, a GET or a POSTed ``ping`` without one (refused 405 or 400, no
    session opened) closed the principal's least recently used idle session at its limit.
    Only a session opened costs one now."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env=LIMIT) as (url, _):
        async with httpx2.AsyncClient(timeout=30) as http:
            held = [await _open(http, url, ACCEPT) for _ in range(3)]
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            for _ in range(2):
                refused = await http.request(method, url, headers=ACCEPT, json=ping if method == "POST" else None)
                assert refused.status_code in (400, 405), refused.text[:300]
            assert [await _status(http, url, ACCEPT, s) for s in held] == [200, 200, 200]


async def test_sessions_opened_at_once_at_the_limit_each_open(tmp_path: Path) -> None:
    """Opening requests served at once: one's room-making closed another still opening (idle,
    nothing in flight yet), whose ``initialize`` was then answered 404. A session still
    opening is neither counted nor closed; once they are open the principal holds three."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env=LIMIT) as (url, _):
        async with httpx2.AsyncClient(timeout=30) as http:
            opened: list[str] = []

            async def open_one() -> None:
                opened.append(await _open(http, url, ACCEPT))

            for _ in range(4):
                async with anyio.create_task_group() as tg:
                    for _ in range(8):
                        tg.start_soon(open_one)
            assert len(opened) == 32
            assert sorted([await _status(http, url, ACCEPT, s) for s in opened]).count(200) == 3


async def test_a_session_with_a_request_in_flight_is_not_closed(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env=LIMIT) as (url, _):
        async with httpx2.AsyncClient(timeout=30) as http:
            listening = await _open(http, url, ACCEPT)
            stream = {"accept": "text/event-stream", "mcp-session-id": listening, "mcp-protocol-version": "2025-11-25"}
            async with http.stream("GET", url, headers=stream) as held:  # its standalone stream, open
                assert held.status_code == 200
                idle = [await _open(http, url, ACCEPT) for _ in range(2)]
                newest = await _open(http, url, ACCEPT)
                # One of the two idle ones goes (the test above holds which: two sessions opened
                # within a few ms are ordered by when the SDK finished each one's last request,
                # which on a loaded machine is not always the order their answers came in).
                assert sorted([await _status(http, url, ACCEPT, s) for s in idle]) == [200, 404]
            assert await _status(http, url, ACCEPT, listening) == 200
            assert await _status(http, url, ACCEPT, newest) == 200


@pytest.mark.parametrize("mode", ERAS)
async def test_one_principals_sessions_never_close_anothers(tmp_path: Path, mode: str) -> None:
    """Alice opens session after session; Bob's session (handshake era) and his requests
    (2026-07-28, which have no session) go on untouched."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    alice: dict[str, Any] = {**ACCEPT, "authorization": "Bearer token-of-alice"}
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens), env=LIMIT) as (url, stderr):
            bob = {"Authorization": "Bearer token-of-bob"}
            async with sdk_client(url, mode, headers=bob) as client, httpx2.AsyncClient(timeout=30) as http:
                assert text(await client.call_tool("d__echo", {"text": "before"})) == "before"
                hers = [await _open(http, url, alice) for _ in range(8)]
                assert [await _status(http, url, alice, s) for s in hers].count(200) == 3
                assert text(await client.call_tool("d__echo", {"text": "after"})) == "after"
            await wait_for(lambda: stderr.read_text().count("closed: its principal opened more than 3") == 5, 10)
