"""A downstream server that speaks only the 2026-07-28 protocol (no ``initialize``).

Built on the SDK's low-level ``Server`` and its dual-era loop with the handshake refused
(-32022 naming only modern versions), so the gateway must negotiate with
``server/discover`` and stamp every request. It asks for input the modern way: an
``input_required`` result whose ``requestState`` it checks on the retry.

Usage: ``python tests/modern_server.py [--http]`` (HTTP prints its URL on stdout).
Every request's ``_meta`` envelope and routing headers are appended, one JSON line per
request, to ``$MODERN_SERVER_LOG`` when set (what the tests inspect). With
``$MODERN_SERVER_SHY`` set, the first ``server/discover`` fails as if it had timed out; with
``$MODERN_SERVER_DEAF`` set, it serves no ``subscriptions/listen`` (its capabilities then say
no ``listChanged`` and no ``resources.subscribe``); with ``$MODERN_SERVER_COMPLETES`` set, it
offers completions and answers each with ``input_required`` (which that method may not); with
``$MODERN_SERVER_HOLD`` naming a file, it reads nothing while that file exists (a server still
starting, as long as a test likes).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp_types import PROTOCOL_VERSION_META_KEY as PROTOCOL_KEY
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

OBJ = {"type": "object"}
STATE = "modern-state-1"
bus = InMemorySubscriptionBus()
grown: list[str] = []
shy_done: list[bool] = []
extra_prompts: list[str] = []
zones: list[str] = []
"""The header ``region``'s argument is mirrored to, once ``rezone`` renamed it (without saying so)."""


def tools() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = [
        {
            "name": "echo",
            "description": "Echo text.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
        {
            "name": "region",
            "description": "Says which region it was asked for (its argument is also an HTTP header).",
            "inputSchema": {
                "type": "object",
                "properties": {"region": {"type": "string", "x-mcp-header": zones[-1] if zones else "Region"}},
                "required": ["region"],
            },
        },
        {"name": "slow", "description": "Reports progress three times.", "inputSchema": OBJ},
        {"name": "log", "description": "Logs one line during the call.", "inputSchema": OBJ},
        {"name": "mutate", "description": "Adds a tool and says so.", "inputSchema": OBJ},
        {"name": "touch", "description": "Says modern://roots changed.", "inputSchema": OBJ},
        {"name": "add_prompt", "description": "Adds a prompt and says so.", "inputSchema": OBJ},
        {"name": "rezone", "description": "Renames region's x-mcp-header, and says nothing.", "inputSchema": OBJ},
        {"name": "odd_type", "description": "Answers with a resultType no revision defines.", "inputSchema": OBJ},
        {"name": "later", "description": "Not done yet twice (requestState only), then done.", "inputSchema": OBJ},
        {"name": "ask", "description": "Elicitation (input_required).", "inputSchema": OBJ},
        {"name": "sample", "description": "Sampling (input_required).", "inputSchema": OBJ},
        {"name": "sample_tools", "description": "Sampling with a tool (input_required).", "inputSchema": OBJ},
        {"name": "roots", "description": "Roots (input_required).", "inputSchema": OBJ},
        {"name": "many_asks", "description": "Asks for 2,000 inputs in one round.", "inputSchema": OBJ},
        {"name": "huge_state", "description": "Asks with a 300 KB requestState.", "inputSchema": OBJ},
        {"name": "bad_ask", "description": "Asks for input with params that are no object.", "inputSchema": OBJ},
        {"name": "bad_sample", "description": "Asks for a sample with no messages.", "inputSchema": OBJ},
        {"name": "bad_schema", "description": "Root is not an object.", "inputSchema": {"type": "string"}},
        {
            "name": "bad_header",
            "description": "Invalid x-mcp-header (not a valid header name).",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "bad header"}}},
        },
    ]
    listed += [{"name": name, "description": "Added by mutate.", "inputSchema": OBJ} for name in grown]
    return listed


ASKS: dict[str, dict[str, Any]] = {
    "ask": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "What is your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    },
    "sample": {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}], "maxTokens": 20},
    },
    "sample_tools": {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "Weather in Paris?"}}],
            "maxTokens": 20,
            "tools": [
                {"name": "lookup", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}
            ],
            "toolChoice": {"mode": "auto"},
        },
    },
    "roots": {"method": "roots/list"},
}


