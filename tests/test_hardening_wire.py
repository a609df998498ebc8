"""The wire is untrusted: one bad message, server or client costs at most its own request.

Real gateway processes, a raw misbehaving downstream (``tests/rogue_wire.py``) over real
pipes, the real SDK client in both eras; where the SDK client cannot say something (a lone
surrogate id, 100,000 levels of nesting, a client that never reads), raw lines are written
to the gateway's stdin.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

from tests.helpers import (
    ERAS,
    PYTHON,
    RawGateway,
    catalog_json,
    demo,
    http_gateway,
    raw_gateway,
    read_artifact,
    sdk_client,
    text,
    url_process,
    write_config,
)

pytestmark = pytest.mark.anyio

ROGUE = str(Path(__file__).with_name("rogue_wire.py"))
FFFD = "\ufffd"


def rogue(*args: str, **table: Any) -> dict[str, Any]:
    return {"command": PYTHON, "args": [ROGUE, *args], **table}


# --- lone surrogates from a server --------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_lone_surrogates_from_a_server_become_fffd(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"rogue": rogue()}, client={"profile": "mcp"})
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with sdk_client(config, mode, logging_callback=on_log) as client:
        result = await client.call_tool("rogue__surrogate_text", {})
        assert not result.is_error
        assert text(result) == f"half an emoji: {FFFD}!"
        result = await client.call_tool("rogue__log_surrogate", {})
        assert text(result) == "logged"
        resources = await client.list_resources()
        assert [r.name for r in resources.resources] == [f"res {FFFD}"]
        prompts = await client.list_prompts()
        assert [p.description for p in prompts.prompts] == [f"prompt {FFFD}"]
        assert text(await client.call_tool("rogue__ok", {})) == "ok"  # still serving
    if mode == "legacy":  # a 2026-07-28 client has no stream for logs outside a call's own
        assert [(p.logger, p.data) for p in logs] == [(f"rogue/l{FFFD}", f"log {FFFD}")]


@pytest.mark.parametrize("mode", ERAS)
async def test_lone_surrogate_result_over_http(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    with http_gateway(config) as (url, _):
        async with sdk_client(url, mode) as client:
            result = await client.call_tool("rogue__surrogate_text", {})
            assert not result.is_error
            assert text(result) == f"half an emoji: {FFFD}!"
            assert text(await client.call_tool("rogue__ok", {})) == "ok"


async def test_lone_surrogate_from_an_http_client_is_replaced_as_on_stdio(tmp_path: Path) -> None:
    # What the stdio entry does with such a line (test_client_lines_that_cannot_be_parsed_are_answered):
    # U+FFFD in its id and its arguments, answered (tests/test_client_surrogates.py: both eras).
    import urllib.request

    config = write_config(tmp_path, {"rogue": rogue()})
    with http_gateway(config) as (url, _):
        envelope = json.dumps({"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}})[
            1:-1
        ]
        body = (
            b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call",'
            b'"params":{"name":"rogue__echo","arguments":{"text":"\\ud800"},' + envelope.encode() + b"}}"
        )
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "rogue__echo",
        }
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert answer["id"] == "\ufffd"
        assert answer["result"]["content"][0]["text"] == "echo: \ufffd", answer
        async with sdk_client(url, "auto") as client:
            assert text(await client.call_tool("rogue__ok", {})) == "ok"


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "sdk-path"])
@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_a_call_the_gateway_cannot_encode_is_not_blamed_on_the_server(tmp_path: Path, modern: bool, fast: bool) -> None:
    # Arguments nested past pydantic-core's serializer depth (a raw client: the SDK's own
    # encoder refuses them too) parse on the way in but cannot be written to the server:
    # the call's error says it was not sent, not that the server answered it.
    config = write_config(tmp_path, {"rogue": rogue()})
    deep: Any = "x"
    for _ in range(300):
        deep = {"a": deep}
    meta = {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}} if modern else {}
    with raw_gateway(config, None, {"PREFIXGATE_FAST_PATH": "1" if fast else "0"}) as gw:
        if not modern:
            gw.handshake()
        gw.request(1, "tools/call", {"name": "rogue__echo", "arguments": {"text": "deep", "d": deep}, **meta})
        answer = gw.answer(1)
        assert answer["result"]["isError"] is True, answer
        said = answer["result"]["content"][0]["text"]
        assert said.startswith("rogue: tool 'echo': request not sent: "), said
        assert "depth" in said and "answered" not in said, said
        gw.request(2, "tools/call", {"name": "rogue__echo", "arguments": {"text": "next"}, **meta})
        assert gw.answer(2)["result"]["content"][0]["text"] == "echo: next"


@contextmanager
def remote_rogue() -> Iterator[str]:
    proc = subprocess.Popen([PYTHON, ROGUE, "--http"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("remote", [False, True], ids=["pipe", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_handshake_era_result_is_read_in_its_era(tmp_path: Path, mode: str, remote: bool) -> None:
    # A 2025-11-25 server's result carrying 2026-07-28 fields (resultType "input_required",
    # inputRequests, requestState) is a result, as a direct SDK client reads it: nobody is
    # asked for input.
    asked: list[Any] = []

    async def elicit(context: Any, params: Any) -> Any:
        asked.append(params)
        raise AssertionError("asked for input")

    with ExitStack() as stack:
        server = {"url": stack.enter_context(remote_rogue())} if remote else rogue()
        config = write_config(tmp_path, {"rogue": server})
        async with sdk_client(config, mode, elicitation_callback=elicit) as client:
            with anyio.fail_after(60):
                result = await client.call_tool("rogue__later_fields", {})
            assert (result.is_error, text(result), asked) == (False, "hi", [])


@pytest.mark.parametrize("mode", ERAS)
async def test_a_malformed_result_is_an_error_naming_its_server_in_both_eras(tmp_path: Path, mode: str) -> None:
    # An object that is no tool result (content a string, no content, a block of no known
    # type): the same one-line isError for a client of either era, never the object itself
    # (which the 2026-07-28 SDK client refused with a ValidationError).
    config = write_config(tmp_path, {"rogue": rogue()})
    async with sdk_client(config, mode) as client:
        said: dict[str, str] = {}
        for kind in ("string", "structured_only", "unknown_block"):
            with anyio.fail_after(60):
                result = await client.call_tool("rogue__malformed", {"text": kind})
            assert result.is_error, (kind, result)
            said[kind] = text(result)
        prefix = "Server 'rogue' returned an invalid result for tool 'malformed': "
        assert said == {
            "string": prefix + "Input should be a valid list",
            "structured_only": prefix + "Field required",
            "unknown_block": prefix + "Field required",
        }
        assert text(await client.call_tool("rogue__ok", {})) == "ok"


@pytest.mark.parametrize("downstream", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_notification_that_does_not_validate_is_one_line_naming_its_server(
    tmp_path: Path, mode: str, downstream: str
) -> None:
    # A server sends, on its own, a log of no known level, progress that is no number and an
    # update naming no URI: each is dropped with one line naming the server and the method,
    # never the SDK's traceback; the server still serves.
    modern = downstream == "2026-07-28"
    config = write_config(tmp_path, {"rogue": rogue(*(["--modern"] if modern else []))})
    errlog = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=errlog) as client:
        with anyio.fail_after(60):
            assert text(await client.call_tool("rogue__bad_notices", {})) == "noticed"
            while "notifications/resources/updated" not in errlog.read_text():  # the last one sent
                await anyio.sleep(0.05)
            assert text(await client.call_tool("rogue__ok", {})) == "ok"
    log = errlog.read_text()
    assert "Traceback" not in log, log
    dropped = [line for line in log.splitlines() if "did not validate" in line]
    assert dropped == [
        "prefixgate WARNING [rogue] ignored a notifications/message that did not validate: params.level: "
        "Input should be 'alert', 'critical', 'debug', 'emergency', 'error', 'info', 'notice' or 'warning'",
        "prefixgate WARNING [rogue] ignored a notifications/progress that did not validate: params.progress: "
        "Input should be a valid number, unable to parse string as a number",
        "prefixgate WARNING [rogue] ignored a notifications/resources/updated that did not validate: params.uri: "
        "Field required",
    ], dropped


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unparsable_reply_is_logged_naming_its_server(tmp_path: Path, mode: str) -> None:
    # A reply that is not JSON fails its call; the log line says which server wrote it.
    config = write_config(tmp_path, {"rogue": rogue()})
    errlog = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=errlog) as client:
        with anyio.fail_after(60):
            assert (await client.call_tool("rogue__not_json", {})).is_error
            assert text(await client.call_tool("rogue__ok", {})) == "ok"
    said = [line for line in errlog.read_text().splitlines() if "unparsable reply" in line]
    assert len(said) == 1 and said[0].startswith("prefixgate WARNING [rogue] unparsable reply to request "), said


@pytest.mark.parametrize("mode", ERAS)
async def test_a_number_too_large_for_a_double_is_null_and_its_artifact_is_json(tmp_path: Path, mode: str) -> None:
    # 1e400 reads as inf, which JSON cannot carry: the client is sent null (as pydantic-core,
    # the SDK's own writer, writes it), and a spilled result's artifact says null too, never
    # the bare token Infinity that no strict JSON parser reads.
    def strict(token: str) -> Any:
        raise AssertionError(f"not JSON: {token}")

    config = write_config(tmp_path, {"rogue": rogue()})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            small = await client.call_tool("rogue__huge_number", {"n": 4})
            assert small.structured_content == {"v": None, "w": 2.5}
            big = await client.call_tool("rogue__huge_number", {"n": 70_000})
            said = text(big)
            assert "Infinity" not in said, said[-600:]
            artifact_id = said.split("saved as artifact ", 1)[1].split(";", 1)[0]
            whole = json.loads(await read_artifact(client, artifact_id), parse_constant=strict)
        assert whole["structuredContent"] == {"v": None, "w": 2.5}
        assert len(whole["content"][0]["data"]) == 70_000


async def test_an_argument_no_double_holds_is_named_as_sent_when_it_is_refused(tmp_path: Path) -> None:
    """A client's ``1e400`` (or a non-standard ``NaN``) reads as a number no double holds and is
    validated as the ``null`` the server would be sent: the refusal said 'null is not of type
    "number"', naming a value the client never sent. It says what became of the number, on
    both ends (the SDK's own client cannot send one: it writes null itself)."""
    import httpx2

    from tests.helpers import opened_session, schemas_server

    tools = [{"name": "num", "inputSchema": {"type": "object", "properties": {"n": {"type": "number"}}}}]
    config = write_config(tmp_path, {"s": schemas_server(tmp_path, tools)})
    call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"s__num","arguments":{"n":%s}}}'
    expected = {
        b"1e400": "Invalid arguments for s__num: arguments.n: infinity, a number no double holds, reads as null: "
        'null is not of type "number"',
        b"-1e400": "Invalid arguments for s__num: arguments.n: -infinity, a number no double holds, reads as null: "
        'null is not of type "number"',
    }
    with raw_gateway(config) as stdio:
        stdio.handshake()
        for number, (literal, said) in enumerate(expected.items(), 10):
            stdio.send(call % (number, literal))
            answer = stdio.answer(number)["result"]
            assert answer["isError"] and answer["content"][0]["text"] == said, answer
    with http_gateway(config) as (url, _):
        async with httpx2.AsyncClient(timeout=30) as http:
            headers = await opened_session(http, url)
            for number, (literal, said) in enumerate(expected.items(), 10):
                answered = await http.post(url, content=call % (number, literal), headers=headers)
                data = [
                    line[5:] for line in answered.text.splitlines() if line.startswith("data:") and line[5:].strip()
                ]
                result = json.loads(data[-1] if data else answered.text)["result"]
                assert result["isError"] and result["content"][0]["text"] == said, result


