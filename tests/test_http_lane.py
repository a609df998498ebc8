"""The HTTP lane for 2026-07-28 ``tools/call`` and ``tools/list`` (issue 25) answers exactly
as the SDK's modern HTTP entry does.

The same raw HTTP requests go to two real ``serve --http`` gateways, one with the lane
and one with ``PREFIXGATE_FAST_PATH=0``, and every response is compared: status, headers
(all but uvicorn's ``date`` and ``server``) and body bytes, JSON and event streams alike.
Masked, because genuinely random: artifact ids and the ``requestState`` of a round trip.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

from gateway.jsontext import PARSE_ASIDE_BYTES
from tests.helpers import PYTHON, http_gateway, write_config
from tests.test_fast_path import CALLS, DEEP, fast_config

MODERN = "2026-07-28"
_ARTIFACT = re.compile(rb'(?<=artifact )[\w-]{32}(?![\w-])|(?<=\\")[\w-]{32}(?=\\")')
_STATE = re.compile(rb'"requestState":"[^"]*"')
_SKIPPED = {b"date", b"server"}

Response = tuple[int, list[tuple[bytes, bytes]], bytes]


def _masked(body: bytes) -> bytes:
    return _STATE.sub(b'"requestState":"*"', _ARTIFACT.sub(b"<id>", body))


class Script:
    """One conversation with a gateway: every response, as (status, headers, bytes)."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http = http
        self.url = url
        self.out: list[tuple[str, Response]] = []

    def post(
        self, label: str, body: Any, headers: dict[str, str] | list[tuple[str, str]] | None = None
    ) -> dict[str, Any] | None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = self.http.post(self.url, content=data, headers=headers)
        kept = [(k, v) for k, v in response.headers.raw if k.lower() not in _SKIPPED]
        self.out.append((label, (response.status_code, kept, _masked(response.content))))
        if response.headers.get("content-type") == "application/json":
            return dict(response.json())
        return None

    def call(
        self, label: str, request_id: Any, name: str, arguments: Any, meta: dict[str, Any] | None = None, **more: Any
    ) -> dict[str, Any] | None:
        params = {"name": name, "arguments": arguments, "_meta": envelope(meta), **more}
        return self.post(label, request(request_id, "tools/call", params), routing("tools/call", name))


def envelope(meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**(meta or {}), PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}}}


def request(request_id: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def deep_call(request_id: int) -> bytes:
    """A ``tools/call`` whose ``_meta`` nests past the interpreter's recursion limit, written
    out (tests/test_fast_path.py sends its like on stdio): the SDK entry refuses it as
    unparsable, and so must the lane."""
    meta = json.dumps(envelope())[:-1] + ', "custom/deep": ' + '{"a":' * DEEP + "1" + "}" * DEEP + "}"
    params = '{"name": "demo__echo", "arguments": {"text": "deep"}, "_meta": ' + meta + "}"
    return f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {params}}}'.encode()


def routing(method: str, name: str | None = None) -> dict[str, str]:
    headers = {MCP_PROTOCOL_VERSION_HEADER: MODERN, MCP_METHOD_HEADER: method}
    if name is not None:
        headers[MCP_NAME_HEADER] = name
    return headers


@contextmanager
def gateway(config: Path, lane: bool) -> Iterator[tuple[str, Path]]:
    with http_gateway(config, "--log-level", "debug", env={"PREFIXGATE_FAST_PATH": "1" if lane else "0"}) as found:
        yield found


