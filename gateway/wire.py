"""The one path from catalog declarations to the bytes ``tools/list`` sends.

The SDK re-serialises every result through the negotiated version's wire model (its own
field order, unknown fields dropped). ``serve`` and ``catalog --json`` both go through
``published_tools`` so what the catalog command prints is what clients receive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

DEFAULT_VERSION = LATEST_HANDSHAKE_VERSION
LIST_CACHE_FIELDS = {"resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
"""2026-07-28 cache hints of the aggregated lists: the same for every client, and
immediately stale, because a change is announced (list_changed / subscriptions)."""


def published_tools(declarations: Sequence[dict[str, Any]], version: str = DEFAULT_VERSION) -> list[dict[str, Any]]:
    """The ``tools`` array exactly as the SDK will put it on the wire for ``version``."""
    data: dict[str, Any] = {"tools": list(declarations)}
    if version in MODERN_PROTOCOL_VERSIONS:  # the 2026-07-28 result carries its cache hints
        data.update(LIST_CACHE_FIELDS)
    result = serialize_server_result("tools/list", version, data)
    tools: list[dict[str, Any]] = result["tools"]
    return tools


def wire_problem(declaration: dict[str, Any]) -> str | None:
    """Why the SDK would refuse to send this tool (which would fail the whole page), or None."""
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        try:
            serialize_server_result("tools/list", version, {"tools": [declaration]})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("tools", 0))
            return f"not a valid MCP tool for protocol {version}: {where or 'tool'}: {first.get('msg', 'invalid')}"
    return None
