"""A dual-era stdio MCP server that asks for input the handshake way in every era.

``python -m tests.backchannel_server``: tool ``ask`` sends ``elicitation/create`` to the client
as a request of its own, even on 2026-07-28 (which has no back-channel: a well-behaved server
answers ``input_required`` there, as the bundled demo does). For the gateway's hint.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(name="ask", description="Ask the user a question (elicitation).", input_schema={"type": "object"})
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[TOOL])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    answer = await ctx.session.elicit_form("What is your name?", SCHEMA, related_request_id=ctx.request_id)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{answer.action}:{answer.content}")])


async def main() -> None:
    server: Server[Any] = Server("backchannel", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
