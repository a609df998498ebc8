"""A downstream's JSON-RPC error on ``tools/call`` reaches the model as an ``isError`` result
naming the server, the tool, the code and the message on one bounded line; the spec's own
request-level codes stay JSON-RPC errors. Real gateway, real server, real SDK client, both eras."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import ERAS, PYTHON, sdk_client, text, write_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ERAS)
async def test_a_servers_json_rpc_error_is_an_is_error_result(tmp_path: Path, mode: str) -> None:
    server = {"command": PYTHON, "args": ["-m", "tests.error_server"], "cwd": str(Path.cwd())}
    config = write_config(tmp_path, {"e": server})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            failed = await client.call_tool("e__fetch", {})  # main: MCPError -32603, the model's turn ends
            assert failed.is_error
            assert text(failed) == "Server 'e' answered tool 'fetch' with JSON-RPC error -32603: fetch failed"
            noisy = await client.call_tool("e__noisy", {})
            line = text(noisy)
            assert noisy.is_error and "'noisy'" in line and "-32000" in line and "line one line two" in line
            assert "\n" not in line and "\x1b" not in line and len(line) < 700, line
            # A spec-defined code is about the request itself: the client acts on it.
            with pytest.raises(MCPError) as caught:
                await client.call_tool("e__capability", {})
            assert caught.value.error.code == -32021
            ok = await client.call_tool("e__ok", {})
            assert not ok.is_error and text(ok) == "fine"
