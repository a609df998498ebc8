"""The innermost HTTP transport toward remote servers: the environment's proxies, one TLS context.

httpx's client sends a request through the proxy its environment names (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``, less ``NO_PROXY``) only when it is given no transport of
its own. The gateway always gives one (its bounds and checks wrap it: ``bounded.py``,
``related.py``, ``oauth.py``), so behind a proxy an SDK client reached a server directly
and the gateway did not. ``EnvironmentRoutes`` routes each request as that client would
have, by its URL (an OAuth authorization server on another host is proxied or not, as
``NO_PROXY`` says).

Every httpx transport made without a TLS context builds one, reading and parsing the
system's CAs (20-90 ms on a 2-core machine), on the event loop: once per connection of
every remote server and OAuth flow, so a server that reconnected stalled every client's
calls that long. One context is built on first use and shared (the environment it reads,
``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, does not change while the gateway runs).
"""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every transport toward a remote server shares: httpx's default."""
    return httpx2.create_ssl_context()


class EnvironmentRoutes(httpx2.AsyncBaseTransport):
    """Each request on the transport httpx's client picks for its URL: the proxy the
    environment names for it, or a direct connection pool."""

    def __init__(self) -> None:
        self._client = httpx2.AsyncClient(verify=tls_context(), trust_env=True)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        transport = self._client._transport_for_url(request.url)  # noqa: SLF001 - the client's own routing
        return await transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self._client.aclose()
