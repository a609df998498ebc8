"""Hardening (issue 10), helper C: HTTP exposure, life cycle, the activation journal,
catalog-change storms and log routing, through real gateway processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest

from tests.helpers import (
    ACCEPT,
    ERAS,
    GATEWAY,
    INIT,
    PYTHON,
    alive,
    catalog_json,
    demo,
    free_port,
    gateway,
    http_gateway,
    raw_gateway,
    run_cli,
    sdk_client,
    text,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio

ROGUE = Path(__file__).with_name("rogue_life.py")


def rogue(*args: str | int | Path) -> dict[str, Any]:
    """A stdio server table running tests/rogue_life.py."""
    return {"command": PYTHON, "args": [str(ROGUE), *map(str, args)]}


# --- item 3: DNS-rebinding protection on every loopback bind ------------------------------


@pytest.mark.parametrize("listen", ["127.0.0.2:0", "[0:0:0:0:0:0:0:1]:0"])
async def test_every_loopback_bind_checks_host_and_origin(tmp_path: Path, listen: str) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--log-calls")})
    with http_gateway(config, listen=listen) as (url, stderr):
        port = urlsplit(url).port
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "d__echo", "arguments": {"text": "x"}},
        }
        async with httpx2.AsyncClient() as plain:
            for evil in (
                {"host": "evil.example"},
                {"host": f"evil.example:{port}"},
                {"origin": "http://evil.example"},
                {"host": f"evil.example:{port}", "origin": f"http://evil.example:{port}"},
            ):
                refused = await plain.post(url, json=INIT, headers={**ACCEPT, **evil})
                assert 400 <= refused.status_code < 500, (evil, refused.status_code)
            # A legitimate session, then a rebinding attempt that reuses it: refused, nothing runs.
            ok = await plain.post(url, json=INIT, headers=ACCEPT)
            assert ok.status_code == 200
            session = {"mcp-session-id": ok.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            attack = await plain.post(
                url, json=call, headers={**ACCEPT, **session, "host": "evil.example", "origin": "http://evil.example"}
            )
            assert 400 <= attack.status_code < 500
            # The usual loopback names with the bound port are allowed.
            local = await plain.post(url, json=INIT, headers={**ACCEPT, "host": f"localhost:{port}"})
            assert local.status_code == 200
        assert "call echo" not in stderr.read_text()
        for mode in ERAS:
            async with sdk_client(url, mode) as client:
                assert text(await client.call_tool("d__echo", {"text": mode})) == mode
    assert stderr.read_text().count("call echo") == 2


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:0"])
async def test_every_path_of_a_loopback_bind_checks_host_and_origin(tmp_path: Path, listen: str) -> None:
    """``/metrics`` (server and tool names), the health probes and an unknown path get the
    rule ``/mcp`` has: a DNS-rebinding page reads none of them; a local client reads each."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, listen=listen) as (url, _):
        parts = urlsplit(url)
        base = url.removesuffix("/mcp")
        async with httpx2.AsyncClient() as plain:

            async def ready() -> bool:
                return (await plain.get(base + "/readyz")).status_code == 200

            await wait_for(ready)
            for path, status in (("/metrics", 200), ("/healthz", 200), ("/readyz", 200), ("/nowhere", 404)):
                for evil, refusal in (
                    ({"host": f"evil.example:{parts.port}"}, 421),
                    ({"origin": f"http://evil.example:{parts.port}"}, 403),
                ):
                    for method in ("GET", "HEAD"):
                        refused = await plain.request(method, base + path, headers=evil)
                        assert refused.status_code == refusal, (path, evil, method, refused.text)
                        assert "prefixgate" not in refused.text
                local = {"host": f"localhost:{parts.port}", "origin": f"http://localhost:{parts.port}"}
                answered = await plain.get(base + path, headers=local)
                assert answered.status_code == status, (path, answered.text)
            assert 'server="d"' in (await plain.get(base + "/metrics")).text


HOST_CASES = ("host", [("LocalHost:{port}", 200), ("127.0.0.1:{port}", 200), ("EVIL.example:{port}", 421)])
ORIGIN_CASES = (
    "origin",
    [("HTTP://LOCALHOST:{port}", 200), ("Http://127.0.0.1:{port}", 200), ("HTTP://EVIL.example:{port}", 403)],
)


