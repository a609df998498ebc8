"""``serve`` behaves the same whatever its stdin and stdout are (issue 31, item 5).

An agent gives the gateway pipes; a person tries it with a file or a terminal. Each is read
and written by the same transport now: junk gets a parse error everywhere, and every
request read before the end of input is answered before the gateway exits (a request still
running when stdin closes used to be cut off on a pipe). On a terminal the gateway says
once what it is, and hands the terminal back as it found it (blocking).
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

from gateway.commands.eventloop import UVLOOP_ENV
from gateway.upstream.stdio import MAX_IN_FLIGHT
from tests.helpers import GATEWAY, INIT, PYTHON, catalog_json, demo, raw_gateway, write_config

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


REQUESTS = b"".join(
    line + b"\n"
    for line in (
        json.dumps(INIT).encode(),
        json.dumps(INITIALIZED).encode(),
        b"this is not JSON",
        json.dumps(call(2, "d__slow", {"seconds": 1, "steps": 1})).encode(),
        json.dumps(call(3, "d__echo", {"text": "last"})).encode(),
    )
)


def answers(out: bytes) -> dict[Any, dict[str, Any]]:
    return {message.get("id"): message for message in map(json.loads, out.splitlines())}


@pytest.mark.parametrize("stdin_kind", ["pipe", "file"])
@pytest.mark.parametrize("stdout_kind", ["pipe", "file"])
def test_every_request_read_before_the_end_of_input_is_answered(
    tmp_path: Path, stdin_kind: str, stdout_kind: str
) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    requests, replies = tmp_path / "requests.jsonl", tmp_path / "replies.jsonl"
    requests.write_bytes(REQUESTS)
    with requests.open("rb") as given, replies.open("wb") as taken, (tmp_path / "stderr.log").open("wb") as err:
        proc = subprocess.Popen(
            [*GATEWAY, "serve", "--config", str(config)],
            stdin=subprocess.PIPE if stdin_kind == "pipe" else given,
            stdout=subprocess.PIPE if stdout_kind == "pipe" else taken,
            stderr=err,
        )
        out, _ = proc.communicate(REQUESTS if stdin_kind == "pipe" else None, timeout=60)
    if stdout_kind == "file":
        out = replies.read_bytes()
    log = (tmp_path / "stderr.log").read_text()
    assert proc.returncode == 0, log[-2000:]
    got = answers(out)
    assert got[None]["error"]["code"] == -32700, out  # the junk line
    assert got[1]["result"]["serverInfo"]["name"] == "prefixgate"
    assert got[2]["result"]["content"][0]["text"] == "slept 1 s", (out, log[-2000:])
    assert got[3]["result"]["content"][0]["text"] == "last"
    assert "this is a stdio MCP server" not in log  # not a terminal


def _on_one_socket(tmp_path: Path, config: Path, loop: str) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """``serve`` with one socket for its stdin and stdout (on ``loop``), its stderr in
    stderr.log: the process and the client's end."""
    ours, theirs = socket.socketpair()
    env = {**os.environ, UVLOOP_ENV: "1" if loop == "uvloop" else "0"}
    with (tmp_path / "stderr.log").open("wb") as err:
        command = [*GATEWAY, "serve", "--config", str(config)]
        proc = subprocess.Popen(command, stdin=theirs, stdout=theirs, stderr=err, env=env)
    theirs.close()
    return proc, ours


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("start", ["first", "warm"])
def test_one_socket_for_stdin_and_stdout_answers_every_request_read(tmp_path: Path, loop: str, start: str) -> None:
    """socat's EXEC, inetd and systemd's StandardInput=socket give a server one socket as its
    stdin and stdout. Its stdout's transport watched that socket for the client closing it, and
    took the client's end of input (a half-close), or on asyncio's loop its very first request,
    for that: the gateway stopped at once and the calls in flight were never answered, where a
    server run directly answers them."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    if start == "warm":
        catalog_json(config)  # the record: the start's first answers come from it
    proc, ours = _on_one_socket(tmp_path, config, loop)
    with ours:
        ours.sendall(REQUESTS)
        ours.shutdown(socket.SHUT_WR)
        out = b""
        ours.settimeout(60)
        while chunk := ours.recv(1 << 16):
            out += chunk
    log = (tmp_path / "stderr.log").read_text()
    assert proc.wait(timeout=60) == 0, log[-2000:]
    got = answers(out)
    assert got[None]["error"]["code"] == -32700, out
    assert got[2]["result"]["content"][0]["text"] == "slept 1 s", (out, log[-2000:])
    assert got[3]["result"]["content"][0]["text"] == "last"
    assert "closed its end of stdout" not in log, log[-2000:]


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_a_client_that_closes_its_one_socket_stops_the_gateway_at_once(tmp_path: Path, loop: str, era: str) -> None:
    """stdin and stdout one socket, and the client closes it entirely (not a half-close) while
    a call runs: nothing can reach it any more, so the gateway stops as when a client closes
    its end of a pipe: its servers stopped (the call cancelled), exit 0. The close read as the
    end of input alone, and the gateway waited ``drain_timeout`` (here 600 s) for the call."""
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--log-calls")}, gateway={"drain_timeout": 600})
    meta = {PROTOCOL_VERSION_META_KEY: era, CLIENT_CAPABILITIES_META_KEY: {}}
    slow = call(2, "d__slow", {"seconds": 600, "steps": 1})
    if era == "2025-11-25":
        opening = [INIT, INITIALIZED, slow]
    else:
        opening = [{**slow, "params": {**slow["params"], "_meta": meta}}]
    proc, ours = _on_one_socket(tmp_path, config, loop)
    try:
        with ours:
            ours.sendall(b"".join(json.dumps(line).encode() + b"\n" for line in opening))
            deadline = time.monotonic() + 60
            while "call slow" not in (tmp_path / "stderr.log").read_text():  # the call runs
                assert time.monotonic() < deadline, (tmp_path / "stderr.log").read_text()[-2000:]
                time.sleep(0.05)
            ours.setblocking(False)
            with contextlib.suppress(BlockingIOError):  # read what came (closed unread, it is a reset)
                while ours.recv(1 << 16):
                    pass
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    log = (tmp_path / "stderr.log").read_text()
    assert "closed its end of stdout" in log and "slow cancelled" in log, log[-2000:]
    assert "Traceback" not in log, log[-2000:]


@pytest.mark.parametrize("start", ["first", "warm", "warm-without-prelude"])
def test_a_last_line_without_a_newline_is_answered(tmp_path: Path, start: str) -> None:
    """A client's last request with no newline before the end of input (``printf`` in a
    script) is a request still, as the SDK's stdio server reads it: answered on a first start,
    a warm one (the start reads it and hands it over) and one without the warm answers."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    env = dict(os.environ, PREFIXGATE_PRELUDE="0" if start == "warm-without-prelude" else "1")
    if start != "first":
        catalog_json(config)  # leaves the warm-start record
    requests = REQUESTS.splitlines()
    data = b"\n".join([requests[0], requests[1], requests[-1]])  # the echo last, no newline after it
    proc = subprocess.run(
        [*GATEWAY, "serve", "--config", str(config)], input=data, capture_output=True, env=env, timeout=60
    )
    log = proc.stderr.decode()
    assert proc.returncode == 0, log[-2000:]
    assert ("answered 1 request from the record" in log) == (start == "warm"), log[-2000:]
    assert answers(proc.stdout)[3]["result"]["content"][0]["text"] == "last", (proc.stdout, log[-2000:])


