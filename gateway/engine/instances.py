"""A server's instances: one process per principal, for a stdio server that holds per-user state.

``[servers.NAME] instances = "per-principal"`` under ``serve --http``. The server's shared
process starts as any server's and gives the catalog (its lists, their changes, the warm
start); every request of a principal that reaches the server (``tools/call``, and so the tasks
a call runs; ``resources/read``, ``prompts/get``, ``completion/complete``) goes to that
principal's own process instead, started by its first such request, and so does its watch
of a resource (gateway/engine/watches.py), which keeps the process running while it lasts.
A login, a browser session or a working directory the server keeps is then never another
principal's, and what an instance asks (elicitation, sampling, roots) or logs is its
principal's by construction (``Downstream.principal``, which the relay reads; the hub's
``InstanceEvents``), not by the rule for a shared pipe, which refuses what two principals'
calls make ambiguous.

An instance is supervised as any server (a crash is restarted with backoff; one that is down
when its principal's next request comes is replaced at once), and stopped once idle for the
server's ``idle_timeout``, never with a request in flight. At most ``max_instances`` run per
server: a new principal's first request stops the least recently used idle one, or, none
being idle, is refused with one line naming the server and the limit. Nothing waits in an
unbounded queue; principals are the configured tokens, so a principal costs at most its own
process. Over stdio there is one principal: the shared process is its instance (``enabled``
stays off).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.abc

from gateway.downstream.connection import Downstream, Events
from gateway.downstream.errors import DownstreamUnavailable
from gateway.downstream.supervisor import Supervisor
from gateway.logs import PrincipalLog
from gateway.state.session import principal_key

log = logging.getLogger("prefixgate")

PER_PRINCIPAL = "per-principal"
_DOWN = ("failed", "exited", "restarting", "late")
"""An instance's statuses in which a new request replaces it rather than wait out its backoff
(or, ``late``, a start still hung past ``startup_timeout``, which no request would wait for again)."""


@dataclass(eq=False)
class _Instance:
    downstream: Downstream
    used: float
    """When its last request ended (or its first began): what its idle time counts from."""
    in_flight: int = 0
    """Requests holding it now (``Instances.held``): never stopped for idleness or room meanwhile."""


class Instances:
    """The instances of every per-principal server, for the hubs of one gateway."""

    def __init__(self, events: Events) -> None:
        """``events``: what an instance reports goes there (the hub's ``InstanceEvents``)."""
        self.enabled = False
        """Whether requests go to instances: ``serve --http`` turns it on (one principal over stdio)."""
        self.tasks: anyio.abc.TaskGroup | None = None
        """Where instances run (the hub's task group: the gateway's stop cancels them)."""
        self._events = events
        self._servers: dict[str, OrderedDict[object, _Instance]] = {}
        """Per server id: its instances by principal (``principal_key``), least recently used first."""
        self._watched: dict[tuple[str, object], int] = {}
        """(Server id, principal) -> the resources its instance was asked to report
        (``gateway.engine.watches``): kept running for them (never stopped for idleness or
        room), though still replaced when down, the new one asked again (``Watches.resume``)."""

    def serves(self, downstream: Downstream) -> bool:
        """Whether a principal's request to ``downstream`` goes to that principal's instance."""
        return self.enabled and downstream.principal is None and downstream.config.instances == PER_PRINCIPAL

    def owner(self, shared: Downstream | None, state: object) -> object | None:
        """The principal whose instance of ``shared``'s server serves ``state``'s requests, or None."""
        return principal_key(state) if shared is not None and self.serves(shared) else None

    def of(self, server_id: str, principal: object) -> Downstream | None:
        """``principal``'s instance of the server, while it has one."""
        mine = self._servers.get(server_id)
        found = mine.get(principal) if mine is not None else None
        return found.downstream if found is not None else None

    def running(self, server_id: str | None = None) -> list[Downstream]:
        """The instances of one server (``server_id``) or of all: what a stop stops, what metrics count."""
        groups = self._servers.values() if server_id is None else [self._servers.get(server_id, OrderedDict())]
        return [instance.downstream for group in groups for instance in group.values()]

    @asynccontextmanager
    async def held(self, shared: Downstream, principal: object) -> AsyncIterator[Downstream]:
        """``principal``'s instance of ``shared``'s server for one request, started if need be
        (the request waits for it, within the server's ``startup_timeout``). Held, it is never
        stopped for idleness or room. ``DownstreamUnavailable``: it did not start, every
        instance the server may have is held by another principal's request, or the server
        itself was stopped (a reload)."""
        instance = self._instance(shared, principal)
        instance.in_flight += 1
        try:
            try:
                await _started(instance.downstream)
            except DownstreamUnavailable:
                # The request that needed it has its error, and the principal's next request
                # starts another: a process that never started is not kept trying for nobody
                # (its supervisor gives up on a failed start itself: Supervisor.run).
                if instance.downstream.status == "late" and self.of(shared.id, principal) is instance.downstream:
                    self._stop(shared.id, principal, "not ready within its startup_timeout")
                raise
            yield instance.downstream
        finally:
            instance.in_flight -= 1
            instance.used = anyio.current_time()

    def watching(self, server_id: str, principal: object, change: int) -> None:
        """``principal``'s instance of the server was asked to report one resource more (+1) or
        one less (-1)."""
        key = (server_id, principal)
        count = self._watched.get(key, 0) + change
        if count > 0:
            self._watched[key] = count
        else:
            self._watched.pop(key, None)
        mine = self._servers.get(server_id)
        instance = mine.get(principal) if mine is not None else None
        if instance is not None:
            instance.used = anyio.current_time()  # (its idle time counts from its last watch)

    def _busy(self, server_id: str, principal: object, instance: _Instance) -> bool:
        """Held by a request, or watched: not stopped for idleness nor for another's room."""
        return instance.in_flight > 0 or (server_id, principal) in self._watched

    def stop_server(self, server_id: str, reason: str) -> None:
        """Stop every instance of a server (it is removed or changed by a reload)."""
        for principal in list(self._servers.get(server_id, ())):
            self._stop(server_id, principal, reason)
        self._servers.pop(server_id, None)

    def _instance(self, shared: Downstream, principal: object) -> _Instance:
        if shared.stopping:
            # A request begun before a reload removed or changed the server, retried after it (its
            # client answered an ``input_required`` meanwhile): refused as its shared process
            # refuses it, never a process started from a table the config no longer has.
            raise DownstreamUnavailable(shared.unavailable())
        mine = self._servers.setdefault(shared.id, OrderedDict())
        found = mine.get(principal)
        if found is not None and found.in_flight == 0 and _down(found.downstream):
            self._stop(shared.id, principal, "down, replaced for a new request")
            found = None
        if found is None:
            limit = shared.config.max_instances
            if len(mine) >= limit:
                idle = next((p for p, i in mine.items() if not self._busy(shared.id, p, i)), None)
                if idle is None:
                    raise DownstreamUnavailable(
                        f"Server {shared.id!r} runs one process per principal, and all {limit} it may run "
                        "(its max_instances) are serving other principals' requests (or resources they watch) now; "
                        "try again later."
                    )
                self._stop(shared.id, idle, "the least recently used, for another principal (max_instances)")
            found = mine[principal] = self._start(shared, principal)
        mine.move_to_end(principal)
        return found

    def _start(self, shared: Downstream, principal: object) -> _Instance:
        assert self.tasks is not None
        downstream = Downstream(shared.config, self._events, principal=principal)
        downstream.log = downstream.listen_stream.log = PrincipalLog(downstream.log, _name(principal))
        instance = _Instance(downstream, anyio.current_time())
        log.info("[%s] starting the process of principal %s", shared.id, _name(principal))
        self.tasks.start_soon(self._run, shared.id, principal, instance)
        return instance

    def _stop(self, server_id: str, principal: object, why: str) -> None:
        mine = self._servers.get(server_id)
        # An emptied group stays (one per server, until ``stop_server``): ``_instance`` holds it
        # across the stops it makes for a new instance, which must land where ``of`` finds it.
        instance = mine.pop(principal, None) if mine is not None else None
        if instance is not None:
            log.info("[%s] the process of principal %s stopped: %s", server_id, _name(principal), why)
            instance.downstream.stop(why)

    async def _run(self, server_id: str, principal: object, instance: _Instance) -> None:
        """Supervise one instance, and stop it once idle for its server's ``idle_timeout``."""
        try:
            if instance.downstream.stopping:  # (stopped before it ran)
                return
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._expire, server_id, principal, instance)
                await Supervisor(instance.downstream).run(supervise=True)
                tg.cancel_scope.cancel()
        finally:
            instance.downstream.closed.set()
            mine = self._servers.get(server_id)
            if mine is not None and mine.get(principal) is instance:
                self._stop(server_id, principal, "its supervisor ended")

    async def _expire(self, server_id: str, principal: object, instance: _Instance) -> None:
        timeout = instance.downstream.config.idle_timeout
        while True:
            idle = anyio.current_time() - instance.used
            busy = self._busy(server_id, principal, instance)
            if not busy and idle >= timeout:
                self._stop(server_id, principal, f"idle for {timeout:g} s (its idle_timeout)")
                return
            await anyio.sleep(timeout if busy else timeout - idle)


