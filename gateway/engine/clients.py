"""The connected clients: who they are, their states, and what the gateway tells them.

Every notification goes to the handshake-era sessions and to the listen streams' bus
together, so clients of both protocol eras hear the same changes. Each client has its own
log level; the servers are asked for the most verbose level any client wants. What a
shared task tells a client goes through that client's outbox (``deliver``,
gateway/engine/outbox.py): a client that does not read holds up no one else.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio
import mcp_types as types
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types import LoggingLevel

from gateway.config import Config
from gateway.downstream.connection import Downstream
from gateway.downstream.modern import relayed_meta
from gateway.engine.outbox import Outbox, Send
from gateway.engine.router import Router
from gateway.engine.watches import OwnerOf, Watches
from gateway.state.journal import activation_key, session_key
from gateway.state.session import ClientState, principal_key
from gateway.state.store import StateStore

log = logging.getLogger("prefixgate")

_ARRIVALS = itertools.count()
"""Connection order across every profile's clients (``Clients.everyone``)."""

LOG_LEVELS: tuple[str, ...] = get_args(LoggingLevel)
"""Log levels, least severe first."""


def admits(threshold: str | None, level: str) -> bool:
    """Whether a client at ``threshold`` (None: never set, sees what its calls cause) wants ``level``."""
    if threshold not in LOG_LEVELS:
        return True
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


@dataclass(eq=False)
class ClientConnection:
    """One connected client: its state (activation, artifacts) and its notification channel."""

    state: ClientState
    server_session: ServerSession | None = None
    subscriptions: set[str] = field(default_factory=set)
    calls: dict[Any, str] = field(default_factory=dict)
    """In-flight tools/call request id -> downstream server id (to route its requests back)."""
    call_order: dict[Any, int] = field(default_factory=dict)
    """In-flight handshake-era tools/call request id -> when it began (``RoundTrips.order``)."""
    call_sessions: dict[Any, ServerSession] = field(default_factory=dict)
    """In-flight tools/call request id -> that request's session (its stream, its log opt-in)."""
    asked: dict[Any, dict[anyio.CancelScope, anyio.Event]] = field(default_factory=dict)
    """In-flight handshake-era call's request id -> its server's requests put to the client on that
    call's stream, not yet answered (``Relay.withdraw``)."""
    log_level: str | None = None
    """The level this client set with ``logging/setLevel`` (None: never set)."""
    servers: AbstractSet[str] = frozenset()
    """The servers its profile sees: only their requests and log messages may reach it."""
    arrival: int = field(default_factory=lambda: next(_ARRIVALS))
    """When it connected, among the clients of every profile served."""
    outbox: Outbox | None = None
    """What shared tasks send it, sent in order by a task of its own (``Clients.deliver``)."""


