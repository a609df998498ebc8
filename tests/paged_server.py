"""A stdio MCP server that pages every list one item at a time, with opaque cursors.

Three resources, three resource templates and three prompts: a gateway that does not follow
``nextCursor`` shows only the first of each. ``--items N --page K`` serves N of each, K to a
page, each with a 160-byte description (many make a list no single page of which is large);
``paged://big/N`` reads as N bytes of text.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.eras import CACHE_HINTS


def items(count: int, padded: bool) -> dict[str, list[dict[str, Any]]]:
    def said(i: int, plain: str | None = None) -> dict[str, str]:
        text = f"Item {i:08d}. " + "x" * 146 if padded else plain
        return {"description": text} if text is not None else {}

    return {
        "resources": [{"uri": f"paged://r/{i}", "name": f"r{i}", **said(i)} for i in range(count)],
        "resourceTemplates": [
            {"uriTemplate": f"paged://t{i}/{{id}}", "name": f"t{i}", **said(i)} for i in range(count)
        ],
        "prompts": [{"name": f"p{i}", **said(i, f"Prompt {i}.")} for i in range(count)],
    }


def page(listed: list[dict[str, Any]], size: int, ctx: Any) -> dict[str, Any]:
    cursor = (ctx.params or {}).get("cursor")
    index = int(cursor.removeprefix("after-")) + 1 if isinstance(cursor, str) else 0
    answer: dict[str, Any] = {KEYS[ctx.method]: listed[index : index + size]}
    if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        answer["resultType"] = "complete"  # a 2026-07-28 result names its type
    if index + size < len(listed):
        answer["nextCursor"] = f"after-{index + size - 1}"
    return answer


KEYS = {"resources/list": "resources", "resources/templates/list": "resourceTemplates", "prompts/list": "prompts"}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=0)
    parser.add_argument("--page", type=int, default=1)
    args = parser.parse_args()
    listed = items(args.items or 3, padded=args.items > 0)

    async def lists(ctx: Any, call_next: Any) -> Any:
        if ctx.method in KEYS:
            return page(listed[KEYS[ctx.method]], args.page, ctx)
        uri = (ctx.params or {}).get("uri")
        if ctx.method == "resources/read" and isinstance(uri, str) and uri.startswith("paged://big/"):
            size = int(uri.removeprefix("paged://big/"))
            answer = {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "y" * size}]}
            return (
                answer if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS else {**answer, "resultType": "complete"}
            )
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
