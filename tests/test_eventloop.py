"""``serve`` runs on uvloop where it is installed (gateway/commands/eventloop.py), and on asyncio's loop
with ``PREFIXGATE_UVLOOP=0``: the same answers either way, in both eras, over stdio and
HTTP, including a classic server's request to the client during a call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.commands.eventloop import UVLOOP_ENV, backend_options
from tests.helpers import ERAS, demo, elicitation, http_gateway, sdk_client, text, write_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_serve_answers_alike_on_either_loop(tmp_path: Path, mode: str, loop: str, transport: str) -> None:
    servers = {
        "demo": demo("--tools", 1, "--rich"),
        "asker": {**demo("--tools", 1, "--rich", "--name", "asker"), "protocol": "legacy"},
    }
    config = write_config(tmp_path, servers)
    env = {UVLOOP_ENV: "1" if loop == "uvloop" else "0"}
    if transport == "http":
        with http_gateway(config, "--log-level", "debug", env=env) as (url, errlog):
            await _calls(url, mode)
    else:
        errlog = tmp_path / "serve.log"
        await _calls(config, mode, env=env, log_level="debug", errlog=errlog)
    assert f"event loop: {loop}" in errlog.read_text()


async def _calls(target: Path | str, mode: str, **options: Any) -> None:
    """A call, one with progress, and one whose classic server asks the client during it."""
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with sdk_client(target, mode, elicitation_callback=elicitation, **options) as client:
        assert text(await client.call_tool("demo__echo", {"text": "hi"})) == "hi"
        result = await client.call_tool("demo__slow", {"seconds": 0.2, "steps": 2}, progress_callback=progress)
        assert text(result) == "slept 0.2 s" and seen == [0.0, 1.0]
        result = await client.call_tool("asker__ask", {})  # a classic server asks the client during the call
        assert not result.is_error and "accept" in text(result)


def test_the_loop_is_chosen_from_the_environment() -> None:
    assert backend_options({}) == {"use_uvloop": True}
    assert backend_options({UVLOOP_ENV: "1"}) == {"use_uvloop": True}
    for off in ("0", "off", " False "):
        assert backend_options({UVLOOP_ENV: off}) == {}
