"""A server that never stops announcing changes is re-listed at most half the time
(gateway/engine/relist.py): each re-list that follows another waits as long as that one
took. The rebuild after a re-list runs on the event loop, and its cost is the server's to
set (thousands of tools): back to back, a churning server would hold the loop nearly all
the time. Checked on the re-list rounds themselves (a fake server's ``refresh``): the pause
before each round is at least the length of the one before, which no load can shorten."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.engine.relist import Relists

pytestmark = pytest.mark.anyio

CHANGED = "notifications/tools/list_changed"


async def test_a_server_that_keeps_changing_is_relisted_at_most_half_the_time() -> None:
    relists = Relists([])
    rounds: list[tuple[float, float]] = []

    class Churning:
        id = "churn"
        status = "ready"

        async def refresh(self, **kinds: Any) -> None:
            started = anyio.current_time()
            relists.changed(server, CHANGED)  # (changed again while it is re-listed)
            await anyio.sleep(0.05)
            rounds.append((started, anyio.current_time()))

    server: Any = Churning()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            relists.tasks = tg
            relists.changed(server, CHANGED)
            while len(rounds) < 5:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    for (start, end), (next_start, _) in zip(rounds, rounds[1:], strict=False):
        assert next_start - end >= end - start