@pytest.mark.parametrize("mode", ERAS)
async def test_a_result_too_deep_to_bound_is_an_error_naming_its_server(tmp_path: Path, mode: str) -> None:
    # structuredContent nested 3,000 levels (the line parser takes 10,000) around 100 KB: bounding
    # it writes JSON, which recursed past Python's limit. The RecursionError escaped the
    # fail-closed path: a JSON-RPC error quoting the interpreter (an "Internal server error" at
    # 2026-07-28) and a traceback in the log. Now the call is an isError, the next call works.
    config = write_config(tmp_path, {"rogue": rogue()})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("rogue__deep_result", {"n": 3000, "size": 100_000})
            assert result.is_error, result
            assert text(result) == (
                "Server 'rogue' answered tool 'deep_result', but the result could not be bounded for the model "
                "(RecursionError); it is not shown."
            )
            assert text(await client.call_tool("rogue__ok", {})) == "ok"


@pytest.mark.parametrize("mode", ERAS)
async def test_lone_surrogate_from_a_remote_server_fails_only_that_call(tmp_path: Path, mode: str) -> None:
    # The SDK's HTTP client parses with jiter, which rejects "\ud800" outright: nothing to
    # scrub, but the call must end at once as an isError result, and the next one work.
    with remote_rogue() as url:
        config = write_config(tmp_path, {"rogue": {"url": url}})
        async with sdk_client(config, mode) as client:
            result = await client.call_tool("rogue__surrogate_text", {})
            assert result.is_error, result
            assert "parse" in text(result).lower(), text(result)
            assert text(await client.call_tool("rogue__ok", {})) == "ok"