@pytest.mark.parametrize("header,cases", [HOST_CASES, ORIGIN_CASES], ids=["host", "origin"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_loopback_name_in_capitals_is_the_same_host(
    tmp_path: Path, mode: str, header: str, cases: list[tuple[str, int]]
) -> None:
    """Host names are case-insensitive (RFC 9110, 3986), and so are an origin's scheme and host
    (RFC 6454), but the SDK's check compares the headers exactly: ``Host: LOCALHOST:PORT`` was
    refused 421, ``Origin: HTTP://LOCALHOST:PORT`` 403, on every path of a loopback bind. Now
    each is the host it names, on ``/mcp`` (the real SDK client) and the gateway's own paths;
    a foreign name in capitals is still refused."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config) as (url, _):
        port = urlsplit(url).port
        base = url.removesuffix("/mcp")
        async with httpx2.AsyncClient() as plain:

            async def ready() -> bool:
                return (await plain.get(base + "/readyz")).status_code == 200

            await wait_for(ready)
            for value, status in cases:
                for path in ("/readyz", "/metrics"):
                    answered = await plain.get(base + path, headers={header: value.format(port=port)})
                    assert answered.status_code == status, (value, path, answered.text)
        async with sdk_client(url, mode, headers={header: cases[0][0].format(port=port)}) as client:
            assert text(await client.call_tool("d__echo", {"text": mode})) == mode


# --- item 12: whitespace-only token; slow request bodies -----------------------------------


def test_whitespace_only_token_is_refused_before_anything_starts(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    proc = run_cli(
        "serve", "--config", str(config), "--http", "127.0.0.1:0", env={"PREFIXGATE_TOKEN": " \t "}, timeout=30
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "prefixgate: $PREFIXGATE_TOKEN is only whitespace; set a real token or unset it"
    ]
    assert proc.stdout == ""
    token_file = tmp_path / "token"
    token_file.write_text("  \n")
    proc = run_cli("serve", "--config", str(config), "--http", "0.0.0.0:0", "--token-file", str(token_file), timeout=30)
    assert proc.returncode == 2 and "is empty or only whitespace" in proc.stderr


def _one_byte_of(url: str, length: int) -> bytes:
    """A POST announcing a body of ``length`` bytes that sends one: all the gateway answers, to
    the connection's close."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n{{".encode()
        )
        received = b""
        while chunk := sock.recv(65536):  # ends when the gateway closes the connection
            received += chunk
    return received


async def test_a_body_that_never_arrives_gets_408_and_frees_the_connection(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, listen="127.0.0.1:0", env={"PREFIXGATE_HTTP_BODY_TIMEOUT": "1"}) as (url, _):
        received = _one_byte_of(url, 1000)
        assert received.startswith(b"HTTP/1.1 408"), received[:200]
        async with sdk_client(url, "legacy") as client:  # still serving
            assert text(await client.call_tool("d__echo", {"text": "up"})) == "up"


async def test_a_body_announced_over_the_limit_gets_413_before_it_arrives(tmp_path: Path) -> None:
    """From its ``content-length`` (as a direct SDK server answers), not once 4 MiB are in or
    at the body deadline (408, which this test's deadline would give without the check)."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env={"PREFIXGATE_HTTP_BODY_TIMEOUT": "5"}) as (url, _):
        received = _one_byte_of(url, 4 * 1024 * 1024 + 1)
        assert received.startswith(b"HTTP/1.1 413"), received[:200]
        async with sdk_client(url, "legacy") as client:  # still serving
            assert text(await client.call_tool("d__echo", {"text": "up"})) == "up"


async def test_a_chunked_body_past_the_limit_gets_413_as_it_passes_it(tmp_path: Path) -> None:
    """No length announced: refused once what came is over the limit (4 MiB), not at the body
    deadline, and the connection is freed."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env={"PREFIXGATE_HTTP_BODY_TIMEOUT": "30"}) as (url, _):
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        piece = b"x" * 65536
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )
            with contextlib.suppress(OSError):  # (the gateway may close before all of it is sent)
                for _ in range(4 * 16 + 1):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            received = b""
            while chunk := sock.recv(65536):  # ends when the gateway closes the connection
                received += chunk
        assert received.startswith(b"HTTP/1.1 413"), received[:200]
        assert b"request body too large" in received
        async with sdk_client(url, "legacy") as client:  # still serving
            assert text(await client.call_tool("d__echo", {"text": "up"})) == "up"


