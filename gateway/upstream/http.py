"""``serve --http``: the gateway over streamable HTTP at ``/mcp``, and each profile at ``/mcp/NAME``.

On every loopback address (all of 127/8, ``::1`` in any spelling, ``localhost``) the
SDK's Host/Origin checks block DNS rebinding on every path (``/mcp``, ``/metrics``, the
health probes), allowing only the bound address and the usual loopback names with the
bound port; any other address requires a bearer token,
checked before a request reaches anything (401 otherwise). A request body must arrive
within ``BODY_TIMEOUT`` seconds (408 otherwise), as its head must within ``HEAD_TIMEOUT``
(gateway/upstream/heads.py), so a slow client cannot hold a connection open.

State belongs to the principal that authenticated: each bearer token is one principal
(named by a hash of the token), an unauthenticated loopback gateway has one (``LOCAL``).
Every connection of a principal, handshake-era sessions and 2026-07-28 requests alike,
shares its activation and artifacts; another principal's are out of reach.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import socket
import ssl
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from catalog.text import plural
from gateway.config import env_count, env_number
from gateway.config import is_loopback as is_loopback
from gateway.config import parse_listen as parse_listen
from gateway.downstream.selfloop import HEADER, INSTANCE, REFUSAL
from gateway.engine.shares import Shares
from gateway.jsontext import parsed_aside, scrub_escapes
from gateway.sdk import envelope_refused_in_one_line, handled_post, lifespan_state
from gateway.upstream.coalesce import coalescing_protocol, send_whole
from gateway.upstream.departures import Answer, Departure, Running, refuse
from gateway.upstream.events import RETRY_MS, SESSION_HEADER, BoundedEventStore, marked
from gateway.upstream.heads import parser_name
from gateway.upstream.health import PATHS as HEALTH_PATHS
from gateway.upstream.health import Readiness
from gateway.upstream.health import answer as health_answer
from gateway.upstream.listen import listening_socket

log = logging.getLogger("prefixgate.http")
_SELF_HEADER, _SELF = HEADER.encode(), INSTANCE.encode()
"""(gateway/downstream/selfloop.py) As ASGI gives a header: its name in lower case, its value as sent."""
_SELF_REFUSED = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": REFUSAL}}).encode()

MCP_PATH = "/mcp"
METRICS_PATH = "/metrics"
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode()
PRINCIPAL = "prefixgate.principal"
"""ASGI scope key: the principal that authenticated the request (``LOCAL`` without tokens)."""
LOCAL = "local"
"""The one principal of an unauthenticated loopback gateway."""


@dataclass(frozen=True)
class BearerToken:
    """One line of the token file: a token, and the profiles it may use (None: every one;
    ``default`` names the top-level [client] and [policy])."""

    value: str
    profiles: frozenset[str] | None = None

    def may_use(self, profile: str | None) -> bool:
        return self.profiles is None or (profile or DEFAULT_PROFILE) in self.profiles


DEFAULT_PROFILE = "default"
"""The default profile's name on a token's ``profiles=`` list."""


def endpoint_path(profile: str | None, served: str | None = None) -> str:
    """Where a profile is served: ``/mcp`` for the one a gateway was started with (``served``),
    ``/mcp/NAME`` for each other profile of a gateway serving them all."""
    return MCP_PATH if profile == served else f"{MCP_PATH}/{profile}"


@dataclass
class Endpoint:
    """One profile's MCP endpoint: its session manager and 2026-07-28 lane, and who may use it."""

    manager: Any
    profile: str | None = None
    """The profile served here (None: the default one)."""
    lane: Any = None
    sessions: Any = None
    """The handshake-era session lane (gateway/upstream/sessionlane.py), None when off."""
    barred: Mapping[str, str] = field(default_factory=dict)
    """Principals whose token may not use this profile (403) -> the profiles it may use."""
    handlers: Any = None
    """The profile's ``Handlers`` (gateway/upstream/server.py), told of a 2026-07-28 roots notice."""


def principal_of_token(token: str) -> str:
    """A bearer token's principal: a hash, never the token (it names state on disk and in logs)."""
    return "token-" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


def principal_of_scope(scope: Any) -> str:
    """The principal ``Front`` recorded for a request (``LOCAL`` when there is none)."""
    found = scope.get(PRINCIPAL) if isinstance(scope, dict) else None
    return found if isinstance(found, str) else LOCAL


_ROOTS_CHANGED = "notifications/roots/list_changed"
_ROOTS_NOTICE = f'"{_ROOTS_CHANGED}"'.encode()


