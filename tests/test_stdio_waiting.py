"""Over stdio, requests past the 64 in flight wait their turn, and what frees a place is still read.

The gateway's stdio end answers at most ``MAX_IN_FLIGHT`` requests of its client at once. The
reader used to stop at the next request until one of them was answered, so every line behind it
waited too: a ``notifications/cancelled`` for one of the 64 (the client making room), or the
client's answers to what those calls had asked it. A client with 64 calls waiting on its answers
or on a cancel then waited for ever, which the SDK's own stdio server (it reads every line)
never does. Now the requests wait, in order, while the reader goes on (gateway/upstream/stdio.py),
and at the end of input they are answered within ``drain_timeout`` as the calls in flight are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from gateway.upstream.stdio import MAX_IN_FLIGHT
from tests.helpers import ERAS, PYTHON, sdk_client, text, wait_for, write_config

pytestmark = pytest.mark.anyio

CLASSIC = {"command": PYTHON, "args": ["-m", "tests.classic_server"]}


async def _sleeping(client: Any, tag: str, started: list[str], scopes: dict[str, anyio.CancelScope]) -> None:
    """``c__sleep`` for 600 s, noted in ``started`` once its server runs it, cancellable by ``tag``."""

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        started.append(tag)

    with anyio.CancelScope() as scope:
        scopes[tag] = scope
        await client.call_tool("c__sleep", {"seconds": 600, "tag": tag}, progress_callback=progressed)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_cancel_read_while_requests_wait_makes_their_room(tmp_path: Path, mode: str) -> None:
    """64 calls run; a 65th waits for a place; the client cancels one of the 64. The cancel was
    never read (the reader waited on the 65th), so the 65th was never answered. A request that
    waited and was cancelled itself is withdrawn: it never reaches its server."""
    config = write_config(tmp_path, {"c": CLASSIC})
    started: list[str] = []
    scopes: dict[str, anyio.CancelScope] = {}
    async with sdk_client(config, mode) as client, anyio.create_task_group() as tg:
        for n in range(MAX_IN_FLIGHT):
            tg.start_soon(_sleeping, client, str(n), started, scopes)
        await wait_for(lambda: len(started) == MAX_IN_FLIGHT)
        tg.start_soon(_sleeping, client, "late", started, scopes)  # waits for a place
        await wait_for(lambda: "late" in scopes)
        await anyio.sleep(0.2)  # (sent: its line is read and waits behind the 64)
        scopes["late"].cancel()  # withdrawn while it waits
        with anyio.fail_after(30):
            scopes["0"].cancel()  # one of the 64: a place frees for the next request
            answer = await client.call_tool("c__sleeps", {})
        # 63 sleeps left, and the withdrawn one never ran (it would have taken the place).
        assert text(answer) == f"now {MAX_IN_FLIGHT - 1} peak {MAX_IN_FLIGHT}", text(answer)
        assert "late" not in started
        tg.cancel_scope.cancel()


async def test_answers_to_what_calls_asked_are_read_while_requests_wait(tmp_path: Path) -> None:
    """64 calls each ask the client a question over the back-channel (a classic server's
    elicitation, relayed to a 2025-11-25 client); the client sends one more request, then
    answers. The answers were never read (behind the waiting request): all 65 hung. (A
    2026-07-28 client is asked in its call's answer, ``input_required``, not on a channel.)"""
    config = write_config(tmp_path, {"c": CLASSIC})
    asked: list[int] = []
    answer_now = anyio.Event()

    async def elicited(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(1)
        await answer_now.wait()
        return types.ElicitResult(action="accept", content={"name": "ada"})

    results: list[str] = []

    async def elicit(client: Any) -> None:
        results.append(text(await client.call_tool("c__elicit", {})))

    async with sdk_client(config, "legacy", elicitation_callback=elicited) as client:
        with anyio.fail_after(45):
            async with anyio.create_task_group() as tg:
                for _ in range(MAX_IN_FLIGHT):
                    tg.start_soon(elicit, client)
                await wait_for(lambda: len(asked) == MAX_IN_FLIGHT)
                tg.start_soon(elicit, client)  # the 65th: waits for a place
                await anyio.sleep(0.2)  # (sent before the answers)
                answer_now.set()
    assert results == ["accept:{'name': 'ada'}"] * (MAX_IN_FLIGHT + 1)


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_requests_still_waiting_at_the_end_of_input_are_answered_within_drain_timeout(tmp_path: Path, era: str) -> None:
    """The client closes its input with 64 calls running (for 600 s) and more requests waiting
    for a place: the gateway stops within ``drain_timeout``, as with no request waiting, each
    request read answered (the waiting ones too, with an error: they never ran)."""
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

    from tests.helpers import raw_gateway

    config = write_config(tmp_path, {"c": CLASSIC}, gateway={"drain_timeout": 1})
    meta = {PROTOCOL_VERSION_META_KEY: era, CLIENT_CAPABILITIES_META_KEY: {}}
    with (tmp_path / "stderr.log").open("w") as err, raw_gateway(config, err) as gw:
        if era == "2025-11-25":
            gw.handshake()
        waiting = 3
        for n in range(100, 100 + MAX_IN_FLIGHT + waiting):
            params: dict[str, Any] = {"name": "c__sleep", "arguments": {"seconds": 600, "tag": str(n)}}
            gw.request(n, "tools/call", params if era == "2025-11-25" else {**params, "_meta": meta})
        assert gw.proc.stdin is not None
        gw.proc.stdin.close()
        assert gw.proc.wait(timeout=60) == 0  # (within drain_timeout, 1 s, and the stop's own seconds)
        answered: set[int] = set()
        while True:
            try:
                message = gw.read(timeout=5)
            except AssertionError:
                break
            if "id" in message and "method" not in message:
                answered.add(message["id"])
    assert answered == set(range(100, 100 + MAX_IN_FLIGHT + waiting))
