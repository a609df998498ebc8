"""Resumable SSE streams (SEP-1699) for the streamable HTTP endpoint, within fixed bounds.

With an event store the SDK starts every SSE stream with a priming event (an id and the
``retry`` interval) and lets a client that lost a stream reconnect with ``Last-Event-ID`` to
get what it missed. The SDK hands one store to every session and names streams by the
client's own request ids (``1`` in every session), so the store itself must keep sessions
apart: each event remembers the session whose request produced it (``marked`` below
marks every request; a new session's mark is filled in when its id is issued), and an event
replays only to a request of that same session, only on its own stream. An event whose
session is not known never replays (fail closed).

Untrusted clients cannot grow it without bound: at most ``max_events`` events and
``max_bytes`` of messages, none older than ``max_age`` seconds. Past the age the oldest go;
past the count or the size, the oldest event of the principal that holds the most, so one
principal's flood of events costs its own streams, not another principal's. A stream whose
events were evicted cannot be resumed (the client re-sends its request), which costs only
that stream. Event ids are 128-bit random tokens, so one client cannot guess another's.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId

SESSION_HEADER = b"mcp-session-id"
RETRY_MS = 1000
"""How long a client waits before reconnecting to a lost stream (the priming event's ``retry``)."""


class Owner:
    """The session a request belongs to; for the request that creates a session, filled in
    when the response names it (tasks that request started share this object). And the
    principal that sent it (None: not known), whose events it counts among."""

    __slots__ = ("principal", "session_id")

    def __init__(self, session_id: str | None, principal: str | None = None) -> None:
        self.session_id = session_id
        self.principal = principal


_owner: ContextVar[Owner | None] = ContextVar("prefixgate_sse_owner", default=None)


@contextmanager
def marked(session_header: bytes | None, principal: str | None = None) -> Iterator[Owner]:
    """Mark the request being served (and the tasks it starts) with its session, from its
    ``Mcp-Session-Id`` header, and its ``principal``; a request without a session (``initialize``)
    gets an owner whose id is filled in when the response issues it (gateway/upstream/http.py
    ``Front``)."""
    owner = Owner(session_header.decode("latin-1") if session_header is not None else None, principal)
    token = _owner.set(owner)
    try:
        yield owner
    finally:
        _owner.reset(token)


@dataclass(slots=True)
class _Event:
    owner: Owner | None
    stream: StreamId
    message: Any
    size: int
    born: float


class BoundedEventStore(EventStore):
    """Events by id, oldest first, bounded in count, bytes and age, shared fairly among
    principals; see the module docstring."""

    def __init__(
        self,
        *,
        max_events: int = 4096,
        max_bytes: int = 8 * 1024 * 1024,
        max_age: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._clock = clock
        self._events: OrderedDict[EventId, _Event] = OrderedDict()
        self._bytes = 0
        self._of: dict[str | None, OrderedDict[EventId, None]] = {}
        """Principal -> its events' ids, oldest first."""
        self._bytes_of: dict[str | None, int] = {}

    @property
    def events(self) -> int:
        # Not __len__: the SDK tests the store for truth, and an empty one must count as present.
        return len(self._events)

    @property
    def bytes(self) -> int:
        return self._bytes

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        event_id = secrets.token_urlsafe(16)
        size = 0 if message is None else len(message.model_dump_json(by_alias=True, exclude_none=True))
        if size <= self.max_bytes:  # a bigger one is sent but cannot be replayed
            owner = _owner.get()
            self._events[event_id] = _Event(owner, stream_id, message, size, self._clock())
            self._bytes += size
            principal = owner.principal if owner is not None else None
            self._of.setdefault(principal, OrderedDict())[event_id] = None
            self._bytes_of[principal] = self._bytes_of.get(principal, 0) + size
        self._evict()
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        self._evict()
        last = self._events.get(last_event_id)
        requester = _owner.get()
        if last is None or requester is None or not _same_session(last.owner, requester):
            return None
        after = False
        for event_id, event in list(self._events.items()):
            if event_id == last_event_id:
                after = True
                continue
            if not after or event.stream != last.stream or event.message is None:
                continue
            if _same_session(event.owner, requester):
                await send_callback(EventMessage(event.message, event_id))
        return last.stream

    def _evict(self) -> None:
        oldest = self._clock() - self.max_age
        while self._events:
            event_id, event = next(iter(self._events.items()))
            if event.born >= oldest:
                break
            self._drop(event_id, event)
        while len(self._events) > self.max_events or self._bytes > self.max_bytes:
            by_count = len(self._events) > self.max_events
            heaviest = max(
                self._of,
                key=lambda p: (len(self._of[p]) if by_count else self._bytes_of[p], p is not None, p or ""),
            )
            event_id = next(iter(self._of[heaviest]))
            self._drop(event_id, self._events[event_id])

    def _drop(self, event_id: EventId, event: _Event) -> None:
        del self._events[event_id]
        self._bytes -= event.size
        principal = event.owner.principal if event.owner is not None else None
        mine = self._of[principal]
        del mine[event_id]
        self._bytes_of[principal] -= event.size
        if not mine:
            del self._of[principal], self._bytes_of[principal]


def _same_session(owner: Owner | None, requester: Owner) -> bool:
    return owner is not None and owner.session_id is not None and owner.session_id == requester.session_id
