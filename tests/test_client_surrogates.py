"""A client's lone surrogate (``"\\ud800"``: half an emoji, as a JavaScript client cuts one)
reaches the server as U+FFFD, over stdio and HTTP, in both eras, on the lane and off it.

Every JSON text that enters the gateway is made valid Unicode on the way in
(gateway/jsontext.py): a stdio line as it is parsed, an HTTP body before any parser reads
it. Before the HTTP entry did so, a 2026-07-28 call carrying one failed ("request not
sent: ... surrogates not allowed", blamed on the server) where the server answers it
directly. The SDK's Python client cannot send one (its encoder refuses it), so these
clients write their JSON themselves, as ``json.dumps`` does: every surrogate an escape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

from tests.helpers import demo, raw_gateway, write_config
from tests.test_fast_path import Script as StdioScript
from tests.test_http_lane import envelope, gateway, request, routing

LONE = "a\ud800b"
SEEN = "a\ufffdb"
"""What the server is given for ``LONE``, and so what its echo answers."""
NAME = "Ann\udc00"
"""An elicitation answer from the client with a lone low half."""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        {
            "demo": demo("--tools", 2, "--rich"),
            "asker": {
                **demo("--tools", 1, "--rich", "--name", "asker"),
                "protocol": "legacy",
            },  # asks on its back-channel
        },
    )


def _answered(message: dict[str, Any]) -> str:
    assert "result" in message and not message["result"].get("isError"), message
    text: str = message["result"]["content"][0]["text"]
    return text


def _accept(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "sdk-entry"])
def test_a_2026_http_client_s_lone_surrogate_reaches_the_server_replaced(config: Path, lane: bool) -> None:
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with gateway(config, lane) as (url, _), httpx.Client(headers=accept, timeout=60) as http:

        def call(request_id: int, name: str, arguments: dict[str, Any], **more: Any) -> dict[str, Any]:
            params = {"name": name, "arguments": arguments, "_meta": envelope(), **more}
            body = json.dumps(request(request_id, "tools/call", params)).encode()  # "\\ud800" as written
            response = http.post(url, content=body, headers=routing("tools/call", name))
            assert response.status_code == 200, response.text
            return dict(response.json())

        assert _answered(call(1, "demo__echo", {"text": LONE})) == SEEN
        for n, server in enumerate(("demo", "asker")):  # a 2026-07-28 server's question, and a classic one's
            first = call(10 + n, f"{server}__ask", {})
            asked = first["result"]
            assert asked["resultType"] == "input_required", first
            answers = {key: _accept(NAME) for key in asked["inputRequests"]}
            done = call(20 + n, f"{server}__ask", {}, inputResponses=answers, requestState=asked["requestState"])
            assert _answered(done) == "accept:{'name': 'Ann\ufffd'}", server


def test_a_handshake_http_client_s_lone_surrogate_reaches_the_server_replaced(config: Path) -> None:
    """The SDK's own handshake-era entry refuses such a body as unparsable (its parser is
    stricter than JSON); the gateway, having replaced it, answers."""
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    version = {MCP_PROTOCOL_VERSION_HEADER: "2025-11-25"}
    with gateway(config, True) as (url, _), httpx.Client(headers=accept, timeout=60) as http:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "js-like", "version": "0"}}
        opened = http.post(url, json=request(0, "initialize", init))
        session = {**version, "mcp-session-id": opened.headers["mcp-session-id"]}
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        body = json.dumps(request(1, "tools/call", {"name": "demo__echo", "arguments": {"text": LONE}})).encode()
        response = http.post(url, content=body, headers=session)
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("text/event-stream"):  # a priming event first: no data
            data = [line[5:] for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]
            message = next(m for m in map(json.loads, data) if m.get("id") == 1)
        else:
            message = response.json()
        assert _answered(message) == SEEN


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_a_stdio_client_s_lone_surrogate_reaches_the_server_replaced(config: Path, modern: bool) -> None:
    with raw_gateway(config) as gw:
        s = StdioScript(gw, modern)
        if modern:
            gw.request("list", "tools/list", {"_meta": s.params("x", {})["_meta"]})
            s.until("list", "list")
        else:
            gw.handshake({"elicitation": {}})
        assert _answered(s.call("echo", 1, "demo__echo", {"text": LONE})) == SEEN
        if modern:
            first = s.call("ask", 2, "asker__ask", {})["result"]
            answers = {key: _accept(NAME) for key in first["inputRequests"]}
            done = s.call("answered", 3, "asker__ask", {}, inputResponses=answers, requestState=first["requestState"])
        else:
            gw.request(2, "tools/call", s.params("asker__ask", {}))
            asked = json.loads(gw.read_line())
            assert asked["method"] == "elicitation/create", asked
            gw.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": _accept(NAME)}).encode())
            done = s.until("answered", 2)
        assert _answered(done) == "accept:{'name': 'Ann\ufffd'}"
