"""A downstream server that speaks only the 2026-07-28 protocol (tests/modern_server.py: no
``initialize``) behind the real gateway, reached by the real SDK client in both eras:
negotiation, per-request envelope and headers, list_changed, progress, logs, quarantine,
and its ``input_required`` results in both upstream eras."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import SERVER_INFO_META_KEY

from tests.helpers import (
    CALLBACKS,
    ERAS,
    PYTHON,
    catalog_json,
    demo,
    sdk_client,
    text,
    url_process,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).with_name("modern_server.py"))


def modern(**extra: Any) -> dict[str, Any]:
    return {"command": PYTHON, "args": [SERVER], **extra}


def config_for(tmp_path: Path, **extra: Any) -> Path:
    return write_config(tmp_path, {"m": modern(**extra)})


def requests_seen(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


@contextmanager
def modern_http(log: Path) -> Iterator[str]:
    """The modern-only server on loopback HTTP; yields its URL."""
    with url_process([PYTHON, SERVER, "--http"], env={"MODERN_SERVER_LOG": str(log)}) as (url, _proc):
        yield url


@pytest.mark.parametrize("mode", ERAS)
async def test_list_call_and_quarantine(tmp_path: Path, mode: str) -> None:
    async with sdk_client(config_for(tmp_path), mode) as client:
        with anyio.fail_after(30):
            names = [t.name for t in (await client.list_tools()).tools]
            assert "m__echo" in names and "m__region" in names
            # one malformed tool (bad root type, invalid x-mcp-header) never hides the rest
            assert "m__bad_schema" not in names and "m__bad_header" not in names
            assert text(await client.call_tool("m__echo", {"text": "hi"})) == "modern:hi"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_relayed_result_names_the_gateway_not_the_server(tmp_path: Path, mode: str) -> None:
    """The client talks to prefixgate: a 2026-07-28 result carries the gateway's
    ``serverInfo`` stamp, never the downstream server's own; a handshake-era result none."""
    async with sdk_client(config_for(tmp_path), mode) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("m__echo", {"text": "hi"})
            listed = await client.list_tools()
    if mode == "legacy":
        assert SERVER_INFO_META_KEY not in (result.meta or {})
        return
    for stamped in (result.meta, listed.meta):
        assert stamped is not None and stamped[SERVER_INFO_META_KEY]["name"] == "prefixgate", stamped


async def test_the_catalog_reports_the_quarantined_tools(tmp_path: Path) -> None:
    report = catalog_json(config_for(tmp_path))
    (server,) = report["servers"]
    assert server["status"] == "ready", server
    quarantined = {w["message"] for w in report["warnings"] if w.get("kind") == "quarantined"}
    assert any("bad_schema" in m for m in quarantined), report["warnings"]
    assert any("bad_header" in m and "x-mcp-header" in m for m in quarantined), report["warnings"]


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_and_logs_during_a_call(tmp_path: Path, mode: str) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    # 2026-07-28: logs are opted in per request; the handshake era: with logging/setLevel.
    opt_in = {"io.modelcontextprotocol/logLevel": "info"} if mode == "auto" else None
    async with sdk_client(config_for(tmp_path), mode, logging_callback=on_log) as client:
        with anyio.fail_after(30):
            if mode == "legacy":
                await client.set_logging_level("info")
            seen: list[float] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append(value)

            result = await client.call_tool("m__slow", {}, progress_callback=progress)
            assert text(result) == "slow done"
            assert seen == [1.0, 2.0, 3.0]
            assert text(await client.call_tool("m__log", {}, meta=opt_in)) == "logged"
            while not logs:
                await anyio.sleep(0.05)
            assert logs[0].data == "modern log line" and logs[0].level == "warning"


@pytest.mark.parametrize("mode", ERAS)
async def test_list_changed_reaches_the_client(tmp_path: Path, mode: str) -> None:
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    async with sdk_client(config_for(tmp_path), mode, message_handler=on_message) as client:
        with anyio.fail_after(30):
            assert "m__grown_1" not in [t.name for t in (await client.list_tools()).tools]
            if mode == "auto":
                async with client.listen(tools_list_changed=True) as events:
                    assert text(await client.call_tool("m__mutate", {})) == "mutated"
                    async for _ in events:
                        break
            else:
                assert text(await client.call_tool("m__mutate", {})) == "mutated"
                while not any(isinstance(m, types.ToolListChangedNotification) for m in heard):
                    await anyio.sleep(0.05)
            assert "m__grown_1" in [t.name for t in (await client.list_tools()).tools]
            assert text(await client.call_tool("m__grown_1", {})) == "modern:grown_1"


