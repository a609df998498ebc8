"""A raw stdio MCP server (handshake era) whose prompts, resources and answers a test sets.

    python tests/surface_server.py '{"prompts": ["p1"], "resources": ["x://1"], ...}'

Keys: ``caps`` (its capabilities), ``prompts``, ``resources``, ``templates`` (names, URIs,
URI templates), ``raw_prompts`` / ``raw_resources`` (items listed as given, for items the
SDK's models refuse), ``overrides`` (method -> the answer's ``result`` or ``error`` member,
``"hang"``: never answered, or ``"exit"``: the process ends). Its one tool, ``emit``, takes
``overrides`` (merged into the server's), ``notifications`` (sent before its answer) and
``progress`` (that many progress notifications for the call's token, sent at once before its
answer), or ``exit`` (the process ends, the call unanswered): how a test changes the server
while it runs. ``log``: a file each request is written to (its method, params and the
process's pid). Each request is answered in a thread of its own, so a hung one holds no other.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

config = json.loads(sys.argv[1])
caps = config.get(
    "caps",
    {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"listChanged": True, "subscribe": True},
        "logging": {},
    },
)
prompts = [{"name": p} for p in config.get("prompts", [])] + config.get("raw_prompts", [])
resources = [{"uri": u, "name": u} for u in config.get("resources", [])] + config.get("raw_resources", [])
templates = [{"uriTemplate": t, "name": t} for t in config.get("templates", [])]
overrides: dict[str, Any] = config.get("overrides", {})
lock = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def handle(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if "log" in config:  # each request's method and params, with this process's pid: one JSON line each
        with open(config["log"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"pid": os.getpid(), "method": method, "params": params}) + "\n")
    if method in overrides:
        override = overrides[method]
        if override == "hang":
            time.sleep(3600)
        if override == "exit":
            os._exit(3)
        return dict(override)
    if method == "initialize":
        info = {"name": "surface", "version": "1"}
        return {"result": {"protocolVersion": params["protocolVersion"], "capabilities": caps, "serverInfo": info}}
    if method == "tools/list":
        return {"result": {"tools": [{"name": "emit", "inputSchema": {"type": "object"}}]}}
    if method == "tools/call":
        arguments = params.get("arguments") or {}
        if arguments.get("exit"):
            os._exit(3)  # (the call unanswered: the gateway sees the process end, and restarts it)
        overrides.update(arguments.get("overrides", {}))
        for notification in arguments.get("notifications", []):
            send({"jsonrpc": "2.0", **notification})
        token = (params.get("_meta") or {}).get("progressToken")
        for step in range(1, arguments.get("progress", 0) + 1):  # all at once, the answer right behind
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": step},
                }
            )
        return {"result": {"content": [{"type": "text", "text": "ok"}]}}
    if method == "prompts/list":
        return {"result": {"prompts": prompts}}
    if method == "resources/list":
        return {"result": {"resources": resources}}
    if method == "resources/templates/list":
        return {"result": {"resourceTemplates": templates}}
    if method in ("ping", "resources/subscribe", "resources/unsubscribe", "logging/setLevel"):
        return {"result": {}}
    return {"error": {"code": -32601, "message": "Method not found"}}


def answer(message: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": message["id"], **handle(message["method"], message.get("params") or {})})


for line in sys.stdin:
    if line.strip():
        message = json.loads(line)
        if "method" in message and "id" in message:
            threading.Thread(target=answer, args=(message,), daemon=True).start()
