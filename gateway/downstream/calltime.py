"""How long a tool call waits for its server: ``call_timeout`` without word from it, restarted
by each progress notification for the call (progress the client asked for: the gateway asks
no server for it on its own), and ``max_call_time`` in all.

The spec (lifecycle, "Timeouts") lets a receiver restart its clock on progress, "as this
implies that work is actually happening", and says it should still enforce a maximum. A job
that reports progress then runs as long as it does when its server is used directly (the
SDK's client waits without limit), and one that goes quiet still fails after
``call_timeout``. While the server waits for the client (its request for input, asked the
classic way during a call, is with the user) its calls are held: they time out only at
their maximum, and their clock restarts when the answer goes back. Each of the three ways
a call is sent keeps its ``Clock``'s deadline (``rawcalls.py``, ``httpcalls.py``, and
``Link.request`` for the SDK's session).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import REQUEST_TIMEOUT


class Clock:
    """One call's deadline on the loop's clock, from ``start`` (when it is sent) on."""

    __slots__ = ("deadline", "end", "held", "idle", "max_time", "moved")

    def __init__(self, timeout: float | None, max_time: float | None) -> None:
        self.idle = math.inf if timeout is None else timeout
        """How long the call may go without a reply or progress."""
        self.max_time = max_time
        """None: progress restarts nothing (a request that is not a tool call)."""
        self.end = self.deadline = math.inf
        """When it times out whatever happens; when it times out as things stand."""
        self.held = 0
        """Requests of its server waiting for the client meanwhile."""
        self.moved: Callable[[Clock], None] | None = None
        """Called when ``deadline`` changes: the way the call is sent keeps its timer (given the
        clock, so that the callback need not hold it: no reference cycle is left per call)."""

    def start(self, now: float) -> None:
        """The call is being sent: its clocks run from now."""
        self.end = now + (self.idle if self.max_time is None else self.max_time)
        self.deadline = self.end if self.held else min(now + self.idle, self.end)

    def progressed(self, now: float) -> None:
        """Progress for the call arrived (or its server's request was answered): it may wait
        ``idle`` again, up to ``end``."""
        if self.max_time is not None and not self.held:
            self._move(min(now + self.idle, self.end))

    def hold(self) -> None:
        """Its server asked the client something: nothing but ``end`` times the call out now."""
        self.held += 1
        if self.max_time is not None:
            self._move(self.end)

    def release(self, now: float) -> None:
        """That request was answered (or given up): the clock restarts."""
        self.held -= 1
        self.progressed(now)

    def _move(self, deadline: float) -> None:
        self.deadline = deadline
        if self.moved is not None:
            self.moved(self)

    def _at_limit(self) -> bool:
        return self.max_time is not None and self.deadline >= self.end

    def expired(self, method: str) -> CallTimedOut:
        """The error the call fails with, as the SDK's dispatcher raises its timeout."""
        return CallTimedOut(method, at_limit=self._at_limit(), idle=self.idle, max_time=self.max_time)

    def reason(self) -> str:
        """The courtesy cancel's reason, in the SDK's words."""
        return f"timed out after {self.max_time if self._at_limit() else self.idle}s"


STALL = 1.0
"""Seconds a call's timer may fire after its time before the loop counts as having stood still
meanwhile (the gateway stopped by SIGSTOP or ^Z, or suspended alone; its loop blocked that long).
What the server sent meanwhile (its answer, its progress) then waits unread in the pipe or socket:
the loop runs the timers due before it reads, so the call would time out over an answer it has."""
REREAD = 0.25
"""Seconds a timer that fired past ``STALL`` waits again, for the loop to read what came meanwhile,
before it times anything out (an answer read then is the call's; progress moves its deadline on)."""


def stalled(armed_for: float, now: float) -> bool:
    """Whether a timer set for ``armed_for`` that fires at ``now`` found the loop standing still."""
    return now - armed_for > STALL


class Expiry:
    """Cancels ``scope`` at its clock's deadline (a ``Clock.moved``: progress moves it on), on the
    loop's own timer, rereading first after a stall (``STALL``): a cancel scope's deadline does not."""

    __slots__ = ("_armed_for", "_handle", "scope")

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for = math.inf

    def moved(self, clock: Clock) -> None:
        self._arm(clock.deadline)

    def close(self) -> None:
        """The call has ended: its timer goes (and with it the timer's reference to this)."""
        self._arm(math.inf)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_for = when
        if when < math.inf:
            self._handle = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        now = asyncio.get_running_loop().time()
        if stalled(self._armed_for, now):
            self._arm(now + REREAD)
            return
        self.scope.cancel()


class CallTimedOut(MCPError):
    """``REQUEST_TIMEOUT``, saying whether the call ran out of ``max_call_time`` (``at_limit``)
    or went ``call_timeout`` without a reply or progress."""

    def __init__(self, method: str, *, at_limit: bool, idle: float, max_time: float | None) -> None:
        super().__init__(code=REQUEST_TIMEOUT, message=f"Request {method!r} timed out")
        self.at_limit = at_limit
        self.detail = (
            f"ran past its {max_time:g} s limit (max_call_time)"
            if at_limit and max_time is not None
            else f"timed out: no answer or progress in {idle:g} s"
        )
        """Which limit, in the words a tool's result and a prompt's error give after what timed out."""