async def _started(d: Downstream) -> None:
    """Until the instance is ready; ``DownstreamUnavailable``, one line, if its start failed,
    passed ``startup_timeout`` (its supervisor's watch ends the wait then) or was cut short (a
    reload, the gateway's stop)."""
    if _ready(d):
        return
    await d.settled.wait()
    if d.stopping and not _ready(d):
        why = d.stop_reason or "stopped"
        raise DownstreamUnavailable(
            f"Server {d.id!r}: the process of this principal was stopped before it was ready ({why})."
        )
    if not _ready(d):
        reason = " ".join(d.error_reason().split())
        raise DownstreamUnavailable(f"Server {d.id!r}: the process of this principal did not start: {reason}.")


def _down(d: Downstream) -> bool:
    """Whether a new request replaces the instance rather than wait out its backoff: it exited,
    failed or is late (its start hung), or its process closed its end (a crash the supervisor
    has yet to take in)."""
    gone = d.link is not None and d.link.gone
    return d.stopping or d.status in _DOWN or (d.status == "ready" and (d.link is None or gone))


def _ready(d: Downstream) -> bool:
    """Read afresh after an await (a status narrowed before it is not narrowed after)."""
    return d.status == "ready"


def _name(principal: object) -> str:
    """A principal as the log names it (its name is a hash of its token, never the token)."""
    return principal if isinstance(principal, str) else "(this client)"
