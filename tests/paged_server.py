"""A stdio MCP server that pages every list one item at a time, with opaque cursors.

Three resources, three resource templates and three prompts: a gateway that does not follow
``nextCursor`` shows only the first of each.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.eras import CACHE_HINTS

ITEMS = {
    "resources": [{"uri": f"paged://r/{i}", "name": f"r{i}"} for i in range(3)],
    "resourceTemplates": [{"uriTemplate": f"paged://t{i}/{{id}}", "name": f"t{i}"} for i in range(3)],
    "prompts": [{"name": f"p{i}", "description": f"Prompt {i}."} for i in range(3)],
}


def page(key: str, ctx: Any) -> dict[str, Any]:
    cursor = (ctx.params or {}).get("cursor")
    index = int(cursor.removeprefix("after-")) + 1 if isinstance(cursor, str) else 0
    answer: dict[str, Any] = {key: ITEMS[key][index : index + 1]}
    if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        answer["resultType"] = "complete"  # a 2026-07-28 result names its type
    if index + 1 < len(ITEMS[key]):
        answer["nextCursor"] = f"after-{index}"
    return answer


async def main() -> None:
    async def lists(ctx: Any, call_next: Any) -> Any:
        keys = {
            "resources/list": "resources",
            "resources/templates/list": "resourceTemplates",
            "prompts/list": "prompts",
        }
        if ctx.method in keys:
            return page(keys[ctx.method], ctx)
        return await call_next(ctx)

    async def unused(ctx: Any, params: Any) -> Any:  # pragma: no cover - the middleware answers
        raise AssertionError

    async def no_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[])

    server: Server[Any] = Server(
        "paged",
        version="1.0",
        on_list_tools=no_tools,
        on_list_resources=unused,
        on_list_resource_templates=unused,
        on_list_prompts=unused,
        on_get_prompt=unused,
        on_read_resource=unused,
        cache_hints=CACHE_HINTS,
    )
    server.middleware.insert(0, lists)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


if __name__ == "__main__":
    anyio.run(main)
