"""What the gateway's shared tasks send one client, sent by a task of that client's own.

A server's notifications are handled by one task per server (gateway/downstream/inbox.py),
and a catalog change is announced under the rebuild lock: tasks every principal depends
on. When such a task awaited a client's stream, a client that stopped reading (its socket
full) held it for good: every later call to that server, anyone's, waited the inbox's
settle time, and no change was announced again. Here those tasks only enqueue. Each client
has one queue and, while it holds anything, one task sending it in order; a client that
does not read holds up its own task alone. Beyond ``LIMIT`` waiting messages new ones are
dropped and counted, as the inbox drops a server's; an essential one (a ``list_changed``)
is never dropped, and one pending per key stands for any number.

A log message a server sent during a call belongs before that call's answer, on the call's
own stream: the call waits for ``flushed`` before it answers, until what was queued for it
is sent (at most ``FLUSH_SECONDS``, its own client's cost). A call with nothing queued for
it does not wait.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio

log = logging.getLogger("prefixgate")

LIMIT = 256
"""Messages (essential ones aside) waiting for one client before new ones are dropped."""
FLUSH_SECONDS = 5.0
"""At most this long a call's answer waits for the messages queued before it."""

Send = Callable[[], Awaitable[Any]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class Outbox:
    """One client's queue of messages from shared tasks (``put``), sent by its own task."""

    __slots__ = (
        "_spawn",
        "_who",
        "_queue",
        "_keys",
        "_calls",
        "_droppable",
        "_put",
        "_sent",
        "_caught_up",
        "_scope",
        "dropped",
    )

    def __init__(self, spawn: Spawn, who: str) -> None:
        """``spawn``: starts the sending task (a task group's ``start_soon``); ``who``: the
        client, as the log names it."""
        self._spawn = spawn
        self._who = who
        self._queue: deque[tuple[Send, str | None, bool, object]] = deque()
        self._keys: set[str] = set()
        self._calls: dict[object, int] = {}
        """Per call (its request id): the number of its newest message queued, until it is sent."""
        self._droppable = 0
        self._put = 0
        self._sent = 0
        self._caught_up: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self.dropped = 0

    def put(self, send: Send, key: str | None = None, *, essential: bool = False, call: object = None) -> None:
        """Queue ``send`` without waiting. ``key``: while a message with it waits, this one is
        the same and is not queued; ``essential``: never dropped (keyed, so bounded);
        ``call``: the request id of the call it belongs before the answer of (``flushed``)."""
        if key is not None:
            if key in self._keys:
                return
            self._keys.add(key)
        if not essential:
            if self._droppable >= LIMIT:
                if key is not None:
                    self._keys.discard(key)
                if not self.dropped:
                    log.warning("client %s is not reading: its notifications are dropped until it does", self._who)
                self.dropped += 1
                return
            self._droppable += 1
        self._queue.append((send, key, essential, call))
        self._put += 1
        if call is not None:
            self._calls[call] = self._put
        if self._scope is None:
            scope = self._scope = anyio.CancelScope()
            self._spawn(functools.partial(self._run, scope))

    async def _run(self, scope: anyio.CancelScope) -> None:
        """Send what is queued, in order, until the queue is empty (``scope``: cancelled by
        ``close``, which may come before this task has even started)."""
        try:
            with scope:
                while self._queue and self._scope is scope:
                    send, key, essential, call = self._queue.popleft()
                    if key is not None:
                        self._keys.discard(key)
                    if not essential:
                        self._droppable -= 1
                    try:
                        await send()
                    except Exception as exc:  # noqa: BLE001 - a gone client must not stop its queue
                        log.debug("notification to client %s failed: %s", self._who, exc)
                    self._sent += 1
                    if call is not None and self._calls.get(call) == self._sent:
                        del self._calls[call]
                    self._wake()
        finally:
            if self._scope is scope:
                self._scope = None
            if self.dropped:
                log.warning("client %s: %d notifications dropped while it was not reading", self._who, self.dropped)
                self.dropped = 0

    def _wake(self) -> None:
        if self._caught_up is not None:
            self._caught_up.set()  # every waiter shares it; the next wait makes a new one
            self._caught_up = None

    def holds(self, call: object) -> bool:
        """Whether a message queued for ``call`` has not been sent yet."""
        return call in self._calls

    async def flushed(self, call: object, timeout: float = FLUSH_SECONDS) -> None:
        """Until what was queued for ``call`` (and so everything before it) has been sent (at
        most ``timeout``)."""
        target = self._calls.get(call)
        if target is None:
            return
        with anyio.move_on_after(timeout):
            while self._sent < target and self._scope is not None:
                if self._caught_up is None:
                    self._caught_up = anyio.Event()
                await self._caught_up.wait()
        self._calls.pop(call, None)  # (on time or not: the call answers now)

    def close(self) -> None:
        """The client has gone: what waits is dropped and the sending task stops."""
        self._queue.clear()
        self._keys.clear()
        self._calls.clear()
        self._droppable = 0
        self._sent = self._put
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
        self._wake()