def conversation(config: Path, lane: bool) -> tuple[list[tuple[str, Response]], str]:
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with gateway(config, lane) as (url, stderr), httpx.Client(headers=accept, timeout=60) as http:
        s = Script(http, url)
        s.post("list", request("l", "tools/list", {"_meta": envelope()}), routing("tools/list"))
        for label, request_id, name, arguments, meta in CALLS:
            s.call(label, request_id, name, arguments, meta=meta)
        s.call(
            "log",
            11,
            "demo__log",
            {"text": "logged line", "level": "warning"},
            meta={"io.modelcontextprotocol/logLevel": "debug"},
        )
        s.call("timeout", 14, "slowpoke__slow", {"seconds": 20, "steps": 1})
        for label, request_id, name in (("ask", 15, "demo__ask"), ("ask legacy server", 18, "asker__ask")):
            first = s.call(label, request_id, name, {})
            assert first is not None and first["result"]["resultType"] == "input_required", first
            answers = {
                key: {"action": "accept", "content": {"name": "Ann"}} for key in first["result"]["inputRequests"]
            }
            s.call(
                f"{label} answered",
                request_id + 1,
                name,
                {},
                inputResponses=answers,
                requestState=first["result"]["requestState"],
            )
        s.call("bad requestState", 20, "demo__ask", {}, requestState="forged")
        # Not claimed: the SDK's own answers, on both gateways.
        s.post("no name", request(21, "tools/call", {"arguments": {}, "_meta": envelope()}), routing("tools/call"))
        s.post(
            "wrong name header",
            request(22, "tools/call", {"name": "demo__echo", "_meta": envelope()}),
            routing("tools/call", "demo__fail"),
        )
        s.post("not JSON", b"{nope", routing("tools/call"))
        s.post(
            "notification",
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}},
            routing("notifications/cancelled"),
        )
        s.post(
            "JSON only",
            request(23, "tools/list", {"_meta": envelope()}),
            {**routing("tools/list"), "accept": "application/json"},
        )
        s.post(
            "wildcard accept",
            request(33, "tools/list", {"_meta": envelope()}),
            {**routing("tools/list"), "accept": "*/*"},
        )
        s.post(
            "routing header twice",
            request(34, "tools/call", {"name": "demo__echo", "arguments": {"text": "x"}, "_meta": envelope()}),
            [*routing("tools/call", "demo__echo").items(), (MCP_METHOD_HEADER, "tools/call")],
        )
        s.post("extra member", {**request(24, "tools/list", {"_meta": envelope()}), "x": 1}, routing("tools/list"))
        for request_id, cursor in ((30, None), (31, "page-2"), (32, 5)):  # no cursor is issued: only none is valid
            s.post(
                f"cursor {cursor}",
                request(request_id, "tools/list", {"cursor": cursor, "_meta": envelope()}),
                routing("tools/list"),
            )
        s.post("deep meta", deep_call(27), routing("tools/call", "demo__echo"))
        # Long bodies, which the lane parses beside the event loop: a call, and one cut short.
        s.call("long", 28, "demo__echo", {"text": "é" * PARSE_ASIDE_BYTES})
        cut = json.dumps(
            request(29, "tools/call", {"name": "demo__echo", "arguments": {"text": "x" * PARSE_ASIDE_BYTES}})
        )
        s.post("long cut", cut[:-1].encode(), routing("tools/call", "demo__echo"))
        s.call("crash mid-call", 17, "crashy__crash", {"status": 7})
        s.call("after the crash", 25, "demo__echo", {"text": "still here"})
        # Closing the response stream cancels the call, which the server sees.
        params = {"name": "demo__slow", "arguments": {"seconds": 30, "steps": 30}, "_meta": envelope()}
        with contextlib.suppress(httpx.ReadTimeout):  # the client gives up and closes its connection
            http.post(
                url,
                json=request(26, "tools/call", params),
                headers=routing("tools/call", "demo__slow"),
                timeout=httpx.Timeout(60, read=0.5),
            )
        return s.out, log_after_cancels(stderr)


def log_after_cancels(stderr: Path, count: int = 2) -> str:
    """The gateway's log once the demo servers logged ``count`` cancelled calls (20 s at most)."""
    deadline = time.monotonic() + 20
    while stderr.read_text().count("slow cancelled after step") < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return stderr.read_text(encoding="utf-8", errors="replace")


