"""``prefixgate demo-server``: a bundled downstream MCP server for the example config,
the tests and the benchmarks.

It serves N generated tools with realistic descriptions and nested schemas whose key
order, ``required`` order and listing order vary with ``--seed`` (names and meaning do
not), so a gateway's canonical catalog can be checked against reordered input. Fixed
tools exercise forwarding: ``echo``, ``payload`` (a result of a requested size),
``structured``, ``image``, ``fail``, ``slow`` (progress, cancellation) and ``crash``.

It serves both protocol eras as a well-behaved server does. On the handshake era (up to
2025-11-25) it announces changes with notifications on the session and asks the client for
input (elicitation, sampling, roots) with requests of its own; on 2026-07-28, which has
neither, changes go out on ``subscriptions/listen`` streams and a request that needs input
answers ``input_required`` (SEP-2322), reading the answers from the retry's
``inputResponses``. Logs during a call ride that call's stream in both eras.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from gateway.eras import CACHE_HINTS, LIST_CACHE_FIELDS, with_result_type

_VERBS = ["get", "list", "create", "update", "delete", "search", "sync", "archive", "export", "describe"]
_NOUNS = [
    "issue", "pull_request", "branch", "commit", "file", "directory", "user", "team", "project",
    "milestone", "label", "release", "workflow", "deployment", "secret", "webhook", "comment",
    "review", "ticket", "invoice", "customer", "order", "metric", "dashboard", "alert",
]  # fmt: skip
# A 1x1 transparent PNG: a real image block without shipping a file.
_PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


# --- input from the client, in either era ------------------------------------------------

Answer = TypeVar("Answer", bound=BaseModel)
_NAME_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
_CAPABILITY = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def ask_name() -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message="What is your name?", requested_schema=_NAME_SCHEMA)
    )


def ask_hi() -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Say hi"))
    return types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[message], max_tokens=20))


def answered(
    ctx: ServerRequestContext[Any, Any],
    params: types.CallToolRequestParams | types.GetPromptRequestParams | types.ReadResourceRequestParams,
    key: str,
    request: types.InputRequest,
    result_type: type[Answer],
) -> Answer | types.InputRequiredResult:
    """On 2026-07-28 (no back-channel): the client's answer from the retry's ``inputResponses``,
    else the ``input_required`` result asking for it (again, if what came back does not parse).

    A client that did not declare the capability the request needs is refused with -32021,
    as the protocol asks, rather than sent a request it cannot answer.
    """
    capability = _CAPABILITY[request.method]
    declared = ctx.session.client_capabilities
    if declared is None or getattr(declared, capability, None) is None:
        data = types.MissingRequiredClientCapabilityErrorData(
            required_capabilities=types.ClientCapabilities.model_validate({capability: {}})
        )
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"{ctx.method} needs the client's {capability} capability",
            data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
    given = (params.input_responses or {}).get(key)
    if given is not None:
        raw = given.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(given, BaseModel) else given
        try:
            return result_type.model_validate(raw)
        except ValidationError:
            pass
    return types.InputRequiredResult(input_requests={key: request})


def _shuffled(rng: random.Random, items: dict[str, Any]) -> dict[str, Any]:
    """The same mapping with its keys in a seed-dependent order (nested dicts too)."""
    keys = list(items)
    rng.shuffle(keys)
    return {k: _shuffled(rng, items[k]) if isinstance(items[k], dict) else items[k] for k in keys}


def generated_tool(index: int, rng: random.Random, server: str) -> dict[str, Any]:
    verb = _VERBS[index % len(_VERBS)]
    noun = _NOUNS[(index // len(_VERBS)) % len(_NOUNS)]
    round_ = index // (len(_VERBS) * len(_NOUNS))
    name = f"{verb}_{noun}" + (f"_{round_}" if round_ else "")
    required = ["owner", "repo", "options"] if index % 2 else ["owner", "repo"]
    rng.shuffle(required)
    schema = {
        "type": "object",
        "properties": {
            "owner": {"type": "string", "description": f"Account that owns the {noun.replace('_', ' ')}."},
            "repo": {"type": "string", "description": "Repository name, without the owner.", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 30},
            "options": {
                "type": "object",
                "description": f"Fine-grained options for {verb} {noun.replace('_', ' ')}.",
                "properties": {
                    "state": {"type": "string", "enum": ["open", "closed", "all"], "default": "open"},
                    "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                    "since": {"type": "string", "format": "date-time"},
                },
                "required": ["state"],
                "additionalProperties": False,
            },
        },
        "required": required,
        "additionalProperties": False,
    }
    return _shuffled(
        rng,
        {
            "name": name,
            "description": (
                f"{verb.capitalize()} a {noun.replace('_', ' ')} in the {server} service. "
                f"Returns the {noun.replace('_', ' ')} as JSON; fails if the caller lacks access."
            ),
            "inputSchema": schema,
            "annotations": {"readOnlyHint": verb in ("get", "list", "search", "describe", "export")},
        },
    )


def rich_tools() -> list[dict[str, Any]]:
    """Tools that make the server talk back: for --rich (resources, prompts, relays)."""
    obj = "object"
    return [
        {"name": "ask", "description": "Ask the user a question (elicitation).", "inputSchema": {"type": obj}},
        {"name": "sample", "description": "Ask the client's model (sampling).", "inputSchema": {"type": obj}},
        {"name": "roots", "description": "List the client's roots.", "inputSchema": {"type": obj}},
        {
            "name": "log",
            "description": "Emit a log message at the given level.",
            "inputSchema": {"type": obj, "properties": {"level": {"type": "string"}, "text": {"type": "string"}}},
        },
        {
            "name": "touch",
            "description": "Report that a resource changed (resources/updated).",
            "inputSchema": {"type": obj, "properties": {"uri": {"type": "string"}}},
        },
        {
            "name": "mutate",
            "description": "Change the tool list: reorder (same tools, new order and key order) "
            "or grow (one more tool).",
            "inputSchema": {"type": obj, "properties": {"kind": {"type": "string", "enum": ["reorder", "grow"]}}},
        },
    ]


def fixed_tools() -> list[dict[str, Any]]:
    obj = "object"
    return [
        {
            "name": "echo",
            "description": "Echo the given text back unchanged.",
            "inputSchema": {"type": obj, "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "annotations": {"readOnlyHint": True},
        },
        {
            "name": "payload",
            "description": "Return a result of the requested size: text or numbered lines of exactly that many "
            "bytes, or an image whose base64 data has that length rounded up to a multiple of 4.",
            "inputSchema": {
                "type": obj,
                "properties": {
                    "bytes": {"type": "integer", "minimum": 0},
                    "kind": {"type": "string", "enum": ["text", "image", "lines"], "default": "text"},
                },
                "required": ["bytes"],
            },
            "annotations": {"readOnlyHint": True},
        },
        {
            "name": "structured",
            "description": "Return structured content matching the output schema.",
            "inputSchema": {"type": obj, "properties": {"count": {"type": "integer", "minimum": 0}}},
            "outputSchema": {
                "type": obj,
                "properties": {"items": {"type": "array", "items": {"type": "string"}}, "count": {"type": "integer"}},
                "required": ["count", "items"],
            },
            "annotations": {"readOnlyHint": True},
        },
        {"name": "image", "description": "Return a tiny PNG image.", "inputSchema": {"type": obj}},
        {
            "name": "fail",
            "description": "Return a tool error (isError) with the given message.",
            "inputSchema": {"type": obj, "properties": {"message": {"type": "string"}}},
        },
        {
            "name": "slow",
            "description": "Sleep, reporting progress at each step; cancellable.",
            "inputSchema": {
                "type": obj,
                "properties": {"seconds": {"type": "number", "minimum": 0}, "steps": {"type": "integer", "minimum": 1}},
            },
        },
        {
            "name": "crash",
            "description": "Exit the server process abruptly with the given status.",
            "inputSchema": {"type": obj, "properties": {"status": {"type": "integer"}}},
        },
    ]


class DemoServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        rng = random.Random(args.seed)
        tools = [generated_tool(i, rng, args.name) for i in range(args.tools)]
        tools += [_shuffled(rng, t) for t in fixed_tools()]
        for extra in args.extra_tool:
            tools.append(
                {
                    "name": extra,
                    "description": f"Report that tool {extra!r} of {args.name} was called.",
                    "inputSchema": {"type": "object", "properties": {"note": {"type": "string"}}},
                }
            )
        if args.rich:
            tools += [_shuffled(rng, t) for t in rich_tools()]
        if args.bad_schema:
            tools.append({"name": "broken", "description": "Its schema is invalid.", "inputSchema": {"type": "string"}})
            tools.append(
                {"name": "broken_type", "inputSchema": {"type": "object", "properties": {"x": {"type": "strin"}}}}
            )
            # A valid JSON Schema, but not a valid MCP tool: the SDK could not send it.
            tools.append(
                {"name": "broken_hint", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": "maybe"}}
            )
        rng.shuffle(tools)
        self.tools = tools
        self.extra = set(args.extra_tool)
        self.rng = rng
        self.grown = 0
        self.log_level = "info"
        self.bus = InMemorySubscriptionBus()
        """Change events for 2026-07-28 clients, served on their ``subscriptions/listen`` streams."""

    async def list_tools_raw(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        """Serve tools/list raw (bypassing the SDK's result model) so invalid schemas go out as-is."""
        if ctx.method != "tools/list":
            return await call_next(ctx)
        page = self.args.page_size or len(self.tools) or 1
        cursor = int((ctx.params or {}).get("cursor") or 0)
        result: dict[str, Any] = {"tools": self.tools[cursor : cursor + page]}
        if cursor + page < len(self.tools):
            result["nextCursor"] = str(cursor + page)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            result.update(LIST_CACHE_FIELDS)  # a 2026-07-28 list result names its type and cache hints
        return result

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        args = params.arguments or {}
        name = params.name
        if self.args.log_calls:
            sys.stderr.write(f"call {name}\n")
            sys.stderr.flush()
        text = types.TextContent
        if name == "echo":
            return types.CallToolResult(content=[text(type="text", text=str(args.get("text", "")))])
        if name == "payload":
            size = int(args.get("bytes", 0))
            kind = args.get("kind", "text")
            if kind == "image":
                # base64 of 3k bytes is exactly 4k characters: no padding, no guessing.
                raw = (b"\x89PNG" * (size // 4 + 1))[: max((size + 3) // 4, 1) * 3]
                data = base64.b64encode(raw).decode()
                return types.CallToolResult(
                    content=[types.ImageContent(type="image", data=data, mime_type="image/png")]
                )
            if kind == "lines":
                # Whole numbered lines, the last one cut so the text is exactly ``size`` bytes.
                line = "line {:08d} of the demo payload\n"
                count = -(-size // len(line.format(0)))
                body = "".join(line.format(i) for i in range(count))[:size]
                return types.CallToolResult(content=[text(type="text", text=body)])
            pattern = "0123456789abcdefghijklmnopqrstuvwxyz\n"
            body = (pattern * (size // len(pattern) + 1))[:size]
            return types.CallToolResult(content=[text(type="text", text=body)])
        if name == "structured":
            count = int(args.get("count", 3))
            items = [f"item-{i}" for i in range(count)]
            return types.CallToolResult(
                content=[text(type="text", text=f"{count} items")],
                structured_content={"count": count, "items": items},
            )
        if name == "image":
            return types.CallToolResult(content=[types.ImageContent(type="image", data=_PNG, mime_type="image/png")])
        if name == "fail":
            message = str(args.get("message", "the demo tool failed"))
            return types.CallToolResult(content=[text(type="text", text=message)], is_error=True)
        if name == "slow":
            seconds = float(args.get("seconds", 1.0))
            steps = int(args.get("steps", 4))
            try:
                for step in range(steps):
                    await ctx.session.report_progress(step, steps, f"step {step + 1} of {steps}")
                    await anyio.sleep(seconds / steps)
            except anyio.get_cancelled_exc_class():
                sys.stderr.write(f"slow cancelled after step {step}\n")
                sys.stderr.flush()
                raise
            return types.CallToolResult(content=[text(type="text", text=f"slept {seconds:g} s")])
        if name == "crash":
            sys.stderr.write("crash requested\n")
            sys.stderr.flush()
            os._exit(int(args.get("status", 3)))
        if self.args.rich and name in {t["name"] for t in rich_tools()}:
            return await self.rich_call(ctx, params)
        if name in self.extra:
            return types.CallToolResult(content=[text(type="text", text=f"{self.args.name}:{name}")])
        if any(t.get("name") == name for t in self.tools):
            return types.CallToolResult(content=[text(type="text", text=f"{self.args.name}:{name} {args}")])
        return types.CallToolResult(content=[text(type="text", text=f"unknown tool {name!r}")], is_error=True)

    async def rich_call(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        session = ctx.session
        name = params.name
        args = params.arguments or {}
        text = types.TextContent
        if name == "ask":
            if is_modern(ctx):
                answer = answered(ctx, params, "name", ask_name(), types.ElicitResult)
                if isinstance(answer, types.InputRequiredResult):
                    return answer
            else:
                try:
                    answer = await session.elicit("What is your name?", _NAME_SCHEMA, related_request_id=ctx.request_id)
                except anyio.get_cancelled_exc_class():
                    sys.stderr.write("ask cancelled while waiting for the answer\n")
                    sys.stderr.flush()
                    raise
            return types.CallToolResult(content=[text(type="text", text=f"{answer.action}:{answer.content}")])
        if name == "sample":
            if is_modern(ctx):
                reply = answered(ctx, params, "hi", ask_hi(), types.CreateMessageResult)
                if isinstance(reply, types.InputRequiredResult):
                    return reply
            else:
                reply = await session.create_message(
                    [types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Say hi"))],
                    max_tokens=20,
                    related_request_id=ctx.request_id,
                )
            said = reply.content.text if isinstance(reply.content, types.TextContent) else str(reply.content)
            return types.CallToolResult(content=[text(type="text", text=f"{reply.model}:{said}")])
        if name == "roots":
            roots = await self.roots(ctx, params)
            if isinstance(roots, types.InputRequiredResult):
                return roots
            return types.CallToolResult(content=[text(type="text", text=",".join(str(r.uri) for r in roots.roots))])
        if name == "log":
            # Related to this call, as the SDK's ctx.log does: on 2026-07-28 the SDK puts it on
            # the call's stream (if the call opted in to logs), on the handshake over HTTP too.
            level = args.get("level", "info")
            await session.send_log_message(level, args.get("text", ""), "demo", related_request_id=ctx.request_id)
            return types.CallToolResult(content=[text(type="text", text="logged")])
        if name == "touch":
            uri = args.get("uri", f"demo://{self.args.name}/readme")
            await self.announce(ctx, ResourceUpdated(uri=uri), lambda: session.send_resource_updated(uri))
            return types.CallToolResult(content=[text(type="text", text="touched")])
        if name == "mutate":
            if args.get("kind") == "grow":
                self.grown += 1
                self.tools.append(
                    {
                        "name": f"grown_{self.grown}",
                        "description": "Added by mutate.",
                        "inputSchema": {"type": "object"},
                    }
                )
            self.rng.shuffle(self.tools)
            self.tools = [_shuffled(self.rng, t) for t in self.tools]
            await self.announce(ctx, ToolsListChanged(), session.send_tool_list_changed)
            return types.CallToolResult(content=[text(type="text", text=f"mutated:{args.get('kind')}")])
        raise AssertionError(name)

    async def announce(
        self, ctx: ServerRequestContext[Any, Any], event: ServerEvent, notify: Callable[[], Awaitable[None]]
    ) -> None:
        """Tell every 2026-07-28 listener (``subscriptions/listen`` streams), and a handshake-era
        caller on its own session as before (that era has no listen streams)."""
        await self.bus.publish(event)
        if not is_modern(ctx):
            await notify()

    async def roots(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams | types.ReadResourceRequestParams
    ) -> types.ListRootsResult | types.InputRequiredResult:
        if is_modern(ctx):
            return answered(ctx, params, "roots", types.ListRootsRequest(), types.ListRootsResult)
        return await ctx.session.list_roots()

    # --- resources, prompts, completion, logging (for --rich) --------------------------

    def resources(self) -> list[dict[str, Any]]:
        base = f"demo://{self.args.name}"
        return [
            {"uri": f"{base}/readme", "name": "readme", "mimeType": "text/plain"},
            {"uri": f"{base}/data.bin", "name": "data", "mimeType": "application/octet-stream"},
            {"uri": "demo://shared/notes", "name": "notes", "mimeType": "text/plain"},
        ]

    async def list_resources(self, ctx: Any, params: Any) -> Any:
        return {"resources": self.resources()}

    async def list_templates(self, ctx: Any, params: Any) -> Any:
        return {
            "resourceTemplates": [
                {"uriTemplate": f"demo://{self.args.name}/items/{{id}}", "name": "item", "mimeType": "text/plain"}
            ]
        }

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        base = f"demo://{self.args.name}"
        if uri == f"{base}/readme" or uri == "demo://shared/notes":
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"{self.args.name} says hello"}]}
        if uri == f"{base}/data.bin":
            return {"contents": [{"uri": uri, "blob": base64.b64encode(b"\x00\x01binary").decode()}]}
        if uri == f"{base}/roots" and self.args.interactive:
            roots = await self.roots(ctx, params)
            if isinstance(roots, types.InputRequiredResult):
                return roots
            return {"contents": [{"uri": uri, "text": ",".join(str(r.uri) for r in roots.roots)}]}
        if uri.startswith(f"{base}/items/"):
            return {"contents": [{"uri": uri, "text": f"item {uri.rsplit('/', 1)[1]} of {self.args.name}"}]}
        # 2026-07-28 retired the handshake era's -32002 for -32602 (its servers must not send it).
        raise MCPError(code=-32602 if is_modern(ctx) else -32002, message=f"Resource not found: {uri}")

    async def subscribe(self, ctx: Any, params: Any) -> Any:
        return {}

    async def list_prompts(self, ctx: Any, params: Any) -> Any:
        prompts = [
            {"name": "greet", "description": "Greet someone.", "arguments": [{"name": "who", "required": True}]},
            {"name": "summarize", "description": "Summarize a text.", "arguments": [{"name": "text"}]},
        ]
        if self.args.interactive:
            prompts.append({"name": "interview", "description": "Greet whoever answers (elicitation)."})
        return {"prompts": prompts}

    async def get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> Any:
        arguments = params.arguments or {}
        if params.name == "greet":
            text = f"Hello {arguments.get('who', 'you')} from {self.args.name}"
        elif params.name == "summarize":
            text = f"Summarize: {arguments.get('text', '')}"
        elif params.name == "interview" and self.args.interactive:
            if is_modern(ctx):
                answer = answered(ctx, params, "name", ask_name(), types.ElicitResult)
                if isinstance(answer, types.InputRequiredResult):
                    return answer
            else:
                answer = await ctx.session.elicit("What is your name?", _NAME_SCHEMA, related_request_id=ctx.request_id)
            text = f"Hello {(answer.content or {}).get('name')} from {self.args.name}"
        else:
            raise MCPError(code=-32602, message=f"Unknown prompt {params.name}")
        return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> Any:
        prefix = params.argument.value
        if isinstance(params.ref, types.PromptReference):
            pool = [f"{who}@{self.args.name}" for who in ("alice", "bob", "carol")]
        else:
            pool = ["1", "2", "3", "12"]
        return {"completion": {"values": [v for v in pool if v.startswith(prefix)], "hasMore": False}}

    async def set_level(self, ctx: Any, params: types.SetLevelRequestParams) -> Any:
        self.log_level = params.level
        sys.stderr.write(f"log level {params.level}\n")
        sys.stderr.flush()
        return {}


DESCRIPTION = (
    "A bundled downstream MCP server for the example config, the tests and the benchmarks: generated "
    "tools plus echo, payload, structured, image, fail, slow and crash. Serves stdio by default, or "
    "streamable HTTP (/mcp) or SSE (/sse) on loopback with --transport. Serves both protocol eras: "
    "on 2026-07-28 it announces changes on subscriptions/listen streams and asks for input with "
    "input_required results; on the handshake era with notifications and requests of its own."
)
"""Plain text: argparse prints it as is, so no reStructuredText markup."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prefixgate demo-server", description=DESCRIPTION)
    p.add_argument("--tools", type=int, default=5, help="number of generated tools (default 5)")
    p.add_argument("--startup-delay", type=float, default=0.0, help="seconds to wait before serving")
    p.add_argument("--seed", type=int, default=0, help="varies key, required and listing order")
    p.add_argument("--name", default="demo", help="server name (serverInfo and descriptions)")
    p.add_argument("--extra-tool", action="append", default=[], metavar="NAME", help="add a tool with this name")
    p.add_argument(
        "--interactive",
        action="store_true",
        help="with --rich: also a prompt 'interview' (elicitation) and a resource demo://NAME/roots (roots)",
    )
    p.add_argument("--bad-schema", action="store_true", help="also list three invalid tools")
    p.add_argument("--page-size", type=int, default=0, help="paginate tools/list (0: one page)")
    p.add_argument("--hang", action="store_true", help="never answer (for start-up timeout tests)")
    p.add_argument("--log-calls", action="store_true", help="write 'call NAME' to stderr for every call")
    p.add_argument(
        "--rich",
        action="store_true",
        help="also serve resources, a template, prompts, completion and logging, and tools that "
        "elicit, sample, list roots, log, touch a resource or change the tool list",
    )
    p.add_argument(
        "--transport",
        choices=("stdio", "http", "sse"),
        default="stdio",
        help="stdio (default), streamable HTTP at /mcp, or SSE at /sse; HTTP and SSE print their URL on stdout",
    )
    p.add_argument("--port", type=int, default=0, help="loopback port for http/sse (default: any free port)")
    return p


async def serve(args: argparse.Namespace) -> None:
    if args.hang:
        await anyio.sleep_forever()
    if args.startup_delay > 0:
        await anyio.sleep(args.startup_delay)
    demo = DemoServer(args)
    rich: dict[str, Any] = {}
    if args.rich:
        rich = dict(
            on_list_resources=_typed(demo.list_resources),
            on_list_resource_templates=_typed(demo.list_templates),
            on_read_resource=_typed(demo.read_resource),
            on_subscribe_resource=_typed(demo.subscribe),
            on_unsubscribe_resource=_typed(demo.subscribe),
            on_list_prompts=_typed(demo.list_prompts),
            on_get_prompt=_typed(demo.get_prompt),
            on_completion=_typed(demo.complete),
            on_set_logging_level=_typed(demo.set_level),
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging is deprecated in 2026-07-28, still served here
        server: Server[Any] = _Server(
            args.name,
            version="1.0",
            on_call_tool=demo.call_tool,
            on_list_tools=_unused,
            on_subscriptions_listen=ListenHandler(demo.bus),
            cache_hints=CACHE_HINTS,
            **rich,
        )
    server.middleware.insert(0, demo.list_tools_raw)
    if args.transport == "stdio":
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    else:
        await _serve_http(server, args)


def _typed(handler: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """A dict-returning handler whose results name their type on the 2026-07-28 protocol."""

    async def handle(ctx: Any, params: Any) -> Any:
        result = await handler(ctx, params)
        return with_result_type(result, ctx.protocol_version) if isinstance(result, dict) else result

    return handle


async def _serve_http(server: Server[Any], args: argparse.Namespace) -> None:
    """Serve on loopback, printing the endpoint URL once the socket is bound."""

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.types import Receive, Scope, Send

    from gateway.upstream.listen import listening_socket

    sock = listening_socket("127.0.0.1", args.port)
    port = sock.getsockname()[1]
    if args.transport == "http":
        app = server.streamable_http_app(streamable_http_path="/mcp")
        url = f"http://127.0.0.1:{port}/mcp"
    else:
        from mcp.server.sse import SseServerTransport

        sse = SseServerTransport("/messages/")

        class SseStream:
            """``GET /sse`` as a plain ASGI app: the transport writes the whole response itself."""

            async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
                async with sse.connect_sse(scope, receive, send) as (read, write):
                    await server.run(read, write, server.create_initialization_options())

        app = Starlette(
            routes=[
                Route("/sse", endpoint=SseStream(), methods=["GET"]),
                Mount("/messages/", app=sse.handle_post_message),
            ]
        )
        url = f"http://127.0.0.1:{port}/sse"
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    sys.stdout.write(url + "\n")  # HTTP/SSE mode: stdout is not an MCP stream here
    sys.stdout.flush()
    await uvicorn.Server(config).serve(sockets=[sock])


class _Server(Server[Any]):
    """Handshake-era capabilities that name the demo's list-change notifications on every
    transport: the streamable HTTP session manager asks for the options with no arguments."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        every = NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)
        return super().create_initialization_options(
            notification_options or every, experimental_capabilities, extensions
        )


async def _unused(ctx: Any, params: Any) -> types.ListToolsResult:  # pragma: no cover - middleware answers
    return types.ListToolsResult(tools=[])


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # It asks for sampling and roots, deprecated on 2026-07-28, on purpose: the SDK's warning
    # would reach the gateway's log as this server's stderr, and its last line (a line of this
    # file) would be given as the reason once the server is down.
    warnings.simplefilter("ignore", MCPDeprecationWarning)
    try:
        anyio.run(serve, args)
    except KeyboardInterrupt:
        return 130
    return 0