def _refused_upload(url: str) -> socket.socket:
    """A connection whose POST announced a body over the limit, once its 413 has been read
    whole (the body not yet sent)."""
    sock, answer = _answered_early(url, "/mcp", None, 5 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 413") and b"request body too large" in answer, answer[:200]
    return sock


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_client_still_sending_after_a_refusal_ends_cleanly(tmp_path: Path, parser: str) -> None:
    """A refused request's connection is closed in halves (gateway/upstream/linger.py): what
    the client still sends is read and dropped, and it reads the answer and then a clean end
    of stream. Closed at once, the gateway's socket answered the bytes that came after with a
    reset: the client's next send failed, and a client that read after it got ECONNRESET."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env={"PREFIXGATE_HTTP_PARSER": parser}) as (url, _):
        with _refused_upload(url) as sock:
            for _ in range(4):  # (the body it announced, as a client that sends before it reads)
                sock.sendall(b"x" * 65536)
                time.sleep(0.05)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(65536) == b""  # the end of stream, not a reset
        async with sdk_client(url, "legacy") as client:  # still serving
            assert text(await client.call_tool("d__echo", {"text": "up"})) == "up"


async def test_a_client_that_never_stops_sending_after_a_refusal_is_cut_off(tmp_path: Path) -> None:
    """The lingering is bounded (``PREFIXGATE_HTTP_LINGER``): a client that goes on sending is
    closed on, not read for ever."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env={"PREFIXGATE_HTTP_LINGER": "0.5"}) as (url, _):
        with _refused_upload(url) as sock:
            cut = False
            deadline = time.monotonic() + 30
            while not cut and time.monotonic() < deadline:
                try:
                    sock.sendall(b"x" * 65536)
                except OSError:  # (a reset, or the pipe broken)
                    cut = True
            assert cut, "the gateway read a refused upload for 30 s"
        async with sdk_client(url, "legacy") as client:  # still serving
            assert text(await client.call_tool("d__echo", {"text": "up"})) == "up"


def _answered_early(url: str, path: str, token: str | None, length: int = 100000) -> tuple[socket.socket, bytes]:
    """A connection whose POST to ``path`` announced a body of ``length`` bytes, and its answer
    (given before the body: a 401, a 405, a 413), read whole; the body not yet sent."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    authorization = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{authorization}Content-Length: {length}\r\n\r\n".encode()
    )
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    size = next(int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
    while len(body) < size:
        chunk = sock.recv(65536)
        assert chunk, received + body
        body += chunk
    return sock, received[: len(head) + 4] + body


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_body_trickled_after_an_early_answer_cannot_hold_the_connection(tmp_path: Path, parser: str) -> None:
    """A request answered before its body is in (a wrong token's 401, a POST to a health
    path) ends its connection, lingering, however its client goes on sending: uvicorn kept
    it alive and dropped the body as it came, each byte restarting its keep-alive timer, and
    the body deadline was the app's, which never read it, so a client without a token that
    sent a byte every second held its connection for ever. The answer says
    ``connection: close``: a keep-alive client that was not told sent its next request on the
    closing connection and lost it."""
    (tmp_path / "tokens").write_text("right-token\n", encoding="utf-8")
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    env = {"PREFIXGATE_HTTP_PARSER": parser, "PREFIXGATE_HTTP_LINGER": "0.5"}
    with http_gateway(config, "--token-file", str(tmp_path / "tokens"), env=env) as (url, _):
        for path, token in (("/mcp", "wrong-token"), ("/healthz", "right-token")):
            sock, answer = _answered_early(url, path, token)
            # It says so: a keep-alive client's next request on it was lost ("Server disconnected").
            assert b"\r\nconnection: close\r\n" in answer.partition(b"\r\n\r\n")[0].lower() + b"\r\n", answer
            with sock:
                ended = False
                for _ in range(150):  # (30 s of a byte every 0.2 s: uvicorn's keep-alive timer is 5 s)
                    try:
                        sock.sendall(b"x")
                        ready, _, _ = select.select([sock], [], [], 0.2)
                        if ready and sock.recv(65536) == b"":
                            ended = True
                    except OSError:  # (a reset, once the lingering is over)
                        ended = True
                    if ended:
                        break
                assert ended, f"a body trickled after the answer to POST {path} held its connection for 30 s"


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_403_or_404_keeps_its_connection_when_the_request_was_read_whole(tmp_path: Path, parser: str) -> None:
    """A 403 (a token that may not use the profile, or read ``/metrics``) or a 404 said
    ``connection: close``: a keep-alive client's next request, and any pipelined behind it,
    was dropped, where a server answering directly keeps the connection. Now each is
    answered, once its body is read whole, in turn on the one connection, a body sent a
    moment after its head too (answered before it, the connection had to close, the body
    unread)."""
    (tmp_path / "tokens").write_text("right-token\nreview-token profiles=review\n", encoding="utf-8")
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, profiles={"review": {}})
    with http_gateway(config, "--token-file", str(tmp_path / "tokens"), env={"PREFIXGATE_HTTP_PARSER": parser}) as (
        url,
        _,
    ):
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'

        def request(method: str, path: str, token: str, body: bytes = b"", last: bool = False) -> bytes:
            return (
                f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {len(body)}\r\n{'Connection: close' if last else 'X-Keep: 1'}\r\n\r\n"
            ).encode() + body

        pipelined = [
            request("GET", "/nope", "right-token"),
            request("POST", "/mcp", "review-token", ping),
            request("GET", "/metrics", "review-token"),
            request("POST", "/mcp/other", "right-token", ping),
            request("GET", "/healthz", "right-token", last=True),
        ]
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(pipelined[0])  # (one first, answered; then the rest pipelined behind one another)
            answer = b""
            while b"Not Found" not in answer:
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
            split = request("POST", "/mcp", "review-token", ping)  # (its body after its head, a moment later)
            sock.sendall(split[: -len(ping)])
            time.sleep(0.5)
            sock.sendall(ping + b"".join(pipelined[1:]))
            while chunk := sock.recv(65536):
                answer += chunk
        assert re.findall(rb"HTTP/1\.1 (\d+) ", answer) == [b"404", b"403", b"403", b"403", b"404", b"200"], answer


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_request_read_while_another_is_answered_is_answered_after_it(tmp_path: Path, parser: str) -> None:
    """Two calls pipelined, the end of the second one's body sent once the first is answered:
    both are answered, in order. The second one's body is not a body the first one's answer
    left unread (whose connection is closed: gateway/upstream/heads.py)."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with http_gateway(config, env={"PREFIXGATE_HTTP_PARSER": parser}) as (url, _):
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        envelope = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        }
        requests = []
        for n, (name, arguments) in enumerate([("d__slow", {"seconds": 1}), ("d__echo", {"text": "second"})]):
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": name, "arguments": arguments, "_meta": envelope},
                }
            ).encode()
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
                f"Mcp-Method: tools/call\r\nMcp-Name: {name}\r\nContent-Length: {len(body)}\r\n"
                f"{'Connection: close' if n else 'X-First: 1'}\r\n\r\n"
            )
            requests.append(head.encode() + body)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(requests[0] + requests[1][:-10])
            answer = b""
            while b"slept 1 s" not in answer:  # the first one's answer, the second one's body not all in
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
            sock.sendall(requests[1][-10:])
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.count(b"HTTP/1.1 200 ") == 2, answer
        assert answer.index(b"slept 1 s") < answer.index(b'"second"'), answer


