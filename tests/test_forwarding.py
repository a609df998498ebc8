"""Forwarding through a real gateway process to real demo servers over stdio."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.helpers import ERAS, PYTHON, demo, gateway, http_gateway, sdk_client, text, write_config

SURFACE = str(Path(__file__).resolve().parent / "surface_server.py")

pytestmark = pytest.mark.anyio


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        {
            "alpha": demo("--tools", 2, "--name", "alpha"),
            "beta": {**demo("--tools", 1, "--name", "beta"), "call_timeout": 1},
        },
    )


async def test_content_kinds_pass_through(config: Path) -> None:
    async with gateway(config) as gw:
        echo = await gw.session.call_tool("alpha__echo", {"text": "héllo 😀"})
        assert echo.content[0].text == "héllo 😀" and not echo.is_error

        structured = await gw.session.call_tool("alpha__structured", {"count": 2})
        assert structured.structured_content == {"count": 2, "items": ["item-0", "item-1"]}

        image = await gw.session.call_tool("alpha__image", {})
        assert isinstance(image.content[0], types.ImageContent)
        assert image.content[0].mime_type == "image/png" and image.content[0].data.startswith("iVBOR")

        failed = await gw.session.call_tool("alpha__fail", {"message": "nope"})
        assert failed.is_error and failed.content[0].text == "nope"

        raw = await gw.raw("tools/call", {"name": "alpha__structured", "arguments": {"count": 1}})
        assert raw["structuredContent"] == {"count": 1, "items": ["item-0"]}
        assert raw["content"] == [{"type": "text", "text": "1 items"}]


async def test_unknown_tool_is_an_error_result(config: Path) -> None:
    async with gateway(config) as gw:
        result = await gw.session.call_tool("alpha__missing", {})
        assert result.is_error and "alpha__missing" in result.content[0].text
        assert (await gw.session.call_tool("alpha__echo", {"text": "ok"})).content[0].text == "ok"


async def test_progress_is_forwarded(config: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with gateway(config) as gw:
        result = await gw.session.call_tool(
            "alpha__slow", {"seconds": 0.3, "steps": 3}, progress_callback=on_progress
        )
        assert result.content[0].text == "slept 0.3 s"
    assert seen == [(0, 3, "step 1 of 3"), (1, 3, "step 2 of 3"), (2, 3, "step 3 of 3")]


async def test_cancellation_reaches_the_downstream_server(config: Path) -> None:
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with gateway(config) as gw:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await gw.session.call_tool(
                    "alpha__slow", {"seconds": 60, "steps": 60}, progress_callback=on_progress
                )
                pytest.fail("the call should have been cancelled")

            tg.start_soon(call)
            with anyio.fail_after(30):
                await started.wait()  # the call is running downstream
            tg.cancel_scope.cancel()
        # The demo server logs its own cancellation to stderr, which the gateway relays.
        with anyio.fail_after(10):
            while "slow cancelled after step" not in gw.stderr():
                await anyio.sleep(0.1)
        assert "[alpha] slow cancelled after step" in gw.stderr()
        assert (await gw.session.call_tool("alpha__echo", {"text": "after"})).content[0].text == "after"


async def test_call_timeout_gives_an_error_result(config: Path) -> None:
    async with gateway(config) as gw:
        result = await gw.session.call_tool("beta__slow", {"seconds": 20, "steps": 1})
        assert result.is_error
        assert result.content[0].text == "beta: tool 'slow' timed out: no answer or progress in 1 s"
        with anyio.fail_after(10):
            while "slow cancelled after step" not in gw.stderr():
                await anyio.sleep(0.1)


async def test_killed_downstream_gives_error_and_gateway_keeps_serving(config: Path) -> None:
    async with gateway(config) as gw:
        result = await gw.session.call_tool("alpha__crash", {"status": 7})
        assert result.is_error
        assert result.content[0].text == "server 'alpha' exited during the call to 'crash' (exit status 7)"
        # The next call waits for the restart the crash began and runs (as a client running
        # the server itself would start it again for that call).
        again = await gw.session.call_tool("alpha__echo", {"text": "x"})
        assert not again.is_error and again.content[0].text == "x", again
        other = await gw.session.call_tool("beta__echo", {"text": "still here"})
        assert other.content[0].text == "still here" and not other.is_error


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_burst_of_progress_arrives_whole_and_before_the_answer(
    tmp_path: Path, mode: str, transport: str
) -> None:
    """A server reports progress 50 times at once and answers. Over HTTP a handshake-era
    client got the first one or two and never the last: the newest waited while one was
    being sent, and was dropped once the call was answered. Then only the newest waited, so
    a client that kept up still lost the steps between (each with its message). Now the 50
    arrive, in order, before the answer, as directly (only against a client too slow for 64
    waiting may steps be skipped: ``test_progress_flood_while_the_client_is_slow_stays_bounded``)."""
    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": [SURFACE, "{}"]}})
    async with AsyncExitStack() as stack:
        if transport == "http":
            url, _log = stack.enter_context(http_gateway(config))
            client = await stack.enter_async_context(sdk_client(url, mode))
        else:
            client = await stack.enter_async_context(sdk_client(config, mode))
        for _ in range(3):
            seen: list[float] = []
            result = await client.call_tool("c__emit", {"progress": 50}, progress_callback=_into(seen))
            assert text(result) == "ok"
            assert seen == [float(i) for i in range(1, 51)], seen


def _into(seen: list[float]) -> Any:
    async def heard(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    return heard
