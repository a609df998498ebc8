"""The client outbox's own rules (gateway/engine/outbox.py), in process: what it queues,
drops and merges, what a call waits for, and a close at any moment. The end-to-end case (a
client that stops reading, real gateway and sockets) is tests/test_client_not_reading.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from gateway.engine import outbox
from gateway.engine.outbox import Outbox

pytestmark = pytest.mark.anyio


def recorder(sent: list[str], gate: anyio.Event | None = None) -> Callable[[str], Callable[[], Awaitable[None]]]:
    """``send`` functions that note their message once ``gate`` (if any) is open."""

    def make(message: str) -> Callable[[], Awaitable[None]]:
        async def send() -> None:
            if gate is not None:
                await gate.wait()
            sent.append(message)

        return send

    return make


async def test_a_client_that_does_not_read_loses_its_excess_not_its_list_changes() -> None:
    sent: list[str] = []
    gate = anyio.Event()
    message = recorder(sent, gate)
    async with anyio.create_task_group() as tg:
        box = Outbox(tg.start_soon, "alice")
        for i in range(outbox.LIMIT + 10):
            box.put(message(f"log {i}"))
        for _ in range(3):  # one pending list change stands for any number
            box.put(message("tools changed"), "list:tools", essential=True)
        box.put(message("updated a"), "updated:a")
        assert box.dropped == 11  # (the limit was reached: a droppable update is dropped too)
        gate.set()
    assert sent == [f"log {i}" for i in range(outbox.LIMIT)] + ["tools changed"]


async def test_a_call_waits_for_its_own_messages_only() -> None:
    sent: list[str] = []
    stuck, gate = anyio.Event(), anyio.Event()
    message = recorder(sent, gate)
    async with anyio.create_task_group() as tg:
        box = Outbox(tg.start_soon, "bob")
        box.put(message("for call 7"), call=7)
        assert box.holds(7) and not box.holds(8)
        await box.flushed(8)  # nothing queued for it: at once

        async def answer() -> None:
            await box.flushed(7)
            sent.append("answer of call 7")
            stuck.set()

        tg.start_soon(answer)
        await anyio.sleep(0.05)
        assert sent == []  # its log line is not out yet, so neither is its answer
        gate.set()
        await stuck.wait()
    assert sent == ["for call 7", "answer of call 7"]
    assert not box.holds(7)


async def test_a_call_waits_at_most_the_flush_time() -> None:
    never = anyio.Event()
    async with anyio.create_task_group() as tg:
        box = Outbox(tg.start_soon, "carol")
        box.put(recorder([], never)("stuck"), call=1)
        with anyio.fail_after(5):
            await box.flushed(1, timeout=0.1)
        assert not box.holds(1)
        box.close()


@pytest.mark.parametrize("when", ["before its task starts", "while it sends"])
async def test_a_close_at_any_moment_ends_the_task_quietly(when: str) -> None:
    sent: list[Any] = []
    gate = anyio.Event()
    async with anyio.create_task_group() as tg:  # (an error in the outbox's task would surface here)
        box = Outbox(tg.start_soon, "dave")
        box.put(recorder(sent, gate)("first"), call=1)
        box.put(recorder(sent)("second"))
        if when == "while it sends":
            await anyio.sleep(0.05)
        box.close()
        assert not box.holds(1)
        await box.flushed(1)
        gate.set()
    assert sent == []