async def test_every_request_carries_the_envelope_and_headers(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with modern_http(log) as url:
        config = write_config(tmp_path, {"m": {"url": url}})
        async with sdk_client(config, "legacy") as client:
            with anyio.fail_after(30):
                assert text(await client.call_tool("m__region", {"region": "eu-west"})) == "region:eu-west"
    # The SDK server looks the tool up (an internal tools/list under the call's headers)
    # to check the Mcp-Param headers: that one is not the gateway's request.
    seen = [
        r for r in requests_seen(log) if r["method"] == "tools/call" or r["headers"].get("mcp-method") != "tools/call"
    ]
    assert {r["method"] for r in seen} >= {"server/discover", "tools/list", "tools/call"}
    for request in seen:
        meta = request["meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28", request
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "prefixgate", request
        # The gateway's own requests declare all it relays; a client's call declares what that
        # client can answer (this one declared no elicitation).
        declared = meta["io.modelcontextprotocol/clientCapabilities"]
        assert ("elicitation" in declared) == (request["method"] != "tools/call"), request
        assert request["headers"]["mcp-method"] == request["method"], request
        assert request["headers"]["mcp-protocol-version"] == "2026-07-28", request
    (call,) = [r for r in seen if r["method"] == "tools/call"]
    assert call["headers"]["mcp-name"] == "region"
    assert call["headers"]["mcp-param-region"] == "eu-west"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_header_mismatch_at_the_server_is_the_gateway_s_hop_not_the_client_s(tmp_path: Path, mode: str) -> None:
    """A 2026-07-28 server that renamed a tool's ``x-mcp-header`` without saying so refuses
    the gateway's call, whose ``Mcp-Param-*`` headers follow the schema it listed, with -32020
    HeaderMismatch. That error was the client's answer, as if the client's own headers
    disagreed with its body (over HTTP a 400, which a client answers by listing the
    gateway's tools again and retrying: the same headers, the same refusal). The call is now
    an ``isError`` naming the server, and the server's tools are listed again, so the next
    call sends the header the server now names."""
    log = tmp_path / "requests.jsonl"
    with modern_http(log) as url:
        config = write_config(tmp_path, {"m": {"url": url}})
        async with sdk_client(config, mode) as client:
            with anyio.fail_after(60):
                assert text(await client.call_tool("m__region", {"region": "eu-west"})) == "region:eu-west"
                assert text(await client.call_tool("m__rezone", {})) == "rezoned"
                refused = await client.call_tool("m__region", {"region": "eu-west"})
                assert refused.is_error, refused
                assert text(refused).startswith("m: tool 'region': the server refused the call's headers (-32020"), (
                    text(refused)
                )

                async def zoned() -> bool:
                    tools = {t.name: t for t in (await client.list_tools()).tools}
                    region = tools["m__region"].input_schema["properties"]["region"]
                    return region.get("x-mcp-header") == "Zone"

                while not await zoned():
                    await anyio.sleep(0.05)
                assert text(await client.call_tool("m__region", {"region": "us-east"})) == "region:us-east"
    calls = [r for r in requests_seen(log) if r["method"] == "tools/call" and r["headers"].get("mcp-name") == "region"]
    assert calls[-1]["headers"].get("mcp-param-zone") == "us-east", calls[-1]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_result_type_no_revision_defines_is_an_invalid_result(tmp_path: Path, mode: str) -> None:
    """A 2026-07-28 server's result whose ``resultType`` the gateway does not know (``pending``:
    2026-07-28 defines ``complete`` and ``input_required``, and says a client MUST take any
    other as invalid) was read as complete: a handshake-era client got its content as the
    tool's answer, a 2026-07-28 client the unknown type from the gateway itself. The call is
    now an ``isError`` naming the server and the type, in both eras."""
    async with sdk_client(config_for(tmp_path), mode) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("m__odd_type", {})
            assert result.is_error and result.result_type == "complete", result
            assert text(result) == (
                "m: tool 'odd_type': resultType 'pending', which 2026-07-28 does not define "
                "(complete, input_required): an invalid result"
            ), text(result)
            assert text(await client.call_tool("m__echo", {"text": "after"})) == "modern:after"


async def test_pinning_the_handshake(tmp_path: Path) -> None:
    # A modern-only server pinned to the handshake really gets `initialize` (and refuses it).
    report = catalog_json(config_for(tmp_path, protocol="legacy"))
    (server,) = report["servers"]
    assert server["status"] == "failed" and "speaks only 2026-07-28" in server["error"], server
    # A dual-era server: pinned or by default, the handshake; "modern", 2026-07-28.
    config = write_config(
        tmp_path,
        {
            "d": {**demo("--tools", 1), "protocol": "legacy"},
            "e": {**demo("--tools", 1), "protocol": "modern"},
            "f": demo("--tools", 1),
        },
    )
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as errlog:
        subprocess.run(
            [PYTHON, "-m", "gateway", "catalog", "--config", str(config), "--log-level", "info"],
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            timeout=60,
            check=False,
        )
    text = stderr.read_text()
    assert "[d] protocol 2025-11-25" in text and "[e] protocol 2026-07-28" in text, text
    assert "[f] protocol 2025-11-25" in text, text


def test_the_protocol_key_is_checked(tmp_path: Path) -> None:
    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"^servers\.m\.protocol: expected one of 'auto', 'legacy', 'modern'$"):
        load_config(config_for(tmp_path, protocol="2026"))


async def test_the_fixture_refuses_the_handshake() -> None:
    """So a server that works behind the gateway was reached with server/discover."""
    from mcp import Client, StdioServerParameters

    with pytest.raises(BaseException) as caught:
        async with Client(StdioServerParameters(command=PYTHON, args=[SERVER]), mode="legacy"):
            pass
    assert "speaks only 2026-07-28" in repr(caught.value)


@pytest.mark.parametrize("mode", ERAS)
async def test_its_input_required_reaches_both_eras(tmp_path: Path, mode: str) -> None:
    """Modern clients answer the server's input_required themselves (state wrapped by the
    gateway); handshake-era clients are asked over their back-channel by the gateway."""
    async with sdk_client(config_for(tmp_path), mode, **CALLBACKS) as client:
        with anyio.fail_after(60):
            assert text(await client.call_tool("m__ask", {})) == "accept:{'name': 'Ann'}"
            assert text(await client.call_tool("m__sample", {})) == "m1:hi"
            assert text(await client.call_tool("m__roots", {})) == "file:///work/project"
            prompt = await client.get_prompt("m__interview")
            assert prompt.messages[0].content.text == "Hello accept:{'name': 'Ann'}"
            read = await client.read_resource("modern://roots")
            assert read.contents[0].text == "file:///work/project"
            # through tool_call too (the same route)
            assert text(await client.call_tool("m__echo", {"text": "after"})) == "modern:after"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_without_the_capability_gets_an_error_not_a_hang(tmp_path: Path, mode: str) -> None:
    async with sdk_client(config_for(tmp_path), mode) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("m__ask", {})
            assert result.is_error and "does not support elicitation" in text(result)
            result = await client.call_tool("m__roots", {})
            assert result.is_error and "does not support roots" in text(result)
            with pytest.raises(MCPError, match="does not support elicitation") as refused:
                await client.get_prompt("m__interview")
            # -32021 naming the capability, as for a handshake-era server's request
            assert refused.value.error.code == -32021
            assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {}}}
            # the gateway is still fine
            assert text(await client.call_tool("m__echo", {"text": "x"})) == "modern:x"


