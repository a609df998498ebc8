"""Resources, templates, prompts, completion, logging, subscriptions, sampling, elicitation
and roots round-trip through a real gateway between real demo servers and the SDK client."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import (
    ERAS,
    PYTHON,
    catalog_json,
    demo,
    gateway,
    http_gateway,
    raw_gateway,
    sdk_client,
    wait_for,
    write_config,
)

# Logging and resources/subscribe are deprecated in the 2026-07-28 era but still part of
# the handshake era the gateway must pass through.
pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        {
            # Handshake-era downstreams: their logging/setLevel, resources/subscribe and
            # server-to-client requests are what this file relays (2026-07-28 has none).
            "r": {**demo("--tools", 0, "--rich", "--name", "r"), "protocol": "legacy"},
            "s": {**demo("--tools", 0, "--rich", "--name", "s"), "protocol": "legacy"},
        },
    )


class Client:
    """The callbacks an MCP client offers, recording what reached it."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.notifications: list[Any] = []

    async def sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked = params.messages[0].content
        assert isinstance(asked, types.TextContent) and asked.text == "Say hi"
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="hi"), model="test-model"
        )

    async def elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        assert params.message == "What is your name?"
        return types.ElicitResult(action="accept", content={"name": "Ann"})

    async def roots(self, context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def message(self, message: Any) -> None:
        self.notifications.append(message)

    def kwargs(self) -> dict[str, Any]:
        return {
            "sampling_callback": self.sampling,
            "elicitation_callback": self.elicitation,
            "list_roots_callback": self.roots,
            "logging_callback": self.log,
            "message_handler": self.message,
        }


async def test_resources_templates_and_prompts(config: Path) -> None:
    async with gateway(config) as gw:
        caps = gw.session.initialize_result.capabilities  # type: ignore[union-attr]
        assert caps.resources is not None and caps.prompts is not None and caps.completions is not None

        resources = (await gw.session.list_resources()).resources
        uris = [str(r.uri) for r in resources]
        assert uris == ["demo://r/data.bin", "demo://r/readme", "demo://s/data.bin", "demo://s/readme", "demo://shared/notes"]
        notes = await gw.session.read_resource("demo://shared/notes")
        assert notes.contents[0].text == "r says hello"  # offered by both: the first id wins
        blob = await gw.session.read_resource("demo://s/data.bin")
        assert base64.b64decode(blob.contents[0].blob) == b"\x00\x01binary"

        templates = (await gw.session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["demo://r/items/{id}", "demo://s/items/{id}"]
        item = await gw.session.read_resource("demo://s/items/7")
        assert item.contents[0].text == "item 7 of s"
        with pytest.raises(MCPError, match="Resource not found"):
            await gw.session.read_resource("demo://r/missing")

        prompts = [p.name for p in (await gw.session.list_prompts()).prompts]
        assert prompts == ["r__greet", "r__summarize", "s__greet", "s__summarize"]
        greeting = await gw.session.get_prompt("s__greet", {"who": "Bo"})
        assert greeting.messages[0].content.text == "Hello Bo from s"
        with pytest.raises(MCPError, match="Unknown prompt"):
            await gw.session.get_prompt("nope", {})

        done = await gw.session.complete(
            types.PromptReference(type="ref/prompt", name="r__greet"), {"name": "who", "value": "a"}
        )
        assert done.completion.values == ["alice@r"]
        done = await gw.session.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="demo://s/items/{id}"),
            {"name": "id", "value": "1"},
        )
        assert done.completion.values == ["1", "12"]

    report = catalog_json(config)
    assert report["prompts"] == prompts and report["resources"] == 5
    assert any("demo://shared/notes" in w["message"] and "served by 'r'" in w["message"] for w in report["warnings"])


