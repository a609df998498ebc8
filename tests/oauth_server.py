"""An OAuth-protected MCP server on loopback, for the OAuth tests.

Built with the mcp SDK's server auth helpers: ``MCPServer`` with an in-memory
authorization server (``OAuthAuthorizationServerProvider``) that registers any client
dynamically, approves every authorization at once (it redirects straight back to the
client's redirect URI with a code, as the conformance suite's test server does), and
issues short-lived access tokens with rotating refresh tokens. Its protected resource
metadata points at itself as the authorization server. Both protocol eras are served on
``/mcp`` (streamable HTTP), or the handshake era on ``/sse`` with ``--transport sse``.

Usage: ``python tests/oauth_server.py [--transport http|sse] [--lifetime S] [--scopes a,b]
[--client-credentials ID:SECRET] [--revocable] ...`` (``--help`` lists every option);
prints its endpoint URL on stdout once bound. Every secret it issues (access token,
refresh token, client secret) is appended as one JSON line to ``$OAUTH_SERVER_LOG`` when
set, so tests can look for the exact strings in what the gateway prints.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
import time
from typing import Any

import anyio
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

PRESENTED = "refresh_token presented"
"""The log's kind for a refresh token presented at ``/token`` (not a secret issued)."""


def _record(kind: str, value: str | None) -> None:
    path = os.environ.get("OAUTH_SERVER_LOG")
    if path and value:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"kind": kind, "value": value}) + "\n")


class ApprovingProvider:
    """An authorization server that says yes at once (no login page, no consent)."""

    def __init__(self, lifetime: int, scopes: list[str]) -> None:
        self.lifetime = lifetime
        self.scopes = scopes
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.tail = ""
        """Appended to each access token issued (``--sloppy``: a newline)."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        # Registered for every scope this server knows (RFC 7591 lets it replace the request):
        # a later step-up asks the same client for more.
        client_info.scope = " ".join(self.scopes)
        self.clients[client_info.client_id] = client_info
        _record("client_secret", client_info.client_secret)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        found = self.codes.get(code)
        return found if found is not None and found.client_id == client.client_id else None

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.lifetime,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        _record("access_token", access)
        _record("refresh_token", refresh)
        return OAuthToken(
            access_token=access + self.tail, expires_in=self.lifetime, scope=" ".join(scopes), refresh_token=refresh
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(code.code, None)
        return self._issue(code.client_id, code.scopes, code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        _record(PRESENTED, refresh_token)  # (each refresh, refused or not: tests count them)
        found = self.refresh.get(refresh_token)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError(error="invalid_grant", error_description="refresh token already used")
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def replaying(body: bytes, receive: Any) -> Any:
    """A ``receive`` that hands the already-read body to the wrapped app first."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def with_client_credentials(app: Any, provider: ApprovingProvider, client_id: str, secret: str) -> Any:
    """The app, with ``grant_type=client_credentials`` answered at ``/token`` for one
    pre-registered client (HTTP Basic or form credentials); the SDK's token handler has no such
    grant, so it is answered here, before the request reaches it."""
    import base64
    from urllib.parse import parse_qs, unquote

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await read_body(receive)
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if form.get("grant_type") != "client_credentials":
            await app(scope, replaying(body, receive), send)
            return
        headers = dict(scope["headers"])
        given = (form.get("client_id"), form.get("client_secret"))
        basic = headers.get(b"authorization", b"").decode()
        if basic.lower().startswith("basic "):
            user, _, password = base64.b64decode(basic[6:]).decode().partition(":")
            given = (unquote(user), unquote(password))
        if given != (client_id, secret):
            status, payload = 401, {"error": "invalid_client"}
        else:
            scopes = form.get("scope", "").split() or ["mcp:read"]
            token = provider._issue(client_id, scopes, form.get("resource"))
            status, payload = 200, token.model_dump(exclude_none=True)
        data = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-store")],
            }
        )
        await send({"type": "http.response.body", "body": data})

    return wrapped


OUTAGE_UNTIL = [0.0]
"""``--outages``: until when (``time.monotonic``) ``/token`` answers 503."""