def test_an_open_listen_stream_does_not_hold_the_gateway_after_the_end_of_input(tmp_path: Path) -> None:
    """A 2026-07-28 client closes its input with a ``subscriptions/listen`` stream open: the
    gateway stops at once, as the SDK's stdio server does (the stream is not a request in
    flight; over HTTP a drain does not wait for one either), not after ``drain_timeout``."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"drain_timeout": 600})
    meta = {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}}
    with (tmp_path / "stderr.log").open("w") as err, raw_gateway(config, err) as gw:
        gw.request(1, "server/discover", meta)
        assert "result" in gw.read()
        gw.request(2, "subscriptions/listen", {**meta, "notifications": {"toolsListChanged": True}})
        assert gw.read()["method"] == "notifications/subscriptions/acknowledged"
        assert gw.proc.stdin is not None
        gw.proc.stdin.close()
        assert gw.proc.wait(timeout=120) == 0  # (drain_timeout is 600 s)
    assert "still unanswered" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_a_call_cancelled_by_its_id_as_a_string_frees_its_place(tmp_path: Path, era: str) -> None:
    """A client that names request 7 as "7" in ``notifications/cancelled`` cancels it, as the
    SDK correlates ids (and a server directly): its place among the 64 requests in flight is
    freed too. It was kept: 64 such cancels and the gateway read nothing more from its client,
    and at the end of input it waited ``drain_timeout`` for calls that would never be answered."""
    classic = {"command": PYTHON, "args": ["-m", "tests.classic_server"]}
    config = write_config(tmp_path, {"c": classic}, gateway={"drain_timeout": 600})
    meta = {PROTOCOL_VERSION_META_KEY: era, CLIENT_CAPABILITIES_META_KEY: {}}
    with (tmp_path / "stderr.log").open("w") as err, raw_gateway(config, err) as gw:
        if era == "2025-11-25":
            gw.send(json.dumps(INIT).encode())
            assert "result" in gw.answer(1)
            gw.send(json.dumps(INITIALIZED).encode())
        for n in range(100, 100 + MAX_IN_FLIGHT):
            params: dict[str, Any] = {"name": "c__sleep", "arguments": {"seconds": 600, "tag": str(n)}}
            gw.request(n, "tools/call", params if era == "2025-11-25" else {**params, "_meta": meta})
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": str(n)}}
            gw.send(json.dumps(cancel).encode())
        gw.request(2, "tools/list", None if era == "2025-11-25" else {"_meta": meta})
        assert "tools" in gw.answer(2)["result"]
        assert gw.proc.stdin is not None
        gw.proc.stdin.close()
        assert gw.proc.wait(timeout=120) == 0  # (drain_timeout is 600 s)
    assert "still unanswered" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_a_cancel_naming_no_possible_id_is_ignored(tmp_path: Path, era: str) -> None:
    """``notifications/cancelled`` whose ``requestId`` is an array or an object names no
    request: ignored, as the SDK ignores it, and the next request is answered. Such an id was
    taken as a key: unhashable, it ended the gateway."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    meta = {PROTOCOL_VERSION_META_KEY: era, CLIENT_CAPABILITIES_META_KEY: {}}
    with raw_gateway(config) as gw:
        if era == "2025-11-25":
            gw.send(json.dumps(INIT).encode())
            assert "result" in gw.answer(1)
            gw.send(json.dumps(INITIALIZED).encode())
        for named in ([1], {"id": 1}):
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": named}}
            gw.send(json.dumps(cancel).encode())
        gw.request(2, "tools/list", None if era == "2025-11-25" else {"_meta": meta})
        assert "tools" in gw.answer(2)["result"]
        assert gw.proc.poll() is None


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_client_that_closes_its_end_of_stdout_stops_the_gateway_quietly(tmp_path: Path, loop: str) -> None:
    """A client that stops listening (closes its end of the gateway's stdout) and writes on:
    nothing can reach it any more, so the gateway stops as at the end of input: its servers
    stopped, exit 0, one log line. (A write to uvloop's closed transport raised out of the
    writer: exit 1 and five tracebacks; on asyncio's it ran on until the end of input.)"""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    env = {UVLOOP_ENV: "1" if loop == "uvloop" else "0"}
    with (tmp_path / "stderr.log").open("w") as err, raw_gateway(config, err, env, "--log-level", "info") as gw:
        gw.handshake()
        assert gw.proc.stdout is not None
        gw.proc.stdout.close()
        try:
            for request_id in range(10, 14):
                gw.request(request_id, "ping")
        except BrokenPipeError:
            pass  # the gateway has gone already
        assert gw.proc.wait(timeout=60) == 0
    log = (tmp_path / "stderr.log").read_text()
    assert "Traceback" not in log and "closed its end of stdout" in log, log[-3000:]


