"""A resource a tool result links to is read from the server that linked it, as directly.

The spec lets a ``resource_link`` name a URI that is not in ``resources/list`` (nor matches a
template). Directly, the client reads it from the server that gave it. Through the gateway a
URI no listed resource or template owns went to the first server offering resources, in id
order: with two such servers the other one's link was "Unknown resource" (gateway/engine/links.py).
Two tests/told_server.py behind one gateway, the real SDK client in both eras.
"""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import ERAS, PYTHON, sdk_client, write_config

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
TOLD = {"command": PYTHON, "args": ["-m", "tests.told_server"], "cwd": str(ROOT)}


@pytest.mark.parametrize("mode", ERAS)
async def test_a_linked_resource_no_server_lists_is_read_from_the_server_that_linked_it(
    tmp_path: Path, mode: str
) -> None:
    config = write_config(tmp_path, {"a": TOLD, "b": TOLD})
    async with sdk_client(config, mode) as client:
        linked = await client.call_tool("b__hide", {"topic": "plan"})
        link = linked.content[0]
        assert isinstance(link, types.ResourceLink) and link.uri == "hidden://plan", linked
        read = await client.read_resource(link.uri)
        assert read.contents[0].text == "hidden plan"  # type: ignore[union-attr]
        # A URI nothing links to or lists still goes where it went: the first server, which refuses it.
        with pytest.raises(MCPError, match="Unknown resource"):
            await client.read_resource("hidden://elsewhere")
