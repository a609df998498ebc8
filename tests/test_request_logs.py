"""A server's log line while it answers ``prompts/get`` or ``resources/read`` reaches the
client that asked, as it does directly and as one during a ``tools/call`` does: before the
answer, on the request's own stream. A 2026-07-28 client hears it when its request opted in
(``io.modelcontextprotocol/logLevel``); a handshake-era one, whose level is the server's
default, hears every line its request caused.

Both were lost: a 2026-07-28 client's every time (the request was not one the gateway's relay
knew as in flight), a handshake-era client's over stdio most times (the answer went out before
the line, which then belonged to a request already answered). And toward a server reached with
the 2026-07-28 protocol, which logs only for a request that opted in, a 2026-07-28 client's
opt-in on these requests did not travel on to it (a tool call's did), so it logged nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import ERAS, PYTHON, http_gateway, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

ROUNDS = 5
"""Requests of each kind (a line lost now and then must not pass by luck)."""


@asynccontextmanager
async def client(config: Path, upstream: str, mode: str, logs: list[str]) -> AsyncIterator[Client]:
    """The SDK's ``Client`` through ``serve`` (over stdio or HTTP), opted in to info lines."""

    async def heard(params: Any) -> None:
        logs.append(str(params.data))

    options: dict[str, Any] = {"mode": mode, "log_level": "info", "logging_callback": heard}
    if upstream == "stdio":
        args = ["-m", "gateway", "serve", "--config", str(config), "--log-level", "warning"]
        async with Client(StdioServerParameters(command=PYTHON, args=args), **options) as connected:
            yield connected
        return
    with http_gateway(config) as (url, _):
        async with Client(streamable_http_client(url), **options) as connected:
            yield connected


async def told(config: Path, upstream: str, mode: str) -> list[str]:
    """The lines heard, in order, while a prompt and a resource read are answered ``ROUNDS``
    times, each checked to arrive before its answer."""
    logs: list[str] = []
    async with client(config, upstream, mode, logs) as gateway:
        for n in range(ROUNDS):
            prompt = await gateway.get_prompt("told")
            assert prompt.messages[0].content.text == "prompt answered"  # type: ignore[union-attr]
            assert logs[-1:] == ["told: prompt"], (n, logs)  # before the answer, not after it
            read = await gateway.read_resource(f"told://{n}")
            assert read.contents[0].text == f"resource {n}"  # type: ignore[union-attr]
            assert logs[-1:] == [f"told: resource {n}"], (n, logs)
    return logs


ROOT = Path(__file__).resolve().parent.parent
SERVER = {"command": PYTHON, "args": ["-m", "tests.told_server"], "cwd": str(ROOT), "prefix": ""}


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_log_line_while_a_prompt_or_resource_is_answered_reaches_its_client(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    config = write_config(tmp_path, {"told": SERVER}, client={"profile": "mcp"})
    assert len(await told(config, upstream, mode)) == 2 * ROUNDS


@pytest.mark.parametrize("upstream", ["stdio", "http"])
async def test_a_2026_client_s_opt_in_reaches_a_server_reached_with_2026(tmp_path: Path, upstream: str) -> None:
    config = write_config(tmp_path, {"told": {**SERVER, "protocol": "modern"}}, client={"profile": "mcp"})
    assert len(await told(config, upstream, "auto")) == 2 * ROUNDS
