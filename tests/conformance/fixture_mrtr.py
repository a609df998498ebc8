"""The fixture's multi-round-trip tools and prompt (2026-07-28 ``input_required`` results, SEP-2322).

Each tool names the input it needs as a map of *input requests* (elicitation, sampling,
roots). How it gets the answers depends on the era of the request:

* 2026-07-28 (stateless): it returns an ``InputRequiredResult`` with the requests still
  unanswered and, where the scenario wants one, a ``requestState``; the client retries with
  ``inputResponses`` (and the state, sealed and verified by the SDK's ``RequestStateBoundary``).
* handshake era (up to 2025-11-25): it sends the same requests to the client as ordinary
  server-to-client requests on the call's back channel and waits for the answers.

So the same fixture is a meaningful downstream for the gateway in both eras: served as a
handshake-era server, the gateway must turn its back-channel requests into ``input_required``
results for a modern client (docs/protocol-eras.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

Ctx = ServerRequestContext[Any, Any]
Params = types.CallToolRequestParams | types.GetPromptRequestParams

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}

TOOLS: list[types.Tool] = [
    types.Tool(name=name, description=description, input_schema=_NO_ARGS)
    for name, description in [
        ("test_input_required_result_elicitation", "Asks for the user's name, then greets them."),
        ("test_input_required_result_sampling", "Asks the client's LLM for the capital of France."),
        ("test_input_required_result_list_roots", "Asks the client for its roots and lists them."),
        ("test_input_required_result_request_state", "Asks for a confirmation; checks its own requestState."),
        ("test_input_required_result_multiple_inputs", "Asks for a name, a sampled greeting and the roots at once."),
        ("test_input_required_result_multi_round", "Asks for a name, then a colour, in two rounds."),
        ("test_input_required_result_tampered_state", "Asks for a confirmation with integrity-protected state."),
        ("test_input_required_result_capabilities", "Asks only for what the client declared it can answer."),
    ]
]

PROMPT = types.Prompt(
    name="test_input_required_result_prompt", description="A prompt that asks the user for its context first."
)


def _elicit(message: str, field: str, kind: str = "string") -> types.ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def _sample(text: str, max_tokens: int) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    )


_RESULT_TYPES: dict[str, type[BaseModel]] = {
    "elicitation/create": types.ElicitResult,
    "sampling/createMessage": types.CreateMessageResult,
    "roots/list": types.ListRootsResult,
}
_CAPABILITY: dict[str, str] = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


CLASSIC = False
"""``--classic``: ask over the back-channel in every era, as most servers written with the SDK's
``elicit_form``/``create_message``/``list_roots`` do (on 2026-07-28 such a request fails: no
back-channel). What a gateway in front must not make worse."""


def is_modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def asks_back(ctx: Ctx) -> bool:
    """Whether this request asks for input over the back-channel rather than with ``input_required``."""
    return CLASSIC or not is_modern(ctx)


def client_can(ctx: Ctx, method: str) -> bool:
    """Whether the client declared the capability ``method`` needs (per request on 2026-07-28)."""
    capability = _CAPABILITY[method]
    declared = ctx.session.client_capabilities
    return declared is not None and getattr(declared, capability) is not None


def _as_dict(value: Any) -> dict[str, Any] | None:
    if isinstance(value, BaseModel):
        dumped: dict[str, Any] = value.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped
    return value if isinstance(value, dict) else None


class Gather:
    """The answers to one round of input requests, or the ``InputRequiredResult`` that asks for them."""

    def __init__(self, answers: dict[str, dict[str, Any]], pending: types.InputRequiredResult | None) -> None:
        self.answers = answers
        self.pending = pending


async def gather(
    ctx: Ctx,
    params: Params,
    requests: Mapping[str, types.InputRequest],
    *,
    state: str | None = None,
    optional: bool = False,
) -> Gather:
    """Collect an answer for every request: from ``inputResponses`` (2026-07-28) or the back channel.

    On 2026-07-28 a request without a well-formed answer is asked (again), with ``state`` as the
    ``requestState``; extra answers the fixture never asked for are ignored. On the handshake era
    the requests go out together (one round, as on 2026-07-28, so a gateway in front can turn them
    into one ``input_required`` result); with ``optional``, one the client refuses for a missing
    capability (-32021) is left unanswered instead of failing the call.
    """
    if asks_back(ctx):
        answers: dict[str, dict[str, Any]] = {}

        async def ask(key: str, request: types.InputRequest) -> None:
            metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
            try:
                result = await ctx.session.send_request(request, _RESULT_TYPES[request.method], metadata=metadata)
            except MCPError as exc:
                if optional and exc.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY:
                    return
                raise
            answers[key] = result.model_dump(by_alias=True, mode="json", exclude_none=True)

        try:
            async with anyio.create_task_group() as tasks:
                for key, request in requests.items():
                    tasks.start_soon(ask, key, request)
        except BaseExceptionGroup as group:
            # The call fails with the client's own error (say -32021), not with the group.
            leaf: BaseException = group
            while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
                leaf = leaf.exceptions[0]
            raise leaf from None
        return Gather(answers, None)
    given = params.input_responses or {}
    answers = {key: answer for key in requests if (answer := _as_dict(given.get(key))) is not None}
    missing = {key: request for key, request in requests.items() if key not in answers}
    if not missing:
        return Gather(answers, None)
    return Gather(answers, types.InputRequiredResult(input_requests=missing, request_state=state))


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _elicited(answer: dict[str, Any], field: str) -> Any:
    content = answer.get("content")
    return content.get(field) if isinstance(content, dict) else None


def _sampled(answer: dict[str, Any]) -> str:
    content = answer.get("content")
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return json.dumps(content, sort_keys=True)


def _roots(answer: dict[str, Any]) -> list[str]:
    roots = answer.get("roots")
    return [str(r.get("uri")) for r in roots if isinstance(r, dict)] if isinstance(roots, list) else []


def lacking(ctx: Ctx, method: str) -> MCPError:
    """``MissingRequiredClientCapabilityError`` (-32021) naming the capability ``method`` needs
    (HTTP 400 on 2026-07-28)."""
    capability = _CAPABILITY[method]
    required = types.ClientCapabilities.model_validate({capability: {}})
    data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    return MCPError(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"{ctx.method} needs the client's {capability} capability",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def missing_sampling(ctx: Ctx) -> MCPError:
    return lacking(ctx, "sampling/createMessage")


async def ask_one(
    ctx: Ctx, params: Params, key: str, request: types.InputRequest
) -> dict[str, Any] | types.InputRequiredResult:
    """One input request, answered in either era: the answer (as JSON), or, on 2026-07-28 before
    the client answered it under ``key``, the ``InputRequiredResult`` that asks for it. Never a
    back-channel request on 2026-07-28: that era has none."""
    got = await gather(ctx, params, {key: request})
    return got.pending if got.pending else got.answers[key]


def elicit_form(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def sample_text(text: str, max_tokens: int) -> types.CreateMessageRequest:
    return _sample(text, max_tokens)


def sampled_text(answer: dict[str, Any]) -> str:
    return _sampled(answer)


def _bad_state(ctx: Ctx, got: str | None) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=f"unexpected requestState {got!r} for {ctx.method}")


def _check_state(ctx: Ctx, params: Params, expected: str) -> None:
    """On 2026-07-28 a retry must carry the state this fixture minted (already verified by the SDK)."""
    if is_modern(ctx) and params.request_state != expected:
        raise _bad_state(ctx, params.request_state)


ToolResult = types.CallToolResult | types.InputRequiredResult


async def call(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult | None:
    """Run one of :data:`TOOLS`; ``None`` when ``params.name`` is not one of them."""
    handler = _HANDLERS.get(params.name)
    return None if handler is None else await handler(ctx, params)


async def _elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    got = await gather(ctx, params, {"user_name": _elicit("What is your name?", "name")})
    if got.pending:
        return got.pending
    return _text(f"Hello, {_elicited(got.answers['user_name'], 'name')}!")


async def _sampling(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    got = await gather(ctx, params, {"capital_question": _sample("What is the capital of France?", 100)})
    if got.pending:
        return got.pending
    return _text(f"LLM response: {_sampled(got.answers['capital_question'])}")


async def _list_roots(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    got = await gather(ctx, params, {"client_roots": types.ListRootsRequest()})
    if got.pending:
        return got.pending
    return _text(f"Client roots: {', '.join(_roots(got.answers['client_roots'])) or '(none)'}")


async def _request_state(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    state = "request-state:confirm"
    got = await gather(ctx, params, {"confirm": _elicit("Please confirm", "ok", "boolean")}, state=state)
    if got.pending:
        return got.pending
    _check_state(ctx, params, state)
    return _text(f"state-ok: confirmed={_elicited(got.answers['confirm'], 'ok')}")


async def _multiple_inputs(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    state = "multiple-inputs:1"
    requests: dict[str, types.InputRequest] = {
        "user_name": _elicit("What is your name?", "name"),
        "greeting": _sample("Generate a greeting", 50),
        "client_roots": types.ListRootsRequest(),
    }
    got = await gather(ctx, params, requests, state=state)
    if got.pending:
        return got.pending
    _check_state(ctx, params, state)
    name = _elicited(got.answers["user_name"], "name")
    roots = ", ".join(_roots(got.answers["client_roots"])) or "(none)"
    return _text(f"name={name}; greeting={_sampled(got.answers['greeting'])}; roots={roots}")


async def _multi_round(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    """Round 1 asks for a name (state ``round-1``), round 2 for a colour (state ``round-2:<name>``)."""
    step1 = {"step1": _elicit("Step 1: What is your name?", "name")}
    step2 = {"step2": _elicit("Step 2: What is your favorite color?", "color")}
    if asks_back(ctx):
        first = await gather(ctx, params, step1)
        second = await gather(ctx, params, step2)
        return _text(
            f"name={_elicited(first.answers['step1'], 'name')}; color={_elicited(second.answers['step2'], 'color')}"
        )
    state = params.request_state
    if state is None or state == "round-1":
        got = await gather(ctx, params, step1, state="round-1")
        if got.pending:
            return got.pending
        name = _elicited(got.answers["step1"], "name")
        return types.InputRequiredResult(input_requests=dict(step2), request_state="round-2:" + json.dumps(name))
    if not state.startswith("round-2:"):
        raise _bad_state(ctx, state)
    name = json.loads(state.removeprefix("round-2:"))
    got = await gather(ctx, params, step2, state=state)
    if got.pending:
        return got.pending
    return _text(f"name={name}; color={_elicited(got.answers['step2'], 'color')}")


async def _tampered_state(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    state = "tampered-state:1"
    got = await gather(ctx, params, {"confirm": _elicit("Please confirm", "ok", "boolean")}, state=state)
    if got.pending:
        return got.pending
    _check_state(ctx, params, state)
    return _text("state-ok")


async def _capabilities(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    """Asks for a name and a sampled answer, but only for what the client said it supports."""
    wanted: dict[str, types.InputRequest] = {
        "user_name": _elicit("What is your name?", "name"),
        "capital_question": _sample("What is the capital of France?", 100),
    }
    requests = {key: request for key, request in wanted.items() if client_can(ctx, request.method)}
    if not requests:
        raise missing_sampling(ctx)
    got = await gather(ctx, params, requests, optional=True)
    if got.pending:
        return got.pending
    return _text(f"answered: {', '.join(sorted(got.answers)) or '(nothing)'}")


_HANDLERS = {
    "test_input_required_result_elicitation": _elicitation,
    "test_input_required_result_sampling": _sampling,
    "test_input_required_result_list_roots": _list_roots,
    "test_input_required_result_request_state": _request_state,
    "test_input_required_result_multiple_inputs": _multiple_inputs,
    "test_input_required_result_multi_round": _multi_round,
    "test_input_required_result_tampered_state": _tampered_state,
    "test_input_required_result_capabilities": _capabilities,
}


async def get_prompt(
    ctx: Ctx, params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    """``test_input_required_result_prompt``: elicits the context the prompt should use."""
    request = _elicit("What context should the prompt use?", "context")
    got = await gather(ctx, params, {"user_context": request})
    if got.pending:
        return got.pending
    context = _elicited(got.answers["user_context"], "context")
    text = types.TextContent(type="text", text=f"Use this context: {context}")
    return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=text)])


MISSING_CAPABILITY_TOOL = types.Tool(
    name="test_missing_capability",
    description="Needs the client's sampling capability; without it, fails with -32021 (SEP-2575).",
    input_schema=_NO_ARGS,
)


async def missing_capability(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    """Refuse with ``MissingRequiredClientCapabilityError`` unless the client declared sampling."""
    if not client_can(ctx, "sampling/createMessage"):
        raise missing_sampling(ctx)
    got = await gather(ctx, params, {"answer": _sample("Say hello.", 20)})
    if got.pending:
        return got.pending
    return _text(f"LLM response: {_sampled(got.answers['answer'])}")


_HANDLERS["test_missing_capability"] = missing_capability
TOOLS.append(MISSING_CAPABILITY_TOOL)