async def test_logging_subscriptions_and_client_requests(config: Path) -> None:
    client = Client()
    async with gateway(config, client=client.kwargs()) as gw:
        await gw.session.set_logging_level("debug")
        with anyio.fail_after(10):
            while gw.stderr().count("log level debug") < 2:  # both servers were told
                await anyio.sleep(0.1)
        await gw.session.call_tool("r__log", {"level": "warning", "text": "disk almost full"})
        with anyio.fail_after(10):
            while not client.logs:
                await anyio.sleep(0.05)
        assert (client.logs[0].level, client.logs[0].logger, client.logs[0].data) == (
            "warning",
            "r/demo",
            "disk almost full",
        )

        await gw.session.subscribe_resource("demo://s/readme")
        await gw.session.call_tool("s__touch", {"uri": "demo://s/readme"})
        await gw.session.call_tool("r__touch", {"uri": "demo://r/readme"})  # not subscribed: not relayed
        with anyio.fail_after(10):
            while not any(isinstance(n, types.ResourceUpdatedNotification) for n in client.notifications):
                await anyio.sleep(0.05)
        # r's update, had it been relayed, went out before r__touch's reply; one more round trip
        # makes sure everything sent before it has been handled.
        await gw.session.list_tools()
        updated = [str(n.params.uri) for n in client.notifications if isinstance(n, types.ResourceUpdatedNotification)]
        assert updated == ["demo://s/readme"]
        await gw.session.unsubscribe_resource("demo://s/readme")

        sampled = await gw.session.call_tool("r__sample", {})
        assert sampled.content[0].text == "test-model:hi"
        asked = await gw.session.call_tool("s__ask", {})
        assert asked.content[0].text == "accept:{'name': 'Ann'}"
        roots = await gw.session.call_tool("r__roots", {})
        assert roots.content[0].text == "file:///work/project"


@pytest.mark.parametrize("mode", ERAS)
async def test_an_update_of_a_uri_another_server_lists_first_is_not_relayed(config: Path, mode: str) -> None:
    """r and s both list ``demo://shared/notes``; it is read from r (first in order), so an
    update s sends about its own copy concerns nothing a client can read: it reached every
    watcher of the URI, in either era. r's updates still arrive, in order."""
    notes, marker = "demo://shared/notes", "demo://r/readme"
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    touches = (("s", notes), ("r", marker), ("r", notes), ("r", marker))

    async def touch(client: Any, server: str, uri: str) -> None:
        assert (await client.call_tool(f"{server}__touch", {"uri": uri})).content[0].text == "touched"

    with http_gateway(config) as (url, _stderr):
        # (a 2026-07-28 client hears them on its listen stream, and the message handler too: one place is read)
        handler = {"message_handler": on_message} if mode == "legacy" else {}
        async with sdk_client(url, mode, **handler) as client:
            with anyio.fail_after(30):
                if mode == "legacy":
                    for uri in (notes, marker):
                        await client.subscribe_resource(uri)
                    for server, uri in touches:
                        await touch(client, server, uri)
                    await wait_for(lambda: heard.count(marker) == 2)
                else:
                    async with client.listen(resource_subscriptions=[notes, marker]) as events:
                        for server, uri in touches:
                            await touch(client, server, uri)
                            if server == "r":  # (read as each comes: the client folds an update into an unread one)
                                heard.append((await events.__anext__()).uri)
    assert heard == [marker, notes, marker]


