"""A client's ``notifications/roots/list_changed`` reaches the servers behind the gateway, as it
reaches a server directly: the gateway declares ``roots.listChanged`` to its servers, so a
server that keeps the roots it listed waits for this notice to list them again.

A classic server (tests/classic_server.py) over stdio and over streamable HTTP counts the
notices it hears. A 2026-07-28 client has no such notice (its server asks for roots with each
request): through the gateway it gets the roots of the moment on every call, as directly.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from bench.common import url_process
from tests.helpers import ERAS, PYTHON, http_gateway, sdk_client, text, wait_for, write_config
from tests.test_principals import tokens_file

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

CLASSIC = str(Path(__file__).resolve().parent / "classic_server.py")
ROGUE = str(Path(__file__).resolve().parent / "rogue_wire.py")
SERVERS = ("stdio", "http")
ALICE = {"Authorization": "Bearer token-of-alice"}
BOB = {"Authorization": "Bearer token-of-bob"}


class Roots:
    """The client's roots, which the test changes."""

    def __init__(self) -> None:
        self.uri = "file:///work/one"

    async def list_roots(self, context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root.model_validate({"uri": self.uri})])


async def test_directly_a_classic_server_hears_the_notice() -> None:
    """The behaviour the gateway keeps: the server itself counts the notice."""
    roots = Roots()
    params = StdioServerParameters(command=PYTHON, args=[CLASSIC])
    async with Client(params, mode="legacy", list_roots_callback=roots.list_roots) as client:
        await client.send_roots_list_changed()
        await wait_for(partial(_said, client, "roots_changed", "roots changed: 1"), 10)


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_roots_change_reaches_each_server_behind_the_gateway(tmp_path: Path, mode: str, upstream: str) -> None:
    roots = Roots()
    with ExitStack() as stack, (tmp_path / "servers.log").open("w") as errlog:
        url, _proc = stack.enter_context(url_process([PYTHON, CLASSIC, "--http"], stderr=errlog))
        config = write_config(tmp_path, {"stdio": {"command": PYTHON, "args": [CLASSIC]}, "http": {"url": url}})
        target: Path | str = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode, list_roots_callback=roots.list_roots) as client:
            for server in SERVERS:
                assert text(await client.call_tool(f"{server}__roots", {})) == "file:///work/one"
            roots.uri = "file:///work/two"
            if mode == "legacy":
                for times in (1, 2):
                    await client.send_roots_list_changed()
                    for server in SERVERS:
                        await wait_for(
                            partial(_said, client, f"{server}__roots_changed", f"roots changed: {times}"), 10
                        )
            for server in SERVERS:
                assert text(await client.call_tool(f"{server}__roots", {})) == "file:///work/two"
            if mode != "legacy":
                for server in SERVERS:
                    assert text(await client.call_tool(f"{server}__roots_changed", {})) == "roots changed: 0"


async def test_one_principals_roots_change_is_not_passed_on_while_another_is_connected(tmp_path: Path) -> None:
    """A shared server's ``roots/list`` outside any call is put to a principal only while every
    connected client is that principal's (docs/state.md), so a notice would make the server ask
    a question it cannot have answered: Alice's is passed on only once Bob has gone."""
    alice_roots, bob_roots = Roots(), Roots()
    config = write_config(tmp_path, {"stdio": {"command": PYTHON, "args": [CLASSIC]}})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, _stderr):
            async with sdk_client(url, "legacy", headers=ALICE, list_roots_callback=alice_roots.list_roots) as alice:
                async with sdk_client(url, "legacy", headers=BOB, list_roots_callback=bob_roots.list_roots) as bob:
                    assert text(await bob.call_tool("stdio__echo", {"text": "here"})) == "classic:here"
                    await alice.send_roots_list_changed()
                    await anyio.sleep(1)  # (a notice passed on reaches the server well within this)
                    assert text(await alice.call_tool("stdio__roots_changed", {})) == "roots changed: 0"

                async def told() -> bool:  # (once the gateway has seen Bob go: his client closed)
                    await alice.send_roots_list_changed()
                    return not await _said(alice, "stdio__roots_changed", "roots changed: 0")

                await wait_for(told, 10)


async def _said(client: Any, tool: str, expected: str) -> bool:
    return text(await client.call_tool(tool, {})) == expected


async def test_a_server_that_stops_reading_holds_up_no_one_else(tmp_path: Path) -> None:
    """A misbehaving server (tests/rogue_wire.py) stops reading its input, and a call's large
    arguments fill its pipe: a roots notice to it waits ``NOTICE_TIMEOUT`` (5 s) at most, then
    is dropped with a line in the log; the other server is told all the same, and calls go on."""
    roots, log = Roots(), tmp_path / "gateway.log"
    servers = {"classic": {"command": PYTHON, "args": [CLASSIC]}, "rogue": {"command": PYTHON, "args": [ROGUE]}}
    config = write_config(tmp_path, servers)
    async with sdk_client(config, "legacy", errlog=log, list_roots_callback=roots.list_roots) as client:
        assert text(await client.call_tool("rogue__stop_reading", {})) == "no longer reading"
        async with anyio.create_task_group() as stuck:
            stuck.start_soon(client.call_tool, "rogue__echo", {"text": "x" * (1 << 20)})  # never read

            async def dropped() -> bool:
                await client.send_roots_list_changed()
                return "[rogue] roots/list_changed not sent: its input is not being read" in log.read_text()

            await wait_for(dropped, 30)
            assert not await _said(client, "classic__roots_changed", "roots changed: 0")
            assert text(await client.call_tool("classic__echo", {"text": "on"})) == "classic:on"
            stuck.cancel_scope.cancel()
