"""Claude Code saves an MCP result whose text is over 50,000 characters to a file and shows
the model only its first 2 KB (measured with 2.1.197: ``min(maxResultSizeChars, 50000)``), so
prefixgate's bounded answer, at 64 KiB, lost its trailer, the artifact the model reads the
rest from. With ``[client] profile = "claude-code"`` the bound defaults to 48 KiB, under that
limit; ``[spill] max_visible_bytes`` set in the config still wins, and a profile endpoint for
Claude Code gets its own bound. Real gateway, the real demo server, the SDK client in both eras.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import parse_config
from tests.helpers import ERAS, demo, sdk_client, write_config

CLAUDE_CODE_SHOWS = 50_000
"""Characters of text Claude Code shows of a result before it moves it to a file."""


def shown(result: Any) -> str:
    """The text Claude Code counts: every text block's, in UTF-16 code units as JavaScript does."""
    return "".join(block.text for block in result.content if block.type == "text")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_bounded_answer_fits_what_claude_code_shows(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, client={"profile": "claude-code"})
    async with sdk_client(config, mode) as client:
        result = await client.call_tool("d__payload", {"bytes": 200_000})
    text = shown(result)
    assert len(text.encode("utf-16-le")) // 2 <= 48 * 1024 < CLAUDE_CODE_SHOWS
    assert "exceeds the 49152-byte limit" in text and 'read it with artifact_read {"id": "' in text


@pytest.mark.anyio
async def test_the_configured_bound_wins(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"d": demo("--tools", 1)}, client={"profile": "claude-code"}, spill={"max_visible_bytes": 65536}
    )
    async with sdk_client(config, "auto") as client:
        result = await client.call_tool("d__payload", {"bytes": 200_000})
    assert "exceeds the 65536-byte limit" in shown(result)


def test_each_profile_endpoint_gets_its_clients_bound() -> None:
    tables = {"servers": {"a": {"command": "x"}}, "profiles": {"cc": {"client": {"profile": "claude-code"}}}}
    config = parse_config(tables, env={})
    assert (config.spill.max_visible_bytes, config.view("cc").spill.max_visible_bytes) == (65536, 48 * 1024)
    given = parse_config({**tables, "spill": {"max_visible_bytes": 8192}}, env={})
    assert (given.spill.max_visible_bytes, given.view("cc").spill.max_visible_bytes) == (8192, 8192)
