"""Where stored tokens came from, found before their first refresh when the token file does
not say (one written before the discovery was stored beside the tokens).

The SDK discovers the authorization server only after a 401; a refresh due before that goes
to the MCP server's own origin (``/token``), refresh token and client secret with it. For a
server whose authorization server is elsewhere (most hosted ones) that sends them to whoever
runs the resource, and fails. So before such a refresh the gateway asks the resource's
metadata (RFC 9728) which authorization server it uses, pinned as a gateway's flow pins it,
and that server's metadata (RFC 8414) for its token endpoint, as the SDK's own flow would.
A resource that publishes no metadata is a 2025-03-26 server, whose authorization server is
its own origin: the SDK's default is right there, and nothing is asked. Pure of I/O: the
caller sends each request :meth:`OriginDiscovery.ask` gives and hands back its answer.
"""

from __future__ import annotations

import time

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    validate_metadata_issuer,
)
from mcp.shared.auth import OAuthToken
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

from gateway.sdk import select_authorization_server


def undiscovered(auth: OAuthClientProvider, tokens: OAuthToken | None) -> bool:
    """The provider is about to refresh ``tokens`` (the ones it holds, or will load from its
    store: it loads them only in its first flow) without knowing its authorization server
    (nothing discovered in this process, nothing stored)."""
    context = auth.context
    expiry = context.token_expiry_time
    if context.oauth_metadata is not None or expiry is None or time.time() <= expiry:
        return False
    return tokens is not None and bool(tokens.refresh_token)


class OriginDiscovery:
    """The resource's metadata, then its authorization server's, into the provider's context."""

    def __init__(self, auth: OAuthClientProvider) -> None:
        self.auth = auth
        self._resource_urls = build_protected_resource_metadata_discovery_urls(None, auth.context.server_url)
        self._metadata_urls: list[str] | None = None
        self._failed: int | None = None
        self._why: str | None = None
        """Why the failed request failed, when no server said (``take``'s ``unanswered``)."""

    def ask(self) -> httpx2.Request | None:
        """The next request to send; None when done (raise OAuthFlowError when the provider
        must not refresh: the authorization server named but not read, the resource unread)."""
        context = self.auth.context
        if self._metadata_urls is None:
            if self._resource_urls:
                return create_oauth_metadata_request(self._resource_urls.pop(0))
            if context.auth_server_url is None:
                if self._failed is not None:
                    why = self._why or f"HTTP {self._failed}"
                    raise OAuthFlowError(f"Protected resource metadata request failed: {why}")
                return None  # no metadata published: a 2025-03-26 server, its own authorization server
            self._metadata_urls = build_oauth_authorization_server_metadata_discovery_urls(
                context.auth_server_url, context.server_url
            )
        if context.oauth_metadata is not None:
            return None
        if self._metadata_urls:
            return create_oauth_metadata_request(self._metadata_urls.pop(0))
        why = f" ({self._why})" if self._why else ""
        server = context.auth_server_url
        raise OAuthFlowError(f"the metadata of its authorization server {server} could not be read{why}")

    async def take(self, response: httpx2.Response, unanswered: str | None = None) -> None:
        """The answer to the last request :meth:`ask` gave; ``unanswered``: why its server gave
        none (unreachable, or its answer too large), which the 503 standing in for it means."""
        context = self.auth.context
        if self._metadata_urls is None:
            if response.status_code >= 500 or response.status_code == 429:
                self._failed, self._why = response.status_code, unanswered
            found = await handle_protected_resource_response(response)
            if found is None:
                return
            expected = resource_url_from_server_url(context.server_url)
            if found.resource and not check_resource_allowed(expected, str(found.resource)):
                raise OAuthFlowError(f"Protected resource {found.resource} does not match expected {expected}")
            context.protected_resource_metadata = found
            context.auth_server_url = select_authorization_server(
                self.auth, [str(url) for url in found.authorization_servers]
            )
            self._resource_urls = []
            return
        ok, metadata = await handle_auth_metadata_response(response)
        if not ok:
            self._metadata_urls = []
            self._why = unanswered
        elif metadata is not None:
            assert context.auth_server_url is not None
            validate_metadata_issuer(metadata, context.auth_server_url)
            context.oauth_metadata = metadata
