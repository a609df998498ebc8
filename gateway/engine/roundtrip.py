"""Input-required round trips (SEP-2322): a handshake-era server asks a modern client.

A 2026-07-28 client has no back-channel, so a downstream's ``elicitation/create``,
``sampling/createMessage`` or ``roots/list`` during its call cannot be relayed as a
request. Instead the downstream call keeps running inside this gateway process (waiting
in the server's request), the client is answered ``input_required`` with the server's
request embedded, and its retry (the same request plus ``inputResponses`` and the
``requestState``) hands the answers to the waiting server and waits for what comes next.

The ``requestState`` names the pending call and carries an HMAC under a per-process
random key over that name, the round, the request (method and target) and the owning
principal's session, so a tampered state or another principal's is refused. Each
principal holds a bounded number of calls waiting for its input (a call that never asks
holds none); one not resumed within the timeout is cancelled downstream (the server sees
``notifications/cancelled``) and forgotten. A client that declared none of the capabilities
these requests need can be asked nothing: its calls run in their request's own task
(``run_here``), booked the same way, every request of their server refused at once.

A 2026-07-28 server asks the modern way, with its own ``input_required`` result. To a
modern client it is passed on with the server's ``requestState`` wrapped (``wrap``): the
same key's HMAC binds it to the principal, the request and the server, and an issue time
limits it to ``timeout``, so the retry goes back to that server with the server's own
state, and nothing is kept here between rounds. Handshake-era clients are asked over
their back-channel instead (gateway/upstream/inputs.py).

Replicas sharing a Redis store share the key (``use_key``) and bind states to the
principal's key, not to this process's objects: a wrapped state then verifies on any
replica. A pending handshake-era call cannot move (its downstream connection lives in
the process that began it), so its retry reaching another replica fails with an error
that says so.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import anyio
import anyio.abc
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST

from gateway.downstream.related import CALLER
from gateway.engine.capabilities import require
from gateway.plaintasks import cancel_all
from gateway.state.session import principal_key

log = logging.getLogger("prefixgate.roundtrip")

MAX_ASKS = 8
"""Server requests one pending call may have open at once (more are refused to the server)."""
_PREFIX = "pg1."
GATHER = 0.1
"""Seconds a round waits for more requests after the latest: a handshake-era server asks for
several inputs at once as concurrent requests, and they belong in one ``input_required``."""
_WRAPPED = "pg2."
MAX_WRAPPED = 256 * 1024
"""Largest wrapped ``requestState`` accepted (the server's own state plus a small envelope)."""


def _tag(owner: object) -> str:
    """What a state is bound to: the owner's stored-state key when it has one (the same on
    every replica), else this object (a session without stored state lives in one process)."""
    key = getattr(owner, "owner", None)
    return f"key:{key}" if isinstance(key, str) else f"object:{id(owner)}"


@dataclass(eq=False)
class _Ask:
    """One server request waiting for the client's answer."""

    method: str
    params: dict[str, Any]
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] | None = None
    error: MCPError | None = None

    def settle(self, answer: dict[str, Any] | None = None, error: MCPError | None = None) -> None:
        self.answer, self.error = answer, error
        self.done.set()


