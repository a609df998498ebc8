"""``serve --http``: the gateway over streamable HTTP at ``/mcp``.

On every loopback address (all of 127/8, ``::1`` in any spelling, ``localhost``) the
SDK's Host/Origin checks block DNS rebinding, allowing only the bound address and the
usual loopback names with the bound port; any other address requires a bearer token,
checked before a request reaches anything (401 otherwise). A request body must arrive
within ``BODY_TIMEOUT`` seconds (408 otherwise), so a slow client cannot hold a
connection open.

State belongs to the principal that authenticated: each bearer token is one principal
(named by a hash of the token), an unauthenticated loopback gateway has one (``LOCAL``).
Every connection of a principal, handshake-era sessions and 2026-07-28 requests alike,
shares its activation and artifacts; another principal's are out of reach.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.upstream.events import RETRY_MS, BoundedEventStore, SessionScope
from gateway.upstream.listen import listening_socket

log = logging.getLogger("prefixgate.http")

MCP_PATH = "/mcp"
PRINCIPAL = "prefixgate.principal"
"""ASGI scope key: the principal that authenticated the request (``LOCAL`` without tokens)."""
LOCAL = "local"
"""The one principal of an unauthenticated loopback gateway."""


def principal_of_token(token: str) -> str:
    """A bearer token's principal: a hash, never the token (it names state on disk and in logs)."""
    return "token-" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


def principal_of_scope(scope: Any) -> str:
    """The principal ``BearerAuth`` recorded for a request (``LOCAL`` when there is none)."""
    found = scope.get(PRINCIPAL) if isinstance(scope, dict) else None
    return found if isinstance(found, str) else LOCAL


BODY_TIMEOUT = float(os.environ.get("PREFIXGATE_HTTP_BODY_TIMEOUT") or 30.0)
"""Seconds a request body may take to arrive in full (the environment variable exists for tests)."""
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} is out of range")
    return host, number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


class BodyDeadline:
    """Pure ASGI: the whole request body must arrive within ``timeout`` seconds, else 408.

    uvicorn has no body timeout, so a client that sends headers and then nothing would
    hold its connection (and a task) for ever. The body is read here, under the deadline
    and bounded by the SDK's size limit (413 beyond it), then replayed to the app.
    """

    def __init__(self, app: ASGIApp, timeout: float, max_size: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self.app = app
        self.timeout = timeout
        self.max_size = max_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        trailing: Message | None = None
        with anyio.move_on_after(self.timeout) as deadline:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    trailing = message  # the client went away
                    break
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_size:
                    await _plain(send, 413, "request body too large")
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            log.info("request body not received within %g s: 408", self.timeout)
            await _plain(send, 408, f"request body not received within {self.timeout:g} s")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                if trailing is not None:
                    return trailing
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _plain(send: Send, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": text.encode()})


class BearerAuth:
    """Pure ASGI: every HTTP request must carry ``Authorization: Bearer <token>`` with one of
    the tokens; the principal it stands for is recorded in the scope for the handlers."""

    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        self.app = app
        self.expected = [(f"Bearer {t}".encode(), principal_of_token(t)) for t in tokens]

    def _principal(self, given: bytes) -> str | None:
        found = None
        for expected, principal in self.expected:  # every token compared: no early exit
            if hmac.compare_digest(given, expected):
                found = principal
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            principal = self._principal(given)
            scope[PRINCIPAL] = principal
            if principal is None:
                body = json.dumps({"error": "unauthorized", "error_description": "missing or wrong bearer token"})
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="prefixgate"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body.encode()})
                return
        await self.app(scope, receive, send)


async def serve_http(server: Server[Any], listen: str, tokens: Sequence[str]) -> None:
    import uvicorn

    host, port = parse_listen(listen)
    sock = listening_socket(host, port)  # accepting from the moment the URL is printed (uvicorn starts later)
    bound = sock.getsockname()[1]
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=transport_security(host, bound),
        event_store=BoundedEventStore(),
        retry_interval=RETRY_MS,
    )
    app = SessionScope(app)
    app = BodyDeadline(app, BODY_TIMEOUT)
    if tokens:
        app = BearerAuth(app, tokens)
    sys.stdout.write(f"http://{_host_literal(host)}:{bound}{MCP_PATH}\n")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])
