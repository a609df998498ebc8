"""One cache epoch: the catalog built from the ready servers and the exact bytes it publishes.

An epoch is immutable. ``tools/list`` serves the same pre-built list object for the
whole epoch, so nothing that happens while serving (calls, searches, refusals) can
change a published byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog.build import build
from catalog.model import Catalog, ServerTools
from catalog.names import PROFILES

from gateway.config import Config
from gateway.downstream import Downstream
from gateway.wire import DEFAULT_VERSION, published_tools, wire_problem

META_TOOLS = frozenset({"tool_search", "tool_call", "artifact_read"})
"""Names the gateway serves itself: a downstream tool never takes one."""


@dataclass
class Epoch:
    catalog: Catalog
    declarations: tuple[dict[str, Any], ...]
    """The canonical declarations ``tools/list`` publishes, in order."""
    fingerprint: str
    discovery_ms: int = 0
    """Wall time of the discovery barrier that produced this epoch."""
    _wire: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def published(self, version: str = DEFAULT_VERSION) -> list[dict[str, Any]]:
        """The wire form for a protocol version, built once per epoch and then reused."""
        wire = self._wire.get(version)
        if wire is None:
            wire = self._wire[version] = published_tools(self.declarations, version)
        return wire


def server_tools(config: Config, downstreams: Sequence[Downstream]) -> list[ServerTools]:
    return [
        ServerTools(
            id=d.config.id,
            prefix=d.config.prefix,
            tools=d.tools,
            include=d.config.include,
            exclude=d.config.exclude,
            deferred=d.config.deferred,
        )
        for d in downstreams
        if d.status == "ready"
    ]


def build_epoch(config: Config, downstreams: Sequence[Downstream]) -> Epoch:
    catalog = build(
        server_tools(config, downstreams),
        PROFILES[config.client.profile],
        config.gateway.separator,
        reserved=META_TOOLS,
        extra_check=wire_problem,
    )
    declarations = tuple(entry.declaration for entry in catalog.entries)
    return Epoch(catalog=catalog, declarations=declarations, fingerprint=catalog.fingerprint)