@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_whose_url_is_the_gateway_itself_fails_saying_so(tmp_path: Path, mode: str) -> None:
    """A server entry whose URL leads back to the gateway serving it (prefixgate registered in
    an agent over HTTP, then imported under another name) made the gateway front itself: its
    own tools came back to it renamed one level deeper, over and over. That server now fails
    at its first request, saying why, and the gateway serves the others."""
    from gateway.downstream.selfloop import REFUSAL

    port = free_port()
    config = write_config(tmp_path, {"d": demo("--tools", 1), "me": {"url": f"http://127.0.0.1:{port}/mcp"}})
    with http_gateway(config, listen=f"127.0.0.1:{port}") as (url, errlog):
        with anyio.fail_after(60):
            async with sdk_client(url, mode) as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                assert "d__echo" in names and not any(name.startswith("me__") for name in names), names
                assert text(await client.call_tool("d__echo", {"text": "served"})) == "served"
            await wait_for(lambda: f"[me] failed: {REFUSAL}" in errlog.read_text())


def _serving(*configs: Path) -> list[int]:
    """The pids of the processes whose command line names one of ``configs`` (gateways serving them)."""
    named = {os.fsencode(config) for config in configs}
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and named & set(Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")):
                found.append(int(entry))
    return [pid for pid in found if alive(pid)]


@pytest.mark.parametrize("mode", ERAS)
async def test_two_gateways_that_serve_each_other_over_stdio_stop_at_the_loop(tmp_path: Path, mode: str) -> None:
    """Gateway A lists gateway B as a stdio server and B lists A: A started B, which started A
    again, which started B... three processes and some 230 MB more every second, without end.
    The second A now exits at once naming the loop, so B's server fails saying so and A serves."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "prefixgate.toml", tmp_path / "b" / "prefixgate.toml"
    write_config(
        a.parent,
        {"d": demo("--tools", 1), "b": {"command": PYTHON, "args": ["-m", "gateway", "serve", "--config", str(b)]}},
    )
    write_config(b.parent, {"a": {"command": PYTHON, "args": ["-m", "gateway", "serve", "--config", str(a)]}})
    errlog = tmp_path / "a.log"
    said = f"a loop of gateways: {os.path.realpath(a)} -> {os.path.realpath(b)} -> {os.path.realpath(a)}"
    try:
        async with sdk_client(a, mode, errlog=errlog) as client:
            with anyio.fail_after(60):
                while said not in errlog.read_text():
                    assert len(_serving(a, b)) <= 4, "a chain of gateways without end"  # A, B and a second A
                    await anyio.sleep(0.05)
            assert text(await client.call_tool("d__echo", {"text": "served"})) == "served"
            assert len(_serving(a, b)) <= 3
    finally:
        for _ in range(100):  # (without the check, a chain grows as it is stopped)
            if not (pids := _serving(a, b)):
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)


async def test_a_cancellation_in_the_body_deadlines_turn_is_not_taken_back() -> None:
    """The body deadline cancels the request's task and takes that cancellation back to
    answer 408. A cancellation from outside (the server stopping) in the same loop turn was
    taken back with it: the task answered 408 and ran on. It now ends the task."""
    import asyncio

    from gateway.upstream.http import Front

    front = Front({}, timeout=0.01)
    sent: list[Any] = []

    async def receive() -> Any:
        await asyncio.Event().wait()  # (a body that never comes)

    async def send(message: Any) -> None:
        sent.append(message)

    task = asyncio.get_running_loop().create_task(front._body([], receive, send))
    await asyncio.sleep(0)  # waiting for its body, the deadline's timer armed
    asyncio.get_running_loop().call_soon(task.cancel)
    time.sleep(0.05)  # (the loop held: the deadline passes, and both run in its next turn)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sent == []


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_that_goes_away_mid_body_is_no_error(tmp_path: Path, mode: str) -> None:
    """Its request goes nowhere and the log says so at debug level, once each: no ERROR, no
    traceback (the SDK's session manager, given the disconnect, logged both for each)."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    version = "" if mode == "legacy" else "mcp-protocol-version: 2026-07-28\r\n"
    with http_gateway(config, "--log-level", "debug") as (url, stderr):
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        for _ in range(5):
            with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
                sock.sendall(
                    f"POST /mcp HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n{version}"
                    'Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{"jsonrpc"'.encode()
                )

        def told() -> int:
            log = stderr.read_text()
            return log.count("went away before its request body was complete") + log.count("Traceback")

        await wait_for(lambda: told() >= 5)  # (each disconnect told, either way)
        async with sdk_client(url, mode) as client:  # still serving
            assert text(await client.call_tool("d__echo", {"text": "up"})) == "up"
    log = stderr.read_text()
    assert "ERROR" not in log and "Traceback" not in log, log
    assert log.count("went away before its request body was complete") == 5


# --- item 9: the activation journal is verified, never trusted blindly --------------------

DEFERRED = {"d": {**demo("--tools", 3), "deferred": True}}
NOT_ACTIVE = "Call tool_search to activate d__echo first; a declaration does not grant execution."


async def _granted_journal(config: Path) -> Path:
    """Run once with --session s and activate d__echo; return the journal's path."""
    async with gateway(config, "--session", "s") as gw:
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
        assert text(await gw.session.call_tool("d__echo", {"text": "1"})) == "1"
    (journal,) = (config.parent / "state" / "activation").iterdir()
    return journal


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root (the CI machine runs as root)")
@pytest.mark.parametrize("foreign", ["file", "directory"])
async def test_a_foreign_owned_journal_grants_nothing(tmp_path: Path, foreign: str) -> None:
    config = write_config(tmp_path, DEFERRED)
    journal = await _granted_journal(config)
    os.chown(journal if foreign == "file" else journal.parent, 54321, 54321)
    async with gateway(config, "--session", "s") as gw:
        assert text(await gw.session.call_tool("d__echo", {"text": "2"})) == NOT_ACTIVE
        assert await gw.saw("owned by uid 54321", "nothing restored"), gw.stderr()


async def test_a_fifo_at_the_journal_path_does_not_hang_calls(tmp_path: Path) -> None:
    config = write_config(tmp_path, DEFERRED)
    journal = await _granted_journal(config)
    journal.unlink()
    os.mkfifo(journal, 0o600)
    with anyio.fail_after(60):
        async with gateway(config, "--session", "s") as gw:
            assert text(await gw.session.call_tool("d__echo", {"text": "2"})) == NOT_ACTIVE
            found = await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
            assert found.is_error  # the grant cannot be written, so nothing is granted
            assert text(await gw.session.call_tool("d__echo", {"text": "3"})) == NOT_ACTIVE
            assert await gw.saw("not a regular file"), gw.stderr()


def _gateway_pid(config: Path) -> int:
    """The pid of the ``serve`` process for this config (found through /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and str(config).encode() in argv and b"gateway" in argv:
            return int(entry.name)
    raise AssertionError("gateway process not found")


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.real_processes  # the gateway's own pid: its memory, its servers
async def test_a_huge_journal_is_read_from_its_tail_only(tmp_path: Path) -> None:
    config = write_config(tmp_path, DEFERRED)
    journal = await _granted_journal(config)
    last = journal.read_bytes().splitlines()[-1]
    with journal.open("r+b") as handle:
        handle.truncate(1 << 30)  # 1 GiB, sparse
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n" + last + b"\n")
    async with gateway(config, "--session", "s") as gw:
        assert text(await gw.session.call_tool("d__echo", {"text": "2"})) == "2"  # honoured
        assert _peak_rss_kib(_gateway_pid(config)) < 400 * 1024


# --- item 8: SIGTERM, SIGHUP and closed stdin leave no server running ---------------------


def _wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# "eof-then-SIGTERM-mid-stop": the SIGTERM lands while the gateway stops its servers after
# EOF (as "eof-then-SIGTERM" does on a loaded machine), which once killed it (exit -15).
@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "eof", "eof-then-SIGTERM", "eof-then-SIGTERM-mid-stop"])
@pytest.mark.real_processes  # the gateway's own pid: its memory, its servers
def test_stopping_the_gateway_leaves_no_server_running(tmp_path: Path, how: str) -> None:
    pidfile = tmp_path / "rogue.pid"
    config = write_config(
        tmp_path, {"r": rogue("--ignore-eof", "--ignore-term", "--pidfile", pidfile), "d": demo("--tools", 1)}
    )
    errlog = (tmp_path / "stderr.log").open("w")
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((__import__("json").dumps(INIT) + "\n").encode())
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()  # serving: every server has started
        pid = int(pidfile.read_text())
        assert alive(pid)
        if how.startswith("SIG"):
            proc.send_signal(getattr(signal, how))
        else:
            proc.stdin.close()  # what every client does first
            if how.startswith("eof-then-SIGTERM"):
                # ... and then SIGTERM a second later; mid-stop: while the rogue server gets
                # its grace (0.2 s after EOF, then 0.1 s after SIGTERM) before SIGKILL.
                time.sleep(0.1 if how.endswith("mid-stop") else 1)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        assert code in (0, 128 + signal.SIGTERM, 128 + signal.SIGHUP), code
        assert _wait_gone(pid), f"server {pid} outlived the gateway ({how})"
    finally:
        if proc.poll() is None:
            proc.kill()
        errlog.close()
        if pidfile.exists() and alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("front", ["stdio", "http"])
@pytest.mark.real_processes  # the gateway's own pid: its servers
def test_a_gateway_killed_with_sigkill_leaves_no_server_running(tmp_path: Path, front: str) -> None:
    """SIGKILL (the OOM killer, a crashed agent) stops nothing in the gateway: a server that
    ignores the EOF on its stdin (and SIGTERM) ran on for good, in its own session, and so did
    one behind a shell wrapper, with the wrapper waiting for it. The warden ends their groups."""
    pids = {name: tmp_path / f"{name}.pid" for name in ("bare", "wrapped")}
    wrapped = f"{PYTHON} {ROGUE} --ignore-eof --ignore-term --pidfile {pids['wrapped']}; true"
    servers = {
        "bare": rogue("--ignore-eof", "--ignore-term", "--pidfile", pids["bare"]),
        "wrapped": {"command": "sh", "args": ["-c", wrapped]},
    }
    config = write_config(tmp_path, servers)
    errlog = tmp_path / "stderr.log"
    extra = ["--http", "127.0.0.1:0"] if front == "http" else []
    with errlog.open("w") as err:
        proc = subprocess.Popen(
            [*GATEWAY, "serve", "--config", str(config), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    started: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while "catalog: 10 tools from 2 of 2 servers" not in errlog.read_text():  # both are up
            assert proc.poll() is None and time.monotonic() < deadline, errlog.read_text()
            time.sleep(0.05)
        started = [int(pids["bare"].read_text()), int(pids["wrapped"].read_text())]
        started.append(_parent(started[1]))  # the wrapper
        assert all(alive(pid) for pid in started)
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        for pid in started:
            assert _wait_gone(pid), f"{pid} outlived a gateway killed with SIGKILL ({front})"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_that_closes_its_stdout_and_runs_on_is_not_said_to_have_exited(
    tmp_path: Path, mode: str
) -> None:
    """The server closes its stdout during a call and runs on: its call and its log line said
    it "exited ... (still running)". They say what it did; it is stopped and restarted.
    (It ignores EOF and SIGTERM: the stop that follows its line takes a moment to end it.)"""
    config = write_config(tmp_path, {"r": rogue("--ignore-eof", "--ignore-term")})
    log = tmp_path / "serve.log"
    line = "[r] exited: server closed its stdout (still running); retrying in 1 s"
    async with sdk_client(config, mode, errlog=log) as client:
        with anyio.fail_after(60):
            muted = await client.call_tool("r__mute", {})
            assert muted.is_error
            assert text(muted) == "server 'r' closed its stdout during the call to 'mute' (still running)", text(muted)
            await wait_for(lambda: line in log.read_text())
            assert text(await client.call_tool("r__storm", {})) == "storm done"  # restarted


def _answer_at_a_stop_signal(tmp_path: Path, config: Path, count: Path) -> Any:
    """A stdio gateway's answer to a call in flight (r__hang) when SIGTERM stops it; None if none."""
    import json

    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "r__hang", "arguments": {}}}
    errlog = (tmp_path / "stderr.log").open("w")
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for message in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
            proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()
        deadline = time.monotonic() + 30
        while "hang" not in (count.read_text() if count.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.02)
        count.unlink()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        return json.loads(proc.stdout.readline() or b"null")
    finally:
        if proc.poll() is None:
            proc.kill()
        errlog.close()


