"""A 2026-07-28 server's change events: they come only on a ``subscriptions/listen`` stream.

Its events also reach the connection's message handler (the SDK tees them), which re-lists
or relays as for a handshake-era server; the stream here is held open and drained. The
resource URIs clients subscribed to are the stream's filter, so a change to them re-opens
it. A lost stream is re-opened after a pause (the backoff of a restart), and everything is
re-listed then: events may have been missed meanwhile, and there is no replay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST

from gateway.downstream import backoff
from gateway.downstream.errors import short
from gateway.logs import ServerLog

MAX_WATCHED = 1024
"""Resource URIs one modern server is watched for (each is a filter entry of its listen stream)."""


class ListenStream:
    """One server's listen stream, across its connections, and the URIs it watches."""

    def __init__(self, server_id: str, log: ServerLog, relisted: Callable[[], Awaitable[None]]) -> None:
        self.server_id = server_id
        self.log = log
        self._relisted = relisted
        """Called when a lost stream is back: the server's lists are to be read again."""
        self.watched: set[str] = set()
        """Resource URIs clients subscribed to (the stream's filter)."""
        self._listening: frozenset[str] = frozenset()
        self._relisten = anyio.Event()
        self._changed = anyio.Event()

    async def hold(
        self,
        session: ClientSession,
        capabilities: dict[str, Any],
        listening: anyio.Event,
        current: Callable[[], bool],
    ) -> None:
        """Hold the stream open for as long as ``current()`` (the session is the server's);
        ``listening`` is set once it is acknowledged, or could not be (start-up goes on)."""
        from mcp.client.subscriptions import listen

        tools, prompts, resources = (
            bool((capabilities.get(k) or {}).get("listChanged")) for k in ("tools", "prompts", "resources")
        )
        if not (tools or prompts or resources or (capabilities.get("resources") or {}).get("subscribe")):
            listening.set()
            return
        pause = backoff.START
        lost = False
        while current():
            relisten = self._relisten = anyio.Event()
            uris = sorted(self.watched)
            try:
                async with listen(
                    session,
                    tools_list_changed=tools,
                    prompts_list_changed=prompts,
                    resources_list_changed=resources,
                    resource_subscriptions=uris,
                ) as events:
                    pause = backoff.START
                    listening.set()
                    self._listening = frozenset(uris)
                    self._changed.set()
                    self._changed = anyio.Event()
                    if lost:
                        lost = False
                        await self._relisted()
                    with anyio.CancelScope() as scope:

                        async def wake(relisten: anyio.Event = relisten) -> None:
                            await relisten.wait()
                            scope.cancel()

                        async with anyio.create_task_group() as tg:
                            tg.start_soon(wake)
                            async for _ in events:
                                pass
                            tg.cancel_scope.cancel()
                    if relisten.is_set():
                        continue
            except Exception as exc:  # noqa: BLE001 - no stream costs change events, never the server
                self.log.info("[%s] subscriptions/listen ended: %s", self.server_id, short(exc))
            listening.set()
            lost = True
            await anyio.sleep(pause)
            pause = min(pause * 2, backoff.LIMIT)

    async def watch(self, uri: str, watch: bool) -> None:
        """``resources/subscribe`` toward a modern server (2026-07-28 has no such request):
        the URI joins (or leaves) the stream's filter; returns once the re-opened stream is
        acknowledged (at most 10 s)."""
        if watch and uri not in self.watched and len(self.watched) >= MAX_WATCHED:
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: more than {MAX_WATCHED} resources watched on {self.server_id!r}",
            )
        (self.watched.add if watch else self.watched.discard)(uri)
        self._relisten.set()
        with anyio.move_on_after(10):
            while (uri in self._listening) != watch:
                await self._changed.wait()
