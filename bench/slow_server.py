"""A minimal stdio MCP server (standard library only) that takes DELAY seconds to start.

The start-up benchmark uses it to measure what the discovery barrier costs: ten bundled
demo servers on two cores mostly measure ten Python processes importing the mcp SDK
(~0.8 s of CPU each) at once, whatever sits in front of them. This one starts in ~20 ms
plus its delay, like a server that waits on the network or a package download.

    python bench/slow_server.py DELAY NAME
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    delay, name = float(sys.argv[1]), sys.argv[2]
    time.sleep(delay)
    tools = [
        {"name": f"{verb}_{name}", "description": f"{verb} for {name}", "inputSchema": {"type": "object"}}
        for verb in ("echo", "get", "list")
    ]
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        method = message.get("method")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"].get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": name, "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": json.dumps(message["params"].get("arguments"))}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