async def _roots_notice(endpoint: Endpoint, scope: Scope, body: bytes) -> None:
    """A 2026-07-28 client's ``notifications/roots/list_changed``, which the SDK acknowledges and
    drops (that era defines none: its server asks for roots with each request): the
    handshake-era servers that keep the roots they listed (server-filesystem) are told, as the
    SDK's client would tell them directly (the servers' own era has the notice). Told beside
    the ``202``, which waits for no server."""
    version = next((v for k, v in scope["headers"] if k == _VERSION_HEADER), b"").decode("latin-1")
    handlers = endpoint.handlers
    if handlers is None or handlers.hub.tasks is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
        return
    try:
        decoded = await parsed_aside(body, "a 2026-07-28 notification")
    except (ValueError, RecursionError):
        return
    if type(decoded) is dict and decoded.get("method") == _ROOTS_CHANGED and "id" not in decoded:
        handlers.hub.tasks.start_soon(handlers.tell_roots_changed, principal_of_scope(scope))


BODY_TIMEOUT = env_number("PREFIXGATE_HTTP_BODY_TIMEOUT", 30.0)
"""Seconds a request body may take to arrive in full (the environment variable exists for tests)."""
SESSION_IDLE_TIMEOUT = env_number("PREFIXGATE_HTTP_SESSION_IDLE_TIMEOUT", 30 * 60)
"""Seconds a handshake-era session may stay unused: the SDK's default (the variable exists for tests)."""
REQUESTS_PER_PRINCIPAL = env_count("PREFIXGATE_HTTP_REQUESTS_PER_PRINCIPAL", 64)
"""Requests (POSTed JSON-RPC requests; listen streams aside) one principal may have answered at
once, as a stdio client may (gateway/upstream/stdio.py ``MAX_IN_FLIGHT``): more wait, in the
order they came, for one of its own to end, while another principal's are answered (the
variable exists for tests)."""
SESSIONS_PER_PRINCIPAL = env_count("PREFIXGATE_HTTP_SESSIONS_PER_PRINCIPAL", 256)
"""Handshake-era sessions one principal may hold open at each endpoint: more close its least
recently used idle one (gateway/sdk.py ``PrincipalSessions``; the variable exists for tests)."""
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def _host_literal(host: str) -> str:
    """How ``host`` appears in a Host header: IPv6 in brackets."""
    return f"[{host}]" if ":" in host else host


def transport_security(host: str, port: int) -> TransportSecuritySettings:
    """DNS-rebinding protection for a bind address.

    The SDK switches it on only for the literal ``127.0.0.1``, ``localhost`` and ``::1``,
    so ``127.0.0.2`` or ``[0:0:0:0:0:0:0:1]`` (loopback too, so no token is needed)
    would accept any Host and Origin. Here every loopback bind allows exactly the bound
    address (as given and normalised) and the usual loopback names, with the bound port.
    A non-loopback bind is guarded by the bearer token instead.
    """
    if not is_loopback(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = {_host_literal(host), *_LOOPBACK_NAMES}
    try:
        names.add(_host_literal(str(ipaddress.ip_address(host))))
    except ValueError:
        pass  # localhost
    hosts = sorted(f"{name}:{port}" for name in names)
    if port == 80:
        hosts += sorted(names)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )


