"""A stdio MCP server that asks for the client's roots on its own, outside any call.

``python -m tests.unprompted_server OUT``: tool ``later`` returns at once, then - with no call
in flight - the server sends ``roots/list`` and writes the answer's root URIs to OUT.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(name="later", description="Ask for roots after answering.", input_schema={"type": "object"})


async def main(out: Path) -> None:
    async with anyio.create_task_group() as tg:

        async def ask(session: Any) -> None:
            await anyio.sleep(0.2)  # the call that scheduled this has been answered
            try:
                roots = await session.list_roots()
                out.write_text(",".join(str(r.uri) for r in roots.roots))
            except Exception as exc:  # the test reads what went wrong
                out.write_text(f"error: {exc}")

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[TOOL])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            tg.start_soon(ask, ctx.session)
            return types.CallToolResult(content=[types.TextContent(type="text", text="later")])

        server: Server[Any] = Server("unprompted", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
