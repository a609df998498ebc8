"""A dual-era server, on the SDK's ``MCPServer``, that logs while it answers a prompt or a
resource read, as a tool call may (``ctx.info``, on the request's own stream).

``python -m tests.told_server`` (stdio): prompt ``told`` and resource template ``told://{topic}``
each log one info line naming themselves, then answer; tool ``echo(text)``.
"""

from __future__ import annotations

import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)  # logging: deprecated as of 2026-07-28

server = MCPServer("told", version="1.0", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Echo text back."""
    return text


@server.prompt()
async def told(ctx: Context) -> str:
    """Log a line, then answer."""
    await ctx.info("told: prompt")
    return "prompt answered"


@server.resource("told://{topic}")
async def told_resource(topic: str, ctx: Context) -> str:
    """Log a line naming the topic, then answer."""
    await ctx.info(f"told: resource {topic}")
    return f"resource {topic}"


if __name__ == "__main__":
    server.run("stdio")
