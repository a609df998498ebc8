"""Catalog lifecycle in a long-running gateway: list_changed, late joins, crash recovery."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.helpers import Notifications, demo, gateway, wait_for, wire, write_config

pytestmark = pytest.mark.anyio


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        {
            # Reached on 2026-07-28 (the default): the demo announces changes on its listen stream.
            "r": demo("--tools", 2, "--rich", "--name", "r"),
            "d": {**demo("--tools", 1, "--name", "d"), "deferred": True},
        },
    )


async def test_unchanged_list_changed_is_silent_and_a_real_change_is_one_epoch(config: Path) -> None:
    notes = Notifications()
    async with gateway(config, client={"message_handler": notes}) as gw:
        before = wire(await gw.raw("tools/list"))
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
        assert not (await gw.session.call_tool("d__echo", {"text": "x"})).is_error

        # Same tools, new listing order and key order: no epoch, no notification.
        assert (await gw.session.call_tool("r__mutate", {"kind": "reorder"})).content[0].text == "mutated:reorder"
        await wait_for(lambda: "catalog unchanged" in gw.stderr())
        # A reply comes after every notification the gateway sent before it (one ordered stream):
        # once this round trip is back, a notification for the reorder would have been seen.
        await gw.raw("tools/list")
        assert notes.tool_changes() == 0
        assert wire(await gw.raw("tools/list")) == before
        assert not (await gw.session.call_tool("d__echo", {"text": "still active"})).is_error

        # One more tool: exactly one notification, new bytes, activation cleared.
        await gw.session.call_tool("r__mutate", {"kind": "grow"})
        await wait_for(lambda: notes.tool_changes() >= 1)
        after = await gw.raw("tools/list")
        assert notes.tool_changes() == 1
        assert wire(after) != before
        assert "r__grown_1" in [t["name"] for t in after["tools"]]
        refused = await gw.session.call_tool("d__echo", {"text": "x"})
        assert refused.is_error and "Call tool_search to activate d__echo first" in refused.content[0].text
        assert (await gw.session.call_tool("r__grown_1", {})).content[0].text.startswith("r:grown_1")
        assert await gw.saw("new epoch (server 'r' changed its tools)", "added: r__grown_1"), gw.stderr()


async def test_killed_server_comes_back_in_the_same_epoch(config: Path) -> None:
    notes = Notifications()
    async with gateway(config, client={"message_handler": notes}) as gw:
        before = wire(await gw.raw("tools/list"))
        crashed = await gw.session.call_tool("r__crash", {"status": 9})
        assert crashed.is_error and "exited during the call" in crashed.content[0].text
        with anyio.fail_after(30):
            # The next call waits for the first restart (tests/test_supervision.py).
            back = await gw.session.call_tool("r__echo", {"text": "back"})
        assert not back.is_error, back
        await wait_for(lambda: "catalog unchanged" in gw.stderr())
        assert wire(await gw.raw("tools/list")) == before
        assert notes.tool_changes() == 0


async def test_late_server_joins_when_ready(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "fast": demo("--tools", 1, "--name", "fast"),
            "slow": {**demo("--tools", 1, "--name", "slow", "--startup-delay", 4), "startup_timeout": 1},
        },
    )
    notes = Notifications()
    async with gateway(config, client={"message_handler": notes}) as gw:
        first = [t.name for t in (await gw.session.list_tools()).tools]
        assert "fast__echo" in first and "slow__echo" not in first
        assert await gw.saw("[slow] late: not ready within startup_timeout 1 s"), gw.stderr()
        await wait_for(lambda: notes.tool_changes() == 1)
        joined = [t.name for t in (await gw.session.list_tools()).tools]
        assert "slow__echo" in joined
        assert (await gw.session.call_tool("slow__echo", {"text": "made it"})).content[0].text == "made it"


async def test_modern_protocol_clients_get_the_change_on_their_listen_stream(config: Path) -> None:
    """2026-07-28 clients have no standing notification stream: subscriptions/listen."""
    import os

    from mcp import Client, StdioServerParameters, stdio_client
    from mcp.shared.subscriptions import ToolsListChanged

    from tests.helpers import PYTHON

    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "gateway", "serve", "--config", str(config), "--log-level", "info"],
        env=dict(os.environ),
    )
    log = config.parent / "gateway-auto.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="auto") as client:  # type: ignore[arg-type]
            assert client.session.protocol_version == "2026-07-28"
            before = [t.name for t in (await client.list_tools()).tools]
            async with client.listen(tools_list_changed=True) as subscription:
                events: list[object] = []

                async def collect() -> None:
                    async for event in subscription:
                        events.append(event)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(collect)
                    await client.call_tool("r__mutate", {"kind": "reorder"})
                    await wait_for(lambda: "catalog unchanged" in log.read_text())
                    # The real changes below are the markers: events arrive in order on one
                    # stream, so a notification for the reorder would come before the grow's.
                    await client.call_tool("r__mutate", {"kind": "grow"})
                    await wait_for(lambda: len(events) >= 1)
                    await client.call_tool("r__mutate", {"kind": "grow"})
                    await wait_for(lambda: len(events) >= 2)
                    tg.cancel_scope.cancel()
            assert len(events) == 2 and all(isinstance(e, ToolsListChanged) for e in events), "one event per change"
            after = [t.name for t in (await client.list_tools()).tools]
            assert set(after) - set(before) == {"r__grown_1", "r__grown_2"}
            # Everything else relayed from a handshake-era server works on the modern wire too.
            assert (await client.read_resource("demo://r/readme")).contents[0].text == "r says hello"
            assert "r__greet" in [p.name for p in (await client.list_prompts()).prompts]
            greeting = await client.get_prompt("r__greet", {"who": "Mo"})
            assert greeting.messages[0].content.text == "Hello Mo from r"
            assert (await client.call_tool("r__echo", {"text": "modern"})).content[0].text == "modern"

