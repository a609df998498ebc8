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
