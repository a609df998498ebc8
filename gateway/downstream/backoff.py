"""The restart policy of a supervised server: exponential backoff with a healthy reset.

Pure (no clock of its own) so the reset after 5 minutes healthy can be tested without
waiting 5 minutes: the caller says how long the last connection was ready.
"""

from __future__ import annotations

from dataclasses import dataclass, field

START = 1.0
LIMIT = 60.0
HEALTHY_RESET = 300.0


@dataclass
class Backoff:
    """1 s doubling to 60 s; back to 1 s once a connection was ready for 5 minutes."""

    start: float = START
    limit: float = LIMIT
    reset_after: float = HEALTHY_RESET
    _next: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._next = self.start

    def delay(self, healthy_for: float | None) -> float:
        """Seconds to wait before the next attempt.

        ``healthy_for``: how long the connection that just ended was ready (None: it never
        became ready). A long healthy run means the last failure is history: start over.
        """
        if healthy_for is not None and healthy_for >= self.reset_after:
            self._next = self.start
        wait = self._next
        self._next = min(wait * 2, self.limit)
        return wait
