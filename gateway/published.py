"""The one path from catalog declarations to the bytes ``tools/list`` sends.

The SDK re-serialises every result through the negotiated version's wire model (its own
field order, unknown fields dropped). ``serve`` and ``catalog --json`` both go through
``published_tools`` so what the catalog command prints is what clients receive.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic_core
from mcp_types.methods import SERVER_RESULTS, serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from catalog.schema import sort_keys
from gateway.eras import DEFAULT_VERSION, LIST_CACHE_FIELDS


class PublishedTools(list[dict[str, Any]]):
    """The ``tools`` array of one epoch and protocol version, and its JSON encoded once.

    A 5,000-tool list is megabytes; re-encoding it on every ``tools/list`` cost ~20 ms of
    CPU. The stdio end splices these bytes into the response (gateway/upstream/stdio.py);
    they are what pydantic's serializer, which the SDK uses, writes for the same list.
    Never mutated once published.
    """

    __slots__ = ("_encoded",)

    def __init__(self, tools: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(tools)
        self._encoded: bytes | None = None

    def encoded(self) -> bytes:
        if self._encoded is None:
            self._encoded = pydantic_core.to_json(self)
        return self._encoded


def published_tools(declarations: Sequence[dict[str, Any]], version: str = DEFAULT_VERSION) -> PublishedTools:
    """The ``tools`` array exactly as the SDK will put it on the wire for ``version``."""
    data: dict[str, Any] = {"tools": list(declarations)}
    if version in MODERN_PROTOCOL_VERSIONS:  # the 2026-07-28 result carries its cache hints
        data.update(LIST_CACHE_FIELDS)
    result = serialize_server_result("tools/list", version, data)
    # The SDK's models emit fields in their own order (a schema's root as properties,
    # required, type, ...); published bytes are canonical: keys sorted at every depth.
    return PublishedTools([sort_keys(tool) for tool in result["tools"]])


@functools.cache
def _checked_versions() -> tuple[str, ...]:
    """The handshake versions whose ``tools/list`` wire model differs from every earlier one's.

    Several versions share one model; validating a tool against the same model again can
    only repeat the first verdict, so the first version of each model stands for the rest."""
    seen: list[Any] = []
    versions = []
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        model = SERVER_RESULTS[("tools/list", version)]
        if not any(model is other for other in seen):
            seen.append(model)
            versions.append(version)
    return tuple(versions)


_FREE_TEXT = frozenset({"name", "title", "description"})
"""Tool fields every wire model takes as any string: their text cannot change a verdict."""
_MAX_SHAPES = 4096
_verdicts: dict[tuple[bytes | str, ...], str | None] = {}
"""Verdicts by shape: the declaration's canonical members, free text left out (bounded)."""


def wire_problem(declaration: dict[str, Any], members: Mapping[str, bytes] | None = None) -> str | None:
    """Why the SDK would refuse to send this tool (which would fail the whole page), or None.

    ``members`` (the declaration's canonical members, ``catalog.canonical.members``) lets
    tools that differ only in their names and descriptions share one verdict: a catalog of
    thousands of tools has far fewer shapes, and pydantic costs ~10 µs a tool and version.
    """
    if not members:
        return _problem(declaration, header=True)
    shape = tuple(
        [k if k in _FREE_TEXT and isinstance(declaration[k], str) else v for k, v in sorted(members.items())]
    )
    if shape not in _verdicts:
        if len(_verdicts) >= _MAX_SHAPES:
            _verdicts.clear()
        # No x-mcp-header key can hide from the canonical bytes (keys are never escaped differently).
        _verdicts[shape] = _problem(declaration, header=b'"x-mcp-header"' in members.get("inputSchema", b""))
    return _verdicts[shape]


def _problem(declaration: dict[str, Any], header: bool) -> str | None:
    for version in _checked_versions():
        try:
            serialize_server_result("tools/list", version, {"tools": [declaration]})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("tools", 0))
            return f"not a valid MCP tool for protocol {version}: {where or 'tool'}: {first.get('msg', 'invalid')}"
    if not header:
        return None
    from mcp.shared.inbound import find_invalid_x_mcp_header

    found = find_invalid_x_mcp_header(declaration.get("inputSchema"))
    if found is not None:
        return f"invalid x-mcp-header ({found}): 2026-07-28 clients must drop such a tool"
    return None
