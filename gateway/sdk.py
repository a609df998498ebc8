"""The mcp SDK internals the gateway cannot do without, each behind one function.

mcp 2.x offers no public way to do these two things; every other use of the SDK goes
through its public API. Checked against mcp 2.3.0: on an SDK upgrade, check these first
(tests/test_relay.py and tests/test_lifecycle.py exercise both).
"""

from __future__ import annotations

from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The SDK's one ``Connection`` per client connection (stdio: one; HTTP: one per
    ``Mcp-Session-Id``), whose ``state`` and ``exit_stack`` tie the gateway's per-client
    record to the connection's life. The low-level context exposes only the session,
    which holds it as ``_connection`` (mcp 2.3.0; the high-level ``Context`` has a public
    ``connection`` but the low-level server never builds one)."""
    return ctx.session._connection  # noqa: SLF001


async def send_raw_request(session: ServerSession, method: str, params: dict[str, Any], *, related: bool) -> Any:
    """Send a server-to-client request exactly as a downstream server sent it, and return
    the client's raw result.

    ``ServerSession.send_request`` takes only typed requests and validates the result
    into a model, which would drop or reorder what the two peers exchange; the raw
    ``send_raw_request`` lives on the session's private outbound channels (mcp 2.3.0):
    the request's own channel (``related``: streamable HTTP answers on the call's
    stream) or the connection's standalone one.
    """
    channel = session._request_outbound if related else session._connection.outbound  # noqa: SLF001
    return await channel.send_raw_request(method, params, None)