def answer_text(kind: str, response: dict[str, Any]) -> str:
    if kind == "ask":
        return f"{response.get('action')}:{response.get('content')}"
    if kind == "sample":
        return f"{response.get('model')}:{(response.get('content') or {}).get('text')}"
    if kind == "sample_tools":
        blocks = response.get("content")
        blocks = blocks if isinstance(blocks, list) else [blocks]
        used = [
            f"{b.get('name')}({b.get('input')})" for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        return f"{response.get('model')}:{response.get('stopReason')}:{','.join(used)}"
    return ",".join(r["uri"] for r in response.get("roots", []))


def with_input(kind: str, params: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """An ``input_required`` result for a first call; the answer's text for a good retry."""
    responses = params.get("inputResponses")
    if not responses:
        return {"resultType": "input_required", "inputRequests": {kind: ASKS[kind]}, "requestState": STATE}, None
    if params.get("requestState") != STATE:
        raise MCPError(code=-32602, message=f"modern server: wrong requestState {params.get('requestState')!r}")
    response = responses.get(kind)
    if not isinstance(response, dict):
        raise MCPError(code=-32602, message=f"modern server: no input response {kind!r}")
    return None, answer_text(kind, response)


def record(ctx: ServerRequestContext[Any, Any]) -> None:
    path = os.environ.get("MODERN_SERVER_LOG")
    if not path:
        return
    headers: dict[str, str] = {}
    request = getattr(ctx, "request", None)
    if request is not None and hasattr(request, "headers"):
        headers = {k: v for k, v in request.headers.items() if k.startswith("mcp-")}
    meta = (ctx.params or {}).get("_meta") or {}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"method": ctx.method, "meta": meta, "headers": headers}) + "\n")


def done(result: dict[str, Any]) -> dict[str, Any]:
    return {"resultType": "complete", **result}


async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    if ctx.method == "initialize":
        raise MCPError(
            code=UNSUPPORTED_PROTOCOL_VERSION,
            message="this server speaks only 2026-07-28",
            data={"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": (ctx.params or {}).get("protocolVersion")},
        )
    if ctx.request_id is not None:
        record(ctx)
    if ctx.method == "server/discover" and os.environ.get("MODERN_SERVER_SHY") and not shy_done:
        # Stands in for a probe that timed out at the client while the server was still
        # starting: the first discover is not answered usefully, yet the server is modern.
        shy_done.append(True)
        raise MCPError(code=-32001, message="request timed out")
    params = dict(ctx.params or {})
    if ctx.method == "tools/list":
        # Raw, so the invalid tools reach the client as a real server would send them.
        return done({"tools": tools(), "ttlMs": 0, "cacheScope": "private"})
    if ctx.method == "tools/call":
        return await call(ctx, params)
    if ctx.method == "prompts/get" and params.get("name") == "interview":
        pending, said = with_input("ask", params)
        if pending is not None:
            return pending
        return done({"messages": [{"role": "user", "content": {"type": "text", "text": f"Hello {said}"}}]})
    if ctx.method == "resources/read" and params.get("uri") == "modern://roots":
        pending, said = with_input("roots", params)
        if pending is not None:
            return pending
        # Hints meant for the gateway alone: a gateway must not pass them on as its own.
        return done({"contents": [{"uri": "modern://roots", "text": said}], "ttlMs": 3_600_000, "cacheScope": "public"})
    if ctx.method == "completion/complete":  # hostile: a request for input where none may come
        return {"resultType": "input_required", "inputRequests": {"ask": ASKS["ask"]}, "requestState": STATE}
    if ctx.method == "resources/read" and params.get("uri") == "modern://unsupported":
        # Mid-session, as a server replaced by a build without the version the gateway chose.
        raise MCPError(
            code=UNSUPPORTED_PROTOCOL_VERSION,
            message="Unsupported protocol version",
            data={"supported": ["2099-01-01"], "requested": (params.get("_meta") or {}).get(PROTOCOL_KEY)},
        )
    return await call_next(ctx)