@pytest.mark.real_processes  # the gateway's own process, signalled
def test_the_call_in_flight_at_a_stop_signal_is_answered_over_stdio(tmp_path: Path) -> None:
    """SIGTERM over stdio with a call in flight: its answer (an isError naming its server's
    exit) was written, or cut by the exit, as the race with its few loop turns went (cut
    one stop in two or three after a server that needs SIGKILL: five stops here). The stop
    now waits for it (2 s at most) once the servers have stopped, as over HTTP."""
    count = tmp_path / "count"
    config = write_config(tmp_path, {"r": rogue("--ignore-eof", "--ignore-term", "--count", count)})
    for _ in range(5):
        answer = _answer_at_a_stop_signal(tmp_path, config, count)
        assert answer is not None, "the call in flight was not answered"
        said = answer["result"]["content"][0]["text"]
        assert said == "server 'r' exited during the call to 'hang' (killed by signal 9)", answer


@pytest.mark.real_processes  # the gateway's own process and its exit
def test_end_of_input_waits_for_calls_in_flight_at_most_drain_timeout(tmp_path: Path) -> None:
    """The client closed stdin with a call in flight that reports progress: the gateway (and
    its servers) stayed up until that call ended, up to max_call_time (an hour), though no
    one could read its answer. Now the calls read get drain_timeout to be answered, as on
    SIGTERM, and the gateway stops, saying so."""
    import json

    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"drain_timeout": 1})
    errlog = (tmp_path / "stderr.log").open("w")
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "d__slow", "arguments": {"seconds": 60, "steps": 60}, "_meta": {"progressToken": 7}},
        }
        for message in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
            proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()
        assert b"notifications/progress" in proc.stdout.readline()  # the call is in flight, reporting
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0  # (60 s and more before)
    finally:
        if proc.poll() is None:
            proc.kill()
        errlog.close()
    assert "end of input: 1 request still unanswered after drain_timeout (1 s); stopping" in (
        (tmp_path / "stderr.log").read_text()
    )


