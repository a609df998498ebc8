"""Each principal's share of something every principal uses: one principal's many requests
wait behind its own, never in front of everyone else's.

Used where one pool serves every principal: the argument-validation workers
(gateway/engine/validation.py) and the HTTP requests being answered (gateway/upstream/http.py).
A principal holds at most ``size`` places at once; its next request waits, in the order they
came, for one of its own to end, while another principal's goes on. A principal's limiter
exists only while it holds or waits for a place, so the record is as large as what is in
flight, however many principals come and go.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import anyio


class Shares:
    """Places per principal (``owner``), ``size`` each."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._limiters: dict[Hashable, anyio.CapacityLimiter] = {}

    def __len__(self) -> int:
        """Principals holding or waiting for a place."""
        return len(self._limiters)

    def _limiter(self, owner: Hashable) -> anyio.CapacityLimiter:
        limiter = self._limiters.get(owner)
        if limiter is None:
            limiter = self._limiters[owner] = anyio.CapacityLimiter(self.size)
        return limiter

    def take_nowait(self, owner: Hashable, borrower: object) -> bool:
        """Take a place for ``borrower`` if ``owner`` has one free (no wait, no turn of the loop)."""
        limiter = self._limiter(owner)
        try:
            limiter.acquire_on_behalf_of_nowait(borrower)
        except anyio.WouldBlock:
            return False
        return True

    async def take(self, owner: Hashable, borrower: object) -> None:
        """Wait for a place of ``owner``'s and take it for ``borrower`` (``give`` it back)."""
        limiter = self._limiter(owner)
        try:
            await limiter.acquire_on_behalf_of(borrower)
        except BaseException:
            self._forget_if_idle(owner, limiter)
            raise

    def give(self, owner: Hashable, borrower: object) -> None:
        """Give back the place ``borrower`` took."""
        limiter = self._limiters[owner]
        limiter.release_on_behalf_of(borrower)
        self._forget_if_idle(owner, limiter)

    @asynccontextmanager
    async def held(self, owner: Hashable) -> AsyncIterator[None]:
        """One of ``owner``'s places for the ``with`` block."""
        borrower = object()
        await self.take(owner, borrower)
        try:
            yield
        finally:
            self.give(owner, borrower)

    def _forget_if_idle(self, owner: Hashable, limiter: anyio.CapacityLimiter) -> None:
        stats = limiter.statistics()
        if not stats.borrowed_tokens and not stats.tasks_waiting and self._limiters.get(owner) is limiter:
            del self._limiters[owner]
