"""What a result looks like in each protocol era: the 2026-07-28 result type and the cache
hints of the aggregated lists, for the gateway's handlers and the demo server alike."""

from __future__ import annotations

from typing import Any

from mcp.server.caching import CacheHint
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

DEFAULT_VERSION = LATEST_HANDSHAKE_VERSION
LIST_CACHE_FIELDS = {"resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
"""2026-07-28 cache hints of the aggregated lists: the same for every client, and
immediately stale, because a change is announced (list_changed / subscriptions)."""
CACHE_HINTS: dict[Any, CacheHint] = {
    "tools/list": CacheHint(ttl_ms=0, scope="public"),
    "prompts/list": CacheHint(ttl_ms=0, scope="public"),
    "resources/list": CacheHint(ttl_ms=0, scope="public"),
    "resources/templates/list": CacheHint(ttl_ms=0, scope="public"),
    "resources/read": CacheHint(ttl_ms=0, scope="private"),
}
"""The same hints for the SDK to fill in on the results of handlers (gateway and demo server)."""


def with_result_type(result: dict[str, Any], version: str) -> dict[str, Any]:
    """A result as the negotiated era wants it: 2026-07-28 results name their type, and
    a result relayed from a handshake-era server (or built as a plain dict) has none."""
    if version in MODERN_PROTOCOL_VERSIONS:
        result.setdefault("resultType", "complete")
    return result