def with_token_outages(app: Any) -> Any:
    """The app, its token endpoint answering 503 while an outage asked for by the
    ``token_outage`` tool lasts (the rest keeps serving)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/token" and time.monotonic() < OUTAGE_UNTIL[0]:
            await send({"type": "http.response.start", "status": 503, "headers": [(b"retry-after", b"1")]})
            await send({"type": "http.response.body", "body": b"token service unavailable"})
            return
        await app(scope, receive, send)

    return wrapped


def with_metadata_outage(app: Any, flag: str) -> Any:
    """The app, its protected-resource metadata answering 503 while the file ``flag`` exists."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/.well-known/oauth-protected-resource")
            and os.path.exists(flag)
        ):
            await send({"type": "http.response.start", "status": 503, "headers": [(b"retry-after", b"1")]})
            await send({"type": "http.response.body", "body": b"metadata unavailable"})
            return
        await app(scope, receive, send)

    return wrapped


def with_metadata_too_large(app: Any, flag: str) -> Any:
    """The app, its protected-resource metadata answering 2 MiB (over the gateway's 1 MiB cap
    on such answers) while the file ``flag`` exists."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/.well-known/oauth-protected-resource")
            and os.path.exists(flag)
        ):
            body = b" " * (2 << 20)
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return wrapped


def with_token_redirect(app: Any, flag: str) -> Any:
    """The app, its token endpoint answering 307 to the URL in the file ``flag`` while it exists."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/token" and os.path.exists(flag):
            with open(flag, encoding="utf-8") as f:
                location = f.read().strip()
            await send({"type": "http.response.start", "status": 307, "headers": [(b"location", location.encode())]})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return wrapped


def with_open_listing(app: Any, provider: ApprovingProvider) -> Any:
    """The app, every request but a ``tools/call`` served without a token (as if presented one
    of this server's own): its tools listed to anyone, called only with a login."""
    listing = "listing-" + secrets.token_urlsafe(8)
    provider.access[listing] = AccessToken(token=listing, client_id="anyone", scopes=provider.scopes)

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or any(k.lower() == b"authorization" for k, _ in scope["headers"]):
            await app(scope, receive, send)
            return
        body = await read_body(receive)
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        if not (isinstance(request, dict) and request.get("method") == "tools/call"):
            scope = {**scope, "headers": [*scope["headers"], (b"authorization", f"Bearer {listing}".encode())]}
        await app(scope, replaying(body, receive), send)

    return wrapped


def with_token_page(app: Any, flag: str) -> Any:
    """The app, its token endpoint answering 200 with the content of the file ``flag`` (a
    proxy's sign-in page, say: no token) while it exists."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/token" and os.path.exists(flag):
            with open(flag, "rb") as f:
                page = f.read()
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
            await send({"type": "http.response.body", "body": page})
            return
        await app(scope, receive, send)

    return wrapped


def with_token_hold(app: Any, flag: str) -> Any:
    """The app, a request to its token endpoint held while the file ``flag`` exists (``flag``
    + ``.held`` is created once one is held), then answered as usual."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/token" and os.path.exists(flag):
            with open(flag + ".held", "w"):
                pass
            while os.path.exists(flag):
                await anyio.sleep(0.05)
        await app(scope, receive, send)

    return wrapped


def with_step_up(app: Any, provider: ApprovingProvider, tool: str, scope: str) -> Any:
    """The app, answering a ``tools/call`` of ``tool`` with 403 ``insufficient_scope`` (naming
    ``scope``) when the presented token lacks that scope: a step-up challenge."""

    async def wrapped(scope_: Any, receive: Any, send: Any) -> None:
        if scope_["type"] != "http" or scope_["method"] != "POST":
            await app(scope_, receive, send)
            return
        body = await read_body(receive)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        token = dict(scope_["headers"]).get(b"authorization", b"").decode().removeprefix("Bearer ")
        held = provider.access.get(token)
        wanted = (
            isinstance(request, dict)
            and request.get("method") == "tools/call"
            and (request.get("params") or {}).get("name") == tool
        )
        if wanted and held is not None and scope not in held.scopes:
            challenge = f'Bearer error="insufficient_scope", scope="{" ".join([*held.scopes, scope])}"'
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [(b"www-authenticate", challenge.encode()), (b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"error": "insufficient_scope"}'})
            return
        await app(scope_, replaying(body, receive), send)

    return wrapped


def with_slow_discovery(app: Any, seconds: float) -> Any:
    """The app, its ``/.well-known/...`` answers each ``seconds`` late."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/.well-known/"):
            await anyio.sleep(seconds)
        await app(scope, receive, send)

    return wrapped


HUGE_TOKEN_ANSWERS = [False]
"""``--sloppy-later``: the tool ``huge_token_answers`` makes ``/token`` declare a 10 MB answer."""


def with_huge_token_answers(app: Any) -> Any:
    """The app, its token endpoint declaring (``content-length``) a 10 MB answer once asked to."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/token" or not HUGE_TOKEN_ANSWERS[0]:
            await app(scope, receive, send)
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", b"10485760")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{", "more_body": True})  # (and no more)

    return wrapped


