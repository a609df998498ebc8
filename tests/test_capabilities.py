"""gateway.engine.capabilities: whether a client can answer a server's request, and the error."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from gateway.engine.capabilities import lacking, require

PLAIN = types.ClientCapabilities(sampling=types.SamplingCapability())
TOOLS = types.ClientCapabilities(sampling=types.SamplingCapability(tools=types.SamplingToolsCapability()))
ASKED = {"messages": [], "maxTokens": 5}


@pytest.mark.parametrize(
    ("capabilities", "params", "lacked"),
    [
        (PLAIN, ASKED, None),
        (PLAIN, {**ASKED, "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}, "sampling.tools"),
        (PLAIN, {**ASKED, "toolChoice": {"mode": "none"}}, "sampling.tools"),  # tools mode, as the SDK reads it
        (TOOLS, {**ASKED, "tools": []}, None),
        (types.ClientCapabilities(), ASKED, "sampling"),
        (None, {**ASKED, "tools": []}, "sampling"),
    ],
)
def test_sampling_with_tools_needs_the_tools_capability(capabilities: object, params: object, lacked: object) -> None:
    assert lacking("sampling/createMessage", capabilities, params) == lacked


def test_the_refusal_names_the_nested_capability() -> None:
    with pytest.raises(MCPError) as info:
        require("sampling/createMessage", PLAIN, {**ASKED, "tools": []})
    assert info.value.error.code == -32021
    assert info.value.error.data == {"requiredCapabilities": {"sampling": {"tools": {}}}}
    assert "does not support sampling.tools" in info.value.error.message


EMPTY = types.ClientCapabilities(elicitation=types.ElicitationCapability())
FORM = types.ClientCapabilities(elicitation=types.ElicitationCapability(form=types.FormElicitationCapability()))
URL = types.ClientCapabilities(elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability()))
BOTH = types.ClientCapabilities(
    elicitation=types.ElicitationCapability(
        form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
    )
)
FORM_ASKED = {"message": "name?", "requestedSchema": {"type": "object", "properties": {}}}
URL_ASKED = {"mode": "url", "message": "sign in", "url": "https://example.com/x", "elicitationId": "e1"}


@pytest.mark.parametrize(
    ("capabilities", "params", "lacked"),
    [
        (EMPTY, FORM_ASKED, None),  # an empty elicitation declares form mode alone
        (EMPTY, URL_ASKED, "elicitation.url"),
        (FORM, URL_ASKED, "elicitation.url"),
        (FORM, {**FORM_ASKED, "mode": "form"}, None),
        (URL, URL_ASKED, None),
        (URL, FORM_ASKED, "elicitation.form"),
        (BOTH, URL_ASKED, None),
        (BOTH, FORM_ASKED, None),
        (types.ClientCapabilities(), FORM_ASKED, "elicitation"),
    ],
)
def test_an_elicitation_needs_its_mode_declared(capabilities: object, params: object, lacked: object) -> None:
    """A form-only client was sent URL-mode elicitations: the gateway declares both modes to
    every server on every client's behalf, so a server that checks cannot refuse it itself."""
    assert lacking("elicitation/create", capabilities, params) == lacked
    if lacked is not None:
        with pytest.raises(MCPError) as info:
            require("elicitation/create", capabilities, params)
        assert info.value.error.code == -32021 and f"does not support {lacked}" in info.value.error.message


def test_a_url_only_client_can_answer_a_servers_input_requests() -> None:
    """Whether a call may wait for its client's input asks of no particular request: a client
    that declared URL mode alone can answer some, so its calls are not run as if it could not."""
    from gateway.engine.capabilities import answers_none

    assert not answers_none(URL) and not answers_none(EMPTY) and answers_none(types.ClientCapabilities())