@dataclass(eq=False)
class RoundTrip:
    """One downstream call of a modern client that may need the client's input."""

    id: str
    owner: object
    """The principal's session: only its requests may resume this call."""
    method: str
    target: str
    binding: object
    """The rest of the request (its arguments) the state is bound to: its ``str()``, made
    only when a state is minted or checked (most calls never need one)."""
    server_id: str
    capabilities: Any
    """The client's declared capabilities (from its latest request's envelope)."""
    seq: int = 0
    """When the call began, in the order of ``RoundTrips.order`` (which call a server request belongs to)."""
    round: int = 0
    fresh: dict[str, _Ask] = field(default_factory=dict)
    handed: dict[str, _Ask] = field(default_factory=dict)
    changed: asyncio.Future[None] | None = None
    """Resolved when the call finishes or asks: made by whoever waits for that (``wait_change``)."""
    finished: bool = False
    result: dict[str, Any] | None = None
    error: BaseException | None = None
    task: asyncio.Task[None] | None = None
    """The call's own plain task (``RoundTrips._run``), cancelled natively by ``cancel``:
    an anyio cancel scope around every call costs more than the rest of its bookkeeping."""
    started: bool = False
    cancel_asked: bool = False
    """``cancel`` was called: the call ends as cancelled, before or while it runs."""
    timer: anyio.CancelScope | None = None
    attached: bool = False
    """A request of the client is waiting for this call now (no second one may)."""
    waiting: bool = False
    """The call has asked for the client's input: it holds one of its principal's slots."""
    progress: Any = None
    """Where the call's progress goes: the request attached to it (gateway/upstream/server.py ``_Progress``)."""
    _next_key: int = 0

    def poke(self) -> None:
        waiter = self.changed
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_change(self, timeout: float | None = None) -> bool:
        """Wait until the call finishes or asks (``poke``); False when ``timeout`` s passed first."""
        waiter = self.changed = asyncio.get_running_loop().create_future()
        if timeout is None:
            await waiter
            return True
        with anyio.move_on_after(timeout):
            await waiter
        return waiter.done() and not waiter.cancelled()

    def cancel(self) -> None:
        """End the call as cancelled: its task is cancelled, or never starts the call."""
        if self.cancel_asked:
            return
        self.cancel_asked = True
        if self.started and self.task is not None:
            self.task.cancel()

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The server's request: wait for the client's answer (delivered by a retry)."""
        require(method, self.capabilities, params)
        if self.finished:
            raise MCPError(code=INVALID_REQUEST, message="prefixgate: the call this request belongs to is over")
        if len(self.fresh) + len(self.handed) >= MAX_ASKS:
            raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: more than {MAX_ASKS} open requests in one call")
        self._next_key += 1
        key = f"{self.server_id}-{self._next_key}"
        pending = self.fresh[key] = _Ask(method, params)
        self.poke()
        try:
            await pending.done.wait()
        finally:
            if not pending.done.is_set():
                # The server withdrew its request (cancelled it, as a server that gives up
                # waiting does): it is asked no more, and takes none of the call's places.
                self.fresh.pop(key, None)
                self.handed.pop(key, None)
        if pending.error is not None:
            raise pending.error
        assert pending.answer is not None
        return pending.answer

    def end(self, why: str) -> None:
        """No more answers will come: every waiting server request fails with ``why``."""
        self.finished = True
        for pending in [*self.fresh.values(), *self.handed.values()]:
            pending.settle(error=MCPError(code=INVALID_REQUEST, message=why))
        self.fresh.clear()
        self.handed.clear()
        self.poke()


def _revoked(principal: object, kept: AbstractSet[object]) -> bool:
    """A token's principal (a name) not in ``kept``; a stdio client's state is no token's."""
    return isinstance(principal, str) and principal not in kept


async def _gather(trip: RoundTrip) -> None:
    """Wait until no new request of the server came for ``GATHER`` s (bounded by ``MAX_ASKS``)."""
    while not trip.finished and len(trip.fresh) < MAX_ASKS:
        if not await trip.wait_change(GATHER):
            return


