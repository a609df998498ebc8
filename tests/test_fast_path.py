"""The stdio fast path for ``tools/call`` (issue 16) answers exactly as the SDK path does.

The same raw JSON lines go to a real gateway twice, with the fast path on and with
``PREFIXGATE_FAST_PATH=0``, and every line the gateway writes back is compared as bytes,
in both protocol eras. Masked, because genuinely random: artifact ids of a spilled result,
and the 2026-07-28 ``requestState`` the gateway mints for an ``input_required`` round trip.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

from tests.helpers import ERAS, PYTHON, RawGateway, demo, elicitation, raw_gateway, sdk_client, text, write_config

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
NON_ASCII = 'héllo — 日本語 🎉 \u2028 "quoted" \\ back'
_ARTIFACT = re.compile(rb'(?<=artifact )[\w-]{32}(?![\w-])|(?<=\\")[\w-]{32}(?=\\")')
_SIZED = re.compile(rb"(?<=line 1 column )\d+ \(char \d+\)|(?<=result of )\d+(?= bytes exceeds)")
_STATE = re.compile(rb'"requestState":"[^"]*"')


CALLS: list[tuple[str, Any, str, Any, dict[str, Any] | None]] = [
    ("echo", 1, "demo__echo", {"text": NON_ASCII}, None),
    ("string id", "id-é", "demo__echo", {"text": "x"}, None),
    ("numeric string id", "7", "demo__echo", {"text": "y"}, None),
    ("structured", 2, "demo__structured", {"count": 3}, None),
    ("image", 3, "demo__image", {}, None),
    ("isError", 4, "demo__fail", {"message": "nope"}, None),
    ("unknown tool", 5, "demo__missing", {}, None),
    ("invalid arguments", 6, "demo__structured", {"count": "three"}, None),
    ("denied", 7, "demo__touch", {}, None),
    ("spilled", 8, "demo__payload", {"bytes": 20000, "kind": "lines"}, None),
    ("progress", 9, "demo__slow", {"seconds": 0.2, "steps": 2}, {"progressToken": "p-9"}),
    ("meta passed", 10, "demo__echo", {"text": "m"}, {"custom/key": [1, 2]}),
]
"""The plain calls both direct paths answer (tests/test_http_lane.py sends them over HTTP): (label, id, tool,
arguments, the request's ``_meta``)."""


def fast_config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        {
            "demo": demo("--tools", 2, "--rich"),
            "slowpoke": {**demo("--tools", 1, "--name", "slowpoke"), "call_timeout": 1},
            "crashy": demo("--tools", 1, "--name", "crashy"),
            "asker": {**demo("--tools", 1, "--rich", "--interactive", "--name", "asker"), "protocol": "legacy"},
        },
        policy={"deny": ["demo__touch"]},
        spill={"max_visible_bytes": 2048},
    )


def masked(line: bytes) -> bytes:
    return _STATE.sub(b'"requestState":"*"', _ARTIFACT.sub(b"<id>", line))


