"""Which resources clients watch, counted, so each owning server is told once.

A client watches a resource with ``resources/subscribe`` (handshake era) or by naming it in a
``subscriptions/listen`` stream's ``resourceSubscriptions`` (2026-07-28). The owning server is
asked to report updates when the first client starts watching a URI and told to stop when the
last one stops: a handshake-era server with ``resources/subscribe`` / ``unsubscribe``, a
2026-07-28 server through the filter of the gateway's listen stream to it. Counting keeps one
client's unsubscribe from silencing a resource another client still watches.

Bounded: each principal watches at most ``MAX_URIS`` distinct URIs at once (more are refused
with an error), so memory is bounded by the principals (the token file's) and one principal
that watches URI after URI (any URI a server with templates accepts) refuses only its own
next watch, never another principal's. Each change of a URI is serialised by that URI's own
lock, so a slow server delays only the clients watching its resources.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST

from gateway.config import env_count
from gateway.downstream.connection import Downstream, offers
from gateway.downstream.errors import DownstreamUnavailable
from gateway.downstream.toolcall import connection_gone

if TYPE_CHECKING:
    from gateway.engine.instances import Instances

log = logging.getLogger("prefixgate")

OwnerOf = Callable[[str, object], Downstream | None]
"""The server a URI is read from for a principal (``Hub.resource_owner``)."""
_Key = tuple[str, str]
"""A URI and the id of the server it is watched at."""
MAX_URIS = env_count("PREFIXGATE_WATCHED_URIS_PER_PRINCIPAL", 4096)
"""Distinct resource URIs one principal may watch at once (the variable exists for tests)."""
STOP_TIMEOUT = 10.0
"""Seconds telling a server to stop reporting a resource may take (it runs shielded, on cleanup)."""


class Watches:
    def __init__(self, owner_of: OwnerOf) -> None:
        """``owner_of(uri, principal)``: the server a URI is read from for that principal
        (``Hub.resource_owner``: a listed owner, else the server that linked it to the principal),
        in the first profile served (every server); a watch names its own profile's."""
        self._owner_of = owner_of
        self._told: dict[_Key, Downstream] = {}
        """(URI, server id) -> the server told to report it (stopped and resumed there, whoever watches)."""
        self._count: dict[_Key, int] = {}
        """(URI, server id) -> how many clients (or listen streams) watch the URI at that server:
        one URI is another server's for another profile (or principal, by its links), and each
        server reports to its own watchers, so one profile's watchers never stand in for another's."""
        self._held: dict[object, dict[str, list[str]]] = {}
        """Principal -> the URIs it watches, each with the server of each of its watches."""
        self._locks: dict[_Key, anyio.Lock] = {}
        self.instances: Instances | None = None
        """The per-principal servers' processes (the hub's): a principal's watch of such a
        server's resource is taken at its own process, which its updates come from."""

    def watched(self) -> dict[str, int]:
        """URI -> how many clients (or listen streams) watch it."""
        counts: dict[str, int] = {}
        for (uri, _), count in self._count.items():
            counts[uri] = counts.get(uri, 0) + count
        return counts

    async def watch(self, uri: str, who: object, owner_of: OwnerOf | None = None) -> None:
        """One more watcher of principal ``who``; the first one has the owning server start reporting.

        ``owner_of``: the watcher's profile's ``Hub.resource_owner``, so a resource is watched
        at the server its ``resources/read`` goes to, one the watcher's profile sees: the
        watches are every profile's, and the first profile's owner may be a server another
        profile does not see (nor its token may use). Raises MCPError (nothing counted) when no
        server offers the resource, the server refuses, or ``who`` watches ``MAX_URIS`` other
        URIs already.
        """
        held = self._held.setdefault(who, {})
        if uri not in held and len(held) >= MAX_URIS:
            raise MCPError(
                code=INVALID_REQUEST, message=f"prefixgate: this principal watches {MAX_URIS} resources already"
            )
        owner = (owner_of or self._owner_of)(uri, who)
        key = (uri, self._site(owner, who))
        held.setdefault(uri, []).append(key[1])  # taken before anything is awaited: the limit holds under concurrency
        try:
            async with self._lock(key):
                count = self._count.get(key, 0)
                if count == 0:
                    await self._start(uri, owner, who)
                self._count[key] = count + 1
        except BaseException:
            self._release(uri, who, key[1])
            raise
        finally:
            self._forget_lock(key)

    def _own(self, owner: Downstream | None) -> bool:
        """Whether ``owner``'s server runs one process per principal, each watched on its own."""
        return owner is not None and self.instances is not None and self.instances.serves(owner)

    def _site(self, owner: Downstream | None, who: object) -> str:
        """Where ``who``'s watch of a resource of ``owner`` is taken: the server (one watch for
        every watcher), or its process of ``who`` (``_own``); "" for no server."""
        if owner is None:
            return ""
        return _site_of(owner.id, who if self._own(owner) else None)

    async def _start(self, uri: str, owner: Downstream | None, who: object) -> None:
        """The first watch of ``uri`` at its site: the server (or ``who``'s own process of it,
        started if need be and kept running while it is watched) starts reporting."""
        if not self._own(owner):
            await self._tell(uri, True, owner)
            return
        assert self.instances is not None and owner is not None
        try:
            async with self.instances.held(owner, who) as own:
                await self._tell(uri, True, own)
        except DownstreamUnavailable as exc:  # (it did not start: the watch is refused, as by a server down)
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None
        self.instances.watching(owner.id, who, 1)

    def _release(self, uri: str, who: object, server_id: str | None) -> str | None:
        """One of ``who``'s watches of ``uri`` less: its watch at ``server_id`` if it has one,
        else its latest; the server id of the watch let go (None: it had none)."""
        held = self._held.get(who)
        servers = held.get(uri) if held is not None else None
        if held is None or not servers:
            return None
        if server_id not in servers:
            server_id = servers[-1]
        servers.remove(server_id)
        if not servers:
            del held[uri]
            if not held:
                del self._held[who]
        return server_id

    async def unwatch(self, uri: str, who: object, owner_of: OwnerOf | None = None) -> None:
        """One watcher of ``who`` less (``owner_of``: as ``watch`` was given it); the last one
        has the owning server stop (best effort)."""
        owner = owner_of(uri, who) if owner_of is not None else None
        server_id = self._release(uri, who, self._site(owner, who) if owner is not None else None)
        if server_id is None:
            return
        key = (uri, server_id)
        async with self._lock(key):
            count = self._count.get(key, 0)
            if count > 1:
                self._count[key] = count - 1
            elif count == 1:
                del self._count[key]
                told = self._told.pop(key, None) or (owner_of or self._owner_of)(uri, who)
                if told is not None and told.principal is not None and self.instances is not None:
                    self.instances.watching(told.id, told.principal, -1)
                    if told.stopping:  # (replaced or stopped since: its principal's process now, if any)
                        told = self.instances.of(told.id, told.principal)
                if told is not None:
                    await self._tell_at_most(uri, False, told, logging.INFO, "was not told to stop reporting")
        self._forget_lock(key)

    async def resume(self, downstream: Downstream) -> None:
        """A handshake-era server is (back) up: a new process knows nothing of what the last
        one was asked to report, so each watched resource it owns is subscribed again (best
        effort, a line each that fails). A 2026-07-28 server's listen stream carries its
        filter anew each time it is opened (``listening.py``). A server a reload restarted
        (its table changed) is a new one, of either era: it takes over what the one stopped
        was asked to report (a modern one's filter starts empty); so does each principal's
        process of a per-principal one that a watch kept, started again (in the background:
        the catalog does not wait for it) rather than at its principal's next request."""
        for key in sorted(self._count):
            told = self._told.get(key)
            if self._own(downstream) and _own_replaced_by(told, downstream) and self.instances is not None:
                assert told is not None and self.instances.tasks is not None
                self.instances.tasks.start_soon(self._rewatch, key, downstream, told.principal)
                continue
            again = _replaced_by(told, downstream) or _own_again(told, downstream)
            if not (again or (told is downstream and not downstream.modern)):
                continue
            async with self._lock(key):
                if key in self._count:  # (not unwatched meanwhile)
                    await self._tell_at_most(
                        key[0], True, downstream, logging.WARNING, "back, was not subscribed again"
                    )
            self._forget_lock(key)

    async def _rewatch(self, key: _Key, shared: Downstream, principal: object) -> None:
        """``principal``'s process of ``shared``'s server (a reload restarted it), started again
        for the resource its watch had the stopped one report (best effort, a line if it fails)."""
        assert self.instances is not None
        async with self._lock(key):
            # (not unwatched meanwhile, nor asked again by its principal's own next process)
            if key in self._count and _own_replaced_by(self._told.get(key), shared):
                try:
                    async with self.instances.held(shared, principal) as own:
                        await self._tell(key[0], True, own)
                except (MCPError, DownstreamUnavailable) as exc:
                    log.warning("resource %r: a process of its server was not started again for it: %s", key[0], exc)
        self._forget_lock(key)

    async def _tell_at_most(
        self, uri: str, start: bool, downstream: Downstream | None, level: int, failed: str
    ) -> None:
        """``_tell``, best effort: within ``STOP_TIMEOUT``, a refusal logged (``failed``: what
        did not happen, after "resource URI: its server")."""
        with anyio.move_on_after(STOP_TIMEOUT):
            try:
                await self._tell(uri, start, downstream)
            except (MCPError, DownstreamUnavailable) as exc:
                log.log(level, "resource %r: its server %s: %s", uri, failed, exc)

    def _lock(self, key: _Key) -> anyio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        return lock

    def _forget_lock(self, key: _Key) -> None:
        lock = self._locks.get(key)
        if lock is not None and key not in self._count and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[key]

    async def _tell(self, uri: str, start: bool, downstream: Downstream | None) -> None:
        """Have ``downstream`` (the URI's server) start or stop reporting the URI."""
        if downstream is None:
            raise MCPError(code=INVALID_PARAMS, message=f"prefixgate: no server offers resource {uri!r}")
        if not offers(downstream, "resources", "subscribe"):
            # It never offered the method (a direct client would not have asked): its bare
            # "Method not found" would read as the gateway's, which advertises subscribe. A
            # 2026-07-28 server would take the URI into its listen stream's filter and never
            # report it.
            if start:
                message = f"prefixgate: server {downstream.id!r} does not offer resources/subscribe (resource {uri!r})"
                raise MCPError(code=INVALID_PARAMS, message=message)
            return
        if downstream.modern:
            await downstream.watch_resource(uri, start)
        else:
            method = "resources/subscribe" if start else "resources/unsubscribe"
            try:
                await downstream.request(method, {"uri": uri}, timeout=downstream.config.call_timeout)
            except DownstreamUnavailable as exc:  # (its server is down: the params were not wrong)
                raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED and connection_gone(downstream, exc):
                    # The SDK's bare words named no one: which server went, during what.
                    message = f"prefixgate: connection to server {downstream.id!r} closed during {method} {uri!r}"
                    raise MCPError(code=CONNECTION_CLOSED, message=message) from None
                raise
        if start:  # (only once it reports: a refused watch leaves nothing behind)
            self._told[(uri, _site_of(downstream.id, downstream.principal))] = downstream


def _site_of(server_id: str, principal: object) -> str:
    """The site of the watches taken at a server (``principal`` None) or at ``principal``'s own
    process of it."""
    return server_id if principal is None else f"{server_id}\x00{principal}"


def _own_again(told: Downstream | None, downstream: Downstream) -> bool:
    """Whether ``downstream`` is a new process of the principal whose process ``told`` was (it
    went down and was replaced): asked again whatever its era (a new listen filter is empty)."""
    return (
        told is not None
        and told is not downstream
        and downstream.principal is not None
        and (told.id, told.principal) == (downstream.id, downstream.principal)
    )


def _own_replaced_by(told: Downstream | None, shared: Downstream) -> bool:
    """Whether ``told`` is a principal's process that a reload stopped with its server, which
    ``shared`` (the new shared process) replaces."""
    return told is not None and told.principal is not None and told.stopping and told.id == shared.id


def _replaced_by(told: Downstream | None, downstream: Downstream) -> bool:
    """Whether ``downstream`` is the server a reload started in place of ``told`` (stopped)."""
    return (
        told is not None
        and told.stopping
        and told.id == downstream.id
        and told.principal is None  # (a principal's process's watches wait for its next one: ``_own_again``)
        and downstream.principal is None
    )
