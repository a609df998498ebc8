"""The bundled demo server, a new user's first contact, works with the real SDK client in
both protocol eras, over stdio and over streamable HTTP."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import ERAS, GATEWAY, PYTHON

pytestmark = pytest.mark.anyio

DEMO = ["demo-server", "--tools", "3", "--rich", "--name", "d"]


@contextmanager
def demo_http() -> Iterator[str]:
    proc = subprocess.Popen([*GATEWAY, *DEMO, "--transport", "http"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def exercise(client: Any) -> None:
    tools = {t.name for t in (await client.list_tools()).tools}
    assert {"echo", "structured", "payload"} <= tools and len(tools) >= 10
    assert (await client.call_tool("echo", {"text": "hé 😀"})).content[0].text == "hé 😀"
    structured = await client.call_tool("structured", {"count": 2})
    assert structured.structured_content == {"count": 2, "items": ["item-0", "item-1"]}
    assert (await client.call_tool("fail", {"message": "no"})).is_error
    resources = {str(r.uri) for r in (await client.list_resources()).resources}
    assert "demo://d/readme" in resources
    assert (await client.read_resource("demo://d/readme")).contents[0].text == "d says hello"
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["demo://d/items/{id}"]
    assert {p.name for p in (await client.list_prompts()).prompts} == {"greet", "summarize"}
    greeting = await client.get_prompt("greet", {"who": "Mo"})
    assert greeting.messages[0].content.text == "Hello Mo from d"


@pytest.mark.parametrize("mode", ERAS)
async def test_demo_server_over_stdio(mode: str) -> None:
    params = StdioServerParameters(command=PYTHON, args=["-m", "gateway", *DEMO])
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        assert client.session.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        await exercise(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_demo_server_over_http(mode: str) -> None:
    with demo_http() as url:
        async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
            assert client.session.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            await exercise(client)


SIZES = (0, 1, 3, 33, 34, 35, 1000, 4097, 200_000)


async def test_payload_is_exactly_the_requested_size() -> None:
    """The description promises the size: text and lines exact for every size (small ones, ones
    that are not a multiple of the line length), image data rounded up to whole base64 quads."""
    params = StdioServerParameters(command=PYTHON, args=["-m", "gateway", "demo-server", "--tools", "0"])
    async with Client(params, mode="legacy") as client:
        for size in SIZES:
            for kind in ("text", "lines"):
                result = await client.call_tool("payload", {"bytes": size, "kind": kind})
                assert len(result.content[0].text.encode()) == size, (kind, size)
            lines = (await client.call_tool("payload", {"bytes": 100, "kind": "lines"})).content[0].text
            assert lines.startswith("line 00000000 of the demo payload\nline 00000001")
            image = (await client.call_tool("payload", {"bytes": size, "kind": "image"})).content[0]
            assert len(image.data) == max(-(-size // 4) * 4, 4), size