class Script:
    """One era's conversation on a raw gateway: each step's lines, as bytes."""

    def __init__(self, gw: RawGateway, modern: bool) -> None:
        self.gw = gw
        self.modern = modern
        self.out: list[tuple[str, list[bytes]]] = []

    def params(self, name: str, arguments: Any, meta: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
        meta = dict(meta or {})
        if self.modern:
            meta[PROTOCOL_VERSION_META_KEY] = MODERN
            meta[CLIENT_CAPABILITIES_META_KEY] = {"elicitation": {}}
        params: dict[str, Any] = {"name": name, "arguments": arguments, **more}
        if meta:
            params["_meta"] = meta
        return params

    def until(self, label: str, request_id: Any) -> dict[str, Any]:
        """The answer to ``request_id``; every line up to it is recorded (masked) under ``label``."""
        lines = []
        while True:
            line = self.gw.read_line()
            lines.append(masked(line))
            message = json.loads(line)
            if "method" not in message and message.get("id") == request_id:
                self.out.append((label, lines))
                return dict(message)

    def ask(self, label: str, request_id: int, name: str) -> None:
        """A call whose server asks the client's name: answered "Ann" in either era."""
        accept = {"action": "accept", "content": {"name": "Ann"}}
        if self.modern:
            first = self.call(label, request_id, name, {})
            state = first["result"]["requestState"]
            answers = {key: accept for key in first["result"]["inputRequests"]}
            self.call(label + " answered", request_id + 1, name, {}, inputResponses=answers, requestState=state)
            return
        self.gw.request(request_id, "tools/call", self.params(name, {}))
        asked = json.loads(self.gw.read_line())
        assert asked["method"] == "elicitation/create", asked
        self.out.append((label, [masked(json.dumps(asked).encode())]))
        self.gw.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": accept}).encode())
        self.until(label + " answered", request_id)

    def call(self, label: str, request_id: Any, name: str, arguments: Any, **kw: Any) -> dict[str, Any]:
        self.gw.request(request_id, "tools/call", self.params(name, arguments, **kw))
        return self.until(label, request_id)


def conversation(config: Path, modern: bool, fast: bool, stderr: Path) -> tuple[list[tuple[str, list[bytes]]], str]:
    env = {"PREFIXGATE_FAST_PATH": "1" if fast else "0"}
    with stderr.open("wb") as err, raw_gateway(config, err, env, "--log-level", "debug") as gw:
        s = Script(gw, modern)
        if modern:
            list_params = {"_meta": s.params("x", {})["_meta"]}
            gw.request("list", "tools/list", list_params)  # the era is decided by the first request
            s.until("list", "list")
        else:
            gw.handshake({"elicitation": {}})
            gw.request("level", "logging/setLevel", {"level": "debug"})  # the server's logs reach this client
            s.until("setLevel", "level")
        for label, request_id, name, arguments, meta in CALLS:
            s.call(label, request_id, name, arguments, meta=meta)
        opt_in = {"io.modelcontextprotocol/logLevel": "debug"} if modern else None  # 2026-07-28: per request
        s.call("log", 11, "demo__log", {"text": "logged line", "level": "warning"}, meta=opt_in)
        # Cancelled: never answered; the next call on the connection is.
        gw.request(12, "tools/call", s.params("demo__slow", {"seconds": 30, "steps": 30}))
        time.sleep(0.5)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 12}}
        gw.send(json.dumps(cancel).encode())
        s.call("after cancel", 13, "demo__echo", {"text": "still here"})
        s.call("timeout", 14, "slowpoke__slow", {"seconds": 20, "steps": 1})
        # Elicitation during a call: a request to the client (handshake era) or an input_required
        # round trip (2026-07-28); from a 2026-07-28 server and from a handshake-era one.
        s.ask("ask", 15, "demo__ask")
        s.ask("ask legacy server", 18, "asker__ask")
        if modern:  # an MCPError from the gate: the same JSON-RPC error (code, message, data)
            s.call("bad requestState", 20, "demo__ask", {}, requestState="forged")
        gw.request(21, "tools/call", {"arguments": {}, **({"_meta": s.params("x", {})["_meta"]} if modern else {})})
        s.until("no name", 21)  # malformed params: the SDK's own error on both paths
        envelope = {"_meta": s.params("x", {})["_meta"]} if modern else {}
        for request_id, cursor in ((30, None), (31, "page-2"), (32, 5)):  # no cursor is issued: only none is valid
            gw.request(request_id, "tools/list", {"cursor": cursor, **envelope})
            s.until(f"cursor {cursor}", request_id)
        s.call("crash mid-call", 17, "crashy__crash", {"status": 7})
        gw.proc.stdin.close()  # type: ignore[union-attr]
        gw.proc.wait(timeout=30)
    return s.out, stderr.read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_fast_path_answers_byte_identical_to_the_sdk_path(tmp_path: Path, era: str) -> None:
    config = fast_config(tmp_path)
    modern = era == "modern"
    fast, fast_log = conversation(config, modern, True, tmp_path / "fast.log")
    sdk, sdk_log = conversation(config, modern, False, tmp_path / "sdk.log")
    assert "stdio fast path" in fast_log and "stdio fast path" not in sdk_log
    assert [label for label, _ in fast] == [label for label, _ in sdk]
    for (label, got), (_, want) in zip(fast, sdk, strict=True):
        assert got == want, label
    steps = dict(fast)
    assert "héllo — 日本語 🎉".encode() in steps["echo"][0]
    assert b"denied by policy" in steps["denied"][0]
    assert b"saved as artifact <id>" in steps["spilled"][0]
    assert len(steps["log"]) == 2 and b"logged line" in steps["log"][0]  # the call's log before its answer
    assert len(steps["progress"]) == 3 and b'"progressToken":"p-9"' in steps["progress"][0]
    assert b"still here" in steps["after cancel"][-1] and len(steps["after cancel"]) == 1
    assert b"exit status 7" in steps["crash mid-call"][-1]
    assert b'"error"' in steps["no name"][-1] and (not modern or b"requestState" in steps["bad requestState"][-1])
    assert b"Ann" in steps["ask answered"][-1] and b"Ann" in steps["ask legacy server answered"][-1]
    assert b'"tools":[' in steps["cursor None"][-1]
    assert b'"code":-32602,"message":"Invalid cursor: ' in steps["cursor page-2"][-1]
    assert b'"code":-32602,"message":"Invalid params: cursor must be a string"' in steps["cursor 5"][-1]
    for log in (fast_log, sdk_log):  # the courtesy cancel reached the server, for the cancel and the timeout
        assert log.count("slow cancelled after step") == 2, log[-3000:]


