"""A real peer no one here wrote: mcp-server-time from PyPI, behind the gateway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import PYTHON, gateway, write_config

pytestmark = pytest.mark.anyio


async def test_mcp_server_time_through_the_gateway(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"time": {"command": PYTHON, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}
    )
    async with gateway(config) as gw:
        names = sorted(t.name for t in (await gw.session.list_tools()).tools)
        assert names == ["artifact_read", "time__convert_time", "time__get_current_time"]
        now = await gw.session.call_tool("time__get_current_time", {"timezone": "Europe/Paris"})
        assert not now.is_error
        assert json.loads(now.content[0].text)["timezone"] == "Europe/Paris"
        converted = await gw.session.call_tool(
            "time__convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        )
        target = json.loads(converted.content[0].text)["target"]
        assert target["timezone"] == "Asia/Tokyo" and target["datetime"].endswith("T21:00:00+09:00")
