"""Whether a client can answer a server's request: the one check, and the one error.

A server asks for input (``sampling/createMessage``, ``elicitation/create``, ``roots/list``)
in either era, and the client it reaches may not have declared the capability that answers
it. Wherever the gateway finds that (relaying a handshake-era server's request, a call
waiting in a round trip, a 2026-07-28 server's ``inputRequests``), the server's request
fails with the 2026-07-28 error for an undeclared capability (-32021, SEP-2575) naming it,
so the caller learns what its call needed instead of waiting.
"""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY

CAPABILITY_FOR = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation", "roots/list": "roots"}
"""The client capability that answers each server request the gateway relays."""


SAMPLING_TOOLS = "sampling.tools"
"""A sampling request with ``tools`` or ``toolChoice`` needs this too (SEP-1577): the gateway
declares it to every server, as it declares every capability it relays, and checks it here
against the client each such request reaches."""


SUB_CAPABILITIES = (SAMPLING_TOOLS, "elicitation.url", "elicitation.form")
"""What ``lacking`` may name below a capability (each a -32021 naming it)."""


def lacking(method: str, capabilities: Any, params: Any = None) -> str | None:
    """The capability the client lacks to answer ``method`` with ``params`` (the method itself
    when no capability answers it; ``sampling.tools`` for a sampling request with tools), or
    None when it can."""
    capability = CAPABILITY_FOR.get(method)
    if capability is None:
        return method
    declared = None if capabilities is None else getattr(capabilities, capability, None)
    if declared is None:
        return capability
    if capability == "sampling" and _with_tools(params) and getattr(declared, "tools", None) is None:
        return SAMPLING_TOOLS
    if capability == "elicitation":
        return _elicitation_mode_lacking(declared, params)
    return None


def _elicitation_mode_lacking(declared: Any, params: Any) -> str | None:
    """``elicitation.url`` or ``elicitation.form`` when the request's mode is one the client
    did not declare. An empty ``elicitation`` declares form mode alone (as the spec reads it,
    for clients from before URL mode); the gateway declares both to every server on every
    client's behalf, so a server cannot tell, and a form-only client was sent URL requests.
    Without a request (``answers_none``: can it answer any?) a client with either mode can."""
    if not isinstance(params, dict):
        return None
    mode = params.get("mode", "form")
    form, url = getattr(declared, "form", None), getattr(declared, "url", None)
    if mode == "url" and url is None:
        return "elicitation.url"
    if mode == "form" and form is None and url is not None:
        return "elicitation.form"
    return None


def _with_tools(params: Any) -> bool:
    """A sampling request in tools mode, as the SDK's ``wants_sampling_tools`` reads one."""
    return isinstance(params, dict) and (params.get("tools") is not None or params.get("toolChoice") is not None)


def refusal(lacked: str) -> MCPError:
    """The error for what ``lacking`` found: -32021 naming a capability; a request no
    capability answers is not one the gateway relays at all."""
    if lacked not in (*CAPABILITY_FOR.values(), *SUB_CAPABILITIES):
        return MCPError(code=INVALID_REQUEST, message=f"prefixgate: the connected client does not support {lacked}")
    required: dict[str, Any] = {}
    for name in reversed(lacked.split(".")):
        required = {name: required}
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"prefixgate: the connected client does not support {lacked}",
        data={"requiredCapabilities": required},
    )


def require(method: str, capabilities: Any, params: Any = None) -> None:
    """Raise ``refusal`` unless the client can answer ``method`` with ``params``."""
    if (lacked := lacking(method, capabilities, params)) is not None:
        raise refusal(lacked)


def answers_none(capabilities: Any) -> bool:
    """The client can answer none of the requests a server may send during a call: each
    would be refused at once (``require``), so a call of it never waits for its input."""
    return all(lacking(method, capabilities) is not None for method in CAPABILITY_FOR)