def opened(gw: RawGateway, modern: bool) -> tuple[Script, dict[str, str] | None]:
    """A conversation whose client hears every log: a 2026-07-28 one lists first (which decides
    the era) and opts in per request (the ``_meta`` returned); a handshake one sets its level."""
    s = Script(gw, modern)
    if modern:
        gw.request("list", "tools/list", {"_meta": s.params("x", {})["_meta"]})
        s.until("list", "list")
        return s, {"io.modelcontextprotocol/logLevel": "debug"}
    gw.handshake()
    gw.request("level", "logging/setLevel", {"level": "debug"})
    s.until("setLevel", "level")
    return s, None


def rogue_conversation(config: Path, fast: bool, modern: bool) -> list[tuple[str, list[bytes]]]:
    env = {"PREFIXGATE_FAST_PATH": "1" if fast else "0"}
    with raw_gateway(config, None, env) as gw:
        s, opt_in = opened(gw, modern)
        for n, (tool, arguments) in enumerate(ROGUE_CALLS, start=1):
            s.call(tool, n, f"rogue__{tool}", arguments, meta=opt_in)
        gw.proc.stdin.close()  # type: ignore[union-attr]
        gw.proc.wait(timeout=30)
    return s.out


ROGUE = str(Path(__file__).with_name("rogue_wire.py"))
ROGUE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"text": NON_ASCII}),
    ("surrogate_text", {}),
    ("log_surrogate", {}),
    ("rpc_error", {}),
    ("bad_result", {}),
    ("malformed", {"text": "string"}),
    ("malformed", {"text": "unknown_block"}),
    ("not_json", {}),
    ("big", {"n": 2 << 20}),
    ("big_ts", {"n": 2 << 20}),
    ("big", {"n": 100_000}),
    ("request_id", {}),
]


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_downstream_raw_calls_answer_as_the_sdk_session_does(tmp_path: Path, era: str) -> None:
    """A misbehaving stdio server (tests/rogue_wire.py): replies with lone surrogates, a
    JSON-RPC error, a result that is not an object, a line that is not JSON, replies over
    ``max_message_bytes`` with the id first and last: the same bytes on both paths, for a
    client of either era."""
    server = {"command": PYTHON, "args": [ROGUE]}
    config = write_config(tmp_path, {"rogue": server}, gateway={"max_message_bytes": 1 << 20})
    modern = era == "modern"
    fast, sdk = rogue_conversation(config, True, modern), rogue_conversation(config, False, modern)
    assert [label for label, _ in fast] == [label for label, _ in sdk]
    *same_fast, (_, fast_id) = fast
    *same_sdk, (_, sdk_id) = sdk
    for (label, got), (_, want) in zip(same_fast, same_sdk, strict=True):
        # A reply's size and a parse error's position count the id's characters ("pg-6" is
        # longer than 6): the server wrote a different line, not the gateway a different answer.
        assert [_SIZED.sub(b"<n>", line) for line in got] == [_SIZED.sub(b"<n>", line) for line in want], label
    # The raw call's id is in a space the SDK's ClientSession never uses (its ids are integers).
    assert b'id \\"pg-' in fast_id[-1] and b'id \\"pg-' not in sdk_id[-1], (fast_id, sdk_id)
    steps = dict(same_fast)
    assert len(steps["log_surrogate"]) == 2  # the log the server wrote just before its reply comes first
    assert b"fetch failed" in steps["rpc_error"][-1] and b"exceeds max_message_bytes" in steps["big_ts"][-1]


@pytest.mark.parametrize("mode", ERAS)
async def test_sdk_client_on_the_fast_path(tmp_path: Path, mode: str) -> None:
    """The SDK client's own view, both eras: results, progress, elicitation during a call."""
    await sdk_client_view(fast_config(tmp_path), mode, "demo__ask")


