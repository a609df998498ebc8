"""Server-to-client traffic: sampling, elicitation and roots requests, log messages, and
the completion of a URL-mode elicitation.

Each goes to the client whose call caused it, when that can be told. A stdio server has
one pipe for every caller and its messages do not say which call they belong to, so they
are attributed only when one principal can have caused them; guessing across principals
would hand one principal's request (and its text) to another, and that one's answer back.
With several profiles served, the clients of all of them are counted: the servers are the same.

A ``roots/list`` outside any call that no client can be asked now (none is connected, the one
it belongs to is a 2026-07-28 client, which has no back-channel, or the call it was put to
ended before its client was asked) waits for the next call of one principal to that server,
which asks it with ``input_required`` before the call goes on (``ask_waiting``): what a
2026-07-28 server would do. A server that lists its client's roots as soon as it is
initialized (server-filesystem does) gets them so, as it would directly.

A server's instance (one principal's own process, gateway/engine/instances.py) is that
principal's alone (``Downstream.principal``): what it sends goes to that principal's call in
flight (its newest), else to that principal's clients, as if it were the only principal; never
to another principal, whoever else calls the server.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types.jsonrpc import INVALID_REQUEST

from gateway.downstream.connection import Downstream
from gateway.engine.capabilities import require
from gateway.engine.clients import LOG_LEVELS, ClientConnection, Clients, admits
from gateway.engine.roundtrip import RoundTrip, RoundTrips
from gateway.sdk import send_raw_request
from gateway.state.session import principal_key

log = logging.getLogger("prefixgate")


MAX_URL_ELICITATIONS = 256
"""URL-mode elicitations remembered for their completion notice, per principal (its oldest
forgotten first): what servers' ids can make the gateway keep is bounded, and one principal's
many elicitations do not cost another's completion notices."""
MAX_ASKING = 64
"""A server's requests (sampling, elicitation, roots) one principal may have waiting for its
answer at once; more are refused to the server at once. A principal that leaves them unanswered
holds up its own, never another's: counted per connection (``link.MAX_ASKING``), one principal's
64 unanswered questions had every other principal's refused."""
WITHDRAW_TIMEOUT = 2.0
"""As the SDK's dispatcher's abandon write: withdrawing a call's questions gives up after this."""
MAX_WAITING = 4
"""A server's requests outside any call that may wait for a call to ask them; more are refused."""
WAITS = "roots/list"
"""The request that waits so: what servers ask outside any call (after ``initialized``, after a
roots change). An elicitation or sampling request outside any call is refused as before."""


@dataclass(eq=False)
class _Waiting:
    """A server's request outside any call, waiting for a call that can ask it (``Relay.ask_waiting``)."""

    method: str
    params: dict[str, Any]
    principal: object | None
    """Whose call may ask it (``principal_key``); None: the first principal to call the server alone."""
    answer: asyncio.Future[dict[str, Any]]
    own: bool = False
    """An instance's (``principal`` is its principal): asked by that principal's next call, whoever else calls."""