async def test_client_without_sampling_gets_a_clear_error(config: Path) -> None:
    async with gateway(config) as gw:
        with pytest.raises(MCPError) as info:
            await gw.session.call_tool("r__sample", {})
        assert "does not support sampling" in str(info.value.message) or "does not support sampling" in gw.stderr()
        assert (await gw.session.call_tool("r__echo", {"text": "fine"})).content[0].text == "fine"


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_for_a_reference_outside_the_catalog_says_what_it_is(config: Path, mode: str) -> None:
    """A completion for a prompt or template the gateway does not list was refused with "no
    server offers completion for ref/prompt": neither which prompt or URI, nor as prompts/get
    and resources/read refuse them. The prompt's name is not repeated, as prompts/get does not
    (it would reach the trace span); the URI is named, as resources/read names it."""
    async with sdk_client(config, mode) as client:
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("nope", {})
        with pytest.raises(MCPError) as completion:
            await client.complete(types.PromptReference(type="ref/prompt", name="nope"), {"name": "who", "value": "a"})
        assert (completion.value.error.code, completion.value.error.message) == (
            prompt.value.error.code,
            prompt.value.error.message,
        )
        assert completion.value.error.message == "Unknown prompt: not among the prompts prefixgate lists"
        uri = types.ResourceTemplateReference(type="ref/resource", uri="demo://nope/{id}")
        with pytest.raises(MCPError) as template:
            await client.complete(uri, {"name": "id", "value": "1"})
        assert template.value.error.code == -32602
        assert template.value.error.message == "prefixgate: no server offers completion for resource 'demo://nope/{id}'"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_resource_not_found_is_told_in_the_client_s_era(tmp_path: Path, mode: str) -> None:
    """A server's "Resource not found" is -32002 up to 2025-11-25; 2026-07-28 replaced it with
    -32602 and says its implementations MUST NOT emit -32002. The gateway passed the server's
    -32002 on to a 2026-07-28 client (from a server of either era); it now tells that client
    -32602, the message and data kept, and a handshake-era client still gets -32002."""
    servers = {
        "r": {**demo("--tools", 0, "--rich", "--name", "r"), "protocol": "legacy"},
        "s": {**demo("--tools", 0, "--rich", "--name", "s"), "protocol": "modern"},
    }
    config = write_config(tmp_path, servers)
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            for server in servers:
                with pytest.raises(MCPError) as missing:
                    await client.read_resource(f"demo://{server}/missing")
                code = -32602 if mode == "auto" else -32002
                assert (missing.value.error.code, missing.value.error.message) == (
                    code,
                    f"Resource not found: demo://{server}/missing",
                ), server
            assert (await client.read_resource("demo://s/readme")).contents[0].text == "s says hello"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_reply_too_large_for_a_resource_read_names_the_server(tmp_path: Path, mode: str) -> None:
    """A server's reply to ``resources/read`` over ``max_message_bytes`` (or one that does
    not parse) reached the client as the gateway's internal code, -32099 (-32098), which
    2026-07-28 reserves for codes it defines itself, and named neither the server nor the
    resource (a tool call's ``isError`` names both). It is now -32603 naming them."""
    config = write_config(
        tmp_path, {"r": demo("--tools", 0, "--rich", "--name", "r")}, gateway={"max_message_bytes": 65536}
    )
    uri = "demo://r/items/" + "x" * 40_000  # (the demo's answer names it twice: over 64 KiB)
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert refused.value.error.code == -32603, refused.value.error
            message = refused.value.error.message
            assert message.startswith("prefixgate: server 'r': resource 'demo://r/items/xxx"), message[:200]
            assert message.endswith("': result of 80094 bytes exceeds max_message_bytes 65536"), message[-200:]
            assert (await client.read_resource("demo://r/readme")).contents[0].text == "r says hello"


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_for_a_server_that_offers_none_names_the_server(tmp_path: Path, mode: str) -> None:
    """A completion for the prompt or template of a server whose capabilities lack
    ``completions`` (the classic FastMCP server, a 2026-07-28 server) was sent there anyway,
    and its bare "Method not found" (HTTP 404 on 2026-07-28: "the server does not implement
    the method") reached the client from a gateway that advertises completions. The server
    is no longer asked: -32602 names it and the prompt or URI; a server that offers
    completions still completes."""
    root = str(Path(__file__).resolve().parent.parent)
    servers = {
        "c": {"command": PYTHON, "args": ["-m", "tests.classic_server"], "cwd": root},
        "m": {"command": PYTHON, "args": ["-m", "tests.modern_server"], "cwd": root},
        "r": demo("--tools", 0, "--rich", "--name", "r"),
    }
    config = write_config(tmp_path, servers)
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            await client.list_prompts()  # (the catalog is up: every server's capabilities are known)
            refs = {
                "prompt 'c__pause'": ("c", types.PromptReference(type="ref/prompt", name="c__pause")),
                "prompt 'm__interview'": ("m", types.PromptReference(type="ref/prompt", name="m__interview")),
                "resource 'classic://asked/{topic}'": (
                    "c",
                    types.ResourceTemplateReference(type="ref/resource", uri="classic://asked/{topic}"),
                ),
            }
            for what, (server, ref) in refs.items():
                with pytest.raises(MCPError) as refused:
                    await client.complete(ref, {"name": "seconds", "value": "1"})
                assert (refused.value.error.code, refused.value.error.message) == (
                    -32602,
                    f"prefixgate: server {server!r} does not offer completion ({what})",
                ), what
            done = await client.complete(
                types.PromptReference(type="ref/prompt", name="r__greet"), {"name": "who", "value": "a"}
            )
            assert done.completion.values == ["alice@r"]


