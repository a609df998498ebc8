"""The HTTP session lane for handshake-era requests (issue 25) answers as the SDK's
session transport does, except that a request answered at once gets one JSON body.

The same raw HTTP conversation goes to two real ``serve --http`` gateways, one with the lane
and one with ``PREFIXGATE_FAST_PATH=0``, and every response is compared: status, headers
(all but uvicorn's ``date`` and ``server``) and body bytes. Where the lane answered with
JSON (answered within its grace with nothing before its answer), the body is the answer the
SDK's event stream carries, byte for byte, under the headers of the transport's own JSON
answers; every other response is byte-identical. It covers plain calls, progress and logs
on the call's stream, a timeout, a crash, elicitation on the call's stream (the gateway's
own and a classic server's, answered by POST while the stream is open), the client's
``notifications/cancelled``, resumption of a finished call's stream with ``Last-Event-ID``,
requests other than calls (lists, reads, their errors, a classic server's elicitation during
a ``prompts/get``), and the requests the lane leaves to the SDK. Masked, because genuinely
random: session and event ids, ping times, artifact ids.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from gateway.jsontext import PARSE_ASIDE_BYTES
from tests.helpers import ACCEPT, ERAS, demo, http_gateway, sdk_client, text, write_config
from tests.test_fast_path import CALLS, fast_config, sdk_client_view
from tests.test_http_lane import Response, _masked, assert_same, log_after_cancels

HANDSHAKE = "2025-11-25"
_EVENT_ID = re.compile(rb"(?m)^id: \S+")
_PING = re.compile(rb"(?m)^: ping - .*$")
_SKIPPED = {b"date", b"server"}
_LANE_LINE = "on the HTTP session lane"


def masked(body: bytes) -> bytes:
    return _PING.sub(b": ping - *", _EVENT_ID.sub(b"id: *", _masked(body)))


def events(body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an event stream."""
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: {")]


class Session:
    """One handshake-era session with a gateway, over raw HTTP: every response, masked."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id = ""
        self.out: list[tuple[str, Response]] = []

    def headers(self, **more: str) -> dict[str, str]:
        return {"mcp-protocol-version": HANDSHAKE, "mcp-session-id": self.session_id, **more}

    def keep(self, label: str, response: httpx.Response, body: bytes) -> bytes:
        kept = [
            (k, b"*" if k.lower() == b"mcp-session-id" else v)
            for k, v in response.headers.raw
            if k.lower() not in _SKIPPED
        ]
        self.out.append((label, (response.status_code, kept, masked(body))))
        return body

    def open(self) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE,
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        response = self.http.post(self.url, json=init)
        self.session_id = response.headers["mcp-session-id"]
        self.keep("initialize", response, response.content)
        self.post("initialized", {"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, label: str, body: Any, headers: dict[str, str] | None = None) -> bytes:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = self.http.post(self.url, content=data, headers=headers if headers is not None else self.headers())
        return self.keep(label, response, response.content)

    def call(self, label: str, request_id: Any, name: str, arguments: Any, meta: dict[str, Any] | None = None) -> bytes:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta is not None:
            params["_meta"] = meta
        return self.post(label, request(request_id, "tools/call", params))

    def streamed(self, label: str, body: dict[str, Any], on_event: Callable[[dict[str, Any]], None]) -> bytes:
        """A POST whose event stream is read as it comes: ``on_event`` sees each message."""
        with self.http.stream("POST", self.url, json=body, headers=self.headers()) as response:
            data = b""
            for line in response.iter_lines():
                data += line.encode() + b"\r\n"
                if line.startswith("data: {"):
                    on_event(json.loads(line[6:]))
            return self.keep(label, response, data)


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


@contextmanager
def demo_session(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[tuple[Session, Path]]:
    """A gateway over HTTP in front of the rich demo server, and a handshake-era session on
    it that listed its tools; with the gateway's stderr log."""
    config = write_config(tmp_path, {"demo": demo("--tools", 2, "--rich")})
    with (
        http_gateway(config, *extra, env=env) as (url, stderr),
        httpx.Client(headers=ACCEPT, timeout=60) as http,
    ):
        s = Session(http, url)
        s.open()
        s.post("list", request("l", "tools/list"))
        yield s, stderr


def wait_for_log(stderr: Path, line: str, seconds: float) -> str:
    """The gateway's log once it holds ``line`` (or ``seconds`` passed)."""
    deadline = time.monotonic() + seconds
    while line not in (logged := stderr.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return logged


def conversation(config: Path, lane: bool) -> tuple[list[tuple[str, Response]], str]:
    env = {"PREFIXGATE_FAST_PATH": "1" if lane else "0"}
    with (
        http_gateway(config, "--log-level", "debug", env=env) as (url, stderr),
        httpx.Client(headers=ACCEPT, timeout=60) as http,
    ):
        s = Session(http, url)
        s.open()
        s.post("list", request("l", "tools/list"))  # (the lane learnt the session at its initialize)
        for label, request_id, name, arguments, meta in CALLS:
            s.call(label, request_id, name, arguments, meta)
        s.post("log level", request(11, "logging/setLevel", {"level": "debug"}))
        s.call("log", 12, "demo__log", {"text": "logged line", "level": "warning"})
        s.call("timeout", 14, "slowpoke__slow", {"seconds": 20, "steps": 1})

        def answering(label: str) -> Callable[[dict[str, Any]], None]:
            def answer(message: dict[str, Any]) -> None:
                if message.get("method") == "elicitation/create":
                    reply = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"action": "accept", "content": {"name": "Ann"}},
                    }
                    s.post(f"{label}: the answer", reply)

            return answer

        for label, request_id, name in (("ask", 15, "demo__ask"), ("ask legacy server", 16, "asker__ask")):
            s.streamed(label, request(request_id, "tools/call", {"name": name, "arguments": {}}), answering(label))
        # Requests other than calls, on the lane too (the SDK's runner answers them there).
        s.post("resources", request(30, "resources/list"))
        s.post("prompts", request(31, "prompts/list", {}))
        s.post("read", request(32, "resources/read", {"uri": "demo://demo/readme"}))
        s.post("read unknown", request(33, "resources/read", {"uri": "demo://demo/nope"}))
        s.post("read without uri", request(34, "resources/read", {}))
        s.post("no such method", request(35, "tools/nope"))
        s.post("ping", request(36, "ping"))
        s.post(
            "complete",
            request(
                37,
                "completion/complete",
                {"ref": {"type": "ref/prompt", "name": "demo__greet"}, "argument": {"name": "who", "value": "a"}},
            ),
        )
        interview = request(38, "prompts/get", {"name": "asker__interview"})
        s.streamed("interview", interview, answering("interview"))

        def cancel(message: dict[str, Any]) -> None:
            if message.get("method") == "notifications/progress" and message["params"]["progress"] == 0:
                s.post("cancel", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 17}})

        slow = {"name": "demo__slow", "arguments": {"seconds": 30, "steps": 30}, "_meta": {"progressToken": "c"}}
        s.streamed("cancelled", request(17, "tools/call", slow), cancel)
        s.call("crash mid-call", 18, "crashy__crash", {"status": 7})
        s.call("after the crash", 19, "demo__echo", {"text": "still here"})
        # A finished call's stream again, from its priming event: the event store's replay.
        progress = next(body for label, (_, _, body) in s.out if label == "progress")
        assert progress.startswith(b"id: *"), progress
        again = s.call("progress again", 20, "demo__slow", {"seconds": 0.2, "steps": 2}, {"progressToken": "p-20"})
        priming = again.split(b"\r\n", 1)[0][4:].decode()
        with http.stream("GET", url, headers=s.headers(**{"last-event-id": priming})) as replay:
            replayed = b""
            for line in replay.iter_lines():  # the stream stays open after the replay: read up to the answer
                replayed += line.encode() + b"\r\n"
                if line.startswith('data: {"jsonrpc":"2.0","id":20,'):
                    break
            s.keep("replayed", replay, replayed)
        # Not claimed: the SDK's own answers, on both gateways.
        s.post("no name", request(21, "tools/call", {"arguments": {}}))
        s.post(
            "enveloped",
            request(
                22,
                "tools/call",
                {"name": "demo__echo", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
            ),
        )
        s.post("not JSON", b"{nope")
        # Long bodies, which the lane parses beside the event loop, with the SDK's verdicts:
        # a call, one cut short, and one nested past the SDK parser's 200 levels.
        s.call("long", 28, "demo__echo", {"text": "é" * PARSE_ASIDE_BYTES})
        long = json.dumps(
            request(29, "tools/call", {"name": "demo__echo", "arguments": {"text": "x" * PARSE_ASIDE_BYTES}})
        )
        s.post("long cut", long[:-1].encode())
        s.post("long and deep", long[:-2].encode() + b',"deep":' + b"[" * 200 + b"]" * 200 + b"}}")
        s.post("extra member", {**request(23, "tools/call", {"name": "demo__echo"}), "x": 1})
        s.post("JSON only", request(24, "tools/call", {"name": "demo__echo"}), s.headers(accept="application/json"))
        s.post(
            "unknown session",
            request(25, "tools/call", {"name": "demo__echo"}),
            {**s.headers(), "mcp-session-id": "nope"},
        )
        s.post(
            "no version header",
            request(26, "tools/call", {"name": "demo__echo", "arguments": {"text": "v"}}),
            {"mcp-session-id": s.session_id},
        )
        ended = http.delete(url, headers=s.headers())
        s.keep("delete", ended, ended.content)
        s.post("after delete", request(27, "tools/call", {"name": "demo__echo", "arguments": {"text": "gone"}}))
        return s.out, log_after_cancels(stderr)


def _answered_at_once(got: Response, want: Response) -> bool:
    """``got`` (the lane's) is one JSON body carrying what ``want`` (the SDK's event stream: a
    priming event and the answer alone) carries; False when ``got`` is not JSON."""
    status, headers, body = got
    if (b"content-type", b"application/json") not in headers or (b"content-type", b"text/event-stream") not in want[1]:
        return False
    assert [k for k, _ in headers] == [b"content-type", b"mcp-session-id", b"content-length"], headers
    assert status == want[0] == 200
    data = [line[6:] for line in want[2].splitlines() if line.startswith(b"data: ")]
    assert data == [b"", body], (data, body)  # the priming event's empty data, then the answer
    return True


def test_the_session_lane_answers_as_the_sdk_transport(tmp_path: Path) -> None:
    config = fast_config(tmp_path)
    lane, lane_log = conversation(config, True)
    sdk, sdk_log = conversation(config, False)
    assert _LANE_LINE in lane_log and _LANE_LINE not in sdk_log
    assert [label for label, _ in lane] == [label for label, _ in sdk]
    at_once = [label for (label, got), (_, want) in zip(lane, sdk, strict=True) if _answered_at_once(got, want)]
    assert_same([step for step in lane if step[0] not in at_once], [step for step in sdk if step[0] not in at_once])
    # Most plain calls are answered within the grace even on a loaded machine, and every other
    # request here within its own; none that notified or asked first can be, nor can the SDK's
    # own answers.
    others = {"list", "log level", "resources", "prompts", "read", "read unknown", "read without uri"}
    others |= {"no such method", "ping", "complete"}
    assert len(at_once) >= 5 + len(others) and set(at_once) <= {label for label, *_ in CALLS} | others | {
        "crash mid-call",
        "after the crash",
        "long",
    }
    assert others <= set(at_once), others - set(at_once)
    assert not {"progress", "log", "ask", "ask legacy server", "cancelled", "progress again", "interview"} & set(
        at_once
    )
    steps = dict(lane)
    status, headers, body = steps["progress"]
    assert status == 200 and (b"content-type", b"text/event-stream") in headers
    # The priming event, then the progress and the answer.
    assert body.startswith(b"id: *\r\ndata: \r\nretry: ") and b"event: message" in body
    assert b"denied by policy" in steps["denied"][2] and b"saved as artifact <id>" in steps["spilled"][2]
    assert [m.get("method") for m in events(steps["progress"][2])] == [
        "notifications/progress",
        "notifications/progress",
        None,
    ]
    assert b"logged line" in steps["log"][2] and b"exit status 7" in steps["crash mid-call"][2]
    assert b"demo says hello" in steps["read"][2] and b"Hello Ann from asker" in steps["interview"][2]
    assert b'"values":["alice@demo"]' in steps["complete"][2], steps["complete"]
    assert b'"code":-32602' in steps["read without uri"][2] and b'"code":-32601' in steps["no such method"][2]
    for asked in ("ask", "ask legacy server", "interview"):
        messages = events(steps[asked][2])
        assert messages[0]["method"] == "elicitation/create" and "Ann" in json.dumps(messages[-1]), messages
        assert steps[f"{asked}: the answer"][0] == 202
    cancelled = events(steps["cancelled"][2])
    assert cancelled[-1]["error"] == {"code": -32800, "message": "Request cancelled"}, cancelled
    replayed = events(steps["replayed"][2])
    assert [m.get("method") for m in replayed] == ["notifications/progress", "notifications/progress", None]
    assert replayed[-1]["id"] == 20 and b"still here" in steps["after the crash"][2]
    assert steps["unknown session"][0] == 404 and steps["JSON only"][0] == 406 and steps["not JSON"][0] == 400
    assert steps["after delete"][0] == 404 and b"v" in steps["no version header"][2]
    assert b"saved as artifact <id>" in steps["long"][2]
    assert steps["long cut"][0] == 400 and steps["long and deep"][0] == 400
    said = "a handshake-era POST body: "
    assert lane_log.count(said) == 3 and said not in sdk_log, lane_log[-3000:]
    for log in (lane_log, sdk_log):  # the timeout's courtesy cancel, and the client's cancel
        assert log.count("slow cancelled after step") == 2, log[-3000:]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_sdk_client_through_the_session_lane(tmp_path: Path, mode: str) -> None:
    """The SDK client over HTTP, both eras: results, progress, a classic server's elicitation
    on the call's stream, invalid arguments. In the handshake era the session lane answers."""
    config = fast_config(tmp_path)
    with http_gateway(config) as (url, stderr):
        await sdk_client_view(url, mode, "demo__ask")
        await sdk_client_view(url, mode, "asker__ask")
    assert (_LANE_LINE in stderr.read_text()) == (mode == "legacy")  # (the log, whole once it stopped)


def _closed_connections_to(port: int) -> int:
    """Client-side connections to ``port`` this machine closed lately (``TIME_WAIT``)."""
    found = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2].endswith(f":{port:04X}") and fields[3] == "06":
            found += 1
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_sdk_client_keeps_its_connection_from_call_to_call(tmp_path: Path, mode: str) -> None:
    """Answered at once, a call's answer is one JSON body, which the SDK's client reads to its
    end: its next call goes on the same connection. An event stream it leaves unfinished
    after the answer, so each handshake-era call used to cost a new TCP connection."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config) as (url, _):
        port = int(url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        async with sdk_client(url, mode) as client:
            assert text(await client.call_tool("d__echo", {"text": "warm"})) == "warm"
            before = _closed_connections_to(port)
            for n in range(10):
                assert text(await client.call_tool("d__echo", {"text": f"call {n}"})) == f"call {n}"
            closed = _closed_connections_to(port) - before
    assert closed <= 3, closed  # a call slower than the grace may still end its connection


def test_the_session_lane_holds_the_session_while_a_call_runs(tmp_path: Path) -> None:
    """A call in flight keeps its session alive past the idle timeout, as the SDK's transport
    counts it; unused, the session then ends (404)."""
    with demo_session(tmp_path, env={"PREFIXGATE_HTTP_SESSION_IDLE_TIMEOUT": "1"}) as (s, _):
        body = s.call("slow", 1, "demo__slow", {"seconds": 2.5, "steps": 2})
        assert b"slept 2.5 s" in body, body
        assert s.out[-1][1][0] == 200
        time.sleep(2)
        s.call("idle", 2, "demo__echo", {"text": "x"})
        assert s.out[-1][1][0] == 404


def test_a_client_gone_mid_call_resumes_it_from_the_priming_event(tmp_path: Path) -> None:
    """As with the SDK's transport: a client that closes a call's stream ends only the stream
    (the lane lets go of it); the call goes on, and a resumed stream (``Last-Event-ID``)
    gets what it sent since and its answer."""
    with demo_session(tmp_path, "--log-level", "debug") as (s, stderr):
        slow = {"name": "demo__slow", "arguments": {"seconds": 6, "steps": 3}, "_meta": {"progressToken": "cut"}}
        with s.http.stream("POST", s.url, json=request(28, "tools/call", slow), headers=s.headers()) as gone:
            priming = next(gone.iter_lines())[4:]
        # Resumed while the call runs (once the lane let go of the request's stream): the SDK's
        # replay then stays for what the call sends next.
        wait_for_log(stderr, "the client closed the event stream of request 28 (tools/call)", 3)
        resumed: list[dict[str, Any]] = []
        with s.http.stream("GET", s.url, headers=s.headers(**{"last-event-id": priming})) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: {"):
                    resumed.append(json.loads(line[6:]))
                    if resumed[-1].get("id") == 28:
                        break
        assert [m.get("method") for m in resumed] == ["notifications/progress"] * 3 + [None], resumed
        assert "slept 6 s" in json.dumps(resumed[-1]), resumed
        assert "on the HTTP session lane" in wait_for_log(stderr, "on the HTTP session lane", 10)


def test_a_client_gone_within_the_grace_costs_only_its_own_call(tmp_path: Path) -> None:
    """A client that sends a call and drops its connection before the call is answered or its
    stream started (within ``ANSWER_GRACE``): the lane lets go of the request, nothing is
    written, and the session and the gateway go on serving."""
    with demo_session(tmp_path, "--log-level", "debug") as (s, stderr):
        host = s.url.split("//", 1)[1].split("/", 1)[0]
        body = json.dumps(request(30, "tools/call", {"name": "demo__slow", "arguments": {"seconds": 1, "steps": 1}}))
        head = "".join(
            f"{k}: {v}\r\n"
            for k, v in {
                "Host": host,
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Content-Length": str(len(body)),
                **s.headers(),
            }.items()
        )
        with socket.create_connection(("127.0.0.1", int(host.rsplit(":", 1)[1])), timeout=10) as raw:
            raw.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n{body}".encode())
        logged = wait_for_log(stderr, "the client left before request 30 (tools/call) was answered", 10)
        assert "the client left before request 30 (tools/call) was answered" in logged, logged[-3000:]
        answer = s.call("after", 31, "demo__echo", {"text": "still served"})
        assert b"still served" in answer and s.out[-1][1][0] == 200, answer


@pytest.mark.parametrize("method", ["ping", "tools/call"])
def test_a_session_ended_while_a_long_request_is_read_is_not_dispatched(tmp_path: Path, method: str) -> None:
    """A request long enough to be parsed beside the event loop (``PARSE_ASIDE_BYTES``) whose
    session ends meanwhile (its client's DELETE, from another connection): the SDK's own answer
    for an ended session (404), as with the lane off, or the request's answer when the DELETE
    came after it; never dispatched into the ended session (an AssertionError there, a bare 500
    and uvicorn's traceback)."""
    pad = [{}] * ((4 << 20) // 4 - 64)  # (nearly the 4 MiB a body may be: ~0.5 s to parse)
    params = {"pad": pad} if method == "ping" else {"name": "demo__echo", "arguments": {"text": "x", "pad": pad}}
    with demo_session(tmp_path, "--log-level", "debug") as (s, stderr), ThreadPoolExecutor(1) as poster:
        for n in range(3):
            ended = Session(s.http, s.url)
            ended.open()
            body = json.dumps(request(40 + n, method, params)).encode()
            parsed = stderr.read_text().count("a handshake-era POST body: ")
            posted = poster.submit(ended.http.post, ended.url, content=body, headers=ended.headers())
            deadline = time.monotonic() + 30
            while stderr.read_text().count("a handshake-era POST body: ") == parsed and time.monotonic() < deadline:
                time.sleep(0.005)
            with httpx.Client(headers=ACCEPT, timeout=60) as other:
                assert other.delete(s.url, headers=ended.headers()).status_code == 200
            answer = posted.result(60)
            assert answer.status_code in (200, 404), (answer.status_code, answer.content[:200])
            if answer.status_code == 404:
                assert answer.json()["error"]["message"] == "Session not found", answer.content
        logged = stderr.read_text()
        assert "Traceback" not in logged and "Exception in ASGI" not in logged, logged[-3000:]
        assert b"still served" in s.call("after", 50, "demo__echo", {"text": "still served"})


def test_a_long_request_holds_its_session_while_it_is_read(tmp_path: Path) -> None:
    """The session's idle countdown stops while a long request (``PARSE_ASIDE_BYTES``) is read
    beside the event loop, as the SDK's transport holds its session for a request from the
    start: here the client's listen stream held the session until the read began, and the idle
    timeout (0.5 s) ran out before it ended (~0.8 s); the request is answered, as with the lane
    off. It was answered as if its session had ended long before (404, and a 500 before that)."""
    config = write_config(tmp_path, {"demo": demo("--tools", 2)})
    body = json.dumps(request(5, "ping", {"pad": [{}] * ((4 << 20) // 4 - 64)})).encode()
    env = {"PREFIXGATE_HTTP_SESSION_IDLE_TIMEOUT": "0.5"}
    with (
        http_gateway(config, "--log-level", "debug", env=env) as (url, stderr),
        httpx.Client(headers=ACCEPT, timeout=60) as http,
        httpx.Client(headers=ACCEPT, timeout=60) as listener,
        ThreadPoolExecutor(1) as poster,
    ):
        s = Session(http, url)
        s.open()
        with listener.stream("GET", url, headers=s.headers()) as listening:  # (holds the session)
            assert listening.status_code == 200
            posted = poster.submit(http.post, url, content=body, headers=s.headers())
            wait_for_log(stderr, "a handshake-era POST body: ", 30)
        answer = posted.result(60)
        assert answer.status_code == 200 and answer.json() == {"jsonrpc": "2.0", "id": 5, "result": {}}, answer.content
        logged = stderr.read_text()
    assert "Traceback" not in logged, logged[-3000:]


@pytest.mark.anyio
@pytest.mark.parametrize("grace", [0.05, 0.2], ids=["call", "other"])
async def test_the_keepalive_commits_then_pings_until_cancelled(monkeypatch: pytest.MonkeyPatch, grace: float) -> None:
    """A request still running after its grace gets ``_COMMIT`` (its event stream starts),
    then ``_PING`` at every interval (the first, the interval after the start: at once for a
    grace that long); cancelled with its call, it stops, and nothing of it is left in a cycle
    (its timer handle lets go of it)."""
    import asyncio
    import gc
    import weakref

    import anyio

    from gateway.upstream import sessionlane

    monkeypatch.setattr(sessionlane, "PING_INTERVAL", 0.2)

    class Watched(sessionlane._Keepalive):  # the same, with room for a weak reference
        pass

    feed, events = anyio.create_memory_object_stream[Any](10)
    keepalive = Watched(asyncio.get_running_loop(), feed, grace)
    seen = []
    with anyio.fail_after(5):
        for _ in range(3):
            seen.append(await events.receive())
    assert seen == [sessionlane._COMMIT, sessionlane._PING, sessionlane._PING]
    keepalive.cancel()
    await anyio.sleep(0.5)
    assert events.statistics().current_buffer_used == 0  # no ping after the cancel
    gone = weakref.ref(keepalive)
    gc.disable()
    try:
        del keepalive
        assert gone() is None  # freed by reference counting alone
    finally:
        gc.enable()
    feed.close()
    events.close()
