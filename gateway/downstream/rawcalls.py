"""``tools/call`` to a stdio server as raw lines, its reply taken by our reader.

Through the SDK's ``ClientSession`` a call costs a request model, a memory-stream pair,
a tracing span and two task hops per direction. On stdio the pipes are ours
(gateway/downstream/stdio.py), so a call is written here as one JSON line, with an id in
a space the ``ClientSession`` never uses (``"pg-<n>"``; the SDK counts integers), and the
reader hands the matching reply to the waiting call before any model parsing. Progress
for the call's token goes to its callback the same way. Everything else the server
sends (its own requests, logs, list changes, replies to the SDK's requests) still goes
to the ``ClientSession``, unchanged.

What the SDK's dispatcher does for a call is done the same way here: the request is the
bytes the SDK's model of it encodes to (built as a plain dict, ``encode_plain``), a
timed-out or cancelled call sends ``notifications/cancelled`` (the same reason text), and a
server that goes away fails every waiting call with the SDK's ``Connection closed``. One
thing differs: the SDK times a call from when its write is done, so while a server reads
nothing (its loop blocked in a tool, say) calls queued behind a full pipe wait until it
reads again, however long. Here the clock runs from when the call is sent: a call waits
for room in the pipe before it writes (only when the server is behind), and gives up at
its deadline having written nothing; a written call's bytes wait in the pipe's backlog,
not in the call, and its courtesy cancel goes in behind them without waiting.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from gateway.downstream.calltime import REREAD, Clock, stalled
from gateway.jsontext import may_be_long

log = logging.getLogger("prefixgate.stdio")

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class Encode(Protocol):
    """A message as a plain dict to its line (gateway/lines.py ``encode_plain``); ``in_pieces``:
    the same bytes, giving the interpreter lock up as it goes (for a worker thread)."""

    def __call__(self, message: dict[str, Any], in_pieces: bool = False) -> bytes: ...


ID_PREFIX = "pg-"
"""Ids of raw calls: strings, which the SDK's ``ClientSession`` (integer ids) never sends."""
_CATCH_UP_TIMEOUT = 5.0
"""How long a reply waits for the ``ClientSession`` to take what came before it."""
_PIPE_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)
_REPLY_KEYS = frozenset(("jsonrpc", "id", "result"))
_CLOSED = types.ErrorData(code=CONNECTION_CLOSED, message="Connection closed")
_TIMER_SLACK = 0.001
"""A loop timer may fire a hair before its time: a deadline this close counts as reached."""
_TIMED_OUT = types.ErrorData(code=REQUEST_TIMEOUT, message="timed out")
"""The outcome the call's timer sets (compared by identity): the call then cancels, as the SDK's does."""

UNSENDABLE_REQUEST = -32097
"""JSON-RPC error code (implementation-defined range) of a request the gateway could not write
(its arguments do not encode: nested past the serializer's depth, say): the request's own
fault, never the server's."""


def request_message(
    request_id: str, method: str, params: Mapping[str, Any] | None, *, progress: bool
) -> dict[str, Any]:
    """A raw call's request as the SDK's dispatcher builds it: ``progress``, the id doubles as
    its progress token; an empty ``_meta`` and empty params are left out."""
    out = dict(params) if params is not None else {}
    meta = dict(out.get("_meta") or {})
    if progress:
        meta["progressToken"] = request_id
    if meta:
        out["_meta"] = meta
    else:
        out.pop("_meta", None)
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if out:
        message["params"] = out
    return message


class Pipe(Protocol):
    """What raw calls write to: the child's stdin (``gateway.downstream.stdio.ChildStdin``)."""

    def backlog(self) -> int:
        """Bytes written that the child has not taken yet."""
        ...

    async def room(self) -> None:
        """Returns once the pipe takes more (at once unless the child is behind)."""
        ...

    def write(self, item: bytes) -> None:
        """Writes ``item`` whole (to the backlog, if need be) without waiting."""
        ...


class _Waiting:
    """One raw call's wait: a loop future the reader resolves in its callback (no task hop)."""

    __slots__ = ("clock", "forwarded", "future", "on_progress", "upto")

    def __init__(
        self,
        future: asyncio.Future[dict[str, Any] | types.ErrorData],
        on_progress: ProgressFn | None,
        forwarded: int,
        clock: Clock,
    ) -> None:
        self.future = future
        self.on_progress = on_progress
        self.forwarded = forwarded
        """Messages handed to the ``ClientSession`` when the call was written ..."""
        self.upto = forwarded
        """... and when its reply arrived: the session takes those before the reply moves on."""
        self.clock = clock
        """When it times out (``calltime.py``), counted from when it was sent."""