def host_in_lower_case(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with the ``Host`` and ``Origin`` values lower-cased (a new list only when
    that changes them).

    Host names are case-insensitive (RFC 9110 7.2, RFC 3986 3.2.2), and so are an origin's
    scheme and host (RFC 6454 4, RFC 3986 3.1), but the SDK's ``TransportSecurityMiddleware``
    compares both headers with its allowed values exactly, so ``Host: LOCALHOST:PORT`` was
    refused 421, and ``Origin: HTTP://LOCALHOST:PORT`` 403, on a loopback bind. Only ASCII
    letters change, and a port is digits (an origin has no path): the scheme and the name
    are what is normalised, so a foreign host is as foreign in any case."""
    for i, (name, value) in enumerate(headers):
        if name in (b"host", b"origin") and (lowered := value.lower()) != value:
            headers = [*headers[:i], (name, lowered), *headers[i + 1 :]]
    return headers


def _in_origin_form(scope: Scope) -> None:
    """An absolute-form request target (``POST http://host:port/mcp``, which a server must
    accept: RFC 9112 3.2.2) as its path: uvicorn's httptools protocol passes the path alone,
    its h11 protocol the whole URL, which was then no path served (404 with h11 alone). The
    Host header stays what the Host/Origin checks read, with either."""
    parts = urlsplit(scope["path"])
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        scope["path"] = parts.path or "/"
        scope["raw_path"] = urlsplit(scope.get("raw_path") or b"").path or b"/"


async def _plain(send: Send, status: int, text: str, *, close: bool = True) -> None:
    """A plain-text answer; ``close``: the connection with it (a body refused or late; a 403
    or 404 given once the body is read keeps it: ``Front._refused``)."""
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if close:
        headers.append((b"connection", b"close"))
    await send_whole(send, status, headers, text.encode())


class Front:
    """The gateway's one ASGI app: auth, the body deadline, the session mark, the endpoint.

    Every HTTP request passes here once (three wrappers and Starlette's routing cost more
    than the call itself):

    - the ``Host`` and ``Origin`` headers are lower-cased for every check after this one
      (``host_in_lower_case``);
    - on a loopback bind, a path the gateway answers itself (health, ``/metrics``, 404) gets
      the Host/Origin check ``/mcp`` gets from the SDK, first (421/403, as there): a
      DNS-rebinding page may read none of them (a health probe on loopback names the bound
      address or a loopback name, which pass);
    - with tokens, ``Authorization: Bearer <token>`` must name one (401 otherwise; every
      token compared, no early exit; the scheme in any case) that may use the profile served
      (403 otherwise, logged with its principal, never the token); a handshake-era session is
      served only to the principal that created it; the principal it stands for goes in the scope;
    - ``/healthz`` and ``/readyz`` (GET or HEAD) are answered first, without a token
      (gateway/upstream/health.py); ``/metrics`` (the Prometheus text format) after the
      token check, when the gateway has tokens (any token may read it);
    - only ``/mcp`` and each profile's ``/mcp/NAME`` are served (404 otherwise), each by its
      own session manager (a session is one profile's);
    - the whole body must arrive within ``timeout`` seconds (408) and within the SDK's size
      limit (413): uvicorn has no body timeout, so a client that sends headers and then
      nothing would hold its connection (and a task) for ever;
    - a 2026-07-28 ``tools/call`` or ``tools/list`` goes to the lane when it claims it
      (gateway/upstream/httplane.py); everything else to the SDK's session manager, with the
      body replayed and the request marked with its session for the event store
      (gateway/upstream/events.py).
    """

    def __init__(
        self,
        endpoints: Mapping[str, Endpoint],
        tokens: Sequence[BearerToken] = (),
        timeout: float = BODY_TIMEOUT,
        max_size: int = DEFAULT_MAX_REQUEST_BODY_SIZE,
        readiness: Readiness | None = None,
        metrics: Any = None,
        requests_per_principal: int = REQUESTS_PER_PRINCIPAL,
        security: TransportSecuritySettings | None = None,
    ) -> None:
        """``endpoints``: path -> the profile served there (``endpoint_path``); ``metrics``: what
        ``/metrics`` serves (``gateway.engine.metrics.Metrics``; None: not served); ``security``:
        the bind's Host/Origin rule (``transport_security``; None: no check), as its endpoints have it."""
        self.metrics = metrics
        self.security = TransportSecurityMiddleware(security)
        self.in_flight = 0
        """POSTs being answered, listen streams aside (``drain`` waits for them)."""
        self.shares = Shares(requests_per_principal)
        """Each principal's requests being answered (``REQUESTS_PER_PRINCIPAL``)."""
        self._quiet: anyio.Event | None = None
        self.routes: dict[str, Endpoint] = {}
        for path, endpoint in endpoints.items():
            self.routes[path] = self.routes[path + "/"] = endpoint
        self.readiness = readiness
        self.expected: dict[bytes, tuple[bytes, str]] = {}
        self.running = Running()
        """Each principal's POSTs being answered, which a token taken away stops."""
        self.set_tokens(tokens)
        self.timeout = timeout
        self.max_size = max_size

    def set_tokens(self, tokens: Sequence[BearerToken]) -> None:
        """The tokens in force, from the next request on (at start, and when the token file
        is read again: gateway/commands/tokenfile.py). A principal whose token is gone, or may
        no longer use a profile, is refused there, its handshake-era sessions and listen
        streams there end (``_end_the_refused``), and its POSTs being answered or waiting their
        turn there stop (``Running``); its state stays in the store (``_put_in_force``)."""
        endpoints = list({id(e): e for e in self.routes.values()}.values())
        before = [self._admitted(endpoint) for endpoint in endpoints]
        self._told_barred: set[tuple[str, str]] = set()
        """(principal, profile) pairs refused with 403 that the log has named."""
        for endpoint in self.routes.values():
            endpoint.barred = {
                principal_of_token(t.value): ",".join(sorted(t.profiles or ()))
                for t in tokens
                if not t.may_use(endpoint.profile)
            }
        self.partial = {principal for endpoint in endpoints for principal in endpoint.barred}
        """Principals barred from some profile served: ``/metrics`` names every profile's servers and tools."""
        self.expected = {
            hashlib.sha256(t.value.encode()).digest(): (t.value.encode(), principal_of_token(t.value)) for t in tokens
        }
        """SHA-256 of each token -> (token, principal)."""
        self.users = {principal: _user(principal) for _, principal in self.expected.values()}
        """What the SDK's session manager binds a session to: the principal that created it."""
        for endpoint, admitted in zip(endpoints, before, strict=True):
            refused = admitted - self._admitted(endpoint)
            _end_the_refused(endpoint, refused)
            if stopped := self.running.stop(id(endpoint), refused, self._refusal):
                log.info("%s stopped: their tokens may no longer use them", plural(stopped, "HTTP request"))

    def admits(self, endpoint: Endpoint, principal: object) -> bool:
        """Whether ``principal``'s token may use ``endpoint`` now (any client may without tokens)."""
        return not self.expected or (principal in self.users and principal not in endpoint.barred)

    def _admitted(self, endpoint: Endpoint) -> set[str]:
        """The principals whose tokens may use ``endpoint`` now."""
        return {principal for _, principal in self.expected.values() if principal not in endpoint.barred}

    def _principal(self, given: bytes) -> str | None:
        """The principal of ``Authorization: Bearer <token>`` (the scheme in any case, RFC 7235).

        Looked up by the given token's SHA-256, then compared in constant time with the one
        token found: what the lookup's time depends on is a digest the caller cannot steer
        towards a token, and one comparison a request whatever the number of tokens (each
        request compared every token, on the loop: ~175 us a request with 1,000 tokens)."""
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer":
            token = b""  # still hashed and compared: the same time either way
        expected, principal = self.expected.get(hashlib.sha256(token).digest(), (b"", None))
        return principal if hmac.compare_digest(token, expected) and token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1000})
            return
        headers = scope["headers"] = host_in_lower_case(scope["headers"])
        if not scope["path"].startswith("/"):
            _in_origin_form(scope)
        if (_SELF_HEADER, _SELF) in headers:
            # (its server's status says so: the SDK's client reads this error out of the 508)
            await send_whole(send, 508, [(b"content-type", b"application/json")], _SELF_REFUSED)
            return
        endpoint = self.routes.get(scope["path"])
        if endpoint is None:  # (an endpoint's session manager and lanes check it themselves)
            refused = await self.security.validate_request(Request(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        if scope["path"] in HEALTH_PATHS and self.readiness is not None:
            await self._health(scope, send, self.readiness)
            return
        if self.expected:
            given = next((v for k, v in headers if k == b"authorization"), b"")
            principal = scope[PRINCIPAL] = self._principal(given)
            if principal is None:
                await _unauthorized(send)
                return
            if endpoint is not None and principal in endpoint.barred:
                served = endpoint.profile or DEFAULT_PROFILE
                if (principal, served) not in self._told_barred:  # (once each: the pairs are the token file's)
                    self._told_barred.add((principal, served))
                    log.warning(
                        "principal %s may not use profile %s (its token's profiles=%s): 403",
                        principal,
                        served,
                        endpoint.barred[principal],
                    )
                await self._refused(headers, receive, send, 403, f"this token may not use profile {served}")
                return
            scope["user"] = self.users[principal]  # another principal's Mcp-Session-Id: 404, as if unknown
        if scope["path"] == METRICS_PATH and self.metrics is not None and scope["method"] in ("GET", "HEAD"):
            if scope.get(PRINCIPAL) in self.partial:
                why = "this token may not read /metrics: it may not use every profile served"
                await self._refused(headers, receive, send, 403, why)
                return
            await self._metrics(scope, send)
            return
        if endpoint is None:
            await self._refused(headers, receive, send, 404, "Not Found")
            return
        body = await self._body(headers, receive, send)
        if body is None:
            return
        body = scrub_escapes(body)  # as every stdio line is: no lone surrogate gets into the gateway
        counted = scope["method"] == "POST" and not await _opens_a_stream(body)
        if counted:
            self.in_flight += 1
        try:
            if counted and self.expected:
                await self._revocable(endpoint, scope, body, headers, receive, send)
            else:
                await self._answer(endpoint, scope, body, headers, receive, send, counted)
        finally:
            if counted:
                self.in_flight -= 1
                if not self.in_flight and self._quiet is not None:
                    self._quiet.set()

    async def _answer(
        self, endpoint: Endpoint, scope: Scope, body: bytes, headers: Any, receive: Receive, send: Send, counted: bool
    ) -> None:
        """Serve the request, a POST (``counted``) once it has one of its principal's places."""
        place: tuple[str, object] | bool = False
        try:
            if counted:
                place = await self._place(scope, body, receive)
                if place is False:
                    return  # its client went away while it waited its turn: nobody to answer
            await self._serve(endpoint, scope, body, headers, receive, send)
        finally:
            if isinstance(place, tuple):
                self.shares.give(*place)

    async def _revocable(
        self, endpoint: Endpoint, scope: Scope, body: bytes, headers: Any, receive: Receive, send: Send
    ) -> None:
        """A POST answered (or waiting its turn) for as long as its token may use the endpoint:
        a token taken away meanwhile (``set_tokens``) stops it, its server told as when its
        client goes, and its client answered with a JSON-RPC error (``departures.refuse``).
        Listen streams and handshake-era sessions end there too (``_end_the_refused``)."""
        principal = scope[PRINCIPAL]
        answer = Answer(send)
        if not self.admits(endpoint, principal):  # (taken away while its body came)
            await refuse(answer, self._refusal(principal), body)
            return
        with self.running.held(principal, id(endpoint)) as task:
            try:
                await self._answer(endpoint, scope, body, headers, receive, answer.send, True)
            except asyncio.CancelledError:
                if (status := self.running.caught(task)) is None:
                    raise
                await refuse(answer, status, body)

    def _refusal(self, principal: str) -> int:
        """The status a principal's next request at an endpoint it may not use gets: 401 for a
        token gone, 403 for one that may not use that profile."""
        return 403 if principal in self.users else 401

    async def _place(self, scope: Scope, body: bytes, receive: Receive) -> tuple[str, object] | bool:
        """One of the request's principal's places (``REQUESTS_PER_PRINCIPAL``); True for a
        message that never waits: an answer or a notification, which a call of the same
        principal may be waiting for (a server's question, a cancellation); False when the
        client went away while its request waited.

        A request whose client is gone is not served when its turn comes: nobody is left to
        read its answer (a 2026-07-28 call would be cancelled as it started, after reaching
        its server), and the requests behind it would wait for it as well. Its whole body is
        read, so the next message ``receive`` gives is the disconnect; watched only while waiting."""
        owner, borrower = principal_of_scope(scope), object()
        if self.shares.take_nowait(owner, borrower):
            return owner, borrower
        if not await _is_request(body):
            return True
        log.debug("principal %s has %d requests being answered: the next waits its turn", owner, self.shares.size)
        departure = Departure(receive)
        departure.watch()
        try:
            await self.shares.take(owner, borrower)  # (a place handed to it as it is cancelled is handed on)
        except asyncio.CancelledError:
            if not departure.caught():
                raise
            log.debug("a client went away while its request waited its turn: not served")
            return False
        finally:
            departure.stop()
        return owner, borrower

    async def quiet(self) -> None:
        """Until no POST is being answered (listen streams aside)."""
        while self.in_flight:
            self._quiet = anyio.Event()
            await self._quiet.wait()

    async def _serve(
        self, endpoint: Endpoint, scope: Scope, body: bytes, headers: Any, receive: Receive, send: Send
    ) -> None:
        session = next((v for k, v in headers if k == SESSION_HEADER), None)
        if scope["method"] == "POST":
            if await self._lanes(endpoint, scope, body, session, receive, send):
                return
            send = envelope_refused_in_one_line(send, body)  # (as the stdio end refuses it)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        with marked(session, principal_of_scope(scope)) as owner:
            if owner.session_id is not None:
                await handled_post(endpoint.manager.handle_request, scope, replay, send)
                return

            async def send_marked(message: Message) -> None:
                if owner.session_id is None and message["type"] == "http.response.start":
                    issued = next((v for k, v in message.get("headers", ()) if k.lower() == SESSION_HEADER), None)
                    if issued is not None:
                        owner.session_id = issued.decode("latin-1")
                    elif message.get("status") == 202 and _ROOTS_NOTICE in body:  # (accepted: every check passed)
                        await _roots_notice(endpoint, scope, body)
                await send(message)

            await handled_post(endpoint.manager.handle_request, scope, replay, send_marked)

    @staticmethod
    async def _lanes(
        endpoint: Endpoint, scope: Scope, body: bytes, session: bytes | None, receive: Receive, send: Send
    ) -> bool:
        """Whether a lane claimed and answered the POST: the 2026-07-28 one
        (gateway/upstream/httplane.py) or, in a handshake-era session, the session lane
        (gateway/upstream/sessionlane.py)."""
        found = next((v for k, v in scope["headers"] if k == _VERSION_HEADER), None)
        if found is None:
            return False
        version = found.decode("latin-1")
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            if endpoint.lane is None:
                return False
            claimed = await endpoint.lane.claim(scope, body)
            if claimed is None:
                return False
            await endpoint.lane.answer(claimed, scope, receive, send)
            return True
        if endpoint.sessions is None or session is None:
            return False
        session_id = session.decode("latin-1")
        handshake = await endpoint.sessions.claim(scope, body, session_id, version)
        if handshake is None:
            return False
        with marked(session, principal_of_scope(scope)):
            await endpoint.sessions.answer(handshake, receive, send)
        return True

    async def _metrics(self, scope: Scope, send: Send) -> None:
        from gateway.engine.metrics import CONTENT_TYPE

        body = await anyio.to_thread.run_sync(self.metrics.text)  # reads the artifact directory now and then
        headers = [(b"content-type", CONTENT_TYPE.encode()), (b"cache-control", b"no-store")]
        await send_whole(send, 200, headers, body, head=scope["method"] == "HEAD")

    @staticmethod
    async def _health(scope: Scope, send: Send, readiness: Readiness) -> None:
        method = scope["method"]
        if method not in ("GET", "HEAD"):
            status, body, extra = 405, b"method not allowed\n", [(b"allow", b"GET, HEAD")]
        else:
            (status, body), extra = await health_answer(scope["path"], readiness.ready), []
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store"), *extra]
        await send_whole(send, status, headers, body, head=method == "HEAD")

    async def _refused(self, headers: Any, receive: Receive, send: Send, status: int, text: str) -> None:
        """A 403 or 404, once the request's body is read whole (within the body's deadline and
        size limit: 408 or 413 otherwise), on a connection kept alive, as a server answering
        directly keeps it: a keep-alive client's next request, or one pipelined behind it, is
        answered. Answered before the body, the connection had to close (the body unread is
        no next request: gateway/upstream/heads.py), and a client that sent its next request
        on it before it saw the close lost that one."""
        if await self._body(headers, receive, send) is not None:
            await _plain(send, status, text, close=False)

    async def _body(self, headers: Any, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None when it was refused (408, 413) and answered here, or when
        the client went away before its end: nothing is left to answer, and its request goes
        nowhere (the SDK's session manager, given the disconnect, logs an error and a
        traceback for each, a client's doing however many).

        A ``content-length`` over the limit is refused before a byte of the body is read, as
        the SDK's ``RequestBodyLimitMiddleware`` does: an honest client is told at once, not
        after uploading the limit, and a slow one holds nothing until the deadline."""
        declared = next((v for k, v in headers if k == b"content-length"), b"")
        # (The HTTP parser refused a malformed one; a length of 16 digits or more is over any limit,
        # and past 4,300 digits not even a Python int.)
        if declared.isdigit() and (len(declared) > 15 or int(declared) > self.max_size):
            await _plain(send, 413, "request body too large")
            return None
        chunks: list[bytes] = []
        size = 0
        # The deadline is a timer that cancels this (uvicorn's) task, not an anyio scope: every
        # request passes here, and a scope's entry and exit cost three times the timer's.
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(self.timeout, expire)
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":  # http.disconnect
                    log.debug("a client went away before its request body was complete")
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_size:
                    break
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except asyncio.CancelledError:
            if not expired or task.uncancel():
                raise  # (cancelled from outside too, in the deadline's turn: that one stands)
        finally:
            timer.cancel()
        # Refused only now, the deadline's timer off: it cannot cut the refusal short, nor a
        # 408 follow a 413 that was being written.
        if not expired:
            del chunks
            await _plain(send, 413, "request body too large")
            return None
        log.info("request body not received within %g s: 408", self.timeout)
        await _plain(send, 408, f"request body not received within {self.timeout:g} s")
        return None


_LISTEN = b"subscriptions/listen"


async def _is_request(body: bytes) -> bool:
    """Whether a POST's body is one JSON-RPC request (a method and an id)."""
    try:
        found = await parsed_aside(body, "a POST body read for its id")
    except (ValueError, RecursionError):
        return False
    return isinstance(found, dict) and "method" in found and "id" in found


async def _opens_a_stream(body: bytes) -> bool:
    """Whether a POST is a 2026-07-28 ``subscriptions/listen``: its stream stays open for as
    long as the client listens, so a drain does not wait for it (as for a GET stream)."""
    if _LISTEN not in body:
        return False
    try:
        found = await parsed_aside(body, "a POST body read for its method")
    except (ValueError, RecursionError):
        return False
    return isinstance(found, dict) and found.get("method") == _LISTEN.decode()


DRAIN_FLUSH = 5.0
"""Seconds the answers written during a drain may take to leave for their clients."""
SETTLE = 2.0
"""Seconds the calls cut at the drain's end may take to be answered, once their servers stopped."""


async def drain(front: Front, server: Any, timeout: float) -> None:
    """What a stop signal does first over HTTP: refuse new connections, then wait up to
    ``timeout`` seconds for the POSTs in flight (not for GET or listen streams, which stay
    open for as long as their clients listen), and for what was written to leave the
    sockets. The caller then stops.

    uvicorn (``server``) is told to shut down gracefully too: it closes its listening
    sockets and idle connections, and closes the others once their answers are complete; it
    would wait for every stream to end, which this does not."""
    server.should_exit = True
    for listening in list(getattr(server, "servers", ())):
        listening.close()
    log.info(
        "stopping: no new connections; %s in flight may finish (up to %g s; the signal again stops at once)",
        plural(front.in_flight, "request"),
        timeout,
    )
    with anyio.move_on_after(timeout):
        await front.quiet()
    if front.in_flight:
        log.warning("stopping with %s still in flight after %g s", plural(front.in_flight, "request"), timeout)
    await _flushed(server)


async def answered(front: Front, server: Any, timeout: float) -> None:
    """After the drain, once every server has stopped: the calls still in flight have ended
    (each an ``isError`` naming its server's exit), so wait up to ``timeout`` seconds for
    those answers to be written, in either era (a handshake-era one goes out on its session's
    stream, a few loop turns later than a 2026-07-28 one), and to leave the sockets."""
    with anyio.move_on_after(timeout):
        await front.quiet()
    await _flushed(server)


def _signal_free_server(config: Any) -> Any:
    """uvicorn's server without handlers of its own for SIGINT and SIGTERM: the gateway's
    (gateway/commands/serve.py) stop it (``drain``). Beside them, uvicorn's raised the
    signal again once it had shut down, which the gateway took for a second one: the stop
    was said twice and done at once, the cut calls' answers not awaited."""
    import uvicorn

    class SignalFree(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return SignalFree(config)


async def _flushed(server: Any) -> None:
    """Until what was written to uvicorn's connections has left (at most ``DRAIN_FLUSH`` s)."""
    connections = getattr(getattr(server, "server_state", None), "connections", ())
    with anyio.move_on_after(DRAIN_FLUSH):
        while any(_unsent(connection) for connection in list(connections)):
            await anyio.sleep(0.02)


def _unsent(connection: Any) -> bool:
    """Whether a connection still holds bytes of an answer (uvicorn's protocol, its transport)."""
    transport = getattr(connection, "transport", None)
    if transport is None:
        return False
    try:
        size = transport.get_write_buffer_size()  # (closing: still sending what it holds)
    except (AttributeError, RuntimeError):
        return False
    return getattr(transport, "_held", None) is not None or size > 0  # (_held: a head waiting, coalesce.py)


def _end_the_refused(endpoint: Endpoint, refused: set[str]) -> None:
    """End what ``refused`` (principals whose tokens may no longer use ``endpoint``) hold open
    there: a stream is served for as long as its client reads it, and refusing the token's next
    request leaves its streams carrying every change, update, log line and server request meant
    for it."""
    if not refused:
        return
    end_sessions = getattr(endpoint.manager, "end_sessions_of", None)  # (gateway/sdk.py ``PrincipalSessions``)
    if end_sessions is not None and (ended := end_sessions(refused)):
        log.info("%s ended: their tokens may no longer use them", plural(ended, "HTTP session"))
    if endpoint.handlers is not None:
        endpoint.handlers.listening.end(refused)


def _user(principal: str) -> Any:
    """The principal as the SDK's session manager reads a request's credential (``scope["user"]``):
    a session is then served only to the principal that created it. It holds the
    principal's name, never the token."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token=principal, client_id=principal, scopes=[]))


async def _unauthorized(send: Send) -> None:
    body = json.dumps({"error": "unauthorized", "error_description": "missing or wrong bearer token"})
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="prefixgate"')]
    await send_whole(send, 401, headers, body.encode())


def server_tls(cert: str, key: str) -> ssl.SSLContext:
    """The TLS context ``serve --http`` serves HTTPS with: the standard library's defaults for a
    server (TLS 1.2 at least), ``cert``'s chain and its ``key`` (PEM files). Raises OSError or
    ssl.SSLError when they cannot be read or do not belong together."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


class TokenSource(Protocol):
    """Where the tokens come from while serving (gateway/commands/tokenfile.py's ``TokenFile``,
    which upstream may not import): the tokens read last, and the slot the front fills with
    what puts new ones in force."""

    @property
    def tokens(self) -> Sequence[BearerToken]: ...

    apply: Callable[[Sequence[BearerToken]], None] | None


def _put_in_force(app: Front, hubs: Sequence[Any], tokens: Sequence[BearerToken]) -> None:
    """The token file's new tokens, from the next request on; the in-memory states of the
    principals whose tokens went are let go (``Clients.forget_principals``)."""
    app.set_tokens(tokens)
    kept = {principal_of_token(t.value) for t in tokens} | {LOCAL}
    for hub in hubs:
        for principal in hub.clients.forget_principals(kept):
            hub.links.forget(principal)
        hub.round_trips.abandon_all_but(kept)


async def serve_http(
    served: Sequence[Any],
    listen: str,
    tokens: Sequence[BearerToken],
    metrics: Any = None,
    signals: Any = None,
    drain_timeout: Callable[[], float] = lambda: 25.0,
    tls: ssl.SSLContext | None = None,
    sock: socket.socket | None = None,
    token_file: TokenSource | None = None,
) -> None:
    """Serve each of ``served`` (one ``Handlers`` per profile, the one started with first: at
    ``/mcp``, the others at ``/mcp/NAME``) until cancelled; over HTTPS with ``tls``; on
    ``sock`` when given (bound to ``listen`` already), else on a socket bound here.
    ``signals.drain`` is set to what a stop signal does first (``drain``, for as long as
    ``drain_timeout()`` says then: a reload may have changed it)."""
    import uvicorn

    from gateway.fastpath import fast_path
    from gateway.sdk import PrincipalSessions

    host, port = parse_listen(listen)
    if sock is None:
        sock = listening_socket(host, port)  # accepting from the moment the URL is printed (uvicorn starts later)
    bound = sock.getsockname()[1]
    security = transport_security(host, bound)
    endpoints: dict[str, Endpoint] = {}
    first = served[0].hub.config.profile
    for handlers in served:
        manager = PrincipalSessions(
            app=handlers.server,
            event_store=BoundedEventStore(),
            retry_interval=RETRY_MS,
            security_settings=security,
            session_idle_timeout=SESSION_IDLE_TIMEOUT,
            per_principal=SESSIONS_PER_PRINCIPAL,
        )
        lane = sessions = None
        if fast_path():
            from gateway.upstream.httplane import ModernLane
            from gateway.upstream.sessionlane import SessionLane

            lane = ModernLane(handlers, security)
            sessions = SessionLane(handlers, manager, security)
        profile = handlers.hub.config.profile
        endpoints[endpoint_path(profile, first)] = Endpoint(manager, profile, lane, sessions, handlers=handlers)
    hubs = [handlers.hub for handlers in served]
    readiness = Readiness(lambda: all(hub.router.epoch is not None for hub in hubs), hubs[0].store)
    if token_file is not None:  # (gateway/commands/tokenfile.py: read again while serving)
        tokens = token_file.tokens
    app = Front(endpoints, tokens, readiness=readiness, metrics=metrics, security=security)
    if token_file is not None:
        token_file.apply = functools.partial(_put_in_force, app, hubs)
    for endpoint in endpoints.values():
        endpoint.handlers.listening.admits = functools.partial(app.admits, endpoint)
    scheme = "https" if tls is not None else "http"
    url = f"{scheme}://{_host_literal(host)}:{bound}{MCP_PATH}"
    try:
        sys.stdout.write(url + "\n")
        sys.stdout.flush()
    except OSError as exc:  # (> /dev/full, a reader gone: the gateway serves all the same)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # (the line still buffered goes nowhere at exit)
        log.warning("serving on %s; that URL could not be written to stdout: %s", url, exc.strerror or exc)
    for path, endpoint in endpoints.items():
        if path != MCP_PATH:
            log.info("profile %s: %s://%s:%d%s", endpoint.profile, scheme, _host_literal(host), bound, path)
    if tls is None and not is_loopback(host):
        log.warning(
            "serving plain HTTP on %s: bearer tokens and tool calls cross the network in the clear "
            "(--tls-cert and --tls-key serve HTTPS; or put a TLS-terminating proxy in front)",
            host,
        )
    parser = parser_name()
    log.debug("HTTP parser: %s", parser)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", access_log=False, http=coalescing_protocol(parser)
    )
    config.load()
    config.ssl = tls  # (uvicorn builds a context only from files and its own defaults)
    async with AsyncExitStack() as stack:
        for endpoint in endpoints.values():
            await stack.enter_async_context(endpoint.manager.run())
            for lane in (endpoint.lane, endpoint.sessions):
                if lane is not None:
                    lane.lifespan = lifespan_state(endpoint.manager)  # as the SDK's entry passes it
        server = uvicorn.Server(config) if signals is None else _signal_free_server(config)
        if signals is not None:
            signals.drain = lambda: drain(app, server, drain_timeout())
            signals.settle = lambda: answered(app, server, SETTLE)
        await server.serve(sockets=[sock])