async def test_schema_nested_too_deeply_quarantines_only_that_tool(tmp_path: Path) -> None:
    # 600 schema levels are 1,200 JSON levels: past what json.loads takes by default.
    config = write_config(tmp_path, {"rogue": rogue("--deep-schema", "600")}, client={"profile": "mcp"})
    data = catalog_json(config)
    (server,) = data["servers"]
    assert server["status"] == "ready", server
    names = [t["name"] for t in data["tools"]]
    assert "rogue__ok" in names
    assert "rogue__deep" not in [t["name"] for t in data["tools"] if t["declared"]]
    assert any("deep" in w and "nested too deeply" in w for w in map(str, data["warnings"])), data["warnings"]


# --- a raw client on the gateway's stdio ------------------------------------------------


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def test_client_lines_that_cannot_be_parsed_are_answered(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"rogue": rogue()}, client={"profile": "mcp"})
    with raw_gateway(config) as gw:
        gw.handshake()
        gw.send(b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}')  # a lone surrogate id
        assert gw.read() == {"jsonrpc": "2.0", "id": FFFD, "result": {}}
        gw.send(b"[" * 100_000 + b"]" * 100_000)  # RecursionError in a naive parser
        answer = gw.read()
        assert answer["id"] is None and answer["error"]["code"] == -32700, answer
        gw.send(b"{not json")
        answer = gw.read()
        assert answer["id"] is None and answer["error"]["code"] == -32700, answer
        gw.send(b'{"jsonrpc":"2.0","id":5,"method":7}')  # JSON, but not JSON-RPC
        answer = gw.read()
        assert answer["id"] == 5 and answer["error"]["code"] == -32600, answer
        gw.send(
            b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"rogue__echo","arguments":{"text":"a\\ud800b"}}}'
        )
        answer = gw.answer(6)
        assert answer["result"]["content"][0]["text"] == f"echo: a{FFFD}b", answer
        gw.request(7, "ping")
        assert gw.answer(7) == {"jsonrpc": "2.0", "id": 7, "result": {}}


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_client_request_over_max_message_bytes_is_answered(tmp_path: Path) -> None:
    limit = 1 << 20  # [gateway] max_message_bytes bounds the client's lines too
    config = write_config(tmp_path, {"rogue": rogue()}, gateway={"max_message_bytes": limit})
    with raw_gateway(config) as gw:
        gw.handshake()
        arguments = {"text": "q" * (33 << 20)}
        gw.request(8, "tools/call", {"name": "rogue__echo", "arguments": arguments})
        answer = gw.answer(8)
        assert f"exceeds max_message_bytes {limit}" in answer["error"]["message"], answer
        assert peak_rss_mib(gw.proc.pid) < 200  # discarded as it arrived, never buffered
        gw.request(9, "ping")
        assert gw.answer(9)["result"] == {}