class RawCalls:
    """The raw calls waiting on one child: written by ``request``, answered by the reader."""

    takes_headers = False
    """A line on a pipe carries no HTTP headers."""

    def __init__(
        self,
        stdin: Pipe,
        to_session: MemoryObjectSendStream[Any],
        encode: Encode,
        spawn: Callable[..., Any],
        name: str,
    ) -> None:
        self._stdin = stdin
        self._to_session = to_session
        self._encode = encode
        self._spawn = spawn
        self._name = name
        self._next = 0
        self._closed = False
        self.pending: dict[str, _Waiting] = {}
        self.forwarded = 0
        """Messages handed to the ``ClientSession`` so far."""
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = math.inf

    # --- the caller's side --------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout: float | None,
        on_progress: ProgressFn | None,
        headers: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> dict[str, Any]:
        """The server's raw result, or ``MCPError`` as the SDK's ``send_raw_request`` raises it
        (``headers``: none go on a pipe; ``clock``: one progress restarts (``calltime.py``),
        else ``timeout``'s)."""
        if self._closed:
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        self._next += 1
        request_id = f"{ID_PREFIX}{self._next}"
        clock = clock or Clock(timeout, None)
        message = request_message(request_id, method, params, progress=on_progress is not None)
        try:
            if may_be_long(params):  # (a client's long call: encoded beside the event loop)
                log.debug("a long %s to %s encoded beside the event loop", method, self._name)
                data = await anyio.to_thread.run_sync(self._encode, message, True)
            else:
                data = self._encode(message)
        except ValueError as exc:
            log.warning("cannot send a message to %s: %s", self._name, exc)
            raise MCPError(code=UNSENDABLE_REQUEST, message=f"request not sent: {exc}") from None
        del message
        loop = asyncio.get_running_loop()
        waiting = _Waiting(loop.create_future(), on_progress, self.forwarded, clock)
        self.pending[request_id] = waiting
        written = False
        try:
            clock.start(loop.time())  # from now, however long the server takes to read it (above)
            if clock.deadline < math.inf:
                self._arm(loop, clock.deadline)
            clock.moved = self._moved
            try:
                if not self._stdin.backlog() or await self._room(waiting):
                    self._stdin.write(data)
                    written = True
            except _PIPE_ERRORS:
                raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
            del data
            outcome = await waiting.future
        except anyio.get_cancelled_exc_class():
            if written:
                self._cancel(request_id, "caller cancelled")
            raise
        finally:
            self.pending.pop(request_id, None)
        if outcome is _TIMED_OUT:
            if written:
                self._cancel(request_id, clock.reason())
            raise clock.expired(method)
        if isinstance(outcome, types.ErrorData):
            raise MCPError(code=outcome.code, message=outcome.message, data=outcome.data)
        if waiting.upto != waiting.forwarded:
            await self._session_caught_up()
        return outcome

    async def _room(self, waiting: _Waiting) -> bool:
        """Wait for room in the pipe unless the call ends first (its deadline, or its server
        gone): whether there is room, with the call still waiting."""
        room = asyncio.ensure_future(self._stdin.room())
        try:
            await asyncio.wait((room, waiting.future), return_when=asyncio.FIRST_COMPLETED)
        finally:
            room.cancel()
        if waiting.future.done():
            if room.done() and not room.cancelled():
                room.exception()  # (retrieved: the call's outcome says what happened)
            return False
        room.result()  # raises when the pipe closed meanwhile
        return True

    def _moved(self, clock: Clock) -> None:
        """A call's deadline moved: an earlier one re-arms the timer (a later one: ``_expire`` looks again)."""
        self._arm(asyncio.get_running_loop(), clock.deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """One timer for every waiting call, set for the earliest deadline: a timer per call
        (made, then cancelled, almost always) cost more than the rest of the bookkeeping."""
        if deadline < self._armed_for:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._expire, loop)
            self._armed_for = deadline

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Time out the calls past their deadline; set the timer for the next one, if any."""
        armed_for = self._armed_for
        self._timer, self._armed_for = None, math.inf
        if stalled(armed_for, loop.time()):  # what the server sent meanwhile is read first (calltime.py)
            self._arm(loop, loop.time() + REREAD)
            return
        now, earliest = loop.time() + _TIMER_SLACK, math.inf
        for waiting in list(self.pending.values()):
            deadline = waiting.clock.deadline  # (progress may have moved it on since the timer was set)
            if deadline <= now:
                self._resolve(waiting, _TIMED_OUT)
            elif deadline < earliest and not waiting.future.done():
                earliest = deadline
        if earliest < math.inf:
            self._arm(loop, earliest)

    def _cancel(self, request_id: str, reason: str) -> None:
        """The courtesy ``notifications/cancelled`` the SDK's dispatcher sends for an abandoned
        request, written behind it without waiting (the SDK waits up to 5 s for room)."""
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason},
        }
        try:
            self._stdin.write(self._encode(note))
        except (*_PIPE_ERRORS, ValueError):
            log.debug("courtesy cancel for %s not sent: the server's stdin is closed", request_id)

    async def _session_caught_up(self) -> None:
        """Let the ``ClientSession`` take what the server sent before this reply (its logs
        for this call, say) before the reply moves on, as it would through the SDK: the
        session's notification tasks then run first (gateway/downstream/inbox.py settles them)."""
        with anyio.move_on_after(_CATCH_UP_TIMEOUT):
            while self._to_session.statistics().current_buffer_used:
                await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()

    # --- the reader's side --------------------------------------------------------------

    def take(self, data: Any, deliver: bool = True) -> bool:
        """Whether ``data`` (a parsed line) is a clean reply or progress for a raw call; delivered
        now unless ``deliver`` is false (the reader then delivers it in order, later)."""
        if type(data) is not dict:
            return False
        request_id = data.get("id")
        if type(request_id) is str and "method" not in data:
            waiting = self.pending.get(request_id)
            if waiting is None or data.keys() != _REPLY_KEYS or data["jsonrpc"] != "2.0":
                return False
            result = data["result"]
            if type(result) is not dict:
                return False  # the SDK's model refuses it: validated (and failed) like any reply
            if deliver:
                self._resolve(waiting, result)
            return True
        if data.get("method") == "notifications/progress" and "id" not in data:
            params = data.get("params")
            if type(params) is not dict:
                return False
            token = params.get("progressToken")
            if type(token) is not str or (waiting := self.pending.get(token)) is None:
                return False
            if deliver:
                self._progress(waiting, params)
            return True
        return False

    def take_message(self, message: SessionMessage | Exception, deliver: bool = True) -> bool:
        """Whether ``message`` (validated, or an error our reader made for an id) answers a raw
        call; delivered now unless ``deliver`` is false."""
        if not isinstance(message, SessionMessage):
            return False
        msg = message.message
        if isinstance(msg, types.JSONRPCResponse | types.JSONRPCError) and isinstance(msg.id, str):
            waiting = self.pending.get(msg.id)
            if waiting is not None:
                if deliver:
                    self._resolve(waiting, msg.result if isinstance(msg, types.JSONRPCResponse) else msg.error)
                return True
        return False

    def close(self) -> None:
        """The server's stdout ended: every waiting call fails as the SDK fails its own."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._armed_for = None, math.inf
        for waiting in self.pending.values():
            self._resolve(waiting, _CLOSED)

    def _resolve(self, waiting: _Waiting, outcome: dict[str, Any] | types.ErrorData) -> None:
        if not waiting.future.done():
            waiting.upto = self.forwarded
            waiting.future.set_result(outcome)

    def _progress(self, waiting: _Waiting, params: dict[str, Any]) -> None:
        """Run in its own task, as the SDK's dispatcher runs progress callbacks; it restarts the
        call's clock (``calltime.py``)."""
        if (args := progress_args(params)) is None:
            return
        waiting.clock.progressed(waiting.future.get_loop().time())
        if (callback := waiting.on_progress) is not None:
            self._spawn(deliver_progress, callback, args)


def progress_args(params: Mapping[str, Any]) -> tuple[float, float | None, str | None] | None:
    """A progress notification's values as the SDK's dispatcher reads them: None (ignored)
    unless ``progress`` is a number."""
    progress, total, message = params.get("progress"), params.get("total"), params.get("message")
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        return None
    return (
        float(progress),
        float(total) if isinstance(total, int | float) else None,
        (message if isinstance(message, str) else None),
    )


async def deliver_progress(callback: ProgressFn, args: tuple[float, float | None, str | None]) -> None:
    """One progress to its callback; a callback that raises is logged, as by the SDK."""
    try:
        await callback(*args)
    except Exception:
        log.exception("progress callback raised")