@pytest.mark.real_processes  # the gateway's own process and its exit
@pytest.mark.parametrize("fast", ["1", "0"])
@pytest.mark.parametrize("mode", ERAS)
def test_a_call_end_of_input_cut_is_answered_with_its_servers_exit(tmp_path: Path, mode: str, fast: str) -> None:
    """The agent quits (closes stdin) with calls in flight that outlast drain_timeout: they
    were answered with the SDK's JSON-RPC error ``Connection closed`` (-32000), where a stop
    signal's calls get an ``isError`` naming their server's exit (docs/running.md). Now the
    end of input stops the servers first, as a signal does, and each call gets that result."""
    import json

    from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"drain_timeout": 1})
    with (tmp_path / "stderr.log").open("w") as errlog:
        with raw_gateway(config, errlog, {"PREFIXGATE_FAST_PATH": fast}) as gw:
            meta = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}
            if mode == "legacy":
                gw.handshake()
                meta = {}
            else:  # the era is decided by the first request
                gw.request("list", "tools/list", {"_meta": meta})
                assert "result" in gw.answer("list")
            for request_id in (1, 2):
                params = {"name": "d__slow", "arguments": {"seconds": 60}, "_meta": meta}
                gw.request(request_id, "tools/call", params)
            assert gw.proc.stdin is not None and gw.proc.stdout is not None
            time.sleep(0.5)  # (both calls at the server: not needed, but the likely case)
            gw.proc.stdin.close()
            answers = [json.loads(line) for line in gw.proc.stdout.read().splitlines()]
            assert gw.proc.wait(timeout=30) == 0
    by_id = {a["id"]: a for a in answers if "id" in a}
    for request_id in (1, 2):
        said = by_id[request_id].get("result", {})
        assert said.get("isError") is True, by_id[request_id]
        assert said["content"][0]["text"].startswith("server 'd' exited during the call to 'slow'"), said
    assert "end of input: 2 requests still unanswered after drain_timeout (1 s); stopping" in (
        (tmp_path / "stderr.log").read_text()
    )