class Clients:
    """The client registry (connections in the order they came, principals' states) and its broadcasts."""

    def __init__(
        self, config: Config, store: StateStore, router: Router, downstreams: Sequence[Downstream], watches: Watches
    ) -> None:
        self.connected: list[ClientConnection] = []
        self.bus = InMemorySubscriptionBus()
        """The listen streams' notifications (2026-07-28 clients have no session to notify)."""
        self.tasks: anyio.abc.TaskGroup | None = None
        """Where a leaving client's watches are dropped (set when the hub starts)."""
        self.log_level: str | None = None
        """The level the servers are asked for: the most verbose any client set."""
        self._config = config
        self._store = store
        self._router = router
        self._downstreams = downstreams
        self._watches = watches
        self.owner_of: OwnerOf | None = None
        """Where this profile reads a URI (``Hub.resource_owner``): a leaving client's watches are
        let go where they were taken (``Watches.unwatch``)."""
        self._principals: dict[str, ClientState] = {}
        self._server_ids = {d.id for d in downstreams}
        """The servers this profile sees (updated in place by a reload: connections hold it)."""
        self._every_server = downstreams
        """The servers of every profile served (the first profile's: all of them)."""
        self.instances: Callable[[], Sequence[Downstream]] = tuple
        """The per-principal servers' instances running now (the hub's ``Instances.running``),
        told the level as the servers are."""
        self.peers: list[Clients] = [self]
        """The clients of every profile served over the same servers (shared by their registries)."""

    def configure(self, config: Config) -> None:
        """A reloaded config (this profile's view); its servers are the hub's list, already updated."""
        self._config = config
        self._server_ids.clear()
        self._server_ids.update(d.id for d in self._downstreams)

    def join(self, first: Clients) -> None:
        """Serve beside ``first``'s profile: one log level for the servers, and server requests
        attributed among the clients of every profile (``everyone``)."""
        self.peers = first.peers
        self.peers.append(self)
        self._every_server = first._every_server
        self.instances = first.instances

    def everyone(self) -> list[ClientConnection]:
        """The clients of every profile served, in the order they connected."""
        if len(self.peers) == 1:
            return self.connected
        return sorted((c for peer in self.peers for c in peer.connected), key=lambda c: c.arrival)

    def connect(self, state: ClientState, session: ServerSession | None = None) -> ClientConnection:
        """A client is connected from here on, with its ``session`` (its channel) from the start
        (a server's request may find it at once); its state is bound next (``bind``)."""
        client = ClientConnection(state, server_session=session, servers=self._server_ids)
        self.connected.append(client)
        return client

    async def bind(self, client: ClientConnection) -> None:
        """A newly connected client's state binds to the epoch served (when there is one)."""
        if self._router.epoch is not None:
            await client.state.enter(self._router.epoch.identity)

    def disconnect(self, client: ClientConnection) -> None:
        if client in self.connected:
            self.connected.remove(client)
        if client.outbox is not None:
            client.outbox.close()
        # Its session holds the connection whose state holds it: without this link every
        # 2026-07-28 request (a connection of its own) left a cycle for the collector.
        client.server_session = None
        if client.subscriptions and self.tasks is not None:
            for uri in sorted(client.subscriptions):  # a client that leaves stops watching
                self.tasks.start_soon(self._watches.unwatch, uri, principal_key(client.state), self.owner_of)
            client.subscriptions.clear()

    def principal_state(self, principal: str) -> ClientState:
        """The one state (activation, artifacts) of an HTTP principal, shared by all its connections and requests.

        The 2026-07-28 protocol has no sessions (every request is a connection of its
        own), so state keyed by connection would be lost between a ``tool_search`` and the
        call it enables. Activation and artifacts are kept in the state store under the
        principal's key, so both survive a restart (and reach every replica sharing a
        Redis store). Principals are
        the configured tokens (or the one local principal): this map cannot grow with
        what clients send.
        """
        state = self._principals.get(principal)
        if state is None:
            key = session_key(f"principal:{principal}")
            artifacts = self._store.artifacts(key) if self._config.spill.enabled else None
            owner = activation_key(key, self._config.profile)
            state = self._principals[principal] = ClientState(self._store, owner, artifacts, principal=principal)
        return state

    def forget_principals(self, kept: AbstractSet[str]) -> list[str]:
        """Let go of the states of principals not in ``kept`` (their tokens were revoked) that no
        connected client holds; the principals let go. Each state was kept for as long as the
        gateway ran, so a token file rotated while serving grew it with every token it ever
        admitted. A principal whose token comes back restores its activation and artifacts
        from the store, as after a restart."""
        held = {id(client.state) for client in self.connected}
        gone = [p for p, state in self._principals.items() if p not in kept and id(state) not in held]
        for principal in gone:
            del self._principals[principal]
        return gone

    async def enter(self, identity: str) -> None:
        """Every connected client's state binds to a newly published epoch."""
        for client in self.connected:
            await client.state.enter(identity)

    @property
    def notifiable(self) -> bool:
        """Whether any connected client has a session to notify."""
        return any(c.server_session is not None for c in self.connected)

    def broadcast(
        self,
        send: Callable[[ServerSession], Any],
        only: Callable[[ClientConnection], bool] = lambda u: True,
        *,
        every_profile: bool = False,
        key: str | None = None,
        essential: bool = False,
    ) -> None:
        """To this profile's clients that ``only`` admits (``every_profile``: every profile's),
        each through its outbox (``deliver``)."""
        for client in list(self.everyone() if every_profile else self.connected):
            session = client.server_session
            if session is None or not only(client):
                continue
            self.deliver(client, functools.partial(send, session), key, essential=essential)

    def deliver(
        self, client: ClientConnection, send: Send, key: str | None = None, *, essential: bool = False, call: Any = None
    ) -> None:
        """Queue ``send`` (a message to ``client``) on the client's outbox: sent in order by the
        client's own task, never awaited here (``Outbox.put`` for ``key``, ``essential`` and
        ``call``)."""
        outbox = client.outbox
        if outbox is None:
            if self.tasks is None:  # (a client of no hub, never told anything)
                log.debug("notification to a client of no hub dropped")
                return
            outbox = client.outbox = Outbox(self.tasks.start_soon, _name(client))
        outbox.put(send, key, essential=essential, call=call)

    async def tools_changed(self) -> None:
        self.broadcast(lambda s: s.send_tool_list_changed(), key="list:tools", essential=True)
        await self.bus.publish(ToolsListChanged())

    async def list_changed(self, kind: str) -> None:
        """``kind``: "prompts" or "resources" (templates included)."""
        if kind == "prompts":
            self.broadcast(lambda s: s.send_prompt_list_changed(), key="list:prompts", essential=True)
            await self.bus.publish(PromptsListChanged())
        else:
            self.broadcast(lambda s: s.send_resource_list_changed(), key="list:resources", essential=True)
            await self.bus.publish(ResourcesListChanged())

    async def resource_updated(self, uri: str, meta: Mapping[str, Any] | None = None, principal: object = None) -> None:
        """Only to the clients that watch ``uri``, with the ``_meta`` its server sent (``updated``);
        ``principal``: only that principal's (an update of its own process of a server)."""
        kept = updated_meta(meta)
        send = functools.partial(send_updated, uri=uri, meta=kept)

        def watching(u: ClientConnection) -> bool:
            return uri in u.subscriptions and (principal is None or principal_key(u.state) == principal)

        self.broadcast(send, watching, key="updated:" + uri)
        await self.bus.publish(Updated(uri=uri, meta=kept, principal=principal))

    async def set_log_level(self, client: ClientConnection, level: str) -> None:
        """One client's level: each client filters at its own level, and the servers are
        asked for the most verbose level any client wants (never lowered by another)."""
        client.log_level = level
        wanted = [u.log_level for u in self.everyone() if u.log_level in LOG_LEVELS]
        verbose = min(wanted, key=LOG_LEVELS.index, default=level)
        if verbose == self.log_level:
            return
        for peer in self.peers:
            peer.log_level = verbose
        async with anyio.create_task_group() as tg:  # all at once: a busy server delays only its own
            for d in (*self._every_server, *self.instances()):
                tg.start_soon(self.pass_level, d)

    async def pass_level(self, downstream: Downstream) -> None:
        """Give a server the level asked for (also one that is just up): a 2026-07-28 server
        takes it with each request, a handshake-era one that is ready and logs is asked once."""
        if downstream.modern:
            downstream.log_level = self.log_level
        elif self.log_level is not None and downstream.status == "ready" and "logging" in downstream.capabilities:
            try:
                await downstream.request("logging/setLevel", {"level": self.log_level}, timeout=10)
            except Exception as exc:  # noqa: BLE001 - a server that refuses is still usable, the client's request too
                log.info("[%s] logging/setLevel refused: %s", downstream.id, exc)


