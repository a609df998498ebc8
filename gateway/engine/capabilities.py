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


def lacking(method: str, capabilities: Any) -> str | None:
    """The capability the client lacks to answer ``method`` (the method itself when no
    capability answers it), or None when it can."""
    capability = CAPABILITY_FOR.get(method)
    if capability is None:
        return method
    if capabilities is None or getattr(capabilities, capability, None) is None:
        return capability
    return None


def refusal(lacked: str) -> MCPError:
    """The error for what ``lacking`` found: -32021 naming a capability; a request no
    capability answers is not one the gateway relays at all."""
    if lacked not in CAPABILITY_FOR.values():
        return MCPError(code=INVALID_REQUEST, message=f"prefixgate: the connected client does not support {lacked}")
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"prefixgate: the connected client does not support {lacked}",
        data={"requiredCapabilities": {lacked: {}}},
    )


def require(method: str, capabilities: Any) -> None:
    """Raise ``refusal`` unless the client can answer ``method``."""
    if (lacked := lacking(method, capabilities)) is not None:
        raise refusal(lacked)


def answers_none(capabilities: Any) -> bool:
    """The client can answer none of the requests a server may send during a call: each
    would be refused at once (``require``), so a call of it never waits for its input."""
    return all(lacking(method, capabilities) is not None for method in CAPABILITY_FOR)