# --- bounded memory ------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["rogue__big", "rogue__big_ts"])
async def test_result_over_max_message_bytes_fails_its_call_at_once(tmp_path: Path, tool: str) -> None:
    limit = 1 << 20
    config = write_config(tmp_path, {"rogue": rogue()}, gateway={"max_message_bytes": limit})
    async with sdk_client(config, "legacy") as client:
        result = await client.call_tool(tool, {"n": 3 << 20})
        assert result.is_error
        assert f"exceeds max_message_bytes {limit}" in text(result), text(result)
        assert text(await client.call_tool("rogue__ok", {})) == "ok"


def call(gw: RawGateway, request_id: int, tool: str, **arguments: Any) -> None:
    gw.request(request_id, "tools/call", {"name": tool, "arguments": arguments})


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_log_flood_while_the_client_is_slow_stays_bounded(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    with raw_gateway(config) as gw:
        gw.handshake()
        gw.request(1, "logging/setLevel", {"level": "debug"})
        gw.answer(1)
        idle = peak_rss_mib(gw.proc.pid)
        call(gw, 2, "rogue__flood_logs", n=40_000)  # ~40 MB of notifications, nobody reading
        time.sleep(4)
        answer = gw.answer(2)
        assert answer["result"]["content"][0]["text"] == "sent 40000 log notifications"
        peak = peak_rss_mib(gw.proc.pid)
        assert peak - idle < 60, (idle, peak)
        call(gw, 3, "rogue__ok")
        assert gw.answer(3)["result"]["content"][0]["text"] == "ok"


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_progress_flood_while_the_client_is_slow_stays_bounded(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    with raw_gateway(config) as gw:
        gw.handshake()
        idle = peak_rss_mib(gw.proc.pid)
        params = {"name": "rogue__flood_progress", "arguments": {"n": 40_000}, "_meta": {"progressToken": "t"}}
        gw.request(2, "tools/call", params)  # ~40 MB of progress, nobody reading
        time.sleep(4)
        answer = gw.answer(2)
        assert answer["result"]["content"][0]["text"] == "sent 40000 progress notifications"
        peak = peak_rss_mib(gw.proc.pid)
        assert peak - idle < 60, (idle, peak)
        call(gw, 3, "rogue__ok")
        assert gw.answer(3)["result"]["content"][0]["text"] == "ok"


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_requests_from_a_server_that_reads_nothing_stay_bounded(tmp_path: Path) -> None:
    """A server sends 40,000 pings (ids of 1 KB) and reads its input no more: each answer
    waited for its stdin in a task of its own (~12 KB each, ~480 MB in all). Past
    ``MAX_UNWRITTEN`` its requests are dropped unanswered; the other server goes on."""
    config = write_config(tmp_path, {"rogue": rogue(), "d": demo("--tools", 1)})
    flood_stays_bounded(config, "pinged 40000 times", n=40_000, size=1000)


def flood_stays_bounded(config: Path, answered: str, **arguments: Any) -> None:
    """``rogue__ping_flood`` is answered ``answered``, the other server ``d`` answers after
    it, and the gateway's peak memory grew by less than 60 MiB meanwhile."""
    with raw_gateway(config) as gw:
        gw.handshake()
        idle = peak_rss_mib(gw.proc.pid)
        call(gw, 2, "rogue__ping_flood", **arguments)
        assert gw.answer(2)["result"]["content"][0]["text"] == answered
        call(gw, 3, "d__echo", text="still")
        assert gw.answer(3)["result"]["content"][0]["text"] == "still"
        peak = peak_rss_mib(gw.proc.pid)
        assert peak - idle < 60, (idle, peak)


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_requests_from_an_http_server_that_takes_no_answer_stay_bounded(tmp_path: Path) -> None:
    """The same over streamable HTTP: a server's call stream carries 20,000 pings (ids of
    1 KB) and the server never takes the POST of an answer. Each answer waited to be posted
    in a task of its own (~300 MB in all); past ``MAX_UNWRITTEN`` its requests are dropped
    unanswered, the call is answered, and the other server goes on."""
    with url_process([PYTHON, "-m", "tests.rogue_http", "--ping-flood"]) as (url, _):
        config = write_config(tmp_path, {"rogue": {"url": url, "protocol": "legacy"}, "d": demo("--tools", 1)})
        flood_stays_bounded(config, "pinged 20000 times")


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_requests_from_an_sse_server_that_takes_no_answer_stay_bounded(tmp_path: Path) -> None:
    """The same over SSE (2024-11-05): the event stream carries 20,000 pings (ids of 1 KB) and
    the server never takes the POST of an answer. Each answer waited to be posted in a task of
    its own; past ``MAX_UNWRITTEN`` its requests are dropped unanswered, as over stdio and
    streamable HTTP."""
    with url_process([PYTHON, "-m", "tests.rogue_http"]) as (url, _):
        sse = url.removesuffix("/mcp") + "/sse"
        config = write_config(tmp_path, {"rogue": {"url": sse, "transport": "sse"}, "d": demo("--tools", 1)})
        flood_stays_bounded(config, "pinged 20000 times")


async def test_a_server_that_forgets_each_new_session_at_once_is_retried_with_backoff(tmp_path: Path) -> None:
    """An SSE server answers ``logging/setLevel`` 404 (the session unknown), which the gateway
    sends each new connection once it is ready (a client asked for a level). A server that
    forgot its session is asked for a new one at once; but this one forgets every new one at
    once, and the gateway reconnected at once each time, without end (a reconnect every few
    seconds, four log lines each). Now one that ended before it served (answered a request once
    ready) is followed at once once only until a connection serves: the next waits the backoff."""
    with url_process([PYTHON, "-m", "tests.rogue_http"]) as (url, _):
        sse = url.removesuffix("/mcp") + "/sse-forgetful"
        config = write_config(tmp_path, {"rogue": {"url": sse, "transport": "sse"}})
        log = tmp_path / "gateway.log"
        with log.open("wb") as stderr, raw_gateway(config, stderr) as gw:
            gw.handshake()
            gw.request(2, "logging/setLevel", {"level": "debug"})
            gw.answer(2)
            with anyio.fail_after(60):  # a hang guard
                while len(retries := re.findall(r"\[rogue\] .*; retrying in (\S+) s", log.read_text())) < 3:
                    await anyio.sleep(0.1)
        assert retries[:3] == ["0", "1", "2"], retries


@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_stderr_without_newline_is_not_held(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    with raw_gateway(config) as gw:
        gw.handshake()
        idle = peak_rss_mib(gw.proc.pid)
        call(gw, 2, "rogue__flood_stderr", n=200 << 20)  # 200 MiB, no newline
        assert gw.answer(2)["result"]["content"][0]["text"] == f"wrote {200 << 20} bytes of stderr"
        peak = peak_rss_mib(gw.proc.pid)
        assert peak - idle < 60, (idle, peak)
        call(gw, 3, "rogue__ok")
        assert gw.answer(3)["result"]["content"][0]["text"] == "ok"


async def test_undrained_gateway_stderr_never_blocks_serving(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    # stderr is a pipe nobody reads: it fills after 64 KiB of log lines.
    with raw_gateway(config, stderr=subprocess.PIPE) as gw:
        gw.handshake()
        for i in range(2, 6):
            call(gw, i, "rogue__stderr_lines", n=4000)  # ~900 KB of logged stderr a call
            assert gw.answer(i)["result"]["content"][0]["text"] == "wrote 4000 stderr lines"
        call(gw, 9, "rogue__ok")
        assert gw.answer(9)["result"]["content"][0]["text"] == "ok"
        # Once stderr is read again, the writer catches up and says how much it dropped.
        assert gw.proc.stderr is not None
        fd, seen, deadline = gw.proc.stderr.fileno(), b"", time.monotonic() + 60
        while b"log records dropped" not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 1)[0]:
                seen = seen[-4096:] + os.read(fd, 1 << 16)
        assert b"log records dropped" in seen


_ECHO = b'"method":"tools/call","params":{"name":"rogue__echo","arguments":{"text":"' + b"x" * 16384 + b'"}}'
BACK_PRESSURE_REQUESTS = {
    "tools/list": b'{"jsonrpc":"2.0","id":%d,"method":"tools/list"}\n',  # the SDK's path
    "tools/call": b'{"jsonrpc":"2.0","id":%d,' + _ECHO + b"}\n",  # the stdio fast path, 16 KiB answers
}


@pytest.mark.parametrize("method", sorted(BACK_PRESSURE_REQUESTS))
@pytest.mark.real_processes  # measures the gateway process's own memory
async def test_a_client_that_never_reads_meets_back_pressure(tmp_path: Path, method: str) -> None:
    config = write_config(tmp_path, {"rogue": rogue()})
    with raw_gateway(config) as gw:
        gw.handshake()
        assert gw.proc.stdin is not None
        fd = gw.proc.stdin.fileno()
        os.set_blocking(fd, False)
        line = BACK_PRESSURE_REQUESTS[method]
        sent = pending = 0
        data = b""
        # Write requests without reading any response until the gateway stops taking them.
        while sent < 20_000:
            if not data:
                data = line % (100 + sent)
                sent += 1
            _, writable, _ = select.select([], [fd], [], 5)
            if not writable:
                break  # the gateway stopped reading: back-pressure reached our pipe
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                continue
        os.set_blocking(fd, True)
        pending = sent
        assert pending < 20_000, "the gateway kept reading requests nobody collects"
        assert peak_rss_mib(gw.proc.pid) < 300
        # Reading again lets everything through: every request is answered (claimed calls
        # run side by side, so in any order).
        waiting = set(range(100, 100 + pending - (1 if data else 0)))
        while waiting:
            message = gw.read()
            if "method" not in message:
                assert "result" in message and message["id"] in waiting, str(message)[:300]
                waiting.remove(message["id"])


async def test_a_servers_requests_no_client_answers_are_bounded(tmp_path: Path) -> None:
    """A server sends 200 ``roots/list`` during one call and the (handshake-era) client never
    answers them: each held a task and a request to the client for as long as the client took
    (20,000 held ~400 MB). At most ``MAX_ASKING`` reach the client; the others are refused at
    once. (A 2026-07-28 client has no back-channel: the gateway holds its server's requests
    for its ``input_required`` rounds, bounded per call and per server in roundtrip.py and relay.py.)"""
    from gateway.engine.relay import MAX_ASKING

    config = write_config(tmp_path, {"rogue": rogue()}, client={"profile": "mcp"})
    asked: list[object] = []

    async def roots(context: Any) -> Any:
        asked.append(context)
        await anyio.sleep_forever()

    async with sdk_client(config, "legacy", list_roots_callback=roots) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "rogue__ask_flood", {"n": 200})
            with anyio.fail_after(60):
                while True:
                    results, errors = map(int, text(await client.call_tool("rogue__answers", {})).split()[::2])
                    if errors + len(asked) >= 200:
                        break
                    await anyio.sleep(0.05)
            assert results == 0 and errors == 200 - len(asked) and len(asked) <= MAX_ASKING, (results, errors)
            assert text(await client.call_tool("rogue__ok", {})) == "ok"
            tg.cancel_scope.cancel()


async def test_inbox_drops_logs_beyond_its_bound_but_never_list_changed(caplog: pytest.LogCaptureFixture) -> None:
    """The per-downstream notification queue, with its consumer held up by a slow client."""
    import anyio

    from gateway.downstream.inbox import Inbox

    delivered: list[str] = []
    release = anyio.Event()

    async def deliver(method: str, params: dict[str, Any], caller: object | None) -> None:
        await release.wait()  # the client is slow
        delivered.append(method)

    inbox = Inbox("s", deliver, limit=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(inbox.run)
        await anyio.sleep(0)
        for i in range(1000):
            inbox.put("notifications/message", {"data": i})
            if i % 100 == 0:
                inbox.put("notifications/tools/list_changed", {})
        assert inbox.dropped > 900
        release.set()
        with anyio.fail_after(30):
            while len(delivered) < 11:
                await anyio.sleep(0.01)
        await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    # 10 logs waited, 990 were dropped; ten list_changed collapsed into one, never dropped.
    assert delivered.count("notifications/tools/list_changed") == 1
    assert delivered.count("notifications/message") == 10
    assert any("dropped 990 notifications" in r.getMessage() for r in caplog.records), caplog.text


async def test_server_stderr_cannot_forge_log_lines_or_drive_the_terminal(tmp_path: Path) -> None:
    """A server's stderr (and any text it chose) is logged as one escaped line."""
    from tests.helpers import gateway

    config = write_config(tmp_path, {"rogue": rogue()}, client={"profile": "mcp"})
    async with gateway(config) as gw:
        result = await gw.session.call_tool("rogue__stderr_forge", {})
        assert text(result) == "forged"
        deadline = time.monotonic() + 10
        while "forged by a server" not in gw.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        log = gw.stderr()
    assert "forged by a server" in log
    assert "\x1b" not in log and "\r" not in log and "\x07" not in log
    forged = [line for line in log.splitlines() if "forged by a server" in line]
    assert forged and all(line.startswith("prefixgate INFO [rogue] ") for line in forged), forged


async def test_stray_lines_on_a_servers_stdout_are_ignored_and_only_the_first_few_logged(tmp_path: Path) -> None:
    """A server prints 500 lines that are not JSON-RPC (an ESC in each) around its answers:
    the call is answered, and the log names the first three, escaped, then says no more."""
    from tests.helpers import gateway

    config = write_config(tmp_path, {"rogue": rogue()}, client={"profile": "mcp"})
    async with gateway(config) as gw:
        assert text(await gw.session.call_tool("rogue__stdout_lines", {"n": 500})) == "printed 500 lines"
        assert text(await gw.session.call_tool("rogue__ok", {})) == "ok"
    stray = [line for line in gw.stderr().splitlines() if "not JSON-RPC" in line]
    assert stray == [
        f"prefixgate INFO [rogue] ignored a line that is not JSON-RPC: '\\u001b[2Kstray print {i}'{more}"
        for i, more in ((0, ""), (1, ""), (2, " (further ones are not logged)"))
    ]


async def test_inbox_settle_waits_for_what_arrived_before_a_reply() -> None:
    """A reply waits until the notifications that preceded it are delivered (a call's log
    must reach the call's stream before its result closes it), every waiter released."""
    import anyio

    from gateway.downstream.inbox import Inbox

    delivered: list[int] = []
    gate = anyio.Event()

    async def deliver(method: str, params: dict[str, Any], caller: object | None) -> None:
        await gate.wait()
        delivered.append(params["n"])

    inbox = Inbox("s", deliver)
    finished: list[int] = []

    async def reply(n: int) -> None:
        await inbox.settle()
        finished.append(len(delivered))

    async with anyio.create_task_group() as tg:
        tg.start_soon(inbox.run)
        await anyio.sleep(0)
        await inbox.settle()  # nothing waiting: returns at once
        for n in range(3):
            inbox.put("notifications/message", {"n": n})
        tg.start_soon(reply, 1)
        tg.start_soon(reply, 2)
        await anyio.sleep(0.05)
        assert finished == []  # both wait for the three queued messages
        gate.set()
        with anyio.fail_after(2):  # far below the settle bound: the waiters were woken
            while len(finished) < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert finished == [3, 3] and delivered == [0, 1, 2]
