"""The reference '@modelcontextprotocol/server-everything' (npm) behind the gateway."""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest

from tests.conformance.runner import node_binary
from tests.helpers import gateway, write_config

pytestmark = pytest.mark.anyio


async def test_server_everything_tools_resources_and_prompts(tmp_path: Path, npm_packages: Path) -> None:
    script = npm_packages / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    config = write_config(
        tmp_path,
        {"everything": {"command": str(node_binary()), "args": [str(script), "stdio"], "prefix": "ev"}},
        client={"profile": "mcp"},
    )
    async with gateway(config) as gw:
        tools = [t.name for t in (await gw.session.list_tools()).tools]
        assert {"ev__echo", "ev__get-sum", "ev__get-tiny-image"} <= set(tools)
        assert tools == sorted(tools, key=lambda n: n.encode("utf-16-be"))

        echo = await gw.session.call_tool("ev__echo", {"message": "through the gateway"})
        assert "through the gateway" in echo.content[0].text
        total = await gw.session.call_tool("ev__get-sum", {"a": 2, "b": 40})
        assert "42" in total.content[0].text
        image = await gw.session.call_tool("ev__get-tiny-image", {})
        assert any(isinstance(block, types.ImageContent) for block in image.content)
        invalid = await gw.session.call_tool("ev__get-sum", {"a": "two"})
        assert invalid.is_error and "arguments" in invalid.content[0].text

        resources = (await gw.session.list_resources()).resources
        assert resources, "server-everything offers resources"
        first = await gw.session.read_resource(resources[0].uri)
        assert first.contents
        templates = (await gw.session.list_resource_templates()).resource_templates
        assert templates

        # Its task-only tool is published for plain calls, which the gateway runs as tasks
        # (tests/test_task_tools.py): nothing to warn about.
        assert "ev__simulate-research-query" in tools
        assert "task-only" not in gw.stderr()

        prompts = [p.name for p in (await gw.session.list_prompts()).prompts]
        assert prompts and all(p.startswith("ev__") for p in prompts)
        simple = next(p for p in prompts if "simple" in p)
        got = await gw.session.get_prompt(simple, {})
        assert got.messages
