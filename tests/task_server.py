"""A server whose tools run only as tasks (SEP-1686), misbehaving: raw JSON lines on a pipe.

It declares ``tasks.requests.tools.call`` and lists four task-only tools, each made as a
task when called with one:

- ``hang``: its ``tasks/result`` is never answered (the call's client gives up);
- ``flood_status``: ``tasks/result`` first sends ``n`` ``notifications/tasks/status`` of
  ``size`` bytes each, then the result;
- ``no_task``: the ``tools/call`` is answered with a plain result, whatever its ``task``;
- ``bad_result``: ``tasks/result`` is answered with a JSON number.

and a plain tool, ``cancelled``, that names the tasks ``tasks/cancel`` was sent for.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TASK_ONLY = {"taskSupport": "required"}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "size": {"type": "integer"}}}
TOOLS = [
    *(
        {"name": name, "inputSchema": SCHEMA, "execution": TASK_ONLY}
        for name in ("hang", "flood_status", "no_task", "bad_result")
    ),
    {"name": "cancelled", "inputSchema": {"type": "object"}},
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def main() -> None:
    tasks: dict[str, tuple[str, dict[str, Any]]] = {}
    cancelled: list[str] = []
    for line in sys.stdin:
        msg = json.loads(line)
        method, request_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if request_id is None:
            continue  # a notification
        result: Any
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}},
                "serverInfo": {"name": "tasks", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call" and params.get("name") == "cancelled":
            result = text(" ".join(cancelled) or "none")
        elif method == "tools/call" and params.get("name") == "no_task":
            result = text("answered without a task")
        elif method == "tools/call" and "task" in params:
            task_id = f"task-{len(tasks) + 1}"
            tasks[task_id] = (params["name"], params.get("arguments") or {})
            result = {
                "task": {"taskId": task_id, "status": "working", "ttl": 60000, "createdAt": "", "lastUpdatedAt": ""}
            }
        elif method == "tasks/result":
            name, args = tasks[params["taskId"]]
            if name == "hang":
                continue
            if name == "bad_result":
                send({"jsonrpc": "2.0", "id": request_id, "result": 42})
                continue
            for n in range(args.get("n", 0)):
                status = {
                    "taskId": params["taskId"],
                    "status": "working",
                    "statusMessage": f"{n} " + "x" * args.get("size", 0),
                }
                send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": status})
            result = text(f"{name} done")
        elif method == "tasks/cancel":
            cancelled.append(params["taskId"])
            result = {
                "taskId": params["taskId"],
                "status": "cancelled",
                "ttl": 60000,
                "createdAt": "",
                "lastUpdatedAt": "",
            }
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": request_id, "result": result})


if __name__ == "__main__":
    main()