async def sdk_client_view(config: Path | str, mode: str, ask: str) -> None:
    """Results, progress, elicitation during a call (``ask``), invalid arguments: as the SDK
    client sees them through the gateway (``config``: a config, or a ``serve --http`` URL;
    tests/test_http_calls.py: HTTP servers behind it, tests/test_session_lane.py: over HTTP)."""
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with sdk_client(config, mode, elicitation_callback=elicitation) as client:
        result = await client.call_tool("demo__echo", {"text": NON_ASCII})
        assert text(result) == NON_ASCII
        result = await client.call_tool("demo__slow", {"seconds": 0.2, "steps": 2}, progress_callback=progress)
        assert text(result) == "slept 0.2 s" and seen == [0.0, 1.0]
        result = await client.call_tool(ask, {})
        assert not result.is_error and "accept" in text(result)
        result = await client.call_tool("demo__structured", {"count": "three"})
        assert result.is_error and "Invalid arguments" in text(result)


def test_the_switch_is_read_from_the_environment() -> None:
    from gateway.fastpath import fast_path

    assert fast_path({}) and fast_path({"PREFIXGATE_FAST_PATH": "1"})
    assert not fast_path({"PREFIXGATE_FAST_PATH": "0"}) and not fast_path({"PREFIXGATE_FAST_PATH": "Off"})


DEEP = 3000
"""Levels of a request ``_meta`` nested past the interpreter's recursion limit (1,000) and
well within what a line may nest (``gateway.jsontext.MAX_DEPTH``)."""


def deep_call(request_id: int, modern: bool) -> bytes:
    """A ``tools/call`` line whose ``_meta`` nests ``DEEP`` levels (written out: no encoder
    here takes it)."""
    envelope = f'"{PROTOCOL_VERSION_META_KEY}":"{MODERN}","{CLIENT_CAPABILITIES_META_KEY}":{{}},' if modern else ""
    meta = "{" + envelope + '"custom/deep":' + '{"a":' * DEEP + "1" + "}" * DEEP + "}"
    params = '{"name":"demo__echo","arguments":{"text":"deep"},"_meta":' + meta + "}"
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{params}}}'.encode()


def deep_conversation(config: Path, fast: bool, modern: bool) -> list[bytes]:
    env = {"PREFIXGATE_FAST_PATH": "1" if fast else "0"}
    with raw_gateway(config, None, env) as gw:
        s, _ = opened(gw, modern)
        gw.send(deep_call(1, modern))
        s.until("deep", 1)
        s.call("after", 2, "demo__echo", {"text": "still here"})
        gw.proc.stdin.close()  # type: ignore[union-attr]
        gw.proc.wait(timeout=30)
    return [line for _, lines in s.out[1:] for line in lines]


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_a_call_whose_meta_nests_deeply_is_answered_as_on_the_sdk_path(tmp_path: Path, era: str) -> None:
    """A ``_meta`` too deep to key (its repr overflows the recursion limit) is answered, not
    lost in the reader: the same bytes as the SDK path's, and the gateway serves on."""
    config = fast_config(tmp_path)
    modern = era == "modern"
    fast, sdk = deep_conversation(config, True, modern), deep_conversation(config, False, modern)
    assert fast == sdk
    assert b"still here" in fast[-1] and b'"id":1' in fast[0]


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_a_tools_list_with_malformed_meta_is_refused_as_any_list(tmp_path: Path, era: str) -> None:
    """A ``tools/list`` whose ``_meta`` the protocol's types refuse (on 2026-07-28 a
    ``logLevel`` of no level, which the spec says to refuse with -32602; in either era a
    progress token that is a list) was answered with the catalog: the gateway answers
    tools/list before the SDK's surface check, which refuses it for every other list."""
    modern = era == "modern"
    config = fast_config(tmp_path)
    malformed: list[dict[str, Any]] = [{"progressToken": []}]
    if modern:
        malformed.append({"io.modelcontextprotocol/logLevel": "loud"})
    with raw_gateway(config, None, {}) as gw:
        s, _ = opened(gw, modern)
        base = s.params("x", {}).get("_meta", {})
        for n, bad in enumerate(malformed):
            answers = []
            for method in ("tools/list", "prompts/list"):
                gw.request(f"{method} {n}", method, {"_meta": {**base, **bad}})
                answers.append(s.until(method, f"{method} {n}"))
            refused, reference = answers
            assert refused.get("error", {}).get("code") == -32602, (bad, refused)
            assert refused["error"] == reference["error"], bad
        gw.request("good", "tools/list", {"_meta": base} if base else {})
        assert "tools" in s.until("good", "good")["result"]
