"""The FastMCP contender: FastMCP's proxy served over stdio, as its users run it.

    python -m bench.fastmcp_proxy CONFIG.json [--reuse]

CONFIG.json is an MCP config (``{"mcpServers": {name: {"command", "args"}}}``).

- default: ``fastmcp.server.create_proxy(config)``, FastMCP's recommended call. With one
  server it keeps that server's process and session alive between requests; with two or
  more it builds a composite router per request, connecting (spawning) every backend for
  each request.
- ``--reuse``: FastMCP's session-reuse setting: a ``fastmcp.Client(config)`` connected once
  and handed to ``create_proxy``, which then reuses that session for every request
  (FastMCP logs that this may mix request contexts under concurrency).

This module runs in the interpreter that has ``fastmcp`` (the ``bench`` extra); it never
imports prefixgate, so it can run from a separate virtual environment too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")
os.environ.setdefault("FASTMCP_LOG_LEVEL", "WARNING")


async def serve(config: dict[str, Any], reuse: bool) -> None:
    from fastmcp import Client
    from fastmcp.server import create_proxy

    if not reuse:
        await create_proxy(config, name="fastmcp-proxy").run_async(transport="stdio", show_banner=False)
        return
    # Legacy era (initialize), like the client in front of it and like prefixgate's own
    # downstream sessions; mode="auto" would negotiate 2026-07-28 with the demo server.
    client = Client(config, mode="legacy")
    async with client:
        proxy = create_proxy(client, name="fastmcp-proxy")
        await proxy.run_async(transport="stdio", show_banner=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="MCP config JSON file")
    parser.add_argument("--reuse", action="store_true", help="one connected Client, reused for every request")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    import anyio

    try:
        anyio.run(serve, config, args.reuse)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