def _name(client: ClientConnection) -> str:
    """A client as the log names it: its principal (never a token), else its connection order."""
    principal = principal_key(client.state)
    return principal if isinstance(principal, str) else f"#{client.arrival}"


@dataclass(frozen=True)
class Updated(ResourceUpdated):
    """A resource update with the ``_meta`` its server sent (a 2026-07-28 listen stream's frame
    carries it: ``gateway.sdk.UpdatesListen``), and whose it is."""

    meta: Mapping[str, Any] | None = field(default=None, compare=False)
    principal: object = field(default=None, compare=False)
    """For one principal's listen streams alone (an update of its own process of a
    per-principal server, ``Hub.InstanceEvents``); None: for every stream watching ``uri``."""


def updated_meta(meta: object) -> dict[str, Any] | None:
    """A server's update ``_meta`` as a client is sent it: its protocol keys (a listen stream's
    subscription id) belong to the server's hop; the rest (a trace context, say) travels on.
    It was dropped, the update re-made from its URI alone."""
    if not isinstance(meta, Mapping):
        return None
    return relayed_meta(meta) or None


def send_updated(session: ServerSession, uri: str, meta: Mapping[str, Any] | None) -> Awaitable[None]:
    """``notifications/resources/updated`` to a handshake-era session, with ``meta``."""
    if meta is None:
        return session.send_resource_updated(uri)
    params = types.ResourceUpdatedNotificationParams(uri=uri, _meta=dict(meta))
    return session.send_notification(types.ResourceUpdatedNotification(params=params))
