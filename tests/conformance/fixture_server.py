"""The project's own fixture MCP server for the official conformance suite.

It implements, with the mcp 2.x low-level ``Server``, every tool, resource and prompt the
non-extension server scenarios of ``@modelcontextprotocol/conformance`` (see
``runner.PACKAGE``) expect, in both protocol eras (the SDK serves the handshake era and the
stateless 2026-07-28 one on the same endpoint):

    tools      test_simple_text, test_image_content, test_audio_content,
               test_embedded_resource, test_multiple_content_types, test_tool_with_logging,
               test_tool_with_progress, test_error_handling, test_sampling, test_elicitation,
               test_elicitation_sep1034_defaults, test_elicitation_sep1330_enums,
               json_schema_2020_12_tool, test_custom_header (x-mcp-header), test_reconnection,
               test_missing_capability and the test_input_required_result_* tools
               (fixture_mrtr.py)
    resources  test://static-text, test://static-binary, test://watched-resource,
               template test://template/{id}/data (plus subscribe/unsubscribe)
    prompts    test_simple_prompt, test_prompt_with_arguments,
               test_prompt_with_embedded_resource, test_prompt_with_image,
               test_input_required_result_prompt
    utilities  completion/complete, logging/setLevel, ping; requestState sealed by the SDK's
               RequestStateBoundary

Run it:

    python -m tests.conformance.fixture_server --port 0   # streamable HTTP on loopback;
                                                          # first stdout line is the URL
    python -m tests.conformance.fixture_server --stdio    # stdio (a gateway downstream)

With ``--classic`` it asks for input the classic way in every era (fixture_mrtr.CLASSIC).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import warnings
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from tests.conformance import fixture_mrtr

# Logging, sampling and roots are deprecated as of 2026-07-28, but the 2025-era suite
# exercises them; the warnings are noise here.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

NAME = "prefixgate-conformance-fixture"

# A 1x1 red PNG and a minimal (empty) WAV file.
PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_BASE64 = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="

_OBJECT_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}

TOOLS: list[types.Tool] = [
    types.Tool(name="test_simple_text", description="Returns a simple text result.", input_schema=_OBJECT_NO_ARGS),
    types.Tool(name="test_image_content", description="Returns a PNG image.", input_schema=_OBJECT_NO_ARGS),
    types.Tool(name="test_audio_content", description="Returns a WAV audio clip.", input_schema=_OBJECT_NO_ARGS),
    types.Tool(
        name="test_embedded_resource", description="Returns an embedded text resource.", input_schema=_OBJECT_NO_ARGS
    ),
    types.Tool(
        name="test_multiple_content_types",
        description="Returns text, image and embedded resource content.",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="test_tool_with_logging",
        description="Sends three info log notifications while it runs.",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="test_tool_with_progress",
        description="Reports progress 0, 50 and 100 of 100 while it runs.",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="test_error_handling", description="Always returns a tool error (isError).", input_schema=_OBJECT_NO_ARGS
    ),
    types.Tool(
        name="test_sampling",
        description="Asks the client to sample an LLM completion for the prompt.",
        input_schema={
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
            "required": ["prompt"],
        },
    ),
    types.Tool(
        name="test_elicitation",
        description="Asks the client for user input (username and email).",
        input_schema={
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to show the user"}},
            "required": ["message"],
        },
    ),
    types.Tool(
        name="test_elicitation_sep1034_defaults",
        description="Elicits a form whose primitive fields all carry defaults (SEP-1034).",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="test_elicitation_sep1330_enums",
        description="Elicits a form with every enum variant (SEP-1330).",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="json_schema_2020_12_tool",
        description="Tool with JSON Schema 2020-12 features",
        # SEP-1613 ($schema, $defs, additionalProperties) and SEP-2106 ($anchor, allOf/anyOf,
        # if/then/else): exactly the schema the suite's json-schema-2020-12 scenario names.
        input_schema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="test_custom_header",
        description="Echoes a parameter the client mirrors into the Mcp-Param-Region header (SEP-2243).",
        input_schema={
            "type": "object",
            "properties": {"region": {"type": "string", "description": "A region name", "x-mcp-header": "Region"}},
            "required": ["region"],
        },
    ),
    *fixture_mrtr.TOOLS,
    types.Tool(
        name="test_trigger_tool_change",
        description="Adds (or removes again) the tool test_dynamic_tool and announces the change (SEP-2575).",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="test_trigger_prompt_change",
        description="Adds (or removes again) the prompt test_dynamic_prompt and announces the change (SEP-2575).",
        input_schema=_OBJECT_NO_ARGS,
    ),
    types.Tool(
        name="test_reconnection",
        description="Closes its SSE stream mid-call and answers after the client reconnects (SEP-1699).",
        input_schema=_OBJECT_NO_ARGS,
    ),
]

RESOURCES: list[types.Resource] = [
    types.Resource(
        uri="test://static-text",
        name="static-text",
        description="A static text resource.",
        mime_type="text/plain",
    ),
    types.Resource(
        uri="test://static-binary",
        name="static-binary",
        description="A static binary resource (a PNG image).",
        mime_type="image/png",
    ),
    types.Resource(
        uri="test://watched-resource",
        name="watched-resource",
        description="A resource clients can subscribe to.",
        mime_type="text/plain",
    ),
]

TEMPLATES: list[types.ResourceTemplate] = [
    types.ResourceTemplate(
        uri_template="test://template/{id}/data",
        name="template-data",
        description="Data for an id, substituted from the URI.",
        mime_type="application/json",
    )
]
DYNAMIC_TOOL = types.Tool(
    name="test_dynamic_tool",
    description="Present between two test_trigger_tool_change calls.",
    input_schema=_OBJECT_NO_ARGS,
)
DYNAMIC_PROMPT = types.Prompt(
    name="test_dynamic_prompt", description="Present between two test_trigger_prompt_change calls."
)

_TEMPLATE_RE = re.compile(r"^test://template/(?P<id>[^/]+)/data$")

PROMPTS: list[types.Prompt] = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments."),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments.",
        arguments=[
            types.PromptArgument(name="arg1", description="First test argument", required=True),
            types.PromptArgument(name="arg2", description="Second test argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt embedding a resource.",
        arguments=[types.PromptArgument(name="resourceUri", description="URI of the resource to embed", required=True)],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with image content."),
    fixture_mrtr.PROMPT,
]

# Completion candidates for test_prompt_with_arguments (and anything else).
_COMPLETIONS = ["paris", "park", "party", "test", "testing", "tested"]

_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


ToolAnswer = types.CallToolResult | types.InputRequiredResult


class MemoryEventStore(EventStore):
    """In-memory SSE event store, so a client can resume a closed stream (SEP-1699)."""

    def __init__(self) -> None:
        self._events: list[tuple[StreamId, EventId, types.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        event_id = str(len(self._events) + 1)
        self._events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        stream = next((s for s, e, _ in self._events if e == last_event_id), None)
        if stream is None:
            return None
        after = int(last_event_id)
        for s, e, message in self._events:
            if s == stream and int(e) > after and message is not None:
                await send_callback(EventMessage(message, e))
        return stream


class Fixture:
    def __init__(self) -> None:
        self.subscriptions: set[str] = set()
        self.min_level: types.LoggingLevel = "debug"
        # List changes reach 2026-07-28 clients on subscriptions/listen streams (this bus) and
        # handshake-era clients as notifications on their session.
        self.bus = InMemorySubscriptionBus()
        self.dynamic_tool = False
        self.dynamic_prompt = False

    async def log(self, ctx: ServerRequestContext[Any, Any], level: types.LoggingLevel, text: str) -> None:
        """A log notification on this request's stream, honouring logging/setLevel."""
        if _LEVELS.index(level) < _LEVELS.index(self.min_level):
            return
        await ctx.session.send_log_message(level, text, logger=NAME, related_request_id=ctx.request_id)

    # -- tools -----------------------------------------------------------------------

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[*TOOLS, DYNAMIC_TOOL] if self.dynamic_tool else TOOLS)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        multi_round = await fixture_mrtr.call(ctx, params)
        if multi_round is not None:
            return multi_round
        asks = getattr(self, f"asks_{params.name}", None)
        if asks is not None:
            answer: types.CallToolResult | types.InputRequiredResult = await asks(ctx, params)
            return answer
        args = params.arguments or {}
        handler = getattr(self, f"tool_{params.name}", None)
        if handler is None:
            return _error(f"unknown tool {params.name!r}")
        result: types.CallToolResult = await handler(ctx, args)
        return result

    async def tool_test_simple_text(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[_text("This is a simple text response for testing.")])

    async def tool_test_image_content(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[_image()])

    async def tool_test_audio_content(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")])

    async def tool_test_embedded_resource(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        resource = types.TextResourceContents(
            uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
        )
        return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=resource)])

    async def tool_test_multiple_content_types(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        resource = types.TextResourceContents(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text=json.dumps({"test": "data", "value": 123}),
        )
        return types.CallToolResult(
            content=[
                _text("Multiple content types test:"),
                _image(),
                types.EmbeddedResource(type="resource", resource=resource),
            ]
        )

    async def tool_test_tool_with_logging(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        await self.log(ctx, "info", "Tool execution started")
        await anyio.sleep(0.05)
        await self.log(ctx, "info", "Tool processing data")
        await anyio.sleep(0.05)
        await self.log(ctx, "info", "Tool execution completed")
        return types.CallToolResult(content=[_text("Tool with logging executed successfully")])

    async def tool_test_tool_with_progress(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        for step, progress in enumerate((0, 50, 100)):
            if step:
                await anyio.sleep(0.05)
            await ctx.session.report_progress(progress, 100, f"Completed step {progress} of 100")
        return types.CallToolResult(content=[_text("Tool with progress executed successfully")])

    async def tool_test_error_handling(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        return _error("This tool intentionally returns an error for testing")

    # The tools that need the client's input (asks_*) ask for it the way the request's era
    # allows: a back-channel request on the handshake era, an input_required result on
    # 2026-07-28 (fixture_mrtr.ask_one), so the fixture is a well-behaved downstream in both.

    async def asks_test_sampling(self, ctx: Any, params: types.CallToolRequestParams) -> ToolAnswer:
        method = "sampling/createMessage"
        if not fixture_mrtr.client_can(ctx, method):
            if fixture_mrtr.is_modern(ctx):
                raise fixture_mrtr.lacking(ctx, method)
            return _error("The client does not support sampling.")
        prompt = str((params.arguments or {}).get("prompt", ""))
        answer = await fixture_mrtr.ask_one(ctx, params, "llm_answer", fixture_mrtr.sample_text(prompt, 100))
        if isinstance(answer, types.InputRequiredResult):
            return answer
        return types.CallToolResult(content=[_text(f"LLM response: {fixture_mrtr.sampled_text(answer)}")])

    async def asks_test_elicitation(self, ctx: Any, params: types.CallToolRequestParams) -> ToolAnswer:
        schema = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        message = str((params.arguments or {}).get("message", ""))
        return await self._elicit(ctx, params, message, schema, "User response")

    async def asks_test_elicitation_sep1034_defaults(self, ctx: Any, params: types.CallToolRequestParams) -> ToolAnswer:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "description": "Verification status", "default": True},
            },
        }
        return await self._elicit(ctx, params, "Please provide user information", schema, "Elicitation completed")

    async def asks_test_elicitation_sep1330_enums(self, ctx: Any, params: types.CallToolRequestParams) -> ToolAnswer:
        schema = {
            "type": "object",
            "properties": {
                "untitledSingle": {
                    "type": "string",
                    "description": "Untitled single-select",
                    "enum": ["option1", "option2", "option3"],
                },
                "titledSingle": {
                    "type": "string",
                    "description": "Titled single-select",
                    "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"},
                    ],
                },
                "legacyEnum": {
                    "type": "string",
                    "description": "Legacy titled enum (deprecated enumNames)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Untitled multi-select",
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Titled multi-select",
                    "items": {
                        "anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"},
                        ]
                    },
                },
            },
        }
        message = "Please pick values for every enum variant"
        return await self._elicit(ctx, params, message, schema, "Elicitation completed")

    async def _elicit(
        self, ctx: Any, params: types.CallToolRequestParams, message: str, schema: dict[str, Any], label: str
    ) -> ToolAnswer:
        method = "elicitation/create"
        if not fixture_mrtr.client_can(ctx, method):
            if fixture_mrtr.is_modern(ctx):
                raise fixture_mrtr.lacking(ctx, method)
            return _error("The client does not support elicitation.")
        answer = await fixture_mrtr.ask_one(ctx, params, "user_input", fixture_mrtr.elicit_form(message, schema))
        if isinstance(answer, types.InputRequiredResult):
            return answer
        content = json.dumps(answer.get("content") or {}, sort_keys=True)
        return types.CallToolResult(content=[_text(f"{label}: action={answer.get('action')}, content={content}")])

    async def tool_test_trigger_tool_change(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        self.dynamic_tool = not self.dynamic_tool
        await self.bus.publish(ToolsListChanged())
        if not fixture_mrtr.is_modern(ctx):
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[_text(f"test_dynamic_tool listed: {self.dynamic_tool}")])

    async def tool_test_trigger_prompt_change(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        self.dynamic_prompt = not self.dynamic_prompt
        await self.bus.publish(PromptsListChanged())
        if not fixture_mrtr.is_modern(ctx):
            await ctx.session.send_prompt_list_changed()
        return types.CallToolResult(content=[_text(f"test_dynamic_prompt listed: {self.dynamic_prompt}")])

    async def tool_test_dynamic_tool(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        if not self.dynamic_tool:
            return _error("test_dynamic_tool is not listed now")
        return types.CallToolResult(content=[_text("dynamic tool called")])

    async def tool_test_custom_header(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        # The SDK has already checked the Mcp-Param-Region header against the body (2026-07-28).
        return types.CallToolResult(content=[_text(f"region={args.get('region')}")])

    async def tool_json_schema_2020_12_tool(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[_text(f"Received: {json.dumps(args, sort_keys=True)}")])

    async def tool_test_reconnection(self, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
        await self.log(ctx, "info", "Before disconnect")
        if ctx.close_sse_stream is not None:
            # Close this request's SSE stream; the client reconnects with Last-Event-ID and
            # the event store replays what follows, including the result.
            await ctx.close_sse_stream()
            await anyio.sleep(0.2)
        await self.log(ctx, "info", "After reconnect")
        return types.CallToolResult(content=[_text("Reconnection test completed successfully")])

    # -- resources -------------------------------------------------------------------

    async def list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=RESOURCES)

    async def list_resource_templates(self, ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        contents: types.TextResourceContents | types.BlobResourceContents
        if uri == "test://static-text":
            contents = types.TextResourceContents(
                uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
            )
        elif uri == "test://static-binary":
            contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_BASE64)
        elif uri == "test://watched-resource":
            contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text="Watched resource content")
        elif match := _TEMPLATE_RE.match(uri):
            ident = match["id"]
            body = json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"})
            contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=body)
        else:
            # SEP-2164: an unknown URI is invalid params, with the URI in the error data.
            raise MCPError(code=types.INVALID_PARAMS, message="Resource not found", data={"uri": uri})
        return types.ReadResourceResult(contents=[contents])

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.subscriptions.discard(str(params.uri))
        return types.EmptyResult()

    # -- prompts ---------------------------------------------------------------------

    async def list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[*PROMPTS, DYNAMIC_PROMPT] if self.dynamic_prompt else PROMPTS)

    async def get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        if params.name == fixture_mrtr.PROMPT.name:
            return await fixture_mrtr.get_prompt(ctx, params)
        if params.name == DYNAMIC_PROMPT.name and self.dynamic_prompt:
            message = types.PromptMessage(role="user", content=_text("A dynamic prompt."))
            return types.GetPromptResult(messages=[message])
        args = params.arguments or {}
        user: Literal["user"] = "user"
        if params.name == "test_simple_prompt":
            messages = [types.PromptMessage(role=user, content=_text("This is a simple prompt for testing."))]
        elif params.name == "test_prompt_with_arguments":
            text = f"Prompt with arguments: arg1='{args.get('arg1', '')}', arg2='{args.get('arg2', '')}'"
            messages = [types.PromptMessage(role=user, content=_text(text))]
        elif params.name == "test_prompt_with_embedded_resource":
            resource = types.TextResourceContents(
                uri=args.get("resourceUri", "test://example-resource"),
                mime_type="text/plain",
                text="Embedded resource content for testing.",
            )
            messages = [
                types.PromptMessage(role=user, content=types.EmbeddedResource(type="resource", resource=resource)),
                types.PromptMessage(role=user, content=_text("Please process the embedded resource above.")),
            ]
        elif params.name == "test_prompt_with_image":
            messages = [
                types.PromptMessage(role=user, content=_image()),
                types.PromptMessage(role=user, content=_text("Please analyze the image above.")),
            ]
        else:
            raise MCPError(code=-32602, message=f"Unknown prompt: {params.name}")
        return types.GetPromptResult(messages=messages)

    # -- utilities -------------------------------------------------------------------

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        prefix = params.argument.value
        values = [v for v in _COMPLETIONS if v.startswith(prefix)]
        return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))

    async def set_level(self, ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        self.min_level = params.level
        return types.EmptyResult()


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(message)], is_error=True)


