"""Server-to-client traffic: sampling, elicitation and roots requests, log messages, and
the completion of a URL-mode elicitation.

Each goes to the client whose call caused it, when that can be told. A stdio server has
one pipe for every caller and its messages do not say which call they belong to, so they
are attributed only when one principal can have caused them; guessing across principals
would hand one principal's request (and its text) to another, and that one's answer back.
With several profiles served, the clients of all of them are counted: the servers are the same.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections import OrderedDict
from typing import Any

from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST

from gateway.downstream.connection import Downstream
from gateway.engine.capabilities import require
from gateway.engine.clients import LOG_LEVELS, ClientConnection, Clients, admits
from gateway.engine.roundtrip import RoundTrip, RoundTrips
from gateway.sdk import send_raw_request

log = logging.getLogger("prefixgate")


MAX_URL_ELICITATIONS = 256
"""URL-mode elicitations remembered for their completion notice (the oldest forgotten first):
what servers' ids can make the gateway keep is bounded."""


class Relay:
    def __init__(self, clients: Clients, round_trips: RoundTrips) -> None:
        self._clients = clients
        self._round_trips = round_trips
        self._urls: OrderedDict[tuple[str, str], tuple[ClientConnection, Any]] = OrderedDict()
        """(server, ``elicitationId``) -> the client and call a URL-mode elicitation went to."""

    async def request(
        self, downstream: Downstream, method: str, params: dict[str, Any], caller: object | None = None
    ) -> dict[str, Any]:
        """Relay sampling, elicitation or roots to the client that can answer it.

        A call of a 2026-07-28 client has no back-channel: the request waits for that
        client's ``input_required`` retry instead (gateway/engine/roundtrip.py).

        ``caller``: the call whose stream the request came on (a streamable-HTTP server's,
        gateway/downstream/related.py); while that call is in flight, it goes there and nowhere else.
        """
        to = self._in_flight(downstream.id, caller) if caller is not None else None
        if to is None:
            to = self._newest_call(downstream.id, method)
        if isinstance(to, RoundTrip):
            require(method, to.capabilities)
            return await self._round_trips.ask(to, method, params)
        client, request_id = to
        if client.server_session is None:
            raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: no client is connected to answer {method}")
        require(method, client.server_session.client_capabilities)
        # Raw, as the server sent it, on the originating call's own stream when there is
        # one (streamable HTTP needs that), else on the client's standalone channel.
        call_session = client.call_sessions.get(request_id) if request_id is not None else None
        if method == "elicitation/create" and params.get("mode") == "url":
            self.sent_urls(downstream.id, [params], client, request_id)
        result: dict[str, Any] = await send_raw_request(
            call_session or client.server_session, method, params, related=call_session is not None
        )
        return result

    def sent_urls(self, server_id: str, elicitations: Any, client: ClientConnection, request_id: Any) -> None:
        """URL-mode elicitations of ``server_id`` that reached a handshake-era ``client`` (asked
        during its call ``request_id``, or listed in the data of a ``-32042`` error it was given):
        the server's notice that one completed goes to that client."""
        for item in elicitations if isinstance(elicitations, list) else ():
            elicitation_id = item.get("elicitationId") if isinstance(item, dict) else None
            if isinstance(elicitation_id, str):
                self._urls[(server_id, elicitation_id)] = (client, request_id)
                self._urls.move_to_end((server_id, elicitation_id))
        while len(self._urls) > MAX_URL_ELICITATIONS:
            self._urls.popitem(last=False)

    async def elicitation_complete(self, downstream: Downstream, params: dict[str, Any]) -> None:
        """A server's ``notifications/elicitation/complete``: to the client its URL-mode
        elicitation went to, on that call's stream while the call is in flight, else on the
        client's own channel. Dropped when the gateway relayed no such elicitation of this
        server (a 2026-07-28 client's, which has no channel for it, or an id it never saw)."""
        elicitation_id = params.get("elicitationId")
        if not isinstance(elicitation_id, str):
            return
        if (found := self._urls.pop((downstream.id, elicitation_id), None)) is None:
            log.debug("[%s] elicitation completion dropped: no client was sent that elicitation", downstream.id)
            return
        client, request_id = found
        call_session = client.call_sessions.get(request_id) if request_id is not None else None
        session = call_session or client.server_session
        if session is None:
            return
        with contextlib.suppress(Exception):  # a gone client must not break the server's connection
            await session.send_elicit_complete(elicitation_id, related_request_id=request_id if call_session else None)

    async def log(self, downstream: Downstream, params: dict[str, Any]) -> None:
        """A server's log message goes to the client whose call to it is in flight (on that
        call's stream, as that call opted in); otherwise to every client whose own
        ``logging/setLevel`` admits it. Never to everyone regardless of who asked."""
        level = params.get("level")
        if level not in LOG_LEVELS:
            return
        name = params.get("logger")
        source = downstream.id if not name else f"{downstream.id}/{name}"
        data = params.get("data")
        principal = self._principal_for(downstream.id)
        if principal is None:
            log.debug("[%s] log message dropped: it cannot be attributed to one principal", downstream.id)
            return
        caller, request_id = self._requester(downstream.id)
        if request_id is not None and caller is not None:
            session = caller.call_sessions.get(request_id)
            if session is not None and admits(caller.log_level, level):
                with contextlib.suppress(Exception):  # a gone client must not break the server's call
                    await _send_log(session, level, data, source, request_id)
            return
        await self._clients.broadcast(
            lambda s: _send_log(s, level, data, source, None),
            lambda u: (
                _who(u.state) == principal
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

    def _newest_call(self, server_id: str, method: str) -> RoundTrip | tuple[ClientConnection, Any]:
        """The call a request the wire does not place belongs to: the newest call to the server,
        and only while every call in flight to it is one principal's (see ``_principal_for``)."""
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
        trip = self._round_trips.waiting_on(server_id)
        target, related = self._requester(server_id)
        if trip is not None and (target is None or target.call_order.get(related, 0) < trip.seq):
            return trip
        if target is None:
            raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: no client is connected to answer {method}")
        return target, related

    def answers_to(self, server_id: str, state: object) -> bool:
        """Whether a request the server sends outside any call (``roots/list`` once told the
        roots changed, say) would be put to this client's principal (``state``: its state)."""
        return self._principal_for(server_id) == _who(state)

    def _principal_for(self, server_id: str) -> object | None:
        """Who (``_who``) a server's request or log message can belong to, or None.

        Attributed only when every call in flight to the server (waiting in the gateway for
        a 2026-07-28 client's input included) is one principal's, or, with none in flight,
        when every connected client that sees the server is one principal's."""
        connected = [c for c in self._clients.everyone() if server_id in c.servers]
        calling = {_who(c.state) for c in connected if server_id in c.calls.values()}
        calling.update(_who(t.owner) for t in self._round_trips.calling(server_id))
        if not calling:
            calling = {_who(c.state) for c in connected}
        if len(calling) != 1:
            return None
        (principal,) = calling
        return principal

    def _requester(self, server_id: str) -> tuple[ClientConnection | None, Any]:
        """The latest-connected client with a call in flight to the server, and that call's id;
        else the latest-connected client that sees it (no call)."""
        connected = [c for c in self._clients.everyone() if server_id in c.servers]
        for client in reversed(connected):
            for request_id, target in client.calls.items():
                if target == server_id:
                    return client, request_id
        return (connected[-1], None) if connected else (None, None)


def _who(state: object) -> object:
    """A principal, the same in every profile: its key, else (a stdio session) the state itself."""
    principal = getattr(state, "principal", None)
    return principal if isinstance(principal, str) else id(state)


async def _send_log(session: ServerSession, level: Any, data: Any, source: str, related: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging is deprecated in 2026-07-28; still relayed
        await session.send_log_message(level, data, source, related_request_id=related)
