"""A dual-era server, on the SDK's ``MCPServer``, that tells its client things while it
answers a prompt or a resource read, as it may during a tool call.

``python -m tests.told_server`` (stdio): prompt ``told`` and resource template ``told://{topic}``
each log one info line naming themselves (``ctx.info``, on the request's own stream), then
answer; prompt ``sign_in`` and resource template ``signin://{topic}`` fail with ``-32042``
(a URL-mode elicitation, ``sign-in-prompt`` or ``sign-in-<topic>``, to complete first) and
send its completion notice on the session a moment later; tool ``echo(text)``; tool
``hide(topic)`` adds a resource ``hidden://<topic>`` that it serves but does not list (nor
say its list changed) and answers with a ``resource_link`` to it, as the spec allows; prompt
``hidden(topic)`` does the same, the link in its message. Prompt ``once``, resource template
``once://{topic}`` and tool ``once_tool`` fail with ``-32042`` the first time (each its own
elicitation), then answer ``signed in: <id>``.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources import TextResource
from mcp.shared.exceptions import MCPDeprecationWarning, UrlElicitationRequiredError

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)  # logging: deprecated as of 2026-07-28

server = MCPServer("told", version="1.0", log_level="WARNING")
background: set[asyncio.Task[None]] = set()
"""Completion notices still to be sent, held until done."""


@server.tool()
def echo(text: str) -> str:
    """Echo text back."""
    return text


@server.tool()
def hide(topic: str) -> list[types.ResourceLink]:
    """Serve ``hidden://<topic>`` without listing it; link to it."""
    uri = f"hidden://{topic}"
    server.add_resource(TextResource(uri=uri, name=topic, text=f"hidden {topic}"))
    return [types.ResourceLink(type="resource_link", uri=uri, name=topic)]


@server.prompt()
def hidden(topic: str) -> list[types.ResourceLink]:
    """Serve ``hidden://<topic>`` without listing it; link to it in the message."""
    return hide(topic)


@server.prompt()
async def told(ctx: Context) -> str:
    """Log a line, then answer."""
    await ctx.info("told: prompt")
    return "prompt answered"


@server.resource("told://{topic}")
async def told_resource(topic: str, ctx: Context) -> str:
    """Log a line naming the topic, then answer."""
    await ctx.info(f"told: resource {topic}")
    return f"resource {topic}"


def _sign_in_first(session: Any, elicitation_id: str) -> UrlElicitationRequiredError:
    """The ``-32042`` error naming ``elicitation_id``; its completion notice follows in 0.2 s."""

    async def complete() -> None:
        await anyio.sleep(0.2)
        await session.send_elicit_complete(elicitation_id)

    task = asyncio.get_running_loop().create_task(complete())
    background.add(task)
    task.add_done_callback(background.discard)
    link = types.ElicitRequestURLParams(
        message="Sign in first.", url="https://example.com/login", elicitation_id=elicitation_id
    )
    return UrlElicitationRequiredError([link])


@server.prompt()
async def sign_in(ctx: Context) -> str:
    """Fail with -32042: sign in first."""
    raise _sign_in_first(ctx.session, "sign-in-prompt")


@server.resource("signin://{topic}")
async def sign_in_resource(topic: str, ctx: Context) -> str:
    """Fail with -32042: sign in first."""
    raise _sign_in_first(ctx.session, f"sign-in-{topic}")


signed_in: set[str] = set()
"""The URL-mode elicitations whose sign-in the ``once`` prompt, resource and tool asked for once."""


def _once(elicitation_id: str) -> str:
    """Fail with ``-32042`` the first time ``elicitation_id`` is asked for, then answer."""
    if elicitation_id not in signed_in:
        signed_in.add(elicitation_id)
        link = types.ElicitRequestURLParams(
            message="Sign in first.", url="https://example.com/login", elicitation_id=elicitation_id
        )
        raise UrlElicitationRequiredError([link])
    return f"signed in: {elicitation_id}"


@server.prompt()
async def once() -> str:
    """Fail with -32042 the first time (sign in first), then answer."""
    return _once("once-prompt")


@server.resource("once://{topic}")
async def once_resource(topic: str) -> str:
    """Fail with -32042 the first time for each topic, then answer."""
    return _once(f"once-{topic}")


@server.tool()
async def once_tool() -> str:
    """Fail with -32042 the first time, then answer."""
    return _once("once-tool")


if __name__ == "__main__":
    server.run("stdio")