@pytest.mark.parametrize(
    ("tool", "answer", "named"),
    [
        ("elicit", {"action": "maybe"}, "elicitation/create is not a valid result: action:"),
        (
            "sample",
            {"role": "assistant", "content": {"type": "text", "text": "hi"}},
            "sampling/createMessage is not a valid result: model:",
        ),
        ("roots", {"roots": [{"name": "no uri"}]}, "roots/list is not a valid result: roots.0.uri:"),
    ],
)
def test_a_clients_malformed_answer_is_named_not_blamed_on_the_server(
    tmp_path: Path, tool: str, answer: dict[str, Any], named: str
) -> None:
    """A handshake-era client's answer to a server's request that is no valid result fails
    the call naming the answer and its first problem. The server was told only "Invalid
    request parameters", which the caller read as the server's own error. (A 2026-07-28
    client's answers are checked as its retry arrives, by the SDK, as a server would.)"""
    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": ["-m", "tests.classic_server"]}})
    with raw_gateway(config) as gw:
        gw.handshake({"elicitation": {}, "sampling": {}, "roots": {}})
        gw.request(1, "tools/call", {"name": f"c__{tool}", "arguments": {}})
        asked = gw.read()
        while "id" not in asked or "method" not in asked:  # a log line or a notice first
            asked = gw.read()
        gw.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": answer}).encode())
        result = gw.answer(1)["result"]
        assert result["isError"] and f"the client's answer to {named}" in result["content"][0]["text"]
        gw.request(2, "tools/call", {"name": "c__echo", "arguments": {"text": "fine"}})
        assert gw.answer(2)["result"]["content"][0]["text"] == "classic:fine"


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_a_resource_update_keeps_the_meta_its_server_sent(tmp_path: Path, era: str) -> None:
    """A server's ``notifications/resources/updated`` carries ``_meta`` (a trace context, a vendor
    key): a client of the gateway gets it, as it would directly. It was dropped, the update
    re-made from its URI alone: on a handshake-era session and on a 2026-07-28 listen stream
    (where the stream's subscription id joins it)."""
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

    from tests.updates_server import URI

    server = {"command": PYTHON, "args": ["-m", "tests.updates_server"], "cwd": str(Path(__file__).parent.parent)}
    config = write_config(tmp_path, {"u": server})
    sent = {"x.example/trace": "00-abc-01", "x.example/why": {"edited": ["line 3"]}}
    envelope = {PROTOCOL_VERSION_META_KEY: era, CLIENT_CAPABILITIES_META_KEY: {}}
    call: dict[str, Any] = {"name": "u__touch", "arguments": {"meta": sent}}
    with (tmp_path / "stderr.log").open("w") as err, raw_gateway(config, err) as gw:
        if era == "2025-11-25":
            gw.handshake()
            gw.request(1, "resources/subscribe", {"uri": URI})
            assert gw.answer(1)["result"] == {}
        else:
            gw.request(1, "server/discover", {"_meta": envelope})
            assert "result" in gw.answer(1)
            gw.request(
                "listen", "subscriptions/listen", {"_meta": envelope, "notifications": {"resourceSubscriptions": [URI]}}
            )
            assert gw.read()["method"] == "notifications/subscriptions/acknowledged"
            call["_meta"] = envelope
        gw.request(2, "tools/call", call)
        while (message := gw.read()).get("method") != "notifications/resources/updated":
            pass
    meta = message["params"].get("_meta", {})
    if era == "2026-07-28":
        assert meta.pop("io.modelcontextprotocol/subscriptionId") == "listen"
    assert message["params"]["uri"] == URI and meta == sent, message