def assert_same(lane: list[tuple[str, Response]], sdk: list[tuple[str, Response]]) -> None:
    """Step by step, the lane's responses are the SDK path's."""
    assert [label for label, _ in lane] == [label for label, _ in sdk]
    for (label, got), (_, want) in zip(lane, sdk, strict=True):
        assert got == want, label


def test_the_http_lane_answers_byte_identical_to_the_sdk_entry(tmp_path: Path) -> None:
    config = fast_config(tmp_path)
    lane, lane_log = conversation(config, True)
    sdk, sdk_log = conversation(config, False)
    assert "on the HTTP lane" in lane_log and "on the HTTP lane" not in sdk_log
    assert_same(lane, sdk)
    steps = dict(lane)
    assert b"h\\u00e9llo \\u2014 \\u65e5\\u672c\\u8a9e \\ud83c\\udf89" in steps["echo"][2]  # as json.dumps writes it
    assert steps["echo"][0] == 200 and (b"content-type", b"application/json") in steps["echo"][1]
    assert b"denied by policy" in steps["denied"][2] and b"saved as artifact <id>" in steps["spilled"][2]
    for streamed, events in (("progress", 3), ("log", 2)):  # notifications during the call: a stream, then the answer
        status, headers, body = steps[streamed]
        assert (b"content-type", b"text/event-stream") in headers and body.count(b"event: message") == events, body
    assert b'"progressToken":"p-9"' in steps["progress"][2] and b"logged line" in steps["log"][2]
    assert b"Ann" in steps["ask answered"][2] and b"Ann" in steps["ask legacy server answered"][2]
    assert steps["no name"][0] == 400 and steps["wrong name header"][0] == 400 and steps["notification"][0] == 202
    assert steps["JSON only"][0] == 406 and b"exit status 7" in steps["crash mid-call"][2]
    assert b"still here" in steps["after the crash"][2] and b"-32700" in steps["deep meta"][2]
    assert b"saved as artifact <id>" in steps["long"][2] and b"-32700" in steps["long cut"][2]
    assert b'"tools":[' in steps["cursor None"][2]
    assert b'"code":-32602,"message":"Invalid cursor: ' in steps["cursor page-2"][2]
    assert b'"code":-32602,"message":"Invalid params: cursor must be a string"' in steps["cursor 5"][2]
    assert "a 2026-07-28 POST body: " in lane_log and "a 2026-07-28 POST body: " not in sdk_log
    for log in (lane_log, sdk_log):  # the timeout's courtesy cancel, and the closed stream's
        assert log.count("slow cancelled after step") == 2, log[-3000:]


def test_a_client_gone_at_once_still_cancels_its_call(tmp_path: Path) -> None:
    """The lane watches for the client only once a call has run ``WATCH_AFTER`` s: a client
    that goes away sooner still cancels it, which its server sees. The client goes as soon
    as its call's first progress shows the server has it (going at a fixed moment instead,
    a busy gateway may not have read the request yet: then, as uvicorn hands an application
    a disconnect for a body it had not read, no call runs at all)."""
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    meta = envelope({"progressToken": "p-1"})
    params = {"name": "demo__slow", "arguments": {"seconds": 30, "steps": 30}, "_meta": meta}
    with gateway(fast_config(tmp_path), True) as (url, stderr), httpx.Client(headers=accept, timeout=60) as http:
        call = request(1, "tools/call", params)
        with http.stream("POST", url, json=call, headers=routing("tools/call", "demo__slow")) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            next(line for line in response.iter_lines() if "notifications/progress" in line)
        log = log_after_cancels(stderr, 1)
    assert "on the HTTP lane" in log and log.count("slow cancelled after step") == 1, log[-3000:]