def test_on_a_terminal_it_says_what_it_is_and_gives_the_terminal_back(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, profiles={"review": {}})
    master, terminal = pty.openpty()
    try:
        assert os.get_blocking(terminal)
        with (tmp_path / "stderr.log").open("wb") as err:
            proc = subprocess.Popen(
                [*GATEWAY, "serve", "--config", str(config), "--profile", "review", "--session", "s1"],
                stdin=terminal,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        assert proc.stdout is not None
        os.write(master, b"junk\n")
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, (tmp_path / "stderr.log").read_text()
        assert json.loads(proc.stdout.readline())["error"]["code"] == -32700
        deadline = time.monotonic() + 30
        while "this is a stdio MCP server" not in (log := (tmp_path / "stderr.log").read_text()):
            assert time.monotonic() < deadline, log
            time.sleep(0.05)
        # The command works pasted: the Inspector takes --config wherever it appears, so after "--".
        assert "npx @modelcontextprotocol/inspector -- " in log
        assert f" serve --config {config} --profile review --session s1" in log.split("inspector -- ")[1]
        os.write(master, b"\x04")  # Ctrl-D: the end of input
        assert proc.wait(timeout=30) == 0, (tmp_path / "stderr.log").read_text()[-2000:]
        assert os.get_blocking(terminal)  # the shell's terminal is as it was
    finally:
        os.close(master)
        os.close(terminal)
