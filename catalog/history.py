"""What one published epoch changed, as the epoch history keeps it: pure, bounded.

Every new epoch is a provider prompt-cache miss for every agent. ``prefixgate catalog
history`` answers "why did my cache miss at 14:02?" after the fact from records made here:
the tools added and removed, and for each changed tool the JSON paths that differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.diff import json_changes
from catalog.model import JSON
from catalog.names import code_unit_key

MAX_TOOLS = 50
"""Tools named per kind of change (the count is always whole)."""
MAX_PATHS = 20
"""JSON paths named per changed tool."""
MAX_PATH_CHARS = 120
"""A JSON path is cut here: its keys are a server's, of any length (a record stays well under
the history file's bound whatever a server lists)."""

Tools = Mapping[str, tuple[str, JSON]]
"""Published name -> (server id, canonical declaration)."""


def epoch_changes(before: Tools | None, after: Tools) -> dict[str, Any]:
    """``{"added": [...], "removed": [...], "changed": [...]}`` between two epochs' tools (all
    of ``after`` added when there was none before), each ``{"tool", "server"}``, a changed one
    with its ``paths``; names in code-unit order, lists cut at ``MAX_TOOLS`` with the counts
    in ``counts``."""
    before = before or {}
    added = sorted(after.keys() - before.keys(), key=code_unit_key)
    removed = sorted(before.keys() - after.keys(), key=code_unit_key)
    changed = sorted((n for n in after.keys() & before.keys() if after[n] != before[n]), key=code_unit_key)

    def ref(name: str, side: Tools) -> dict[str, Any]:
        return {"tool": name, "server": side[name][0]}

    def paths(name: str) -> list[str]:
        found = [_cut(c.path) or "(whole declaration)" for c in json_changes(before[name][1], after[name][1])]
        return found[:MAX_PATHS] + ([f"... {len(found) - MAX_PATHS} more"] if len(found) > MAX_PATHS else [])

    return {
        "counts": {"added": len(added), "removed": len(removed), "changed": len(changed)},
        "added": [ref(n, after) for n in added[:MAX_TOOLS]],
        "removed": [ref(n, before) for n in removed[:MAX_TOOLS]],
        "changed": [{**ref(n, after), "paths": paths(n)} for n in changed[:MAX_TOOLS]],
    }


def _cut(path: str) -> str:
    return path if len(path) <= MAX_PATH_CHARS else path[: MAX_PATH_CHARS - 1] + "…"


def summary(changes: Mapping[str, Any]) -> list[str]:
    """The changes as printable lines (names and paths come from servers: the caller escapes)."""
    lines = []
    for kind in ("added", "removed", "changed"):
        for item in changes.get(kind, ()):
            where = f"{kind} {item['tool']} (server {item['server']})"
            lines.append(where + (": " + ", ".join(item["paths"]) if item.get("paths") else ""))
        shown, count = len(changes.get(kind, ())), changes.get("counts", {}).get(kind, 0)
        if count > shown:
            lines.append(f"... {count - shown} more {kind}")
    return lines
