"""A stdio MCP server whose tools answer JSON-RPC errors, as an offline server does.

``fetch`` fails with ``-32603 fetch failed``; ``noisy`` with a long, multi-line message
holding a terminal escape; ``capability`` with the spec's -32021 (a client capability the
request lacked); ``ok`` succeeds, to show the gateway still serves.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

TOOLS = [
    types.Tool(name=name, description=f"Tool {name}.", input_schema={"type": "object"})
    for name in ("fetch", "noisy", "capability", "ok")
]


async def main() -> None:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        if params.name == "fetch":
            raise MCPError(code=-32603, message="fetch failed")
        if params.name == "noisy":
            raise MCPError(code=-32000, message="line one\nline two\x1b[31m " + "x" * 5000)
        if params.name == "capability":
            raise MCPError(code=-32021, message="needs sampling", data={"requiredCapabilities": {"sampling": {}}})
        return types.CallToolResult(content=[types.TextContent(type="text", text="fine")])

    server: Server[Any] = Server("errors", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
