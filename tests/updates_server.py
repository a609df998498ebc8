"""A handshake-era stdio server whose change notifications carry ``_meta`` (JSON lines, no SDK).

One resource, ``updates://notes`` (subscribable), a tool ``pid``, and ``touch {meta}``: it sends
``notifications/resources/updated`` for that resource and ``notifications/resources/list_changed``,
each with ``_meta`` = ``meta``, then answers. For tests/test_relay.py: what a client of the
gateway gets of that ``_meta``, as it would directly. With ``UPDATES_SUBSCRIBED_ONLY=1`` it
reports the update only while the resource is subscribed (as a server that keeps the spec's
subscriptions does): for tests/test_instances.py, each principal's process asked itself; with
``UPDATES_EVERY=S`` it also reports the subscribed resource changed every S seconds.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

URI = "updates://notes"
PID = {"name": "pid", "description": "This process's id.", "inputSchema": {"type": "object"}}
SUBSCRIBED_ONLY = os.environ.get("UPDATES_SUBSCRIBED_ONLY") == "1"
subscribed: set[str] = set()
TOUCH = {
    "name": "touch",
    "description": "Report that the notes changed, with the _meta given.",
    "inputSchema": {"type": "object", "properties": {"meta": {"type": "object"}}},
}


_writing = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with _writing:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def tick(every: float) -> None:
    """Report the resource changed every ``every`` seconds while it is subscribed (a change
    nobody asked for by a call: a file edited elsewhere)."""
    while True:
        time.sleep(every)
        if URI in subscribed:
            send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": URI}})


def result(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The answer to a request, or None (not a method it has)."""
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}, "resources": {"subscribe": True, "listChanged": True}},
            "serverInfo": {"name": "updates", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [TOUCH, PID]}
    if method == "resources/list":
        return {"resources": [{"uri": URI, "name": "notes", "mimeType": "text/plain"}]}
    if method == "resources/templates/list":
        return {"resourceTemplates": []}
    if method == "resources/read":
        return {"contents": [{"uri": URI, "mimeType": "text/plain", "text": "notes"}]}
    if method == "resources/subscribe":
        subscribed.add(params.get("uri"))
        return {}
    if method == "resources/unsubscribe":
        subscribed.discard(params.get("uri"))
        return {}
    if method in ("ping", "logging/setLevel"):
        return {}
    if method == "tools/call" and params.get("name") == "pid":
        return {"content": [{"type": "text", "text": str(os.getpid())}]}
    if method == "tools/call":
        meta = (params.get("arguments") or {}).get("meta") or {}
        if URI in subscribed or not SUBSCRIBED_ONLY:
            send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": URI, "_meta": meta}})
        send({"jsonrpc": "2.0", "method": "notifications/resources/list_changed", "params": {"_meta": meta}})
        return {"content": [{"type": "text", "text": "touched"}]}
    return None


def main() -> None:
    if every := float(os.environ.get("UPDATES_EVERY", "0")):
        threading.Thread(target=tick, args=(every,), daemon=True).start()
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if rid is None or method is None:
            continue  # a notification or a response
        answer = result(method, message.get("params") or {})
        if answer is None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "result": answer})


if __name__ == "__main__":
    main()
