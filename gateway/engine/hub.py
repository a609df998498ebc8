"""The running gateway: the downstream servers and the parts that serve their catalog.

One hub per profile served composes them: the connected clients (``clients``), the epoch
they see (``publishing``), coalesced re-lists (``relist``), server-to-client requests and logs
(``relay``), the catalog lock (``lockfile``), and the resources clients watch. What a
downstream server reports (the ``Events`` it is given) goes to the part that handles it.

An HTTP gateway serves every profile from one process (``/mcp/NAME``): the first hub (the
default profile) starts and supervises the servers, and each profile's hub (``profile``)
shares them, with the state store, the schema checks, the resources watched, the round
trips and the relay; it has its own clients, call gate, epochs and warm-start record. A
server's events reach every hub whose profile sees it; its requests go to the one client
that caused them, whichever profile that client uses. A per-principal server's instances
(``instances``: one process per principal) report to ``InstanceEvents``: to their principal alone.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST

from catalog.names import code_unit_key
from gateway.config import Config
from gateway.downstream.connection import Downstream
from gateway.downstream.spawn import Spawned
from gateway.downstream.supervisor import Supervisor
from gateway.downstream.tasks import task_status
from gateway.engine.checks import CheckCache
from gateway.engine.clients import Clients
from gateway.engine.instances import Instances
from gateway.engine.links import Links
from gateway.engine.lockfile import ServedLock, lock_path
from gateway.engine.oauth import oauth_setup
from gateway.engine.publishing import Publisher
from gateway.engine.relay import Relay
from gateway.engine.relist import Relists
from gateway.engine.roundtrip import RoundTrips
from gateway.engine.router import Router
from gateway.engine.surface import Surface, capability_union
from gateway.engine.warm import WarmRecords
from gateway.engine.watches import Watches
from gateway.state.backend import state_store
from gateway.state.counted import CountedStore
from gateway.state.store import StateStore

log = logging.getLogger("prefixgate")


class Hub:
    def __init__(
        self,
        config: Config,
        *,
        persist: bool = True,
        use_lock: bool = True,
        early: Mapping[str, Spawned] | None = None,
        warm_records: bool | None = None,
        shared: Hub | None = None,
    ) -> None:
        """``early``: stdio servers already started (``gateway.upstream.prelude``), by id;
        ``warm_records``: keep the warm-start record (default: when ``persist``); ``shared``:
        the first hub, whose servers this profile's hub serves (``profile`` makes it)."""
        self.config = config
        self._use_lock = use_lock
        path = lock_path(config) if use_lock else None
        find = functools.partial(lock_path, config) if use_lock and path is None and config.path is not None else None
        self.lock = ServedLock(path, find)
        """The catalog lock served under (``load`` reads it), polled while serving."""
        early = early or {}
        if shared is None:
            self.downstreams = [
                Downstream(s, self, oauth=oauth_setup(config), early=early.get(s.id)) for s in config.servers
            ]
        else:
            self.downstreams = [shared.by_id[s.id] for s in config.servers]
        self.by_id: dict[str, Downstream] = {d.id: d for d in self.downstreams}
        self.restarts_before: dict[str, int] = {}
        """Restarts of the servers a reload stopped, by id: the one that replaces a server (or adds
        it again) counts on from there (``gateway.engine.reload``), as a Prometheus counter must."""
        self.router = Router(self.by_id, config.policy, config.spill)
        self.checks: CheckCache = shared.checks if shared else CheckCache(config.gateway.state_dir, persist=persist)
        self.store: StateStore = shared.store if shared else CountedStore(state_store(config))
        """Activation, artifacts and the integrity key (opened by ``serve``), its operations counted."""
        self.records = WarmRecords(config, self.store, enabled=persist if warm_records is None else warm_records)
        """The warm-start record: seeded from by a warm start, written after each verified build."""
        self.watches: Watches = shared.watches if shared else Watches(self.resource_owner)
        """Resources clients watch (resources/subscribe, listen streams), counted per URI."""
        self.links: Links = shared.links if shared else Links()
        """Which server linked each principal to a resource no server lists (every profile's,
        as the watches that ask it are)."""
        self.round_trips: RoundTrips = (
            shared.round_trips
            if shared
            else RoundTrips(timeout=config.gateway.round_trip_timeout, per_owner=config.gateway.max_round_trips)
        )
        """Calls of 2026-07-28 clients that may wait for the client's input (no back-channel)."""
        self.clients = Clients(config, self.store, self.router, self.downstreams, self.watches)
        self.clients.owner_of = self.resource_owner
        self.publisher = Publisher(
            config, self.downstreams, self.checks, self.router, self.clients, self.records, self.lock
        )
        self.tasks: anyio.abc.TaskGroup | None = None
        """Where the gateway's own tasks run (set by ``start``)."""
        self.family: list[Hub] = shared.family if shared else []
        """Every hub serving these servers, the first one first (one per profile served)."""
        self.family.append(self)
        if shared is None:
            self.relists = Relists([self.publisher])
            self.relay = Relay(self.clients, self.round_trips)
            self.instances = Instances(InstanceEvents(self))
            self.watches.instances = self.instances
            self.clients.instances = self.instances.running
        else:
            self.relists, self.relay, self.instances = shared.relists, shared.relay, shared.instances
            # A principal's worker threads are its own across profiles (a profile's count of its
            # own let one principal at five endpoints take every thread of anyio's 40).
            self.router.threads = shared.router.threads
            # So are its schema validation workers: one pool for every profile (each profile's own
            # gave a token calling at three endpoints three shares, and N profiles 4 x N workers).
            self.router.validation = shared.router.validation
            self.relists.publishers.append(self.publisher)
            self.clients.join(shared.clients)
        self.router.instances = self.instances
        """Per-principal servers' processes, one per principal (``serve --http``)."""

    def profile(self, config: Config) -> Hub:
        """The hub of another profile (``config``: its view, ``Config.view``) over these same
        servers, started with this one (``start``)."""
        return Hub(config, shared=self, use_lock=self._use_lock, warm_records=self.records.enabled)

    def configure(self, config: Config, downstreams: list[Downstream]) -> None:
        """Take a reloaded config (its view for this profile) and the servers it sees
        (``gateway.engine.reload``): new requests are gated, bounded and named by it."""
        self.config = config
        self.downstreams[:] = downstreams  # the same list the publisher and the clients hold
        self.by_id.clear()
        self.by_id.update((d.id, d) for d in downstreams)
        self.router.configure(self.by_id, config.policy, config.spill)
        self.publisher.configure(config)
        self.clients.configure(config)
        self.records.config = config
        if self.family[0] is self:
            self.round_trips.timeout = config.gateway.round_trip_timeout
            self.round_trips.per_owner = config.gateway.max_round_trips
            self.store.keep_for(config.spill.max_age_days * 86400)

    def start(self, tg: anyio.abc.TaskGroup, *, supervise: bool) -> None:
        """Start the servers (once, by the first hub) and every profile's hub."""
        self.tasks = tg
        self.relists.tasks = self.round_trips.tasks = self.instances.tasks = tg
        tg.start_soon(self.round_trips.keep)
        for downstream in self.downstreams:
            tg.start_soon(functools.partial(Supervisor(downstream).run, supervise=supervise))
        for hub in self.family:
            hub.clients.tasks = tg
            if (hub.lock.path is not None or hub.lock.find is not None) and supervise:
                tg.start_soon(hub.lock.watch, hub.publisher.discovered, hub.publisher.rebuild)

    def processes(self) -> list[Downstream]:
        """Every server's connection and every instance's (``instances``): what a stop stops."""
        return [*self.downstreams, *self.instances.running()]

    @property
    def surface(self) -> Surface:
        """Resources, templates and prompts of the catalog served now."""
        return self.publisher.surface

    @property
    def capabilities_known(self) -> bool:
        """Whether what the servers offer is known (the barrier passed, or a warm start's record
        says): else ``initialize`` advertises everything the gateway can relay."""
        return self.publisher.discovered.is_set() or self.records.record is not None

    def capabilities(self) -> dict[str, Any]:
        """The union of what the servers offer (``capability_union``)."""
        return capability_union(self.downstreams)

    def resource_owner(self, uri: str, principal: object = None) -> Downstream | None:
        """The owner of a URI; else the server whose result linked ``principal`` to it
        (``links.py``); else the first ready server (code-unit id order) offering resources."""
        owner = self.surface.owner_of_uri(uri)
        if owner is None and principal is not None and (linked := self.links.owner(principal, uri)) in self.by_id:
            owner = linked  # (a server this profile serves)
        if owner is None:
            candidates = sorted(
                (d for d in self.downstreams if d.status == "ready" and "resources" in d.capabilities),
                key=lambda d: code_unit_key(d.id),
            )
            owner = candidates[0].id if candidates else None
        return self.by_id.get(owner) if owner is not None else None

    # --- Events (from downstream servers) ---------------------------------------------

    def seeing(self, downstream: Downstream) -> list[Hub]:
        """The hubs whose profile sees ``downstream`` (every hub, with one profile served)."""
        return [hub for hub in self.family if downstream.id in hub.by_id]

    async def server_ready(self, downstream: Downstream) -> None:
        await self.clients.pass_level(downstream)  # the level every profile's clients asked for
        await self.watches.resume(downstream)  # and the resources they watch
        for hub in self.seeing(downstream):
            await hub.publisher.server_up(downstream)
        self.relists.ready(downstream)

    async def server_down(self, downstream: Downstream) -> None:
        """A server went away: its tools stay in the epoch (calls report it down) until
        it comes back; if it comes back with the same tools, clients see nothing. Its next
        process owes nothing to the principals that called this one (``Relay.called``)."""
        self.relay.forget_callers(downstream.id)

    async def server_notification(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> None:
        if method.endswith("/list_changed"):
            self.relists.changed(downstream, method)
        elif method == "notifications/resources/updated":
            uri = params.get("uri")
            if isinstance(uri, str):
                for hub in self.seeing(downstream):
                    if hub.surface.owner_of_uri(uri) in (None, downstream.id):
                        # (a URI another server lists first is read from that one: this copy is nobody's)
                        await hub.clients.resource_updated(uri, params.get("_meta"))
        elif method == "notifications/message":
            self.relay.log(downstream, params, caller)
        elif method == "notifications/elicitation/complete":
            self.relay.elicitation_complete(downstream, params)
        elif method == "notifications/tasks/status":
            task_status(downstream, params)

    async def server_request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        """Sampling, elicitation or roots, to the client that can answer it (``Relay.request``).
        A per-principal server's shared process gives the catalog only and is no principal's:
        what it asks (its client's roots, as soon as it is initialized) is refused at once,
        never left for the next principal's call to answer."""
        if self.instances.serves(downstream):
            log.info("[%s] %s refused: its shared process gives the catalog only", downstream.id, method)
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: {method}: this process of server {downstream.id!r} gives the catalog only; "
                "each principal's requests go to a process of its own",
            )
        return await self.relay.request(downstream, method, params, caller)


class InstanceEvents:
    """What an instance reports: its requests and log lines take the hub's way, as any
    server's, and reach its principal alone (``Relay`` reads ``Downstream.principal``); its
    lists never reach the catalog, which the shared process gives (an instance's
    ``list_changed`` changes nothing), and its start or end is no catalog event."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub

    async def server_ready(self, downstream: Downstream) -> None:
        await self._hub.clients.pass_level(downstream)
        await self._hub.watches.resume(downstream)  # (a new process of its principal: asked again)

    async def server_down(self, downstream: Downstream) -> None:
        return None  # (``Relay.forget_callers`` is about the shared process's callers)

    async def server_notification(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> None:
        if method.endswith("/list_changed"):
            return
        if method == "notifications/resources/updated":
            uri, principal = params.get("uri"), downstream.principal
            if isinstance(uri, str):  # to its principal's clients watching the URI alone, in every profile
                for peer in self._hub.clients.peers:
                    await peer.resource_updated(uri, params.get("_meta"), principal)
            return
        await self._hub.server_notification(downstream, method, params, caller)

    async def server_request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        return await self._hub.server_request(downstream, method, params, caller)