async def test_the_wrapped_request_state(tmp_path: Path) -> None:
    async with sdk_client(config_for(tmp_path), "auto", **CALLBACKS) as client:
        with anyio.fail_after(60):
            session = client.session
            first = await session.call_tool("m__ask", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.input_requests is not None and set(first.input_requests) == {"ask"}  # intact
            state = first.request_state
            assert state is not None and state.startswith("pg2.") and state != "modern-state-1"
            answer = {"ask": types.ElicitResult(action="accept", content={"name": "Bo"})}
            tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
            with pytest.raises(MCPError, match="requestState refused"):
                await session.call_tool("m__ask", {}, input_responses=answer, request_state=tampered)
            with pytest.raises(MCPError, match="requestState refused"):  # bound to the request
                await session.call_tool("m__sample", {}, input_responses=answer, request_state=state)
            with pytest.raises(MCPError, match="requestState refused"):  # and to its arguments
                await session.call_tool("m__ask", {"x": 1}, input_responses=answer, request_state=state)
            done = await session.call_tool("m__ask", {}, input_responses=answer, request_state=state)
            assert text(done) == "accept:{'name': 'Bo'}"  # the server got its own state back
            # Not remembered as used (issue 26, item 8: decided and documented): a replay reaches
            # the server again, exactly as a direct client's would; the server guards its own state.
            again = await session.call_tool("m__ask", {}, input_responses=answer, request_state=state)
            assert text(again) == "accept:{'name': 'Bo'}"


@pytest.mark.parametrize("mode", ERAS)
async def test_over_http_both_ways(tmp_path: Path, mode: str) -> None:
    """The modern server over HTTP behind a gateway served over HTTP."""
    from tests.helpers import http_gateway

    with modern_http(tmp_path / "requests.jsonl") as url:
        config = write_config(tmp_path, {"m": {"url": url}})
        with http_gateway(config) as (gateway_url, _):
            async with sdk_client(gateway_url, mode, **CALLBACKS) as client:
                with anyio.fail_after(60):
                    assert text(await client.call_tool("m__region", {"region": "eu"})) == "region:eu"
                    assert text(await client.call_tool("m__ask", {})) == "accept:{'name': 'Ann'}"
                    prompt = await client.get_prompt("m__interview")
                    assert prompt.messages[0].content.text == "Hello accept:{'name': 'Ann'}"


async def test_its_hop_local_fields_are_not_passed_on(tmp_path: Path) -> None:
    """The server's cache hints, resultType and serverInfo stamp are its answer to the
    gateway; each client gets the gateway's own (here the server says public, one hour)."""
    from tests.helpers import gateway

    config = config_for(tmp_path)
    async with sdk_client(config, "auto", **CALLBACKS) as client:
        with anyio.fail_after(60):
            read = await client.read_resource("modern://roots")
            assert read.contents[0].text == "file:///work/project"
            assert (read.ttl_ms, read.cache_scope) == (0, "private")
            assert client.server_info is None or client.server_info.name == "prefixgate"
    async with gateway(config, client=CALLBACKS) as gw:  # the handshake era, raw
        with anyio.fail_after(60):
            called = await gw.raw("tools/call", {"name": "m__echo", "arguments": {"text": "a"}})
            assert called == {"content": [{"type": "text", "text": "modern:a"}]}
            read_raw = await gw.raw("resources/read", {"uri": "modern://roots"})
            assert set(read_raw) == {"contents"}, read_raw


@pytest.mark.parametrize("mode", ERAS)
async def test_its_unsupported_version_error_mid_session_is_not_the_gateways(tmp_path: Path, mode: str) -> None:
    """A server's -32022 ("unsupported protocol version") to a request the gateway relayed
    refused the version the gateway chose for its hop, not the client's: passed on as it
    was, it told the client the gateway refused the client's version (a client may then
    negotiate again, or give up on the gateway). It is the server's failure, named, and the
    next request is served."""
    async with sdk_client(config_for(tmp_path), mode, **CALLBACKS) as client:
        with anyio.fail_after(60):
            with pytest.raises(MCPError) as refused:
                await client.read_resource("modern://unsupported")
            assert refused.value.code == -32603, refused.value.error
            assert refused.value.error.message == (
                "prefixgate: server 'm': resource 'modern://unsupported': the server refused the protocol "
                "version prefixgate speaks with it (-32022 Unsupported protocol version)"
            )
            assert text(await client.call_tool("m__echo", {"text": "a"})) == "modern:a"


@pytest.mark.parametrize("mode", ERAS)
async def test_input_required_where_the_method_allows_none_is_the_servers_error(tmp_path: Path, mode: str) -> None:
    """Only ``tools/call``, ``prompts/get`` and ``resources/read`` may be answered
    ``input_required``. A server answering ``completion/complete`` so had it passed on: a
    handshake-era client got a result that is no completion, a 2026-07-28 one a question it
    could only answer with a retry the gateway sent to the server unchecked. It is the
    server's failure, named."""
    config = config_for(tmp_path, env={"MODERN_SERVER_COMPLETES": "1"})
    async with sdk_client(config, mode, **CALLBACKS) as client:
        with anyio.fail_after(60):
            with pytest.raises(MCPError) as refused:
                await client.complete(types.PromptReference(name="m__interview"), {"name": "who", "value": "a"})
            assert refused.value.code == -32603, refused.value.error
            assert refused.value.error.message == (
                "prefixgate: server 'm': completion for prompt 'm__interview': it answered input_required, "
                "which completion/complete may not"
            )
            assert text(await client.call_tool("m__echo", {"text": "a"})) == "modern:a"


async def test_resource_subscriptions_become_its_listen_filter(tmp_path: Path) -> None:
    """2026-07-28 has no resources/subscribe: a client's subscription to a modern server's
    resource is a filter of the gateway's listen stream to it, and its updates arrive."""
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    async with sdk_client(config_for(tmp_path), "legacy", message_handler=on_message) as client:
        with anyio.fail_after(60):
            await client.subscribe_resource("modern://roots")
            assert text(await client.call_tool("m__touch", {})) == "touched"
            while not any(isinstance(m, types.ResourceUpdatedNotification) for m in heard):
                await anyio.sleep(0.05)
            (update,) = [m for m in heard if isinstance(m, types.ResourceUpdatedNotification)]
            assert str(update.params.uri) == "modern://roots"


async def test_a_refused_handshake_naming_modern_versions_is_probed_again(tmp_path: Path) -> None:
    """A probe lost to a slow start: the handshake's -32022 names 2026-07-28, so the
    gateway asks server/discover once more instead of failing the server."""
    config = write_config(tmp_path, {"m": {**modern(), "protocol": "modern", "env": {"MODERN_SERVER_SHY": "1"}}})
    async with sdk_client(config, "legacy") as client:
        with anyio.fail_after(30):
            assert text(await client.call_tool("m__echo", {"text": "late"})) == "modern:late"


@pytest.mark.parametrize("mode", ERAS)
async def test_state_only_rounds(tmp_path: Path, mode: str) -> None:
    """An input_required with only a requestState (the server is not done yet) is retried
    with that state, by the modern client itself or by the gateway for a handshake-era one."""
    async with sdk_client(config_for(tmp_path), mode) as client:
        with anyio.fail_after(30):
            assert text(await client.call_tool("m__later", {})) == "done later"


async def test_a_wrapped_state_is_the_principals_own_and_expires(tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from tests.helpers import http_gateway

    # Long enough for the three calls below on a loaded machine (CI once took over 1 s for them).
    config = write_config(tmp_path, {"m": modern()}, gateway={"round_trip_timeout": 4})
    (tmp_path / "tokens").write_text("token-of-ann\ntoken-of-bo\n")
    answer = {"ask": types.ElicitResult(action="accept", content={"name": "Bo"})}
    with http_gateway(config, "--token-file", str(tmp_path / "tokens")) as (url, _):
        async with (
            create_mcp_http_client(headers={"Authorization": "Bearer token-of-ann"}) as ann_http,
            create_mcp_http_client(headers={"Authorization": "Bearer token-of-bo"}) as bo_http,
            Client(streamable_http_client(url, http_client=ann_http), mode="auto", **CALLBACKS) as ann,
            Client(streamable_http_client(url, http_client=bo_http), mode="auto", **CALLBACKS) as bo,
        ):
            with anyio.fail_after(60):
                first = await ann.session.call_tool("m__ask", {}, allow_input_required=True)
                assert isinstance(first, types.InputRequiredResult) and first.request_state
                with pytest.raises(MCPError, match="requestState refused"):
                    await bo.session.call_tool("m__ask", {}, input_responses=answer, request_state=first.request_state)
                done = await ann.session.call_tool(
                    "m__ask", {}, input_responses=answer, request_state=first.request_state
                )
                assert text(done) == "accept:{'name': 'Bo'}"
                await anyio.sleep(4.5)  # past round_trip_timeout (4 s): the state is no longer accepted
                with pytest.raises(MCPError, match="expired"):
                    await ann.session.call_tool("m__ask", {}, input_responses=answer, request_state=first.request_state)


async def test_a_dual_era_server_asking_over_a_back_channel_works_by_default(tmp_path: Path) -> None:
    """A server that asks for elicitation with a request of its own (the classic way) works
    through the default ("auto": the handshake toward a server that offers it); pinned to
    2026-07-28 it cannot (no back-channel), and the log says which setting makes it work.
    (The demo asks the 2026-07-28 way, so "modern" loses nothing for it.)"""
    from tests.helpers import gateway

    server = {"command": PYTHON, "args": ["-m", "tests.backchannel_server"], "cwd": str(Path.cwd())}
    config = write_config(tmp_path, {"b": server})
    async with gateway(config, client=CALLBACKS) as gw:
        with anyio.fail_after(60):
            result = await gw.session.call_tool("b__ask", {})
            assert text(result) == "accept:{'name': 'Ann'}"
            assert await gw.saw("[b] protocol 2025-11-25")
    pinned = write_config(tmp_path, {"b": {**server, "protocol": "modern"}})
    async with gateway(pinned, client=CALLBACKS) as gw:
        with anyio.fail_after(60):
            # The server's JSON-RPC error reaches the model as an isError result naming it.
            refused = await gw.session.call_tool("b__ask", {})
            assert refused.is_error and "back-channel" in text(refused), refused
            assert await gw.saw(
                "[b] its tools/call asked the client for input over a back-channel", 'remove protocol = "modern"'
            )
    config = write_config(
        tmp_path, {"r": {**demo("--tools", 0, "--rich", "--interactive", "--name", "r"), "protocol": "modern"}}
    )
    async with gateway(config, client=CALLBACKS) as gw:
        with anyio.fail_after(60):
            result = await gw.session.call_tool("r__ask", {})
            assert text(result) == "accept:{'name': 'Ann'}"
            assert await gw.saw("[r] protocol 2026-07-28")
            assert "back-channel" not in gw.stderr()


async def test_its_prompts_list_changed_reaches_the_client(tmp_path: Path) -> None:
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    async with sdk_client(config_for(tmp_path), "legacy", message_handler=on_message) as client:
        with anyio.fail_after(30):
            assert [p.name for p in (await client.list_prompts()).prompts] == ["m__interview"]
            assert text(await client.call_tool("m__add_prompt", {})) == "prompt added"
            while not any(isinstance(m, types.PromptListChangedNotification) for m in heard):
                await anyio.sleep(0.05)
            assert [p.name for p in (await client.list_prompts()).prompts] == ["m__extra_1", "m__interview"]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_hostile_input_required_fails_its_call_clearly(tmp_path: Path, mode: str) -> None:
    """Issue 26, items 6 and 7: 2,000 input requests in one round never become 2,000 requests
    to a handshake-era client; a requestState too big to carry is refused when issued, by size."""
    asked: list[str] = []

    async def roots(context: Any) -> types.ListRootsResult:
        asked.append("roots")
        return types.ListRootsResult(roots=[])

    async with sdk_client(config_for(tmp_path), mode, **{**CALLBACKS, "list_roots_callback": roots}) as client:
        with anyio.fail_after(60):
            if mode == "legacy":  # the gateway asks the client itself
                many = await client.call_tool("m__many_asks", {})
                assert many.is_error and "asked for 2000 inputs in one round (at most 8)" in text(many)
                assert asked == []
            else:  # the client holds the state between rounds: it must be able to bring it back
                huge = await client.call_tool("m__huge_state", {})
                assert huge.is_error and "requestState of 300000 bytes, too big to carry" in text(huge), text(huge)
                assert asked == []
            assert text(await client.call_tool("m__echo", {"text": "after"})) == "modern:after"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_subscription_survives_a_reload_that_restarts_its_server(tmp_path: Path, mode: str) -> None:
    """A reload that changed the server's table restarts it as a new server: its listen
    stream's filter started empty (the watch stayed with the one stopped), so the updates of
    a resource the client still watched never came again."""
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    def updates() -> int:
        return sum(isinstance(m, types.ResourceUpdatedNotification) for m in heard)

    log = tmp_path / "gateway.log"
    async with (
        sdk_client(config_for(tmp_path), mode, message_handler=on_message, errlog=log) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        with anyio.fail_after(60):
            if mode == "legacy":
                await client.subscribe_resource("modern://roots")
            else:
                await stack.enter_async_context(client.listen(resource_subscriptions=["modern://roots"]))
            assert text(await client.call_tool("m__touch", {})) == "touched"
            await wait_for(lambda: updates() == 1)
            config_for(tmp_path, env={"ROTATED": "1"})
            await wait_for(lambda: "config reloaded (the file changed): restarted 'm'" in log.read_text())
            await wait_for(lambda: "[m] ready" in log.read_text().split("restarted 'm'", 1)[1])
            assert text(await client.call_tool("m__touch", {})) == "touched"
            await wait_for(lambda: updates() == 2, seconds=15)


@pytest.mark.parametrize("mode", ERAS)
async def test_an_input_request_whose_params_are_no_object_fails_its_call_clearly(tmp_path: Path, mode: str) -> None:
    """An ``input_required`` result asking for roots with params that are a list: the call
    fails naming the server, nobody is asked, no traceback; the server stays callable. For a
    handshake-era client the gateway failed making the request (a TypeError's text for
    the call, a traceback in the log)."""
    asked: list[str] = []

    async def roots(context: Any) -> types.ListRootsResult:
        asked.append("roots")
        return types.ListRootsResult(roots=[])

    errlog = tmp_path / "gateway.log"
    options = {**CALLBACKS, "list_roots_callback": roots}
    async with sdk_client(config_for(tmp_path), mode, errlog=errlog, **options) as client:
        with anyio.fail_after(60):
            bad = await client.call_tool("m__bad_ask", {})
            assert bad.is_error and "server 'm' sent malformed inputRequests" in text(bad), text(bad)
            assert text(await client.call_tool("m__echo", {"text": "after"})) == "modern:after"
    assert asked == []
    assert "Traceback" not in errlog.read_text(), errlog.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_an_input_request_no_sdk_can_read_fails_its_call_naming_what(tmp_path: Path, mode: str) -> None:
    """A sampling request with no messages: the call fails naming the server and what is
    wrong, and nobody is asked. A 2026-07-28 client was passed the result, which its SDK
    could not read (a ValidationError for the call, naming no server)."""
    sampled: list[Any] = []

    async def sampling(context: Any, params: Any) -> Any:
        sampled.append(params)
        raise AssertionError("asked to sample")

    options = {**CALLBACKS, "sampling_callback": sampling}
    async with sdk_client(config_for(tmp_path), mode, **options) as client:
        with anyio.fail_after(60):
            bad = await client.call_tool("m__bad_sample", {})
            said = "server 'm' sent malformed inputRequests: k.params.messages: Field required"
            assert bad.is_error and said in text(bad), text(bad)
            assert text(await client.call_tool("m__echo", {"text": "after"})) == "modern:after"
    assert sampled == []


@pytest.mark.real_processes  # the server's own process, by its pid
async def test_a_lost_listen_stream_is_logged_by_its_cause(tmp_path: Path) -> None:
    """The gateway's listen stream to a modern server that is killed (found by chaos) was
    logged as ``subscriptions/listen ended: ExceptionGroup: unhandled errors in a TaskGroup
    (1 sub-exception)``, naming nothing that happened; the line now names the one error inside."""
    import os
    import signal

    from tests.helpers import wait_for
    from tests.test_reload import children, gateway_pid

    config = config_for(tmp_path)
    errlog = tmp_path / "gateway.err"
    async with sdk_client(config, "legacy", errlog=errlog) as client:
        with anyio.fail_after(60):
            assert text(await client.call_tool("m__echo", {"text": "hi"})) == "modern:hi"
            (server,) = children(gateway_pid(config))
            os.kill(server, signal.SIGKILL)
            await wait_for(lambda: "subscriptions/listen ended" in errlog.read_text(encoding="utf-8"))
    (line,) = [line for line in errlog.read_text(encoding="utf-8").splitlines() if "listen ended" in line]
    assert "ExceptionGroup" not in line and "sub-exception" not in line, line
