"""An HTTP request's client, or its token, going away while the gateway works on the request
in uvicorn's task.

The 2026-07-28 lane's call, the session lane's request and a request waiting its turn among
its principal's places each stop when their client closes the connection, as the SDK's
transport stops a request whose stream closed. Their bodies are read whole by then, so the
next message ``receive`` gives is the disconnect.

Each stops too when its token is taken out of the token file, or may no longer use the
profile (``Running``): the call is cancelled (its server told, as when its client goes), and
its client is answered with the refusal its next request would get.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.types import Message, Receive, Send

from gateway.jsontext import parsed_aside


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


REVOKED = "prefixgate: this token may no longer use this endpoint"
"""What a request stopped for its token is answered (as a listen stream opening then is refused)."""
_INVALID_REQUEST = -32600
_EVENTS = b"text/event-stream"


class Answer:
    """A request's ``send``, which remembers how far its response went (``Running.refuse``
    finishes it)."""

    __slots__ = ("_send", "started", "streaming", "complete")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = self.streaming = self.complete = False

    async def send(self, message: Message) -> None:
        await self._send(message)  # (uvicorn waits, if at all, before it writes: sent once this returns)
        if message["type"] == "http.response.start":
            self.started = True
            headers = message.get("headers", ())
            self.streaming = any(k.lower() == b"content-type" and v.startswith(_EVENTS) for k, v in headers)
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True


class Running:
    """The POSTs each principal has being answered (each its uvicorn task and its endpoint),
    so that a token taken away stops them: a call already running ran to its end and its
    answer was delivered, while every later request of the token was refused."""

    def __init__(self) -> None:
        self._tasks: dict[str, dict[asyncio.Task[Any], Hashable]] = {}
        self._stopped: dict[asyncio.Task[Any], int] = {}
        """Tasks cancelled here -> the status their refusal has (401: token gone; 403: profile)."""

    @contextmanager
    def held(self, principal: str, endpoint: Hashable) -> Iterator[asyncio.Task[Any]]:
        """The current task, counted among ``principal``'s at ``endpoint`` for the block."""
        task = asyncio.current_task()
        assert task is not None
        tasks = self._tasks.setdefault(principal, {})
        tasks[task] = endpoint
        try:
            yield task
        finally:
            del tasks[task]
            if not tasks:
                del self._tasks[principal]
            if self._stopped.pop(task, None) is not None:
                task.uncancel()  # (its cancellation was swallowed: its client went away as it came)

    def stop(self, endpoint: Hashable, principals: set[str], status: Callable[[str], int]) -> int:
        """Cancel the requests ``principals`` have at ``endpoint`` (``status``: the refusal each
        principal's gets); how many."""
        stopped = 0
        for principal in principals:
            for task, where in self._tasks.get(principal, {}).items():
                if where == endpoint and task not in self._stopped:
                    self._stopped[task] = status(principal)
                    task.cancel()
                    stopped += 1
        return stopped

    def caught(self, task: asyncio.Task[Any]) -> int | None:
        """For a ``CancelledError`` ``task`` caught: the status of its refusal when ``stop``
        cancelled it (then taken back, unless it was cancelled from elsewhere too), else None."""
        status = self._stopped.pop(task, None)
        if status is None or task.uncancel():
            return None
        return status


async def refuse(answer: Answer, status: int, body: bytes) -> None:
    """Answer a request stopped (or refused) for its token: a JSON-RPC error for its id, with
    ``status``, or as the last event of the stream it was answered on; a response complete
    already stays as it is."""
    if answer.complete:
        return
    found: Any = None
    try:
        found = await parsed_aside(body, "a stopped request's body, read for its id")
    except (ValueError, RecursionError):
        pass
    request_id = found.get("id") if isinstance(found, dict) and "method" in found else None
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": _INVALID_REQUEST, "message": REVOKED}}
    data = json.dumps(error, separators=(",", ":")).encode()
    if not answer.started:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="prefixgate"'))
        await answer.send({"type": "http.response.start", "status": status, "headers": headers})
        await answer.send({"type": "http.response.body", "body": data})
    elif answer.streaming and request_id is not None:
        await answer.send({"type": "http.response.body", "body": b"event: message\r\ndata: " + data + b"\r\n\r\n"})
    else:
        await answer.send({"type": "http.response.body", "body": b""})
