"""The bundled demo server, a new user's first contact, works with the real SDK client in
both protocol eras, over stdio and over streamable HTTP."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from tests.helpers import CALLBACKS, ERAS, GATEWAY, PYTHON

pytestmark = pytest.mark.anyio

DEMO = ["demo-server", "--tools", "3", "--rich", "--name", "d"]


@contextmanager
def demo_http(args: list[str] = DEMO) -> Iterator[str]:
    proc = subprocess.Popen([*GATEWAY, *args, "--transport", "http"], stdout=subprocess.PIPE, text=True)
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
    with pytest.raises(MCPError) as missing:  # -32002 up to 2025-11-25; 2026-07-28 retired it for -32602
        await client.read_resource("demo://d/missing")
    modern = client.session.protocol_version == "2026-07-28"
    assert (missing.value.error.code, missing.value.error.message) == (
        -32602 if modern else -32002,
        "Resource not found: demo://d/missing",
    )
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


INTERACTIVE = ["demo-server", "--tools", "0", "--rich", "--interactive", "--name", "d"]


async def talk_back(client: Any, mode: str, heard: list[Any]) -> None:
    """Input from the client (back-channel requests or input_required rounds) and change
    announcements (session notifications or the listen stream), each the way its era allows."""
    text = lambda result: result.content[0].text  # noqa: E731
    assert text(await client.call_tool("ask", {})) == "accept:{'name': 'Ann'}"
    assert text(await client.call_tool("sample", {})) == "m1:hi"
    assert text(await client.call_tool("roots", {})) == "file:///work/project"
    assert (await client.get_prompt("interview")).messages[0].content.text == "Hello Ann from d"
    assert (await client.read_resource("demo://d/roots")).contents[0].text == "file:///work/project"
    capabilities = client.server_capabilities
    assert capabilities.tools.list_changed and capabilities.resources.subscribe, capabilities
    if mode == "auto":
        async with client.listen(tools_list_changed=True, resource_subscriptions=["demo://d/readme"]) as events:
            assert text(await client.call_tool("mutate", {"kind": "grow"})) == "mutated:grow"
            assert text(await client.call_tool("touch", {})) == "touched"
            got = []
            async for event in events:
                got.append(event)
                if len(got) == 2:
                    break
        assert got == [ToolsListChanged(), ResourceUpdated(uri="demo://d/readme")]
    else:
        await client.subscribe_resource("demo://d/readme")
        assert text(await client.call_tool("mutate", {"kind": "grow"})) == "mutated:grow"
        assert text(await client.call_tool("touch", {})) == "touched"
        while len(heard) < 2:
            await anyio.sleep(0.05)
        assert [type(m) for m in heard] == [types.ToolListChangedNotification, types.ResourceUpdatedNotification]
    assert "grown_1" in [t.name for t in (await client.list_tools()).tools]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_the_demo_talks_back_in_both_eras(mode: str) -> None:
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        if not isinstance(message, Exception):
            heard.append(message)

    params = StdioServerParameters(command=PYTHON, args=["-m", "gateway", *INTERACTIVE])
    async with Client(params, mode=mode, message_handler=on_message, **CALLBACKS) as client:  # type: ignore[arg-type]
        with anyio.fail_after(30):
            await talk_back(client, mode, heard)
    heard.clear()
    with demo_http(INTERACTIVE) as url:
        async with Client(url, mode=mode, message_handler=on_message, **CALLBACKS) as client:  # type: ignore[arg-type]
            with anyio.fail_after(30):
                await talk_back(client, mode, heard)


async def test_a_modern_client_without_the_capability_is_told_so() -> None:
    """On 2026-07-28 the demo asks only for what the client declared: else -32021."""
    params = StdioServerParameters(command=PYTHON, args=["-m", "gateway", *INTERACTIVE])
    async with Client(params, mode="auto") as client:  # type: ignore[arg-type]
        with anyio.fail_after(30):
            with pytest.raises(MCPError) as caught:
                await client.call_tool("ask", {})
            assert caught.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
            assert "elicitation" in caught.value.error.message
            assert (await client.call_tool("echo", {"text": "x"})).content[0].text == "x"
