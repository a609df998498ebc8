"""gateway/engine/shares.py: each principal's places, in process (the HTTP front and the
validation pool use them; tests/test_requests_per_principal.py and
tests/test_hardening_schema.py run them for real)."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from gateway.engine.shares import Shares

pytestmark = pytest.mark.anyio


async def test_a_principal_waits_for_its_own_places_in_order_and_another_does_not() -> None:
    shares = Shares(2)
    held = [object(), object()]
    assert all(shares.take_nowait("alice", b) for b in held)
    assert not shares.take_nowait("alice", object())
    assert shares.take_nowait("bob", object())  # Alice's being full costs Bob nothing
    order: list[int] = []

    async def wait(n: int) -> None:
        borrower = object()
        await shares.take("alice", borrower)
        order.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(2):
            tg.start_soon(wait, n)
            await anyio.wait_all_tasks_blocked()
        assert order == []
        shares.give("alice", held[0])
        shares.give("alice", held[1])
    assert order == [0, 1]


async def test_a_principal_with_nothing_held_or_waiting_is_forgotten() -> None:
    shares = Shares(1)
    for n in range(100):
        async with shares.held(f"principal-{n}"):
            assert len(shares) == 1
    assert len(shares) == 0
    borrower = object()
    assert shares.take_nowait("alice", borrower)
    with anyio.move_on_after(0.01):
        await shares.take("alice", object())  # cancelled while waiting
    assert len(shares) == 1
    shares.give("alice", borrower)
    assert len(shares) == 0


async def test_a_waiter_cancelled_as_it_is_handed_a_place_hands_it_on() -> None:
    """A waiter given a place in the same turn as its cancellation gives it to the next one:
    no place is lost, and the principal is forgotten once all are back."""
    shares = Shares(1)
    first = object()
    assert shares.take_nowait("alice", first)
    got: list[str] = []

    async def wait(name: str) -> None:
        borrower = object()
        await shares.take("alice", borrower)
        got.append(name)
        shares.give("alice", borrower)

    doomed = asyncio.ensure_future(wait("cancelled"))
    await anyio.wait_all_tasks_blocked()
    after = asyncio.ensure_future(wait("next"))
    await anyio.wait_all_tasks_blocked()
    assert not shares.take_nowait("alice", object())  # the queue is served first
    shares.give("alice", first)  # handed to the first waiter...
    doomed.cancel()  # ...cancelled before it runs: it hands the place on
    await asyncio.wait([doomed, after])
    assert doomed.cancelled()
    assert got == ["next"]
    assert len(shares) == 0