# --- item 7: a list_changed storm is coalesced --------------------------------------------


async def test_a_list_changed_storm_is_coalesced_and_other_calls_go_on(tmp_path: Path) -> None:
    count = tmp_path / "lists.txt"
    config = write_config(
        tmp_path,
        {"r": rogue("--tools", 600, "--storm", 300, "--count", count), "d": demo("--tools", 1)},
        client={"profile": "mcp", "declarations": "fixed"},
    )
    async with gateway(config) as gw:
        await gw.session.list_tools()  # behind the barrier (initialize is answered before it)
        assert len(count.read_text().splitlines()) == 1  # the start-up listing
        assert text(await gw.session.call_tool("r__storm", {})) == "storm done"  # 300 list_changed first
        with anyio.fail_after(60):
            assert text(await gw.session.call_tool("d__echo", {"text": "unrelated"})) == "unrelated"
        # Let the gateway settle: the count stops changing.
        seen, stable_since = -1, time.monotonic()
        with anyio.fail_after(120):
            while time.monotonic() - stable_since < 2:
                now = len(count.read_text().splitlines())
                if now != seen:
                    seen, stable_since = now, time.monotonic()
                await anyio.sleep(0.1)
        assert 2 <= seen <= 4, f"{seen - 1} re-listings for 300 notifications"
        with anyio.fail_after(60):
            assert text(await gw.session.call_tool("d__echo", {"text": "still"})) == "still"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_a_new_list_brings_and_the_config_excludes_is_information_not_a_warning(
    tmp_path: Path, mode: str
) -> None:
    """A server's new tool that its ``exclude`` leaves out was logged as a warning when the
    list changed, though nothing was wrong (at the start, as information: doctor's rating)."""
    errlog = tmp_path / "gateway.log"
    config = write_config(tmp_path, {"d": {**demo("--tools", 1, "--rich"), "exclude": ["grown_1"]}})
    async with sdk_client(config, mode, errlog=errlog) as client:
        for _ in range(2):  # (the first only brings the excluded tool: the same catalog, nothing said)
            assert text(await client.call_tool("d__mutate", {"kind": "grow"})) == "mutated:grow"
        await wait_for(lambda: "excluded: d/grown_1" in errlog.read_text())
    (line,) = [line for line in errlog.read_text().splitlines() if "excluded: d/grown_1" in line]
    assert line.startswith("prefixgate INFO "), line


@pytest.mark.parametrize("mode", ERAS)
async def test_a_relist_left_unanswered_keeps_the_tools_and_the_next_list_changed_relists(
    tmp_path: Path, mode: str
) -> None:
    """The server leaves its first re-list (its second tools/list) unanswered: the re-list ends
    at its startup_timeout with one log line, the old tools are kept, and the next
    list_changed re-lists it anew. The re-list used to wait for good, every later list_changed
    joined it, and the server's tools were never published again."""
    config = write_config(tmp_path, {"r": {**rogue("--vary", "--hang-list", 2, "--storm", 1), "startup_timeout": 2}})
    log = tmp_path / "serve.log"
    failed = "[r] re-listing tools after list_changed failed: tools/list not answered in full within 2 s"

    async def lists(name: str) -> bool:
        return name in {t.name for t in (await client.list_tools()).tools}

    async with sdk_client(config, mode, errlog=log) as client:
        assert await lists("r__v1")
        assert text(await client.call_tool("r__storm", {})) == "storm done"  # its re-list hangs
        await wait_for(lambda: failed in log.read_text(), 60)
        assert await lists("r__v1")
        assert text(await client.call_tool("r__storm", {})) == "storm done"
        await wait_for(lambda: lists("r__v2"), 60)
    assert log.read_text().count(failed) == 1


def test_a_tool_list_that_never_ends_fails_its_server_at_the_bound(tmp_path: Path) -> None:
    """Every tools/list page brings 2,000 new tools and a fresh nextCursor: the listing stops
    at 100,000 items and the server is failed, naming the bound. Under ``serve`` it used to
    page on past its deadlines, the gateway growing by ~90 MiB a second."""
    config = write_config(tmp_path, {"r": rogue("--endless", 2000), "d": demo("--tools", 1)})
    by_id = {s["id"]: s for s in catalog_json(config)["servers"]}
    assert by_id["d"]["status"] == "ready"
    assert by_id["r"]["status"] == "failed"
    assert by_id["r"]["error"] == "ValueError: tools/list listed more than 100,000 items, the most one listing may hold"


