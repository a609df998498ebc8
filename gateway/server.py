"""The upstream MCP server: one low-level SDK server in front of the router.

``initialize`` is answered at once (clients time out waiting for it); ``tools/list``
and ``tools/call`` wait for the discovery barrier, so no client ever sees a partial
catalog.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions

from gateway import __version__
from gateway.router import Router
from gateway.session import Session

INSTRUCTIONS = (
    "prefixgate aggregates several MCP servers; tool names are '<server prefix>__<tool>'. "
    "When tool_search is offered, some tools are deferred: find them with tool_search, "
    "which activates the tools it returns, then call them (with tool_call when offered)."
)


def build_server(router: Router, session: Session) -> tuple[Server[Any], InitializationOptions]:
    """The stdio server: one client, so one activation session."""

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> Any:
        epoch = await router.current()
        return {"tools": epoch.published(ctx.protocol_version)}

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        raw_meta = (ctx.params or {}).get("_meta")
        meta = dict(raw_meta) if isinstance(raw_meta, dict) else None
        wants_progress = bool(meta and meta.get("progressToken") is not None)

        async def progress(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        return await router.call(
            params.name,
            params.arguments,
            session,
            meta=meta,
            on_progress=progress if wants_progress else None,
            version=ctx.protocol_version,
        )

    server: Server[Any] = Server(
        "prefixgate",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,  # type: ignore[arg-type]
        on_call_tool=call_tool,  # type: ignore[arg-type]
    )
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    return server, options
