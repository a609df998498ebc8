"""An HTTP request's client going away while the gateway works on the request in uvicorn's task.

The 2026-07-28 lane's call, the session lane's request and a request waiting its turn among
its principal's places each stop when their client closes the connection, as the SDK's
transport stops a request whose stream closed. Their bodies are read whole by then, so the
next message ``receive`` gives is the disconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Receive


async def disconnected(receive: Receive) -> None:
    """Return once the request's client has gone away (``http.disconnect``)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class Departure:
    """Cancels the task that made it when the request's client goes away (once ``watch`` has
    started watching, and while ``still`` says the request is not over)."""

    __slots__ = ("_receive", "_still", "_task", "_watcher", "gone")

    def __init__(self, receive: Receive, still: Callable[[], bool] | None = None) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._receive = receive
        self._still = still
        self._watcher: asyncio.Task[None] | None = None
        self.gone = False
        """Whether the client went away and the task was cancelled for it."""

    def watch(self) -> None:
        """Start watching (a task of its own, until ``stop``)."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        await disconnected(self._receive)
        if self._still is None or self._still():
            self.gone = True
            self._task.cancel()

    def caught(self) -> bool:
        """For a ``CancelledError`` the task caught: whether it was this departure's (then
        taken back: the request is over, uvicorn's task is not)."""
        if not self.gone:
            return False
        self._task.uncancel()
        return True

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