def with_huge_metadata(app: Any, compressed: bool = False) -> Any:
    """Every ``/.well-known/...`` answer is 5 MB of JSON, sent in chunks without a length;
    ``compressed``: gzip-encoded, 5 KB on the wire."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/.well-known/"):
            await app(scope, receive, send)
            return
        if compressed:
            import gzip

            body = gzip.compress(b'{"pad": "' + b"x" * (5 << 20) + b'"}')
            headers = [(b"content-type", b"application/json"), (b"content-encoding", b"gzip")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"pad": "', "more_body": True})
        for _ in range(80):
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        await send({"type": "http.response.body", "body": b'"}'})

    return wrapped


def with_hostile_metadata(app: Any, flag: str, resource: str, evil: str) -> Any:
    """The app turned hostile while the file ``flag`` exists: its protected-resource metadata
    names ``evil`` (another origin) as the authorization server, and every MCP request is
    answered 401 (so a client discovers again)."""
    metadata = json.dumps({"resource": resource, "authorization_servers": [evil]}).encode()
    challenge = f'Bearer error="invalid_token", resource_metadata="{resource.rsplit("/", 1)[0]}'
    challenge += f'/.well-known/oauth-protected-resource/{resource.rsplit("/", 1)[1]}"'

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not os.path.exists(flag):
            await app(scope, receive, send)
            return
        if scope["path"].startswith("/.well-known/oauth-protected-resource"):
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": metadata})
            return
        if scope["path"].startswith("/.well-known/"):
            await app(scope, receive, send)
            return
        await read_body(receive)
        headers = [(b"www-authenticate", challenge.encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})

    return wrapped


def evil_authorization_server(evil: str) -> Any:
    """An authorization server on an origin of its own, named by a hostile resource: it
    publishes its metadata, registers anyone, refuses every token request, and appends each
    request other than its metadata (path, Authorization header, body) to ``$OAUTH_EVIL_LOG``."""
    metadata = json.dumps(
        {
            "issuer": evil,
            "authorization_endpoint": evil + "/authorize",
            "token_endpoint": evil + "/token",
            "registration_endpoint": evil + "/register",
            "response_types_supported": ["code"],
        }
    ).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path = scope["path"]
        if path == "/.well-known/oauth-authorization-server":
            status, answer = 200, metadata
        else:
            if log := os.environ.get("OAUTH_EVIL_LOG"):
                authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
                entry = {"path": path, "authorization": authorization, "body": body.decode(errors="replace")}
                with open(log, "a", encoding="utf-8") as out:
                    out.write(json.dumps(entry) + "\n")
            if path == "/register":
                status, answer = 201, json.dumps({**json.loads(body or b"{}"), "client_id": "evil-client"}).encode()
            else:
                status, answer = 400, b'{"error": "invalid_grant"}'
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": answer})

    return app


def resource_front(base: str, front: str, path: str, moved: bool = False) -> Any:
    """The MCP server as most hosted ones are: the resource (``front``) on another origin than
    its authorization server (``base``, this process's own). ``path`` is proxied to the real
    endpoint; its protected-resource metadata names ``base`` as the authorization server; every
    other request (its own ``/token``, which does not exist) gets 404 and is appended, as its
    path and form keys, to ``$OAUTH_FRONT_LOG`` when set. ``moved``: the metadata's well-known
    paths answer 307 to ``/moved`` + the path, on the same origin, which serves it."""
    import httpx2

    client = httpx2.AsyncClient(timeout=None)
    metadata = json.dumps({"resource": front + path, "authorization_servers": [base]}).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if moved and scope["path"].startswith("/.well-known/oauth-protected-resource"):
            location = ("/moved" + scope["path"]).encode()
            await send({"type": "http.response.start", "status": 307, "headers": [(b"location", location)]})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["path"].startswith("/moved" if moved else "/.well-known/oauth-protected-resource"):
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": metadata})
            return
        if scope["path"] != path:
            if log := os.environ.get("OAUTH_FRONT_LOG"):
                keys = sorted(k.partition("=")[0] for k in body.decode(errors="replace").split("&") if k)
                with open(log, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"path": scope["path"], "form": keys}) + "\n")
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"not here"})
            return
        skip = (b"host", b"content-length")
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.lower() not in skip]
        request = client.build_request(scope["method"], base + path, headers=headers, content=body)
        response = await client.send(request, stream=True)
        dropped = ("content-length", "transfer-encoding", "www-authenticate", "connection")
        out = [(k.encode(), v.encode()) for k, v in response.headers.multi_items() if k.lower() not in dropped]
        if response.status_code in (401, 403):
            challenge = (
                f'Bearer error="invalid_token", resource_metadata="{front}/.well-known/oauth-protected-resource"'
            )
            out.append((b"www-authenticate", challenge.encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await response.aclose()
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--transport", choices=("http", "sse"), default="http")
    p.add_argument("--lifetime", type=int, default=3600, help="access token lifetime in seconds")
    p.add_argument("--scopes", default="mcp:read", help="comma-separated scopes the resource requires")
    p.add_argument("--client-credentials", metavar="ID:SECRET", help="also answer the client_credentials grant")
    p.add_argument("--step-up", metavar="SCOPE", help="tool 'admin' needs this scope too (403 insufficient_scope)")
    p.add_argument("--sloppy", action="store_true", help="issue access tokens with a trailing newline")
    p.add_argument("--sloppy-later", action="store_true", help="tool 'go_sloppy' makes the next tokens sloppy")
    p.add_argument("--huge-token", action="store_true", help="issue 200 KB access tokens (under the 1 MiB answer cap)")
    p.add_argument("--revocable", action="store_true", help="tool 'revoke' drops tokens server-side")
    p.add_argument("--huge-metadata", action="store_true", help="answer metadata discovery with 5 MB, chunked")
    p.add_argument("--gzip-metadata", action="store_true", help="the same 5 MB, gzip-encoded (5 KB on the wire)")
    p.add_argument("--outages", action="store_true", help="tool 'token_outage' makes /token answer 503 a while")
    p.add_argument("--metadata-outage", metavar="FILE", help="resource metadata answers 503 while FILE exists")
    p.add_argument("--metadata-too-large", metavar="FILE", help="resource metadata answers 2 MiB while FILE exists")
    p.add_argument("--token-redirect", metavar="FILE", help="/token answers 307 to the URL in FILE while it exists")
    p.add_argument("--hold-token", metavar="FILE", help="/token requests wait while FILE exists")
    p.add_argument("--open-listing", action="store_true", help="only tools/call needs a token")
    p.add_argument("--token-page", metavar="FILE", help="/token answers 200 with FILE's content while it exists")
    p.add_argument(
        "--hostile",
        metavar="FILE",
        help="while FILE exists, the resource metadata names an authorization server of another origin",
    )
    p.add_argument("--slow-discovery", type=float, default=0.0, help="answer metadata discovery this many s late")
    p.add_argument("--json-response", action="store_true", help="answer each POST with JSON, once its result is ready")
    p.add_argument(
        "--front",
        action="store_true",
        help="serve the MCP endpoint from another origin (printed), this one only its authorization server",
    )
    p.add_argument("--front-moved", action="store_true", help="the front's metadata redirects (307) within its origin")
    args = p.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    path = "/mcp" if args.transport == "http" else "/sse"
    scopes = [s for s in args.scopes.split(",") if s]
    provider = ApprovingProvider(args.lifetime, [*scopes, *([args.step_up] if args.step_up else [])])
    if args.sloppy:
        provider.tail = "\n"
    if args.huge_token:
        provider.tail = "x" * (200 << 10)
    server: MCPServer[Any] = MCPServer(
        "oauth-demo",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=base + path,
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=provider.scopes),
            required_scopes=scopes,
            validate_token_resource=False,
        ),
    )

    @server.tool()
    def echo(text: str) -> str:
        """Echo text."""
        return text

    @server.tool()
    def whoami() -> str:
        """Which client and scopes the presented access token belongs to."""
        token = get_access_token()
        return f"client={token.client_id if token else None} scopes={' '.join(token.scopes) if token else ''}"

    @server.tool()
    def admin() -> str:
        """A tool that may need a wider grant (--step-up)."""
        return "admin done"

    released = anyio.Event()

    @server.tool()
    async def hold() -> str:
        """Answer once ``release`` is called (a call that lasts until another one comes)."""
        await released.wait()
        return "released"

    @server.tool()
    def release() -> str:
        """Let every ``hold`` call answer."""
        released.set()
        return "done"

    if args.revocable:

        @server.tool()
        def revoke(everything: bool = False) -> str:
            """Drop the presented access token here, as a restart or a revocation would (with
            everything=true every refresh token too): its expiry says it is still good."""
            token = get_access_token()
            if token is not None:
                provider.access.pop(token.token, None)
            if everything:
                provider.refresh.clear()
            return "revoked"

    if args.sloppy_later:

        @server.tool()
        def go_sloppy(tail: str = "\n") -> str:
            """From now on, issue access tokens with this appended (a newline: not a header value)."""
            provider.tail = tail
            return "sloppy"

        @server.tool()
        def huge_token_answers() -> str:
            """From now on, the token endpoint declares a 10 MB answer."""
            HUGE_TOKEN_ANSWERS[0] = True
            return "huge"

    if args.outages:

        @server.tool()
        def token_outage(seconds: float) -> str:
            """Make the token endpoint answer 503 for this many seconds."""
            OUTAGE_UNTIL[0] = time.monotonic() + seconds
            return "down"

    app = server.streamable_http_app(json_response=args.json_response) if args.transport == "http" else server.sse_app()
    if args.step_up:
        app = with_step_up(app, provider, "admin", args.step_up)
    if args.client_credentials:
        client_id, _, secret = args.client_credentials.partition(":")
        app = with_client_credentials(app, provider, client_id, secret)
    if args.huge_metadata or args.gzip_metadata:
        app = with_huge_metadata(app, compressed=args.gzip_metadata)
    if args.outages:
        app = with_token_outages(app)
    if args.sloppy_later:
        app = with_huge_token_answers(app)
    if args.slow_discovery:
        app = with_slow_discovery(app, args.slow_discovery)
    if args.metadata_outage:
        app = with_metadata_outage(app, args.metadata_outage)
    if args.metadata_too_large:
        app = with_metadata_too_large(app, args.metadata_too_large)
    if args.token_redirect:
        app = with_token_redirect(app, args.token_redirect)
    if args.hold_token:
        app = with_token_hold(app, args.hold_token)
    if args.open_listing:
        app = with_open_listing(app, provider)
    if args.token_page:
        app = with_token_page(app, args.token_page)
    servers = []
    if args.hostile:
        evil_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        evil_sock.bind(("127.0.0.1", 0))
        evil_sock.listen(128)
        evil = f"http://127.0.0.1:{evil_sock.getsockname()[1]}"
        evil_app = evil_authorization_server(evil)
        servers.append((uvicorn.Server(uvicorn.Config(evil_app, log_level="warning", lifespan="off")), evil_sock))
        app = with_hostile_metadata(app, args.hostile, base + path, evil)
    servers.append((uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")), sock))
    printed = base + path
    if args.front:
        front_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        front_sock.bind(("127.0.0.1", 0))
        front_sock.listen(128)
        front = f"http://127.0.0.1:{front_sock.getsockname()[1]}"
        front_app = resource_front(base, front, path, args.front_moved)
        servers.append((uvicorn.Server(uvicorn.Config(front_app, log_level="warning", lifespan="off")), front_sock))
        printed = front + path
    sys.stdout.write(printed + "\n")
    sys.stdout.flush()

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            for server_, bound in servers:
                tg.start_soon(server_.serve, [bound])

    anyio.run(serve)


if __name__ == "__main__":
    main()