class RoundTrips:
    """The pending round trips of this gateway process, bounded per principal."""

    def __init__(self, *, timeout: float, per_owner: int) -> None:
        self.timeout = timeout
        self.per_owner = per_owner
        self._key = secrets.token_bytes(32)
        self.shared = False
        """The key is shared with other replicas (wrapped states verify on any of them)."""
        self._boot = secrets.token_urlsafe(6)
        """Names this process in its states, so a state from before a restart is told apart."""
        self._trips: dict[str, RoundTrip] = {}
        self._waiting: dict[object, int] = {}
        """Per principal (``principal_key``: an HTTP principal's name, the same at every profile's
        endpoint, where it has a state each; a stdio client's state): calls waiting for input."""
        self.tasks: anyio.abc.TaskGroup | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._order = itertools.count(1)
        self._ids = itertools.count(1)
        """Trip ids: unguessability is not needed, a state names its trip under the key's MAC."""

    def use_key(self, key: bytes, *, shared: bool) -> None:
        """The state store's integrity key (before serving): shared by replicas of a Redis store."""
        self._key, self.shared = key, shared

    def use_key_if_new(self, key: bytes) -> bool:
        """The shared store's key, if it is not the one in use (True): see ``serve.keep_the_key``."""
        if hmac.compare_digest(key, self._key):
            return False
        self._key = key
        return True

    def order(self) -> int:
        """A number for a call beginning now: a server request belongs to the newest call to it."""
        return next(self._order)

    def __len__(self) -> int:
        return len(self._trips)

    def waiting(self, owner: object) -> int:
        """How many calls of ``owner`` wait for its input (O(1): counted as they start and end)."""
        return self._waiting.get(principal_key(owner), 0)

    async def ask(self, trip: RoundTrip, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A server's request during ``trip``: the call now waits for its client, and takes
        one of the principal's ``per_owner`` slots for as long as it is pending. Calls that
        never ask take none; over the limit the server's request is refused (the call goes on)."""
        if not trip.waiting and not trip.finished:
            key = principal_key(trip.owner)
            held = self._waiting.get(key, 0)
            if held >= self.per_owner:
                log.warning(
                    "[%s] %s %r: refused %s: the client already has %d calls waiting for its input",
                    trip.server_id,
                    trip.method,
                    trip.target,
                    method,
                    held,
                )
                raise MCPError(
                    code=INVALID_REQUEST,
                    message=f"prefixgate: this client already has {self.per_owner} calls waiting for its input; "
                    "answer or abandon one first",
                )
            self._waiting[key] = held + 1
            trip.waiting = True
        return await trip.ask(method, params)

    def _forget(self, trip: RoundTrip) -> None:
        """The call is over or abandoned: out of the books, its slot (if it held one) freed."""
        if self._trips.pop(trip.id, None) is not None and trip.waiting:
            trip.waiting = False
            key = principal_key(trip.owner)
            left = self._waiting[key] - 1
            if left:
                self._waiting[key] = left
            else:
                del self._waiting[key]

    def abandon_all_but(self, kept: AbstractSet[object]) -> None:
        """End now the parked calls (waiting for a retry) of every principal not in ``kept``
        (their tokens were revoked: no retry of theirs can come), as ``timeout`` would later:
        cancelled at their servers, their slots freed. A call a request is attached to ends
        with that request."""
        for trip in list(self._trips.values()):
            timer = trip.timer  # (set while the call is parked: ``next_answer``)
            if timer is None or trip.attached or not _revoked(principal_key(trip.owner), kept):
                continue
            log.info(
                "[%s] %s %r: its principal's token was revoked, cancelling the call",
                trip.server_id,
                trip.method,
                trip.target,
            )
            timer.cancel()  # (its ``_expire`` ends unfired)
            trip.timer = None
            self._forget(trip)
            trip.cancel()

    def calling(self, server_id: str) -> list[RoundTrip]:
        """The unfinished calls to ``server_id`` (whose principals its requests may belong to)."""
        return [t for t in self._trips.values() if t.server_id == server_id and not t.finished]

    def waiting_on(self, server_id: str) -> RoundTrip | None:
        """The newest unfinished call to ``server_id`` (the one its request belongs to)."""
        for trip in reversed(self._trips.values()):
            if trip.server_id == server_id and not trip.finished:
                return trip
        return None

    # --- the client's side --------------------------------------------------------------

    def book(
        self, owner: object, method: str, target: str, binding: object, server_id: str, capabilities: Any
    ) -> RoundTrip:
        """A call beginning now, in the books: from here on its server's requests and logs are
        attributed to its principal (``calling``, ``waiting_on``). Then ``begin`` or ``run_here``."""
        trip = RoundTrip(str(next(self._ids)), owner, method, target, binding, server_id, capabilities, self.order())
        self._trips[trip.id] = trip
        return trip

    async def run_here(self, trip: RoundTrip, run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """A call of a client that can answer none of its server's requests (``answers_none``):
        each is refused at once, so nothing outlives the request, and the call runs in its
        task, without ``begin``'s own task and its two loop turns."""
        trip.started = True
        caller = CALLER.set(trip)  # a server's request on the call's stream comes back here
        try:
            return await run()
        finally:
            CALLER.reset(caller)
            trip.end("prefixgate: the call this request belongs to is over")
            self._forget(trip)

    def begin(self, trip: RoundTrip, run: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Start a booked call in the gateway's own task, so it outlives the request that began it."""
        if self.tasks is None:
            self._forget(trip)
            raise MCPError(code=INTERNAL_ERROR, message="prefixgate: not serving")
        # A plain asyncio task (every 2026-07-28 call makes one: gateway/plaintasks.py),
        # cancelled with the rest when serving ends (``keep``).
        trip.task = asyncio.get_running_loop().create_task(self._run(trip, run))
        self._running.add(trip.task)

    async def _run(self, trip: RoundTrip, run: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        trip.started = True
        CALLER.set(trip)  # this task's own context: a server's request on the call's stream comes back here
        try:
            interrupted = trip.cancel_asked
            if not interrupted:
                try:
                    trip.result = await run()
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    # Only the trip's own cancel ends here; serving's end (``keep``) goes on up.
                    if not trip.cancel_asked or task is None or task.uncancel() > 0:
                        raise
                    interrupted = True
                except Exception as exc:  # noqa: BLE001 - delivered to the client's request
                    trip.error = exc
            if interrupted and trip.error is None:
                trip.error = MCPError(code=INVALID_REQUEST, message="prefixgate: the call was cancelled")
            trip.end("prefixgate: the call this request belongs to is over (or its client did not answer in time)")
        finally:
            self._running.discard(asyncio.current_task())
            # The task's context holds the trip (``CALLER``): the trip holding the task too
            # would leave every such call a reference cycle.
            trip.task = None

    async def keep(self) -> None:
        """Run for as long as the gateway serves; then cancel the calls still running, and wait for them."""
        try:
            await anyio.sleep_forever()
        finally:
            await cancel_all(self._running)

    def resume(
        self, state: Any, owner: object, method: str, target: str, binding: object, capabilities: Any, responses: Any
    ) -> RoundTrip:
        """A retry: check its state, hand its answers to the waiting server requests."""
        trip_id, round_no = self._verify(state, owner, method, target, binding)
        trip = self._trips.get(trip_id)
        if trip is None or trip.owner is not owner:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: this input round trip expired (not answered in time, "
                "already completed, or the gateway restarted); call again without requestState",
            )
        if round_no != trip.round:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: requestState of round {round_no} was already answered "
                f"(the call is at round {trip.round})",
            )
        if trip.attached:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: this requestState is being answered by another request",
            )
        trip.capabilities = capabilities
        given = responses if isinstance(responses, dict) else {}
        for key, pending in list(trip.handed.items()):
            answer = given.get(key)
            if isinstance(answer, dict):
                del trip.handed[key]
                pending.settle(answer={k: v for k, v in answer.items() if k != "resultType"})
            # an unanswered request is asked again in the next round
        trip.fresh = {**trip.handed, **trip.fresh}
        trip.handed = {}
        return trip

    async def next_answer(self, trip: RoundTrip) -> dict[str, Any]:
        """Wait for the call to finish (its result) or to need input (``input_required``).

        While no request of the client waits here, the call is parked: after the
        timeout it is cancelled downstream and forgotten. A request that ends here without
        either (the client cancelled it, or went away) ends the call at once.
        """
        if trip.timer is not None:
            trip.timer.cancel()
            trip.timer = None
        trip.attached = True
        handed = False
        try:
            while True:
                if trip.finished:
                    self._forget(trip)
                    if trip.error is not None:
                        raise trip.error
                    assert trip.result is not None
                    return trip.result
                if trip.fresh:
                    await _gather(trip)
                    if not trip.finished and trip.fresh:  # (none, if the server withdrew them meanwhile)
                        handed = True
                        return self._input_required(trip)
                    continue
                await trip.wait_change()
        finally:
            trip.attached = False
            if trip.id in self._trips:
                if not handed or self.tasks is None:
                    # The client gave up on the call (before any state, or on a retry whose
                    # answers the server already has): it ends now, as a cancelled call of
                    # the handshake era does, not after ``timeout`` with the server still at it.
                    self._forget(trip)
                    trip.cancel()
                else:
                    trip.timer = anyio.CancelScope()
                    self.tasks.start_soon(self._expire, trip, trip.timer)

    def _input_required(self, trip: RoundTrip) -> dict[str, Any]:
        requests: dict[str, Any] = {}
        for key, pending in trip.fresh.items():
            requests[key] = {"method": pending.method, **({"params": pending.params} if pending.params else {})}
        trip.handed.update(trip.fresh)
        trip.fresh = {}
        trip.round += 1
        return {"resultType": "input_required", "inputRequests": requests, "requestState": self._seal(trip)}

    async def _expire(self, trip: RoundTrip, timer: anyio.CancelScope) -> None:
        with timer:
            await anyio.sleep(self.timeout)
            log.warning(
                "[%s] %s %r: no retry within %g s, cancelling the call",
                trip.server_id,
                trip.method,
                trip.target,
                self.timeout,
            )
            self._forget(trip)
            # Cancel first: the server must see notifications/cancelled before any of its
            # requests is answered (``_run`` fails them once the cancellation is out).
            trip.cancel()

    # --- requestState -------------------------------------------------------------------

    def _mac(self, trip_id: str, round_no: int, owner: object, method: str, target: str, binding: object) -> str:
        message = "\0".join((trip_id, str(round_no), _tag(owner), method, target, str(binding))).encode(
            "utf-8", "surrogatepass"
        )
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def _seal(self, trip: RoundTrip) -> str:
        mac = self._mac(trip.id, trip.round, trip.owner, trip.method, trip.target, trip.binding)
        return f"{_PREFIX}{self._boot}.{trip.id}.{trip.round}.{mac}"

    def _verify(self, state: Any, owner: object, method: str, target: str, binding: object) -> tuple[str, int]:
        refused = MCPError(
            code=INVALID_PARAMS,
            message=f"prefixgate: {method} {target!r}: requestState refused: not issued by this gateway "
            "for this request and this client (tampered or foreign)",
        )
        if not isinstance(state, str) or not state.startswith(_PREFIX) or len(state) > 200:
            raise refused
        parts = state[len(_PREFIX) :].split(".")
        if len(parts) != 4 or not parts[2].isdigit():
            raise refused
        boot, trip_id, round_text, mac = parts
        if boot != self._boot and self.shared:
            # Not covered by the MAC: changing it only changes which refusal the sender reads.
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: this input round trip is pending on another gateway "
                "replica (or on one that restarted): a handshake-era server's call stays in the replica that "
                "began it, and this request reached a different one; call again without requestState",
            )
        if boot != self._boot:
            # Not covered by the MAC (another process's key is gone): changing it only
            # changes which refusal the sender reads.
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: this input round trip expired: the gateway that began it "
                "has restarted since; call again without requestState",
            )
        if not hmac.compare_digest(mac, self._mac(trip_id, int(round_text), owner, method, target, binding)):
            raise refused
        return trip_id, int(round_text)

    # --- a modern server's own requestState, wrapped ----------------------------------------

    @staticmethod
    def is_wrapped(state: Any) -> TypeGuard[str]:
        return isinstance(state, str) and state.startswith(_WRAPPED)

    def wrap(
        self,
        owner: object,
        method: str,
        target: str,
        binding: object,
        server_id: str,
        state: str | None,
        *,
        rerun: bool = False,
    ) -> str:
        """The server's ``requestState`` (or none) as a state only this request of this
        principal can bring back, to this server, within the timeout. ``rerun``: the retry
        runs the request anew (a handshake-era server's -32042 answered), not the answers to
        the server: said in the state, as the replica the retry reaches may not know the
        server's era yet (its server still starting, its catalog from the warm-start record)."""
        fields: dict[str, Any] = {"s": server_id, "r": state, "t": int(time.time())}
        if rerun:
            fields["a"] = 1
        body = json.dumps(fields, separators=(",", ":"))
        payload = base64.urlsafe_b64encode(body.encode("utf-8", "surrogatepass")).decode().rstrip("=")
        mac = self._wrap_mac(self._boot, payload, owner, method, target, binding)
        wrapped = f"{_WRAPPED}{self._boot}.{payload}.{mac}"
        if len(wrapped) > MAX_WRAPPED:
            # Refused now, naming the size, rather than handed out and refused as foreign on the retry.
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: server {server_id!r} sent a requestState of "
                f"{len(state or '')} bytes, too big to carry (at most about {MAX_WRAPPED * 3 // 4 - 256} bytes)",
            )
        return wrapped

    def unwrap(
        self, state: str, owner: object, method: str, target: str, binding: object
    ) -> tuple[str, str | None, bool]:
        """The server, its own state and ``rerun`` from a wrapped state, or a clear refusal."""
        refused = MCPError(
            code=INVALID_PARAMS,
            message=f"prefixgate: {method} {target!r}: requestState refused: not issued by this gateway "
            "for this request and this client (tampered or foreign)",
        )
        parts = state[len(_WRAPPED) :].split(".")
        if len(state) > MAX_WRAPPED or len(parts) != 3:
            raise refused
        boot, payload, mac = parts
        if boot != self._boot and not self.shared:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: this input round trip expired: the gateway that began it "
                "has restarted since; call again without requestState",
            )
        if not hmac.compare_digest(mac, self._wrap_mac(boot, payload, owner, method, target, binding)):
            raise refused
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        if time.time() - body["t"] > self.timeout:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prefixgate: {method} {target!r}: this input round trip expired (not answered within "
                f"{self.timeout:g} s); call again without requestState",
            )
        server_state = body["r"]
        return str(body["s"]), server_state if isinstance(server_state, str) else None, body.get("a") == 1

    def _wrap_mac(self, boot: str, payload: str, owner: object, method: str, target: str, binding: object) -> str:
        message = "\0".join((_WRAPPED, boot, payload, _tag(owner), method, target, str(binding)))
        digest = hmac.new(self._key, message.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
