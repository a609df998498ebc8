"""A deliberately misbehaving MCP server (raw JSON lines on stdio) for the hardening tests.

``python tests/rogue_schema.py SPEC`` where SPEC is a JSON object:

- ``tools``: the tool list it serves (schemas with remote ``$ref``s, ReDoS patterns,
  reference cycles, names with newlines or lone surrogates: anything goes);
- ``tools2``: the list served after a call to a tool named ``mutate`` (which also sends
  ``notifications/tools/list_changed``), or, with ``"tools2_after_list": true``, right after
  it answered its first ``tools/list`` (the change then comes while the gateway is still
  starting, or publishing its first catalog);
- ``pads``: ``{tool: [where, bytes]}``: that tool's result has a tiny ``text`` and
  ``bytes`` of padding in ``where``: ``_meta``, ``annotations`` (of the text block),
  ``block_meta`` (``_meta`` of the text block) or ``unknown`` (an unknown result key).

Any other call answers ``{"content": [{"type": "text", "text": "<tool> ran"}]}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def padded(where: str, size: int) -> dict[str, Any]:
    pad = {"pad": "x" * size}
    block: dict[str, Any] = {"type": "text", "text": "ok"}
    result: dict[str, Any] = {"content": [block]}
    if where == "_meta":
        result["_meta"] = pad
    elif where == "annotations":
        block["annotations"] = {"audience": ["user"], "priority": 0.5, "x-pad": "x" * size}
    elif where == "block_meta":
        block["_meta"] = pad
    else:
        result["x-unknown"] = pad
    return result


def main() -> None:
    spec = json.loads(sys.argv[1])
    tools = spec.get("tools", [])
    out = sys.stdout

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    listed = False
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        params = message.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "rogue-schema", "version": "1"},
            }
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}})
            if not listed and spec.get("tools2_after_list"):
                tools = spec["tools2"]
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            listed = True
            continue
        elif method == "tools/call":
            name = params.get("name")
            if name == "mutate" and "tools2" in spec:
                tools = spec["tools2"]
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            pad = spec.get("pads", {}).get(name)
            if pad is not None:
                result = padded(pad[0], int(pad[1]))
            else:
                result = {"content": [{"type": "text", "text": f"{name} ran"}]}
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
