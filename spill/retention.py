"""Which artifacts retention removes: one choice for every store (the file store, the Redis store).

Artifacts belong to owners (a principal, or one of its sessions). Past the total size, the
owner holding the most bytes gives up its oldest artifact first, again and again until the
total fits: on a gateway a team shares, whoever spills the most pays for the excess, and
another owner's recent output (an id its model was just handed) stays readable. With one
owner this is plain oldest first.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterable
from typing import Protocol, TypeVar


class Stored(Protocol):
    """What retention reads of an artifact (``spill.store.ArtifactInfo``)."""

    @property
    def session(self) -> str: ...  # its owner
    @property
    def id(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime(self) -> float: ...


Info = TypeVar("Info", bound=Stored)


def doomed(
    artifacts: Iterable[Info],
    *,
    max_age_seconds: float,
    max_total_bytes: int,
    now: float,
    protected: Callable[[Info], bool] = lambda a: False,
    spiller: str | None = None,
    fresh_seconds: float = 0.0,
    handed: Collection[str] = (),
) -> list[Info]:
    """Everything past ``max_age_seconds``, then, while the rest is over ``max_total_bytes``,
    the oldest artifact of the owner that holds the most bytes (ties: the smaller owner key).
    A ``protected`` artifact is never picked, though its bytes count. Oldest first.

    An artifact younger than ``fresh_seconds`` (an id a model was just handed) is picked only
    once nothing older is left: ``spiller``'s (the owner whose spill runs this) first, oldest
    first, then other owners', and never the spiller's newest nor any of its ``handed`` (the ids
    the answer that runs this hands out: a result's text and structuredContent, a search's
    schemas). A principal that spills a burst pays with its own recent output before another's."""
    out: list[Info] = []
    total = 0
    held: dict[str, int] = defaultdict(int)
    evictable: dict[str, deque[Info]] = defaultdict(deque)
    last: deque[Info] = deque()  # the fresh artifacts: the spiller's, then (``others``) other owners'
    others: deque[Info] = deque()
    ordered = sorted(artifacts, key=lambda a: (a.mtime, a.session, a.id))
    newest = next((a for a in reversed(ordered) if a.session == spiller), None)
    for a in ordered:
        fresh = now - a.mtime < fresh_seconds
        spared = protected(a) or (fresh and (a is newest or (a.session == spiller and a.id in handed)))
        if not spared and now - a.mtime > max_age_seconds:
            out.append(a)
            continue
        total += a.size
        held[a.session] += a.size
        if spared:
            continue
        if fresh:
            (last if a.session == spiller else others).append(a)
        else:
            evictable[a.session].append(a)
    heap = [(-held[owner], owner) for owner in evictable]
    heapq.heapify(heap)
    while total > max_total_bytes and heap:
        _, owner = heapq.heappop(heap)
        victim = evictable[owner].popleft()
        out.append(victim)
        total -= victim.size
        held[owner] -= victim.size
        if evictable[owner]:
            heapq.heappush(heap, (-held[owner], owner))
    last.extend(others)
    while total > max_total_bytes and last:
        victim = last.popleft()
        out.append(victim)
        total -= victim.size
    return sorted(out, key=lambda a: (a.mtime, a.session, a.id))