@pytest.mark.anyio
async def test_a_silent_call_commits_the_event_stream_and_pings() -> None:
    """As the SDK's entry: no notification within the interval, so the stream is committed
    with a keep-alive ping (a proxy's idle timeout must not close it), and the answer ends it."""
    import anyio
    from starlette.requests import Request

    from gateway.upstream.httplane import Exchange

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], "query_string": b""}
    exchange = Exchange(send, Request(scope), 1, None, interval=1.0)
    await anyio.sleep(1.0)  # the call was silent for the interval: the lane's timer starts the pings now
    async with anyio.create_task_group() as tg:
        tg.start_soon(exchange.pings)
        await anyio.sleep(0.2)
        assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]  # committed at once
        await exchange.finish({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert (b"content-type", b"text/event-stream") in sent[0]["headers"]
    assert [m["body"] for m in sent[1:]] == [
        b": ping\r\n\r\n",
        b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\r\n\r\n',
    ]
    assert sent[-1]["more_body"] is False


def header_conversation(config: Path, lane: bool) -> tuple[list[tuple[str, Response]], str]:
    """Calls whose ``Mcp-Param-*`` headers agree with the body, or not: a tool whose schema
    names ``x-mcp-header`` (tests/modern_server.py's ``region``) and one that names none."""
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    header = "Mcp-Param-Region"
    with gateway(config, lane) as (url, stderr), httpx.Client(headers=accept, timeout=60) as http:
        s = Script(http, url)
        s.post("list", request("l", "tools/list", {"_meta": envelope()}), routing("tools/list"))
        for label, request_id, name, arguments, extra in (
            ("agrees", 1, "m__region", {"region": "eu-west"}, {header: "eu-west"}),
            ("agrees again", 2, "m__region", {"region": "us-east"}, {header: "us-east"}),
            ("differs", 3, "m__region", {"region": "eu-west"}, {header: "us-east"}),
            ("missing", 4, "m__region", {"region": "eu-west"}, {}),
            ("without its argument", 5, "m__region", {}, {header: "eu-west"}),
            ("unannotated", 6, "m__echo", {"text": "hi"}, {header: "eu-west"}),
        ):
            params = {"name": name, "arguments": arguments, "_meta": envelope()}
            s.post(label, request(request_id, "tools/call", params), {**routing("tools/call", name), **extra})
        return s.out, stderr.read_text(encoding="utf-8", errors="replace")


def test_the_http_lane_checks_param_headers_as_the_sdk_entry(tmp_path: Path) -> None:
    """Remembering which schemas name ``x-mcp-header`` changes no answer: a header that
    disagrees with its argument is refused, one no schema names passes, on both paths."""
    server = str(Path(__file__).with_name("modern_server.py"))
    config = write_config(tmp_path, {"m": {"command": PYTHON, "args": [server]}})
    lane, lane_log = header_conversation(config, True)
    sdk, sdk_log = header_conversation(config, False)
    assert "on the HTTP lane" in lane_log and "on the HTTP lane" not in sdk_log
    assert_same(lane, sdk)
    steps = dict(lane)
    assert b'"x-mcp-header":"Region"' in steps["list"][2]  # published as the server declared it
    assert b"region:eu-west" in steps["agrees"][2] and b"region:us-east" in steps["agrees again"][2]
    for refused in ("differs", "missing", "without its argument"):
        assert steps[refused][0] == 400 and b"Mcp-Param-Region header" in steps[refused][2], refused
    assert steps["unannotated"][0] == 200 and b"modern:hi" in steps["unannotated"][2]


def method_conversation(config: Path, lane: bool) -> tuple[list[tuple[str, Response]], str]:
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with gateway(config, lane) as (url, stderr), httpx.Client(headers=accept, timeout=60) as http:
        s = Script(http, url)
        for label, method in (("list method", ["tools/call"]), ("object method", {"tools/call": 1})):
            params = {"name": "demo__echo", "arguments": {"text": "hi"}, "_meta": envelope()}
            s.post(label, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, routing("tools/call"))
        s.call("after", 2, "demo__echo", {"text": "still here"})
        return s.out, stderr.read_text(encoding="utf-8", errors="replace")


def test_an_unhashable_method_is_refused_as_by_the_sdk_entry(tmp_path: Path) -> None:
    """A 2026-07-28 POST whose ``method`` is a list or an object (found by fuzzing) is the
    SDK's to refuse: the lane's membership test once raised on it, a traceback in the log
    and a bare 500 for the client."""
    config = fast_config(tmp_path)
    lane, lane_log = method_conversation(config, True)
    sdk, sdk_log = method_conversation(config, False)
    assert_same(lane, sdk)
    steps = dict(lane)
    for refused in ("list method", "object method"):
        assert steps[refused][0] == 400 and b'"code":-32600' in steps[refused][2], steps[refused]
    assert b"still here" in steps["after"][2]
    for log in (lane_log, sdk_log):
        assert "Traceback" not in log, log[-3000:]


MALFORMED_ENVELOPES: list[tuple[str, dict[str, Any]]] = [
    ("log level", {"io.modelcontextprotocol/logLevel": "loud"}),
    ("capabilities", {CLIENT_CAPABILITIES_META_KEY: "all"}),
    ("client info", {"io.modelcontextprotocol/clientInfo": 5}),
]
"""2026-07-28 envelopes whose keys are there but whose values the protocol's types refuse."""


def envelope_conversation(config: Path, lane: bool) -> tuple[list[tuple[str, Response]], str]:
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with gateway(config, lane) as (url, stderr), httpx.Client(headers=accept, timeout=60) as http:
        s = Script(http, url)
        for n, (label, bad) in enumerate(MALFORMED_ENVELOPES):
            for method in ("tools/list", "prompts/list"):
                params = {"_meta": {**envelope(), **bad}}
                s.post(f"{method} {label}", request(n, method, params), routing(method))
        s.post("tools/list", request("l", "tools/list", {"_meta": envelope()}), routing("tools/list"))
        return s.out, stderr.read_text(encoding="utf-8", errors="replace")


def test_a_tools_list_whose_envelope_is_malformed_is_refused_as_any_list(tmp_path: Path) -> None:
    """A 2026-07-28 ``tools/list`` whose ``_meta`` envelope holds a value the protocol's types
    refuse (a ``logLevel`` of no level, which the spec says to refuse with -32602) was
    answered with the catalog, where every other list is refused -32602 (HTTP 400): the
    gateway answers tools/list itself, before the SDK's surface check. Both paths now refuse it."""
    config = fast_config(tmp_path)
    lane, _lane_log = envelope_conversation(config, True)
    sdk, _sdk_log = envelope_conversation(config, False)
    assert_same(lane, sdk)
    steps = dict(lane)
    for label, _bad in MALFORMED_ENVELOPES:
        refused, reference = steps[f"tools/list {label}"], steps[f"prompts/list {label}"]
        assert refused[0] == 400 and b'"code":-32602' in refused[2], (label, refused)
        assert refused[2] == reference[2], label
    assert steps["tools/list"][0] == 200 and b'"tools":[' in steps["tools/list"][2]


def test_the_remembered_accept_verdicts_stay_bounded_whatever_a_client_sends() -> None:
    """Each client sends one ``Accept`` with every request, so its verdict is remembered; one
    varying it on every request, or sending a huge one, keeps at most ``MAX_ACCEPTS`` short
    values, and every verdict is still the SDK's."""
    from gateway.upstream import httplane

    httplane._ACCEPTS.clear()
    for n in range(3 * httplane.MAX_ACCEPTS):
        assert httplane._accepts_json_and_events(f"application/json;q=0.{n}, text/event-stream")
        assert len(httplane._ACCEPTS) <= httplane.MAX_ACCEPTS
    huge = "text/event-stream, " + "x/y, " * 200 + "application/json"
    assert httplane._accepts_json_and_events(huge) and huge not in httplane._ACCEPTS
    assert not httplane._accepts_json_and_events("application/json")  # (no event streams)
    assert httplane._accepts_json_and_events("*/*")
