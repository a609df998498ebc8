"""A server-filesystem look-alike for the bounded-result tests: one tool, ``read_text_file``,
that declares an ``outputSchema`` and returns the same text twice, as ``content[0].text`` and
as ``structuredContent.content`` (as @modelcontextprotocol/server-filesystem does).

``python tests/textfile_server.py``; the tool takes ``{"lines": N}`` and returns N lines
``line I: <I % 7 times é> "quoted"`` (about 1 MiB for 40,000 lines).
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

OUTPUT_SCHEMA = {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}


def file_text(lines: int) -> str:
    return "".join(f'line {i}: {"é" * (i % 7)} "quoted"\n' for i in range(lines))


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    tool = types.Tool(
        name="read_text_file",
        description="Read a (generated) text file.",
        input_schema={"type": "object", "properties": {"lines": {"type": "integer", "minimum": 0}}},
        output_schema=OUTPUT_SCHEMA,
    )
    return types.ListToolsResult(tools=[tool])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = file_text(int((params.arguments or {}).get("lines", 3)))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content={"content": text}
    )


async def main() -> None:
    server: Server[Any] = Server(
        "textfile",
        version="1.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="public")},
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
