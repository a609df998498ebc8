"""The bundled demo server behind the real gateway on the 2026-07-28 protocol
(``protocol = "modern"``; the default reaches this dual-era server with the handshake), with
the real SDK client in both eras: what the demo announces or asks
reaches the client the way that protocol allows (listen streams, ``input_required``, logs on
the call's stream)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from tests.helpers import (
    CALLBACKS,
    ERAS,
    answers_every_input_request,
    demo,
    http_gateway,
    sdk_client,
    text,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

RICH = ("--tools", 0, "--rich", "--interactive", "--name", "r")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, {"r": {**demo(*RICH), "protocol": "modern"}})


def reached_modern(stderr: Path) -> bool:
    return "[r] protocol 2026-07-28" in stderr.read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("mode", ERAS)
async def test_the_demo_asks_for_input_on_2026_07_28(config: Path, mode: str) -> None:
    """ask, sample, roots, the interview prompt and the roots resource: ``input_required``
    from the demo, answered by the client (auto) or by the gateway's back-channel (legacy)."""
    with http_gateway(config, "--log-level", "info") as (url, stderr):
        async with sdk_client(url, mode, **CALLBACKS) as client:
            with anyio.fail_after(60):
                await answers_every_input_request(client)
        assert reached_modern(stderr), stderr.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_mutate_and_touch_reach_the_client_on_2026_07_28(config: Path, mode: str) -> None:
    """The demo announces on its listen stream; the gateway relays to either era's client.
    (A resource update for a modern client: the next tests.)"""
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    def tool_changes() -> int:
        return sum(isinstance(m, types.ToolListChangedNotification) for m in heard)

    def updates() -> list[str]:
        return [str(m.params.uri) for m in heard if isinstance(m, types.ResourceUpdatedNotification)]

    with http_gateway(config, "--log-level", "info") as (url, stderr):
        async with sdk_client(url, mode, message_handler=on_message) as client:
            with anyio.fail_after(60):
                assert "r__grown_1" not in [t.name for t in (await client.list_tools()).tools]
                if mode == "auto":
                    async with client.listen(tools_list_changed=True) as events:
                        assert text(await client.call_tool("r__mutate", {"kind": "grow"})) == "mutated:grow"
                        async for event in events:
                            assert isinstance(event, ToolsListChanged)
                            break
                else:
                    await client.subscribe_resource("demo://r/readme")
                    assert text(await client.call_tool("r__mutate", {"kind": "grow"})) == "mutated:grow"
                    await wait_for(lambda: tool_changes() >= 1)
                    assert text(await client.call_tool("r__touch", {})) == "touched"
                    await wait_for(lambda: bool(updates()))
                    assert updates() == ["demo://r/readme"]
                assert "r__grown_1" in [t.name for t in (await client.list_tools()).tools]
                assert text(await client.call_tool("r__grown_1", {})).startswith("r:grown_1")
        assert reached_modern(stderr), stderr.read_text()


async def hears_the_readme_touched(client: Any) -> None:
    """The client's own listen stream watches ``demo://r/readme`` and hears its update when it
    touches it (``r__touch``)."""
    async with client.listen(resource_subscriptions=["demo://r/readme"]) as events:
        assert text(await client.call_tool("r__touch", {})) == "touched"
        with anyio.fail_after(10):
            async for event in events:
                assert isinstance(event, ResourceUpdated) and event.uri == "demo://r/readme"
                break


async def test_touch_reaches_a_modern_client_on_2026_07_28(config: Path) -> None:
    with http_gateway(config, "--log-level", "info") as (url, stderr):
        async with sdk_client(url, "auto") as client:
            await hears_the_readme_touched(client)
        assert reached_modern(stderr), stderr.read_text()


async def test_watchers_are_counted_so_one_leaving_does_not_silence_another(config: Path) -> None:
    """A handshake-era client's resources/subscribe and a 2026-07-28 client's listen stream watch
    the same resource: when the listen stream closes, the other client still gets updates."""
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    with http_gateway(config, "--log-level", "info") as (url, stderr):
        async with sdk_client(url, "legacy", message_handler=on_message) as old:
            await old.subscribe_resource("demo://r/readme")
            async with sdk_client(url, "auto") as new:
                async with new.listen(resource_subscriptions=["demo://r/readme"]) as events:
                    assert text(await new.call_tool("r__touch", {})) == "touched"
                    with anyio.fail_after(10):
                        async for event in events:
                            assert isinstance(event, ResourceUpdated)
                            break
            await wait_for(lambda: len(heard) >= 1)
            assert text(await old.call_tool("r__touch", {})) == "touched"
            await wait_for(lambda: len(heard) >= 2)
            assert heard == ["demo://r/readme", "demo://r/readme"]
            await old.unsubscribe_resource("demo://r/readme")
        assert reached_modern(stderr), stderr.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_logs_during_a_call_reach_the_client_on_2026_07_28(config: Path, mode: str) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    # 2026-07-28: logs are opted in per request; the handshake era: with logging/setLevel.
    opt_in = {"io.modelcontextprotocol/logLevel": "info"} if mode == "auto" else None
    with http_gateway(config, "--log-level", "info") as (url, stderr):
        async with sdk_client(url, mode, logging_callback=on_log) as client:
            with anyio.fail_after(60):
                if mode == "legacy":
                    await client.set_logging_level("info")
                result = await client.call_tool("r__log", {"level": "warning", "text": "disk almost full"}, meta=opt_in)
                assert text(result) == "logged"
                await wait_for(lambda: bool(logs))
                assert (logs[0].level, logs[0].logger, logs[0].data) == ("warning", "r/demo", "disk almost full")
        assert reached_modern(stderr), stderr.read_text()


async def test_a_listen_stream_watching_too_many_resources_is_refused(config: Path) -> None:
    """At most 64 resources per listen stream: a stream naming more is refused (and the gateway
    keeps serving); a stream naming a resource no server lists still serves the rest."""
    from mcp.shared.exceptions import MCPError

    too_many = [f"demo://r/items/{i}" for i in range(65)]
    with http_gateway(config, "--log-level", "info") as (url, _stderr):
        async with sdk_client(url, "auto") as client:
            with pytest.raises(MCPError, match="at most 64 resources"):
                async with client.listen(resource_subscriptions=too_many) as events:
                    async for _ in events:
                        break
            async with client.listen(resource_subscriptions=["nowhere://x", "demo://r/readme"]) as events:
                assert text(await client.call_tool("r__touch", {})) == "touched"
                with anyio.fail_after(10):
                    async for event in events:
                        assert isinstance(event, ResourceUpdated) and event.uri == "demo://r/readme"
                        break
