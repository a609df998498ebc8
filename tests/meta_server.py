"""A stdio MCP server that shows what ``_meta`` reached it and answers with a ``_meta`` of its own.

Tool ``meta`` returns the request's ``_meta`` as JSON text and a result ``_meta`` of
``{"x.example/answer": 42}``; it also sends one progress notification when the request
carried a progress token, so a test can see whose token the server was given.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(name="meta", description="Show the request's _meta.", input_schema={"type": "object"})


async def main() -> None:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        seen = dict((ctx.params or {}).get("_meta") or {})
        if seen.get("progressToken") is not None:
            await ctx.session.report_progress(1, 2, "half")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(seen, sort_keys=True))],
            _meta={"x.example/answer": 42},
        )

    server: Server[Any] = Server("meta", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
