"""A client's ``notifications/roots/list_changed`` reaches the servers behind the gateway, as it
reaches a server directly: the gateway declares ``roots.listChanged`` to its servers, so a
server that keeps the roots it listed waits for this notice to list them again.

A classic server (tests/classic_server.py) over stdio and over streamable HTTP counts the
notices it hears. 2026-07-28 defines no such notice (its server asks for roots with each
request), yet the SDK's client sends it in that era too: directly, a handshake-only server
(server-filesystem, which keeps the roots it listed) hears it, as the client falls back to the
handshake with it; through the gateway, which speaks 2026-07-28 to that client, it is passed on
all the same (the SDK would drop it), so the server lists the roots again.
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
            for times in (1, 2):
                await client.send_roots_list_changed()
                for server in SERVERS:
                    await wait_for(partial(_said, client, f"{server}__roots_changed", f"roots changed: {times}"), 10)
            for server in SERVERS:
                assert text(await client.call_tool(f"{server}__roots", {})) == "file:///work/two"


async def test_one_principals_roots_change_is_not_passed_on_while_another_is_connected(tmp_path: Path) -> None:
    """A shared server's ``roots/list`` outside any call is put to a principal only while every
    connected client, and every principal that has called the server, is that principal's
    (docs/state.md), so a notice would make the server ask a question it cannot have answered:
    Alice's is passed on only once Bob has gone, and only if he never called that server."""
    alice_roots, bob_roots = Roots(), Roots()
    config = write_config(tmp_path, {"stdio": {"command": PYTHON, "args": [CLASSIC]}})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, _stderr):
            async with sdk_client(url, "legacy", headers=ALICE, list_roots_callback=alice_roots.list_roots) as alice:
                async with sdk_client(url, "legacy", headers=BOB, list_roots_callback=bob_roots.list_roots) as bob:
                    assert "stdio__echo" in {t.name for t in (await bob.list_tools()).tools}
                    await alice.send_roots_list_changed()
                    await anyio.sleep(1)  # (a notice passed on reaches the server well within this)
                    assert text(await alice.call_tool("stdio__roots_changed", {})) == "roots changed: 0"

                async def told() -> bool:  # (once the gateway has seen Bob go: his client closed)
                    await alice.send_roots_list_changed()
                    return not await _said(alice, "stdio__roots_changed", "roots changed: 0")

                await wait_for(told, 10)


async def _said(client: Any, tool: str, expected: str) -> bool:
    return text(await client.call_tool(tool, {})) == expected


async def _listed_at_start(client: Any, expected: str, said: list[str]) -> bool:
    """Whether the server's roots, listed once it was initialized, are ``expected`` (each
    answer noted in ``said``)."""
    said.append(text(await client.call_tool("classic__startup_roots_listed", {})))
    return said[-1] == expected


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


async def test_directly_a_server_lists_the_roots_once_initialized() -> None:
    """What the gateway keeps: a server that lists its client's roots as soon as it is
    initialized (outside any call, as server-filesystem does) has them from the start."""
    roots = Roots()
    params = StdioServerParameters(command=PYTHON, args=[CLASSIC, "--roots-at-start"])
    async with Client(params, mode="legacy", list_roots_callback=roots.list_roots) as client:
        await wait_for(partial(_said, client, "startup_roots_listed", roots.uri), 10)


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_roots_asked_outside_any_call_reach_a_client_of_either_era(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """Such a server behind the gateway, first-ever and warm start: its ``roots/list`` comes
    while no client can be asked (none connected yet, or a 2026-07-28 client, which has no
    back-channel). It waits for the client's next call to the server, which asks it (with
    ``input_required`` at 2026-07-28), so the server has the client's roots as directly;
    before, it was refused and the server never had them."""
    roots = Roots()
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC, "--roots-at-start"]}})
    for start in ("first-ever", "warm"):
        with ExitStack() as stack:
            target: Any = config
            log = tmp_path / f"gateway-{start}.log"
            if upstream == "http":
                target, log = stack.enter_context(http_gateway(config))
            async with sdk_client(target, mode, errlog=log, list_roots_callback=roots.list_roots) as client:
                assert text(await client.call_tool("classic__echo", {"text": "hi"})) == "classic:hi", start
                said: list[str] = []
                try:
                    await wait_for(partial(_listed_at_start, client, roots.uri, said), 10)
                except TimeoutError:  # (what the server got, and the gateway's roots lines: for a rare miss)
                    lines = [line for line in log.read_text().splitlines() if "roots" in line]
                    raise AssertionError(f"{start}: the server has {said[-1:]!r}; gateway: {lines}") from None


