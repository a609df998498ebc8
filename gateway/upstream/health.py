"""``/healthz`` and ``/readyz`` of ``serve --http``: for load balancers and orchestrators.

Both are answered before authentication and say nothing but their verdict: ``/healthz``
that the process serves HTTP, ``/readyz`` that a catalog is published (a warm start's or
the barrier's) and the state store can be read and written. The readiness verdict is kept
for a second and worked out by one request at a time, so probes, however many and whoever
sends them, cost the store at most one check a second. The store's check is given
``CHECK_TIMEOUT``, not its commands' own timeouts: a store that does not answer by then is
not ready, and the probe is answered before the orchestrator gives up on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from gateway.state.store import StateStore

PATHS = frozenset(("/healthz", "/readyz"))
TTL = 1.0
"""Seconds a readiness verdict is reused."""
CHECK_TIMEOUT = 0.5
"""Seconds the store's check may take. Orchestrators give a probe about a second (Kubernetes'
default ``timeoutSeconds`` is 1); a hung Redis (accepting, never answering) held a probe for
its commands' timeouts, 5 s each, retried once. Its client drops a connection cancelled
mid-command, so the next check starts on a fresh one."""


class Readiness:
    def __init__(self, published: Callable[[], bool], store: StateStore, ttl: float = TTL) -> None:
        self.published = published
        self.store = store
        self.ttl = ttl
        self._verdict = False
        self._at: float | None = None
        self._lock = anyio.Lock()

    async def ready(self) -> bool:
        if self._fresh():
            return self._verdict
        async with self._lock:
            if not self._fresh():  # another probe may have just checked
                self._verdict = self.published() and await self._store_usable()
                self._at = anyio.current_time()
            return self._verdict

    def _fresh(self) -> bool:
        return self._at is not None and anyio.current_time() - self._at < self.ttl

    async def _store_usable(self) -> bool:
        with anyio.move_on_after(CHECK_TIMEOUT):
            try:
                health = await self.store.health()
            except OSError:
                return False
            return health.reachable and health.writable
        return False  # no answer in time


async def answer(path: str, ready: Callable[[], Awaitable[bool]]) -> tuple[int, bytes]:
    """The status and body of a health path."""
    if path == "/healthz":
        return 200, b"ok\n"
    return (200, b"ready\n") if await ready() else (503, b"not ready\n")
