"""Each principal's share of something every principal uses: one principal's many requests
wait behind its own, never in front of everyone else's.

Used where one pool serves every principal: the argument-validation workers
(gateway/engine/validation.py) and the HTTP requests being answered (gateway/upstream/http.py).
A principal holds at most ``size`` places at once; its next request waits, in the order they
came, for one of its own to end, while another principal's goes on. A principal's record
exists only while it holds or waits for a place, so the record is as large as what is in
flight, however many principals come and go.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager


class _Places:
    """One principal's places: who holds them, and who waits for one, in order."""

    __slots__ = ("holders", "waiting")

    def __init__(self) -> None:
        self.holders: set[object] = set()
        self.waiting: deque[tuple[asyncio.Future[None], object]] = deque()


class Shares:
    """Places per principal (``owner``), ``size`` each.

    Its holders and a queue of futures per principal, not an ``anyio.CapacityLimiter``: every
    HTTP request takes a place, and a sequential client's limiter was made, asked for its
    statistics and dropped again on each of its requests (taking and giving a place: ~2.2 us
    that way, ~0.4 us this way)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._places: dict[Hashable, _Places] = {}

    def __len__(self) -> int:
        """Principals holding or waiting for a place."""
        return len(self._places)

    def __contains__(self, owner: Hashable) -> bool:
        """Whether ``owner`` holds or waits for a place."""
        return owner in self._places

    def take_nowait(self, owner: Hashable, borrower: object) -> bool:
        """Take a place for ``borrower`` if ``owner`` has one free and nobody of its waits for
        one (no wait, no turn of the loop)."""
        places = self._places.get(owner)
        if places is None:
            places = self._places[owner] = _Places()
        elif len(places.holders) >= self.size or places.waiting:
            return False
        if borrower in places.holders:
            raise RuntimeError("this borrower already holds one of its principal's places")
        places.holders.add(borrower)
        return True

    async def take(self, owner: Hashable, borrower: object) -> None:
        """Wait for a place of ``owner``'s and take it for ``borrower`` (``give`` it back); the
        principal's waiters are served in the order they came."""
        if self.take_nowait(owner, borrower):
            return
        places = self._places[owner]
        entry = (asyncio.get_running_loop().create_future(), borrower)
        places.waiting.append(entry)
        try:
            await entry[0]
        except BaseException:
            if borrower in places.holders:  # handed a place as it was cancelled: handed on
                self.give(owner, borrower)
            else:
                try:
                    places.waiting.remove(entry)
                except ValueError:
                    pass  # (a give took it off the queue, seeing it cancelled)
                self._forget_if_idle(owner, places)
            raise

    def give(self, owner: Hashable, borrower: object) -> None:
        """Give back the place ``borrower`` took: to the principal's first waiter, if any."""
        places = self._places[owner]
        places.holders.remove(borrower)
        while places.waiting:
            future, waiter = places.waiting.popleft()
            if not future.done():  # (a cancelled waiter's future is: passed over)
                places.holders.add(waiter)
                future.set_result(None)
                return
        self._forget_if_idle(owner, places)

    @asynccontextmanager
    async def held(self, owner: Hashable) -> AsyncIterator[None]:
        """One of ``owner``'s places for the ``with`` block."""
        borrower = object()
        await self.take(owner, borrower)
        try:
            yield
        finally:
            self.give(owner, borrower)

    def _forget_if_idle(self, owner: Hashable, places: _Places) -> None:
        if not places.holders and not places.waiting and self._places.get(owner) is places:
            del self._places[owner]