@pytest.mark.parametrize("mode", ERAS)
async def test_roots_asked_outside_any_call_of_a_client_without_roots_are_refused_plainly(
    tmp_path: Path, mode: str
) -> None:
    """The call that would ask it comes from a client that declared no roots: the server is
    told so (-32021), as over stdio. Over HTTP it got "unhandled errors in a TaskGroup" and
    the gateway logged an ERROR traceback (the refusal left its task group in an exception group)."""
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC, "--roots-at-start"]}})
    with http_gateway(config) as (url, log):
        await wait_for(lambda: "roots/list waits for the next call to it" in log.read_text(), 10)
        async with sdk_client(url, mode) as client:
            assert text(await client.call_tool("classic__echo", {"text": "hi"})) == "classic:hi"

            async def answered() -> bool:
                said.append(text(await client.call_tool("classic__startup_roots_listed", {})))
                return said[-1] != "not yet"

            said: list[str] = []
            await wait_for(answered, 10)
    assert said[-1] == "failed: prefixgate: the connected client does not support roots", said
    assert "ERROR" not in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_roots_asked_outside_any_call_go_to_no_one_while_two_principals_see_the_server(
    tmp_path: Path, mode: str
) -> None:
    """The request was made for no one in particular: Alice's call does not answer it while
    Bob is connected too (her roots would serve his calls), and does once he has gone."""
    alice_roots, bob_roots = Roots(), Roots()
    bob_roots.uri = "file:///work/bob"
    config = write_config(tmp_path, {"stdio": {"command": PYTHON, "args": [CLASSIC, "--roots-at-start"]}})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, log):
            # The server asked before anyone connected (had only Alice been connected then, hers it would be).
            await wait_for(lambda: "roots/list waits for the next call to it" in log.read_text(), 10)
            async with sdk_client(url, mode, headers=ALICE, list_roots_callback=alice_roots.list_roots) as alice:
                async with sdk_client(url, "legacy", headers=BOB, list_roots_callback=bob_roots.list_roots):
                    assert text(await alice.call_tool("stdio__echo", {"text": "here"})) == "classic:here"
                    await anyio.sleep(0.5)  # (an answer given reaches the server well within this)
                    assert text(await alice.call_tool("stdio__startup_roots_listed", {})) == "not yet"

                async def listed() -> bool:  # (once the gateway has seen Bob go: his client closed)
                    await alice.call_tool("stdio__echo", {"text": "again"})
                    return await _said(alice, "stdio__startup_roots_listed", alice_roots.uri)

                await wait_for(listed, 10)


async def test_requests_waiting_for_a_call_are_bounded(tmp_path: Path) -> None:
    """A server asks for the roots six times outside any call, of a 2026-07-28 client (which
    cannot be asked there): four wait for its next call, which asks them; the rest are refused
    at once (a server cannot make the gateway hold more)."""
    roots = Roots()
    config, log = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC]}}), tmp_path / "gateway.log"
    async with sdk_client(config, "auto", errlog=log, list_roots_callback=roots.list_roots) as client:
        assert text(await client.call_tool("classic__roots_later", {"n": 6})) == "asking 6 times"

        def handled(text: str) -> bool:  # all six, before a call (which would be asked them) is made
            return text.count("roots/list waits for the next call") == 4 and text.count("roots/list refused") == 2

        await wait_for(lambda: handled(log.read_text()), 10)

        async def ended(count: int) -> bool:
            return len(text(await client.call_tool("classic__roots_later_results", {})).split("; ")) == count

        await wait_for(partial(ended, 6), 10)
        ends = text(await client.call_tool("classic__roots_later_results", {})).split("; ")
    assert (
        ends[:2]
        == [
            "failed: prefixgate: no client can be asked roots/list now, and 4 requests of this server "
            "already wait for a call to ask them"
        ]
        * 2
    )
    assert ends[2:] == [roots.uri] * 4


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_without_roots_has_the_waiting_request_refused(tmp_path: Path, mode: str, upstream: str) -> None:
    """A client that declares no roots: the request waiting for its call is refused to the
    server (as directly, where the client refuses it), and the call itself goes on."""
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC, "--roots-at-start"]}})
    with ExitStack() as stack:
        target: Any = config
        if upstream == "http":
            target, _log = stack.enter_context(http_gateway(config))
        async with sdk_client(target, mode) as client:
            assert text(await client.call_tool("classic__echo", {"text": "hi"})) == "classic:hi"

            async def refused() -> bool:
                return text(await client.call_tool("classic__startup_roots_listed", {})).startswith("failed: ")

            await wait_for(refused, 10)