def build_server() -> Server[Any]:
    fixture = Fixture()
    server = Server(
        NAME,
        version="1.0.0",
        on_list_tools=fixture.list_tools,
        on_call_tool=fixture.call_tool,
        on_list_resources=fixture.list_resources,
        on_list_resource_templates=fixture.list_resource_templates,
        on_read_resource=fixture.read_resource,
        on_subscribe_resource=fixture.subscribe,
        on_unsubscribe_resource=fixture.unsubscribe,
        on_list_prompts=fixture.list_prompts,
        on_get_prompt=fixture.get_prompt,
        on_completion=fixture.complete,
        on_set_logging_level=fixture.set_level,
        on_subscriptions_listen=ListenHandler(fixture.bus),
    )
    # Seals every requestState the multi-round-trip tools mint and rejects tampered echoes.
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = build_server()
    async with stdio_server() as (read, write):
        options = server.create_initialization_options(NotificationOptions(tools_changed=True, prompts_changed=True))
        await server.run(read, write, options)


async def serve_http(host: str, port: int) -> None:
    """Serve streamable HTTP at /mcp; print the URL once the socket is listening."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = build_server()
    # host=127.0.0.1/localhost/::1 turns on the SDK's Host/Origin (DNS rebinding) checks.
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host=host,
        event_store=MemoryEventStore(),
        retry_interval=100,
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"http://{shown}:{port}/mcp", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.conformance.fixture_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--stdio", action="store_true", help="serve over stdio instead of HTTP")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="HTTP port (default 0: any free port)")
    p.add_argument("--classic", action="store_true", help="ask for input over the back-channel in every era")
    args = p.parse_args(argv)
    fixture_mrtr.CLASSIC = args.classic
    try:
        if args.stdio:
            anyio.run(serve_stdio)
        else:
            anyio.run(serve_http, args.host, args.port)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