@pytest.mark.real_processes  # the gateway's own pid: its memory
async def test_a_listing_s_fat_cursors_are_not_all_kept(tmp_path: Path) -> None:
    """A relisting pages through 60 empty pages, each with a fresh 4 MB nextCursor: the
    gateway remembers cursors to refuse one repeated, and kept every one whole (~240 MB)."""
    count = tmp_path / "lists.txt"
    server = rogue("--storm", 1, "--count", count, "--fat-cursor", 4 << 20, "--fat-pages", 60)
    config = write_config(tmp_path, {"r": server, "d": demo("--tools", 1)}, client={"profile": "mcp"})
    async with gateway(config) as gw:
        await gw.session.list_tools()  # behind the barrier: the first listing is a plain one
        pid = _gateway_pid(config)
        idle = _peak_rss_kib(pid)
        assert text(await gw.session.call_tool("r__storm", {})) == "storm done"  # list_changed
        with anyio.fail_after(120):
            while len(count.read_text().splitlines()) < 62:  # the first listing, 61 pages
                await anyio.sleep(0.1)
            assert await gw.saw("server 'r' changed its tools: catalog unchanged")
        assert text(await gw.session.call_tool("d__echo", {"text": "after"})) == "after"
        assert _peak_rss_kib(pid) - idle < 120 * 1024, (idle, _peak_rss_kib(pid))


# --- item 12: server logs go to the client that caused them, at each client's own level ----


@asynccontextmanager
async def _log_client(url: str) -> AsyncIterator[tuple[Any, list[str]]]:
    """A handshake-era SDK ClientSession over HTTP that records the log data it receives."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    received: list[str] = []

    async def on_log(params: Any) -> None:
        received.append(f"{params.logger}:{params.data}")

    async with create_mcp_http_client() as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log) as session:
                await session.initialize()
                yield session, received


async def _until(condition: Any, what: str) -> None:
    with anyio.fail_after(20):
        while not condition():
            await anyio.sleep(0.05)


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
async def test_server_logs_reach_the_client_that_caused_them_at_its_own_level(tmp_path: Path) -> None:
    levels = tmp_path / "levels.txt"
    config = write_config(tmp_path, {"r": rogue("--levels", levels)})
    with http_gateway(config, listen="127.0.0.1:0") as (url, _):
        async with _log_client(url) as (a, a_logs), _log_client(url) as (b, b_logs):
            await a.set_logging_level("debug")
            await b.set_logging_level("error")  # must not quiet the server for a
            await a.call_tool("r__log", {"level": "info", "data": "from-a"})
            await b.call_tool("r__log", {"level": "critical", "data": "from-b"})
            await b.call_tool("r__log", {"level": "info", "data": "below-b"})
            await _until(lambda: "r:from-a" in a_logs and "r:from-b" in b_logs, "call logs")
            # Outside any call: every client whose own level admits it.
            await a.call_tool("r__log_later", {"level": "warning", "data": "later-warning"})
            await _until(lambda: "r:later-warning" in a_logs, "later-warning")
            await a.call_tool("r__log_later", {"level": "alert", "data": "later-alert"})
            await _until(lambda: "r:later-alert" in a_logs and "r:later-alert" in b_logs, "later-alert")
            # A marker both receive: anything wrongly delivered earlier would precede it.
            await a.call_tool("r__log_later", {"level": "emergency", "data": "final"})
            await _until(lambda: "r:final" in a_logs and "r:final" in b_logs, "final")
        assert a_logs == ["r:from-a", "r:later-warning", "r:later-alert", "r:final"]
        assert b_logs == ["r:from-b", "r:later-alert", "r:final"]
    assert levels.read_text().split() == ["debug"]


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
@pytest.mark.parametrize("served", ["stdio", "http"])
async def test_a_busy_server_delays_no_other_servers_log_level(tmp_path: Path, served: str) -> None:
    """``logging/setLevel`` reaches every server at once: one that is slow to answer it (it
    comes first) does not hold back the others' level, as it would not directly. (Handshake
    era only: a 2026-07-28 client names its level on each request, and the SDK's server
    answers its ``logging/setLevel`` with -32601, through the gateway as directly.)"""
    release, levels = tmp_path / "release", tmp_path / "levels.txt"
    config = write_config(tmp_path, {"a": rogue("--hold-levels", release), "b": rogue("--levels", levels)})
    with contextlib.ExitStack() as stack:
        target: Path | str = config if served == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, "legacy") as client:
            done = anyio.Event()

            async def set_level() -> None:
                await client.set_logging_level("debug")
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(set_level)
                await _until(lambda: levels.exists() and levels.read_text().split() == ["debug"], "b's level")
                assert not done.is_set()  # a has not answered yet: b was not made to wait for it
                release.touch()
                with anyio.fail_after(20):
                    await done.wait()
            await client.call_tool("b__log", {"level": "debug", "data": "after"})


async def test_a_modern_client_gets_its_calls_logs_at_the_level_it_asked_for(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"r": rogue()})
    received: list[str] = []

    async def on_log(params: Any) -> None:
        received.append(str(params.data))

    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    with http_gateway(config, listen="127.0.0.1:0") as (url, _):
        # Not sdk_client: its log_level is the gateway's stderr level.
        async with Client(
            streamable_http_client(url), mode="auto", log_level="warning", logging_callback=on_log
        ) as client:
            await client.call_tool("r__log", {"level": "info", "data": "quiet"})
            await client.call_tool("r__log", {"level": "error", "data": "loud"})
            await _until(lambda: "loud" in received, "loud")
    assert received == ["loud"]
