"""A downstream's notifications, bounded: one queue and one consumer per connection.

The SDK runs a task per incoming notification; when each awaits a slow client, a log
flood grows without bound (300k notifications took 1.35 GB). Here the SDK's task only
enqueues. Beyond ``LIMIT`` waiting notifications new ones are dropped and counted, the
count logged once per burst. ``list_changed`` notifications are never dropped: they are
idempotent, so one pending per kind stands for any number.

Queueing must not reorder a notification after the reply it preceded: a log message a
server sent during a call belongs to that call (on the 2026-07-28 protocol it can only
travel on the call's own response stream). :meth:`Inbox.settle` lets a request wait, after
its reply, until what arrived before the reply has been delivered.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

LIMIT = 256
"""Notifications (other than list_changed) waiting per downstream before new ones are dropped."""
REPORT_EVERY = 10.0
"""Seconds between drop reports while a flood goes on."""
SETTLE_SECONDS = 5.0
"""At most this long a reply waits for the notifications that arrived before it."""

Deliver = Callable[[str, dict[str, Any], object | None], Awaitable[None]]
"""(method, params, the call whose stream it came on when the wire says: ``related.py``)."""

log = logging.getLogger("prefixgate.downstream")


class Inbox:
    def __init__(self, server: str, deliver: Deliver, limit: int = LIMIT) -> None:
        self.server = server
        self.limit = limit
        self.dropped = 0
        self._deliver = deliver
        self._queue: deque[tuple[str, dict[str, Any], object | None]] = deque()
        self._others = 0
        self._changes: set[str] = set()
        self._wake = anyio.Event()
        self._reported = 0.0
        self._enqueued = 0
        self._delivered = 0
        self._caught_up: anyio.Event | None = None
        self._consumer: int | None = None

    def put(self, method: str, params: dict[str, Any], caller: object | None = None) -> None:
        """Enqueue without waiting (called from the SDK's per-notification task)."""
        if method.endswith("/list_changed"):
            if method in self._changes:
                return  # one pending refresh covers this one too
            self._changes.add(method)
        elif self._others >= self.limit:
            self.dropped += 1
            return
        else:
            self._others += 1
        self._queue.append((method, params, caller))
        self._enqueued += 1
        self._wake.set()

    async def run(self) -> None:
        """Deliver in arrival order, one at a time, until cancelled."""
        self._consumer = anyio.get_current_task().id
        while True:
            if not self._queue:
                self._report()
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            method, params, caller = self._queue.popleft()
            if method.endswith("/list_changed"):
                self._changes.discard(method)  # a change arriving from now on needs another refresh
            else:
                self._others -= 1
            try:
                await self._deliver(method, params, caller)
            except Exception:  # one bad notification costs only itself
                log.exception("[%s] handling %s failed", self.server, method)
            self._delivered += 1
            if self._caught_up is not None:
                self._caught_up.set()  # every waiter shares it; the next wait makes a new one
                self._caught_up = None
            if self.dropped and anyio.current_time() - self._reported >= REPORT_EVERY:
                self._report()

    async def settle(self) -> None:
        """Wait until every notification enqueued so far has been delivered (at most
        ``SETTLE_SECONDS``; at once when nothing is waiting, and never from the consumer)."""
        target = self._enqueued
        if self._delivered >= target or anyio.get_current_task().id == self._consumer:
            return
        with anyio.move_on_after(SETTLE_SECONDS):
            while self._delivered < target:
                if self._caught_up is None:
                    self._caught_up = anyio.Event()
                await self._caught_up.wait()

    def _report(self) -> None:
        if self.dropped:
            log.warning(
                "[%s] dropped %d notifications: more than %d were waiting for the client",
                self.server,
                self.dropped,
                self.limit,
            )
            self.dropped = 0
            self._reported = anyio.current_time()