async def call(ctx: ServerRequestContext[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    args = params.get("arguments") or {}

    def text(value: str) -> dict[str, Any]:
        return done({"content": [{"type": "text", "text": value}]})

    if name == "echo":
        return text(f"modern:{args.get('text')}")
    if name == "region":
        return text(f"region:{args.get('region')}")
    if name == "slow":
        for step in (1, 2, 3):
            await ctx.session.report_progress(step, 3, f"step {step}")
            await anyio.sleep(0.05)
        return text("slow done")
    if name == "log":
        await ctx.session.send_log_message("warning", "modern log line", "modern", related_request_id=ctx.request_id)
        return text("logged")
    if name == "mutate":
        grown.append(f"grown_{len(grown) + 1}")
        await bus.publish(ToolsListChanged())
        return text("mutated")
    if name == "later":
        step = {None: 1, "later-1": 2, "later-2": 3}.get(params.get("requestState"))
        if step is None:
            raise MCPError(code=-32602, message=f"modern server: wrong requestState {params.get('requestState')!r}")
        if step < 3:
            return {"resultType": "input_required", "requestState": f"later-{step}"}
        return text("done later")
    if name == "odd_type":  # hostile: a result type no revision defines
        return {"resultType": "pending", "content": [{"type": "text", "text": "not yet"}]}
    if name == "rezone":
        zones.append("Zone")
        return text("rezoned")
    if name == "add_prompt":
        extra_prompts.append(f"extra_{len(extra_prompts) + 1}")
        await bus.publish(PromptsListChanged())
        return text("prompt added")
    if name == "touch":
        await bus.publish(ResourceUpdated(uri="modern://roots"))
        return text("touched")
    if name == "many_asks":  # hostile: as many requests to the client as it likes
        return {"resultType": "input_required", "inputRequests": {f"k{n}": ASKS["roots"] for n in range(2000)}}
    if name == "huge_state":  # hostile: a state no retry can carry back
        return {"resultType": "input_required", "inputRequests": {"k": ASKS["roots"]}, "requestState": "s" * 300_000}
    if name == "bad_ask":  # hostile: an input request whose params are a list
        return {"resultType": "input_required", "inputRequests": {"k": {"method": "roots/list", "params": [1]}}}
    if name == "bad_sample":  # hostile: a sampling request no client's SDK can read
        asks = {"k": {"method": "sampling/createMessage", "params": {"maxTokens": 5}}}
        return {"resultType": "input_required", "inputRequests": asks}
    if name in ASKS:
        pending, said = with_input(str(name), params)
        return pending if pending is not None else text(str(said))
    if name in grown:
        return text(f"modern:{name}")
    return done({"content": [{"type": "text", "text": f"unknown tool {name!r}"}], "isError": True})


async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
    prompts = [types.Prompt(name="interview", description="Asks a name (input_required).")]
    return types.ListPromptsResult(prompts=prompts + [types.Prompt(name=name) for name in extra_prompts])


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(uri="modern://roots", name="roots")])


async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[])


async def unused(ctx: Any, params: Any) -> Any:  # pragma: no cover - the middleware answers
    raise MCPError(code=-32603, message="unreachable")


def build() -> Server[Any]:
    server: Server[Any] = Server(
        "modern",
        version="1.0",
        on_list_tools=unused,
        on_call_tool=unused,
        on_list_prompts=list_prompts,
        on_get_prompt=unused,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=unused,
        on_completion=unused if os.environ.get("MODERN_SERVER_COMPLETES") else None,
        on_subscriptions_listen=None if os.environ.get("MODERN_SERVER_DEAF") else ListenHandler(bus),
    )
    server.middleware.insert(0, middleware)
    return server


async def main() -> None:
    from mcp.server.lowlevel import NotificationOptions

    hold = os.environ.get("MODERN_SERVER_HOLD")
    while hold and os.path.exists(hold):
        await anyio.sleep(0.05)
    server = build()
    if "--http" in sys.argv:
        import uvicorn

        from gateway.upstream.listen import listening_socket

        sock = listening_socket("127.0.0.1", 0)
        app = server.streamable_http_app(streamable_http_path="/mcp")
        sys.stdout.write(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp\n")
        sys.stdout.flush()
        await uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).serve(sockets=[sock])
        return
    from mcp.server.stdio import stdio_server

    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