class Relay:
    def __init__(self, clients: Clients, round_trips: RoundTrips) -> None:
        self._clients = clients
        self._round_trips = round_trips
        self._urls: dict[_UrlKey, tuple[ClientConnection, Any]] = {}
        """(server, its instance's principal or None, ``elicitationId``) -> the client and call a
        URL-mode elicitation went to (instances of one server may use the same ids)."""
        self._url_order: dict[object, OrderedDict[_UrlKey, None]] = {}
        """Per principal (``principal_key``): its entries of ``_urls``, oldest first."""
        self._waiting: dict[str, list[_Waiting]] = {}
        """Per server: its requests outside any call that wait for a call to ask them."""
        self._callers: dict[str, object] = {}
        """Per server: the one principal that has called it, or ``_MANY`` once another has."""
        self._asking: dict[tuple[str, object], int] = {}
        """Per server and principal: its requests waiting for that principal's answer (``MAX_ASKING``)."""
        self._refusing: set[tuple[str, object]] = set()
        """Those refused for ``MAX_ASKING`` (logged once until one is taken again)."""

    async def request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        """Relay sampling, elicitation or roots to the client that can answer it.

        A call of a 2026-07-28 client has no back-channel: the request waits for that
        client's ``input_required`` retry instead (gateway/engine/roundtrip.py).

        ``caller``: the call whose stream the request came on (a streamable-HTTP server's,
        gateway/downstream/related.py); while that call is in flight, it goes there and nowhere else.
        """
        only = downstream.principal
        to = self._in_flight(downstream.id, caller) if caller is not None else None
        placed = to is not None
        if to is None:
            to = self._newest_call(downstream.id, method, only)
        if to is None:
            if method != WAITS:
                raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: no client is connected to answer {method}")
            return await self._wait_for_a_call(downstream.id, method, params, only, own=only is not None)
        whose = principal_key(to.owner if isinstance(to, RoundTrip) else to[0].state)
        with self._counted(downstream.id, whose, method):
            return await self._put(downstream, method, params, caller, to, placed)

    async def _put(
        self,
        downstream: Downstream,
        method: str,
        params: dict[str, Any],
        caller: object | None,
        to: RoundTrip | tuple[ClientConnection, Any],
        placed: bool = False,
    ) -> dict[str, Any]:
        """``request``'s question put to the client it found, ``to`` (``placed``: the server sent
        it on that call's own stream)."""
        only = downstream.principal
        if isinstance(to, RoundTrip):
            require(method, to.capabilities, params)
            try:
                return await self._round_trips.ask(to, method, params)
            except MCPError:
                # Put to the newest call only because a pipe does not say which call it is
                # for, and that call ended (cancelled, say) before its client answered: it may
                # be another call's. A roots request waits for the next call; another request,
                # a call still in flight to the server asks it.
                if caller is not None or not to.finished:
                    raise
                if method != WAITS:
                    again = self._newest_call(downstream.id, method, only)
                    a_call = isinstance(again, RoundTrip) or (again is not None and again[1] is not None)
                    if not a_call or again is to:
                        raise
                    assert again is not None
                    return await self._put(downstream, method, params, caller, again)
                return await self._wait_for_a_call(
                    downstream.id, method, params, principal_key(to.owner), own=only is not None
                )
        client, request_id = to
        if client.server_session is None:
            raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: no client is connected to answer {method}")
        require(method, client.server_session.client_capabilities, params)
        # Raw, as the server sent it, on the originating call's own stream when there is
        # one (streamable HTTP needs that), else on the client's standalone channel.
        call_session = client.call_sessions.get(request_id) if request_id is not None else None
        if method == "elicitation/create" and params.get("mode") == "url":
            self.sent_urls(downstream.id, [params], client, request_id, only)
        if call_session is None and method == WAITS:
            # Outside any call: on the client's own channel, which a 2026-07-28 client does not
            # have and a streamable-HTTP client may not have opened yet (what is sent there then
            # is lost); so the next call to the server asks it too, whichever answers first.
            session = client.server_session
            return await self._wait_for_a_call(
                downstream.id,
                method,
                params,
                principal_key(client.state),
                at_once=lambda: send_raw_request(session, method, params, related=False),
                own=only is not None,
            )
        if call_session is None or not (placed or self._only_call(downstream.id, client, request_id)):
            # A question a pipe does not place, asked while other calls are in flight to its
            # server, may be theirs: it is not withdrawn with this call.
            result: dict[str, Any] = await send_raw_request(
                call_session or client.server_session, method, params, related=call_session is not None
            )
            return result
        asked = client.asked.setdefault(request_id, {})
        with anyio.CancelScope() as scope:
            asked[scope] = gone = anyio.Event()
            try:
                result = await send_raw_request(call_session, method, params, related=True)
                return result
            finally:
                del asked[scope]
                if not asked and client.asked.get(request_id) is asked:
                    del client.asked[request_id]
                gone.set()
        raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: {method} withdrawn: the client's call ended")

    def _only_call(self, server_id: str, client: ClientConnection, request_id: Any) -> bool:
        """Whether that call is the only one in flight to the server: what its server asks
        now is then that call's, though its pipe does not say so."""
        if client.calls.get(request_id) != server_id or self._round_trips.calling(server_id):
            return False
        return sum(list(c.calls.values()).count(server_id) for c in self._clients.everyone()) == 1

    @staticmethod
    async def withdraw(client: ClientConnection, request_id: Any) -> None:
        """The client cancelled its call, or it failed (timed out, say): the requests its server
        put to the client on that call's stream, surely for that call, are cancelled toward the
        client now, while the stream is open, as a server on the SDK withdraws its question
        before its call ends. Left to the server (which withdraws it once the call's
        cancellation reaches it), the courtesy cancel would find the call's stream closed, and
        streamable HTTP drops a notification for a closed stream: the user would be left with
        a question nobody waits for."""
        if not (asked := client.asked.get(request_id)):
            return
        with anyio.move_on_after(WITHDRAW_TIMEOUT, shield=True):
            for scope, gone in list(asked.items()):
                scope.cancel()  # its courtesy cancel goes out before it is gone
                await gone.wait()

    @contextmanager
    def _counted(self, server_id: str, principal: object, method: str) -> Iterator[None]:
        """One more of ``server_id``'s requests waiting for ``principal``'s answer, or MCPError
        when ``MAX_ASKING`` already do."""
        key = (server_id, principal)
        asking = self._asking.get(key, 0)
        if asking >= MAX_ASKING:
            if key not in self._refusing:
                self._refusing.add(key)
                log.warning(
                    "[%s] %s refused: %d of its requests already wait for one principal (further ones are not logged)",
                    server_id,
                    method,
                    MAX_ASKING,
                )
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: {MAX_ASKING} requests of this server already wait for this client's answer",
            )
        self._refusing.discard(key)
        self._asking[key] = asking + 1
        try:
            yield
        finally:
            if (left := self._asking[key] - 1) > 0:
                self._asking[key] = left
            else:
                del self._asking[key]

    async def _wait_for_a_call(
        self,
        server_id: str,
        method: str,
        params: dict[str, Any],
        principal: object | None,
        *,
        at_once: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        own: bool = False,
    ) -> dict[str, Any]:
        """A request outside any call that no client can be asked now (or, ``at_once``, only
        perhaps): it waits (up to ``round_trip_timeout``) for the next call of one principal to
        the server to ask it. ``own``: an instance's, counted apart per principal (one principal's
        instance does not use up the others')."""
        same = [w for w in self._waiting.get(server_id, ()) if w.own == own and (not own or w.principal == principal)]
        if len(same) >= MAX_WAITING:
            log.warning("[%s] %s refused: %d of its requests already wait for a call", server_id, method, MAX_WAITING)
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: no client can be asked {method} now, and {MAX_WAITING} requests of this "
                "server already wait for a call to ask them",
            )
        item = _Waiting(method, params, principal, asyncio.get_running_loop().create_future(), own)
        self._enlist(server_id, item)
        timeout = self._round_trips.timeout
        try:
            async with anyio.create_task_group() as tg:
                if at_once is not None:
                    tg.start_soon(self._try_at_once, server_id, item, at_once)
                else:
                    log.info("[%s] %s waits for the next call to it: no client is connected", server_id, method)
                try:
                    with anyio.move_on_after(timeout):
                        await asyncio.wait((item.answer,))  # (its error raised below: not in an exception group)
                finally:
                    tg.cancel_scope.cancel()  # (``at_once``, if it is still waiting)
            if item.answer.done():
                return item.answer.result()
            raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: no call came to ask {method} in {timeout:g} s")
        finally:
            self._delist(server_id, item)

    def _enlist(self, server_id: str, item: _Waiting) -> None:
        self._waiting.setdefault(server_id, []).append(item)

    def _delist(self, server_id: str, item: _Waiting) -> None:
        waiting = self._waiting.get(server_id)
        if waiting is not None and item in waiting:
            waiting.remove(item)
            if not waiting:
                del self._waiting[server_id]

    @staticmethod
    async def _try_at_once(server_id: str, item: _Waiting, ask: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Put a waiting request to its client's own channel now; one it has not got (a
        2026-07-28 client) waits for the next call alone."""
        try:
            answer = await ask()
        except NoBackChannelError:
            log.info("[%s] %s waits for the next call to it: its client has no back-channel", server_id, item.method)
            return
        except MCPError as exc:  # the client's own error answer
            if not item.answer.done():
                item.answer.set_exception(exc)
            return
        if not item.answer.done():
            item.answer.set_result(answer)

    def waits_for(self, server_id: str) -> bool:
        """Whether a request of ``server_id`` waits for a call to ask it: the per-call check,
        made before anything is awaited (``ask_waiting``, ``ask_waiting_over_back_channel``)."""
        return server_id in self._waiting

    async def ask_waiting(self, trip: RoundTrip) -> None:
        """Ask ``trip``'s client, before its call goes on, what its server asked outside any
        call while no client could be asked (``_wait_for_a_call``): as a 2026-07-28 server
        asks during a call."""

        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await self._round_trips.ask(trip, method, params)

        await self._ask_waiting(trip.server_id, principal_key(trip.owner), ask)

    async def ask_waiting_over_back_channel(self, client: ClientConnection, server_id: str, request_id: Any) -> None:
        """``ask_waiting`` for a handshake-era client's call ``request_id``: on the call's own
        stream (its server asked before any client was connected, or before this client's
        own channel was open)."""
        session = client.call_sessions.get(request_id)
        if session is None:
            return

        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            require(method, session.client_capabilities, params)
            timeout = self._round_trips.timeout
            with anyio.move_on_after(timeout):
                answer: dict[str, Any] = await send_raw_request(session, method, params, related=True)
                return answer
            raise MCPError(
                code=INVALID_REQUEST, message=f"prefixgate: the client did not answer {method} in {timeout:g} s"
            )

        await self._ask_waiting(server_id, principal_key(client.state), ask)

    async def _ask_waiting(
        self, server_id: str, who: object, ask: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
    ) -> None:
        """Each request of ``server_id`` waiting for a call, put with ``ask`` to principal ``who``:
        only while every call in flight to the server, and every client connected that sees it,
        is that principal's (the request was made for no one in particular)."""
        waiting = self._waiting.get(server_id)
        if not waiting:
            return
        alone = self._principal_for(server_id) == who and not any(
            principal_key(c.state) != who for c in self._clients.everyone() if server_id in c.servers
        )
        mine = [w for w in waiting if (w.principal == who if w.own else alone and w.principal in (None, who))]
        for item in [w for w in mine if not w.answer.done()]:
            self._delist(server_id, item)
            try:
                answer = await ask(item.method, item.params)
            except MCPError as exc:
                if not item.answer.done():
                    item.answer.set_exception(exc)
                continue
            except BaseException:  # this call was cancelled meanwhile: the next one asks it
                if not item.answer.done():
                    self._enlist(server_id, item)
                raise
            if not item.answer.done():
                item.answer.set_result(answer)

    def sent_urls(
        self, server_id: str, elicitations: Any, client: ClientConnection, request_id: Any, instance: object = None
    ) -> None:
        """URL-mode elicitations of ``server_id`` that reached a handshake-era ``client`` (asked
        during its call ``request_id``, or listed in the data of a ``-32042`` error it was given):
        the server's notice that one completed goes to that client. ``instance``: the principal
        whose instance of the server asked (``Downstream.principal``), None for its shared process."""
        principal = principal_key(client.state)
        for item in elicitations if isinstance(elicitations, list) else ():
            elicitation_id = item.get("elicitationId") if isinstance(item, dict) else None
            if isinstance(elicitation_id, str):
                key = (server_id, instance, elicitation_id)
                self._forget_url(key)  # (an id used again: the newest client it went to hears it)
                self._urls[key] = (client, request_id)
                order = self._url_order.setdefault(principal, OrderedDict())
                order[key] = None
                if len(order) > MAX_URL_ELICITATIONS:
                    self._forget_url(next(iter(order)))

    def _forget_url(self, key: _UrlKey) -> tuple[ClientConnection, Any] | None:
        """Forget one remembered URL-mode elicitation; what it held, if anything."""
        found = self._urls.pop(key, None)
        if found is not None:
            principal = principal_key(found[0].state)
            order = self._url_order.get(principal)
            if order is not None:
                order.pop(key, None)
                if not order:
                    del self._url_order[principal]
        return found

    def elicitation_complete(self, downstream: Downstream, params: dict[str, Any]) -> None:
        """A server's ``notifications/elicitation/complete``: to the client its URL-mode
        elicitation went to, on that call's stream while the call is in flight, else on the
        client's own channel. Dropped when the gateway relayed no such elicitation of this
        server (a 2026-07-28 client's, which has no channel for it, or an id it never saw)."""
        elicitation_id = params.get("elicitationId")
        if not isinstance(elicitation_id, str):
            return
        if (found := self._forget_url((downstream.id, downstream.principal, elicitation_id))) is None:
            log.debug("[%s] elicitation completion dropped: no client was sent that elicitation", downstream.id)
            return
        client, request_id = found
        call_session = client.call_sessions.get(request_id) if request_id is not None else None
        session = call_session or client.server_session
        if session is None:
            return
        related = request_id if call_session else None
        send = functools.partial(session.send_elicit_complete, elicitation_id, related_request_id=related)
        self._clients.deliver(client, send, "complete:" + elicitation_id, call=related)

    def log(self, downstream: Downstream, params: dict[str, Any], caller: object | None = None) -> None:
        """A server's log message goes to the client whose call to it is in flight (on that
        call's stream, as that call opted in); otherwise to every client whose own
        ``logging/setLevel`` admits it. Never to everyone regardless of who asked.

        ``caller``: the call whose stream it came on (a streamable-HTTP server's,
        gateway/downstream/related.py): it is that call's principal's, whoever else calls."""
        level = params.get("level")
        if level not in LOG_LEVELS:
            return
        name = params.get("logger")
        source = downstream.id if not name else f"{downstream.id}/{name}"
        data = params.get("data")
        principal = downstream.principal
        if principal is None and caller is not None:
            principal = self._principal_of(downstream.id, caller)
        if principal is None:
            principal = self._principal_for(downstream.id)
        if principal is None:
            log.debug("[%s] log message dropped: it cannot be attributed to one principal", downstream.id)
            return
        to = self._in_flight(downstream.id, caller) if caller is not None else None
        client, request_id = to if isinstance(to, tuple) else self._requester(downstream.id, principal)
        if request_id is not None and client is not None:
            session = client.call_sessions.get(request_id)
            if session is not None and admits(client.log_level, level):  # (before the call's answer: ``flushed``)
                send = functools.partial(_send_log, session, level, data, source, request_id)
                self._clients.deliver(client, send, call=request_id)
            return
        self._clients.broadcast(
            lambda s: _send_log(s, level, data, source, None),
            lambda u: (
                principal_key(u.state) == principal
                and u.log_level is not None
                and admits(u.log_level, level)
                and downstream.id in u.servers
            ),
            every_profile=True,
        )

    def _in_flight(self, server_id: str, caller: object) -> RoundTrip | tuple[ClientConnection, Any] | None:
        """``caller`` (what ``gateway.downstream.related`` noted), if it is still a call in flight
        to this server that can be asked: a 2026-07-28 trip, or a handshake-era call (it has an
        order; a 2026-07-28 client's call has no back-channel). Else None: the rule for pipes decides."""
        if isinstance(caller, RoundTrip):
            return caller if caller.server_id == server_id and not caller.finished else None
        if not (isinstance(caller, tuple) and len(caller) == 2 and isinstance(caller[0], ClientConnection)):
            return None
        client, request_id = caller
        in_flight = client.calls.get(request_id) == server_id and request_id in client.call_order
        return (client, request_id) if in_flight and request_id in client.call_sessions else None

    def _newest_call(
        self, server_id: str, method: str, only: object | None = None
    ) -> RoundTrip | tuple[ClientConnection, Any] | None:
        """The call a request the wire does not place belongs to: the newest call to the server,
        and only while every call in flight to it is one principal's (see ``_principal_for``);
        None when no client is connected. ``only``: an instance's principal, whose newest call
        (or client) it is, whoever else calls the server."""
        if only is not None:
            trips = [t for t in self._round_trips.calling(server_id) if principal_key(t.owner) == only]
            return self._newer(trips[-1] if trips else None, *self._requester(server_id, only))
        if self._principal_for(server_id) is None and (
            self._clients.everyone() or self._round_trips.calling(server_id)
        ):
            log.warning(
                "[%s] %s refused: calls of more than one principal are in flight to it (or none, with more than "
                "one connected), and its pipe does not say which call it belongs to",
                server_id,
                method,
            )
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: {method} cannot be attributed to one client: calls from more than one are "
                "in flight to this server",
            )
        return self._newer(self._round_trips.waiting_on(server_id), *self._requester(server_id))

    @staticmethod
    def _newer(
        trip: RoundTrip | None, target: ClientConnection | None, related: Any
    ) -> RoundTrip | tuple[ClientConnection, Any] | None:
        """The newer of a 2026-07-28 call and a handshake-era client's (its call, if any)."""
        if trip is not None and (target is None or target.call_order.get(related, 0) < trip.seq):
            return trip
        if target is None:
            return None
        return target, related

    def answers_to(self, server_id: str, principal: object) -> bool:
        """Whether a request the server sends outside any call (``roots/list`` once told the
        roots changed, say) would be put to this principal (its ``principal_key``)."""
        return self._principal_for(server_id) == principal

    def called(self, server_id: str, principal: object) -> None:
        """A call of ``principal`` to the server begins (``_principal_for``'s memory)."""
        if self._callers.setdefault(server_id, principal) != principal:
            self._callers[server_id] = _MANY

    def forget_callers(self, server_id: str) -> None:
        """The server's process is gone: what its next one sends owes nothing to earlier calls."""
        self._callers.pop(server_id, None)

    def _principal_for(self, server_id: str) -> object | None:
        """Who (``principal_key``) a server's request or log message can belong to, or None.

        Attributed only when every call in flight to the server (waiting in the gateway for
        a 2026-07-28 client's input included) is one principal's, or, with none in flight,
        when every connected client that sees the server, and every principal that has
        called it, is one principal's: what a server sends after a call has returned may be
        that call's (a 2026-07-28 client's, or one that has gone), never for whoever is left."""
        connected = [c for c in self._clients.everyone() if server_id in c.servers]
        calling = {principal_key(c.state) for c in connected if server_id in c.calls.values()}
        calling.update(principal_key(t.owner) for t in self._round_trips.calling(server_id))
        if not calling:
            calling = {principal_key(c.state) for c in connected}
            if server_id in self._callers:
                calling.add(self._callers[server_id])
        if len(calling) != 1 or _MANY in calling:
            return None
        (principal,) = calling
        return principal

    @staticmethod
    def _principal_of(server_id: str, caller: object) -> object | None:
        """Whose (``principal_key``) ``caller``, a call ``related.py`` noted, is; None if not one."""
        if isinstance(caller, RoundTrip):
            return principal_key(caller.owner) if caller.server_id == server_id else None
        if isinstance(caller, tuple) and len(caller) == 2 and isinstance(caller[0], ClientConnection):
            return principal_key(caller[0].state)
        return None

    def _requester(self, server_id: str, principal: object | None = None) -> tuple[ClientConnection | None, Any]:
        """The latest-connected client (of ``principal``, if given) with a call in flight to the
        server, and that call's id; else the latest-connected such client that sees it (no call)."""
        connected = [
            c
            for c in self._clients.everyone()
            if server_id in c.servers and (principal is None or principal_key(c.state) == principal)
        ]
        for client in reversed(connected):
            for request_id, target in client.calls.items():
                if target == server_id:
                    return client, request_id
        return (connected[-1], None) if connected else (None, None)


_UrlKey = tuple[str, object, str]
"""A URL-mode elicitation remembered: its server, the principal of its instance or None, its id."""

_MANY = object()
"""``Relay._callers``' mark of a server called by more than one principal."""


async def _send_log(session: ServerSession, level: Any, data: Any, source: str, related: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging is deprecated in 2026-07-28; still relayed
        await session.send_log_message(level, data, source, related_request_id=related)
