"""How long a call waits for its server: ``call_timeout`` without word from it, restarted by
each progress notification for the call, and ``max_call_time`` in all.

The spec (lifecycle, "Timeouts") lets a receiver restart its clock on progress, "as this
implies that work is actually happening", and says it should still enforce a maximum. A job
that reports progress then runs as long as it does when its server is used directly (the
SDK's client waits without limit), and one that goes quiet still fails after
``call_timeout``. Each of the three ways a call is sent keeps one ``Clock``
(``rawcalls.py``, ``httpcalls.py``, and ``Link.request`` for the SDK's session).
"""

from __future__ import annotations

import math

from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import REQUEST_TIMEOUT


class Clock:
    """One call's deadline on the loop's clock, started at its write."""

    __slots__ = ("capped", "deadline", "end", "idle")

    def __init__(self, now: float, timeout: float | None, max_time: float | None) -> None:
        self.idle = math.inf if timeout is None else timeout
        """How long the call may go without a reply or progress."""
        self.capped = max_time is not None
        """Whether progress restarts the clock (not for a request that is not a tool call)."""
        self.end = now + (self.idle if max_time is None else max_time)
        """When it times out whatever progress it makes."""
        self.deadline = min(now + self.idle, self.end)

    def progressed(self, now: float) -> None:
        """Progress for the call arrived: it may wait ``idle`` again, up to ``end``."""
        self.deadline = min(now + self.idle, self.end)

    def expired(self, method: str) -> CallTimedOut:
        """The error the call fails with, as the SDK's dispatcher raises its timeout."""
        return CallTimedOut(method, at_limit=self.capped and self.deadline >= self.end)


class CallTimedOut(MCPError):
    """``REQUEST_TIMEOUT``, saying whether the call ran out of ``max_call_time`` (``at_limit``)
    or went ``call_timeout`` without a reply or progress."""

    def __init__(self, method: str, *, at_limit: bool) -> None:
        super().__init__(code=REQUEST_TIMEOUT, message=f"Request {method!r} timed out")
        self.at_limit = at_limit
