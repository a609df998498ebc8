"""``serve --http``: the gateway over streamable HTTP at ``/mcp``.

On a loopback address the SDK's Host/Origin checks block DNS rebinding; any other
address requires a bearer token, checked before a request reaches anything (401
otherwise). Each HTTP session (``Mcp-Session-Id``) is its own client to the hub, with
its own activation state and artifacts.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import sys
from typing import Any

from mcp.server.lowlevel import Server
from starlette.types import ASGIApp, Receive, Scope, Send

MCP_PATH = "/mcp"


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


class BearerAuth:
    """Pure ASGI: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
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


async def serve_http(server: Server[Any], listen: str, token: str | None) -> None:
    import uvicorn

    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # accept from the moment the URL is printed (uvicorn starts a little later)
    bound = sock.getsockname()[1]
    app: ASGIApp = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    if token is not None:
        app = BearerAuth(app, token)
    shown = f"[{host}]" if ":" in host else host
    sys.stdout.write(f"http://{shown}:{bound}{MCP_PATH}\n")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])
