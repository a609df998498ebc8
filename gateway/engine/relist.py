"""A server's ``list_changed``, answered by re-listing it: coalesced per server and list.

Each re-list may rebuild a catalog of thousands of tools; hundreds of notifications in a
burst must not mean hundreds of rebuilds. A notification that arrives while a re-list
runs marks one more as pending (it will see every change so far); while one is pending,
a notification adds nothing. One that comes while the server is still being listed is
re-listed once it is ready (that listing may have been answered before the change). The
re-list runs in the hub's own task, so whoever delivers notifications is never held up by
it; one that follows another waits as long as that one took, so a server that never stops
changing cannot keep the catalog rebuilding. A server is re-listed once however many
profiles see it; each of those rebuilds its own catalog from the new lists.
"""

from __future__ import annotations

import logging

import anyio

from gateway.downstream.connection import Downstream
from gateway.engine.publishing import Publisher

log = logging.getLogger("prefixgate")

KINDS = {
    "notifications/tools/list_changed": "tools",
    "notifications/prompts/list_changed": "prompts",
    "notifications/resources/list_changed": "resources",
}
"""The list each ``list_changed`` notification is about."""
MAX_PAUSE = 30.0
"""Seconds at most between two re-lists of one server's list (``Relists._relist``)."""


class Relists:
    def __init__(self, publishers: list[Publisher]) -> None:
        self.tasks: anyio.abc.TaskGroup | None = None
        """Where re-lists run (set when the hub starts; before that, a notification is dropped)."""
        self.publishers = publishers
        """Each profile's publisher (one per hub): those that see a server rebuild after it re-lists."""
        self._pending: dict[tuple[str, str], bool] = {}
        """(server id, kind) -> whether another re-list is pending behind the running one."""
        self._early: set[tuple[str, str]] = set()
        """(server id, kind) announced while the server was being listed: re-listed once it is ready."""

    def changed(self, downstream: Downstream, method: str) -> None:
        """A ``.../list_changed`` notification from ``downstream``: re-list it soon."""
        kind = KINDS.get(method)
        if kind is None:
            return
        if downstream.status != "ready":
            # Still being listed: that listing may already be behind this change (a server
            # can change its tools right after answering tools/list). Once it is ready.
            self._early.add((downstream.id, kind))
            return
        key = (downstream.id, kind)
        if key in self._pending:
            self._pending[key] = True
            return
        if self.tasks is None:
            return
        self._pending[key] = False
        self.tasks.start_soon(self._relist, downstream, kind, key)

    def ready(self, downstream: Downstream) -> None:
        """A server is ready: re-list what it said changed while it was being listed."""
        for method, kind in KINDS.items():
            if (downstream.id, kind) in self._early:
                self._early.discard((downstream.id, kind))
                self.changed(downstream, method)

    async def _relist(self, downstream: Downstream, kind: str, key: tuple[str, str]) -> None:
        try:
            while True:
                self._pending[key] = False
                started = anyio.current_time()
                try:
                    await downstream.refresh(**{kind: True}, again=True)
                    for publisher in self.publishers:
                        if not publisher.sees(downstream):
                            continue
                        if kind == "tools":
                            await publisher.rebuild(f"server {downstream.id!r} changed its tools")
                        else:
                            await publisher.relisted(kind)
                except Exception as exc:  # noqa: BLE001 - a server that fails to re-list keeps its old lists
                    log.warning("[%s] re-listing %s after list_changed failed: %s", downstream.id, kind, exc)
                if not self._pending[key]:
                    return
                # Changed again meanwhile: first as long again as this round took. A server that
                # announces change after change then has the event loop (the rebuild runs on
                # it) half the time at most, however large its lists.
                await anyio.sleep(min(anyio.current_time() - started, MAX_PAUSE))
        finally:
            del self._pending[key]
