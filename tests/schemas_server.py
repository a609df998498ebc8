"""A stdio MCP server whose tools are read from a JSON file: ``python -m tests.schemas_server
TOOLS.json`` lists each ``{"name", "description", "inputSchema"}`` there, and a call answers
with its arguments as JSON text. For schemas of any size and shape (tool_search's pages)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server


async def main(path: Path) -> None:
    tools = [types.Tool.model_validate(t) for t in json.loads(path.read_text(encoding="utf-8"))]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = json.dumps(params.arguments or {}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server: Server[Any] = Server("schemas", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
