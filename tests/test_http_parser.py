"""``serve --http`` reads requests with httptools where it is installed, or h11 with
``PREFIXGATE_HTTP_PARSER=h11`` (gateway/upstream/heads.py): the same answers with either, in
both eras, a classic server's request for input included. With either, a request head that
does not end is refused once past 16 KiB (before, uvicorn's httptools protocol read such a
head for as long as the peer sent it: 200 MiB of header lines, 232 MiB more memory, the
connection open), and a connection whose head does not arrive in time is closed (before,
one that sent nothing, or a byte now and then, was held for ever); other clients are
served on. The gateways here give a head ``DEADLINE`` seconds.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.upstream.heads import MAX_AHEAD, MAX_HEAD, PARSER_ENV, parser_name, protocol_class
from tests.helpers import ERAS, INIT, demo, elicitation, http_gateway, sdk_client, text, write_config
from tests.test_coalesce import MODERN, _call, _port, _Raw
from tests.test_eventloop import _calls

PARSERS = ("httptools", "h11")
DEADLINE = 1.5
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}
REFUSED = {"httptools": b"HTTP/1.1 431 ", "h11": b"HTTP/1.1 400 "}
"""How each refuses an endless head: the gateway's 431 naming the bound; uvicorn's 400 for h11's."""


@contextmanager
def _served(tmp_path: Path, parser: str, *, rich: bool = False) -> Iterator[tuple[str, Path]]:
    servers: dict[str, object] = {"d": demo("--tools", 1)}
    if rich:  # what tests/test_eventloop.py's calls use
        servers["demo"] = demo("--tools", 1, "--rich")
        servers["asker"] = {**demo("--tools", 1, "--rich", "--name", "asker"), "protocol": "legacy"}
    config = write_config(tmp_path, servers)
    env = {PARSER_ENV: parser, "PREFIXGATE_HTTP_HEAD_TIMEOUT": str(DEADLINE)}
    with http_gateway(config, "--log-level", "debug", env=env) as served:
        yield served


def test_the_parser_is_chosen_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert parser_name({}) == "httptools"  # a dependency: installed wherever the tests run
    assert parser_name({PARSER_ENV: "httptools"}) == "httptools"
    assert parser_name({PARSER_ENV: " H11 "}) == "h11"
    assert not caplog.records
    with caplog.at_level("WARNING", logger="prefixgate.http"):
        assert parser_name({PARSER_ENV: "h2"}) == "httptools"  # (found by QA: taken unsaid)
    assert [r.getMessage() for r in caplog.records] == [
        f"{PARSER_ENV}='h2' is neither h11 nor httptools: using the default"
    ]
    h11, httptools = ([base.__name__ for base in protocol_class(name).__mro__] for name in ("h11", "httptools"))
    assert {"H11Protocol", "HeadDeadline"} <= set(h11) and "BoundedHead" not in h11
    assert {"HttpToolsProtocol", "HeadDeadline", "BoundedHead"} <= set(httptools)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("parser", PARSERS)
async def test_either_parser_serves_alike(tmp_path: Path, parser: str, mode: str) -> None:
    with _served(tmp_path, parser, rich=True) as (url, errlog):
        await _calls(url, mode)
        async with sdk_client(url, mode, elicitation_callback=elicitation) as client:
            assert text(await client.call_tool("d__echo", {"text": "x" * 60_000})) == "x" * 60_000
            slow = await client.call_tool("demo__slow", {"seconds": DEADLINE + 0.5})  # longer than a head may take
            assert text(slow) == f"slept {DEADLINE + 0.5:g} s"
            assert text(await client.call_tool("d__echo", {"text": "after"})) == "after"
    assert f"HTTP parser: {parser}" in errlog.read_text()


@pytest.mark.parametrize("parser", PARSERS)
def test_a_head_near_the_bound_is_read(tmp_path: Path, parser: str) -> None:
    """A long header (a big token, a cookie) still fits: 12 KiB of it, in both eras."""
    with _served(tmp_path, parser) as (url, _):
        raw = _Raw(url)
        padding = f"X-Padding: {'p' * 12 * 1024}\r\n".encode()
        request = _posted(_call(1, "padded", ENVELOPE), raw.host).replace(b"\r\n", b"\r\n" + padding, 1)
        head, answer, _ = raw.exchange(request)
        assert head.startswith(b"HTTP/1.1 200 ") and b"padded" in answer, (head, answer)


ENDLESS = {
    "header lines": (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Filler: " + b"a" * 1000 + b"\r\n"),
    "one header line": (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ", b"a" * 1024),
    "request line": (b"GET /mcp?", b"q" * 1024),
}


@pytest.mark.parametrize("shape", sorted(ENDLESS))
@pytest.mark.parametrize("parser", PARSERS)
def test_an_endless_head_is_refused_and_others_are_served(tmp_path: Path, parser: str, shape: str) -> None:
    start, more = ENDLESS[shape]
    with _served(tmp_path, parser) as (url, errlog):
        answer, sent = _flood(url, start, more)
        assert answer.startswith(REFUSED[parser]), (shape, answer[:200], sent)
        head, body, _ = _Raw(url).post(_call(2, "after the flood", ENVELOPE), MODERN)  # the gateway serves on
        assert head.startswith(b"HTTP/1.1 200 ") and b"after the flood" in body, (head, body)
    if parser == "httptools":
        assert answer.endswith(b"request head over 16384 bytes (request line and headers)"), answer
        assert (
            "a request head went past 16384 bytes: 431" in errlog.read_text()
        )  # (the log is written on its own thread)


@pytest.mark.parametrize("parser", PARSERS)
def test_a_head_over_the_bound_is_refused_after_the_answer_before_it(tmp_path: Path, parser: str) -> None:
    """The next request's head going past the bound while a call is answered on the same
    connection is refused once that answer is out, as a late head is: the 431 was written at
    once and the connection closed, so the call was cancelled and its client read the 431
    as the call's answer."""
    with _served(tmp_path, parser, rich=True) as (url, _):
        raw = _Raw(url)
        slow = _call(1, "unused", ENVELOPE)
        slow["params"] = {"name": "demo__slow", "arguments": {"seconds": 1}, "_meta": ENVELOPE}
        raw.sock.sendall(_posted(slow, raw.host))
        time.sleep(0.3)  # (the call under way; either order is the same answer, though)
        raw.sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: " + b"f" * (MAX_HEAD + 4096))
        answer = _answer(raw.sock)
        assert answer.startswith(b"HTTP/1.1 200 ") and b"slept 1 s" in answer, answer[:300]
        assert answer.count(b"HTTP/1.1 ") == 2 and REFUSED[parser] in answer, answer


@pytest.mark.parametrize("parser", PARSERS)
def test_requests_sent_far_ahead_of_their_answers_are_bounded(tmp_path: Path, parser: str) -> None:
    """1,000 requests pipelined in one write: with httptools, those read ahead of their
    answers up to ``MAX_AHEAD`` are answered and the connection then ends cleanly (the rest
    are for its client to send again): uvicorn's httptools protocol parsed every request of a
    read into a queue, 9 MB held for 256 KiB sent by a client that did not read. h11 reads one
    request at a time, and answers them all."""
    total = 1000
    with _served(tmp_path, parser) as (url, errlog):
        host = _Raw(url).host
        probe = b"GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode()
        last = b"GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host.encode()
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as sock:
            sock.sendall(probe * (total - 1) + last)
            answer = _answer(sock)
        answered = answer.count(b"HTTP/1.1 200 OK")
        assert answer.endswith(b"\r\n\r\nok\n") and answered == answer.count(b"\r\n\r\nok\n"), answer[-300:]
        if parser == "httptools":
            assert MAX_AHEAD < answered < total, answered
            assert "Invalid HTTP request" not in errlog.read_text()  # (uvicorn's line for a parse error)
        else:
            assert answered == total, answered
        head, body, _ = _Raw(url).post(_call(2, "after", ENVELOPE), MODERN)  # the gateway serves on
        assert head.startswith(b"HTTP/1.1 200 ") and b"after" in body, (head, body)


@pytest.mark.parametrize("parser", PARSERS)
def test_an_absolute_form_target_is_served_in_both_eras(tmp_path: Path, parser: str) -> None:
    """``POST http://HOST/mcp HTTP/1.1`` (the absolute form, which a server must accept) is
    served as ``POST /mcp``: a 2026-07-28 call, and a handshake-era ``initialize``. uvicorn's
    h11 protocol passed the whole URL as the path, which the gateway answered 404."""
    with _served(tmp_path, parser) as (url, _):
        raw = _Raw(url)
        absolute = b"POST http://%s/mcp HTTP/1.1" % raw.host.encode()
        head, body, _ = raw.exchange(
            _posted(_call(1, "absolute", ENVELOPE), raw.host).replace(b"POST /mcp HTTP/1.1", absolute)
        )
        assert head.startswith(b"HTTP/1.1 200 ") and b"absolute" in body, (head, body)
        initialize = json.dumps(INIT).encode()
        head, body, _ = raw.exchange(
            absolute + b"\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
            % (raw.host.encode(), len(initialize), initialize)
        )
        assert head.startswith(b"HTTP/1.1 200 ") and b"mcp-session-id" in head.lower(), (head, body)
        assert b'"serverInfo"' in body, body


def _chunked(host: str, trailers: bytes = b"", headers: bytes = b"") -> bytes:
    """A 2026-07-28 ``tools/call`` of ``d__echo`` as a chunked POST whose ``Mcp-Name`` header
    is missing (``headers`` added), up to its last chunk; then ``trailers``."""
    body = json.dumps(_call(1, "chunked", ENVELOPE)).encode()
    return (
        b"POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: %s\r\n"
        b"Mcp-Method: tools/call\r\n%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n%s"
    ) % (host.encode(), MODERN.encode(), headers, len(body), body, trailers)


ENDLESS_FRAMING = {
    "trailer lines": (b"", b"X-Trailer: " + b"t" * 1000 + b"\r\n"),
    "one trailer line": (b"X-Trailer: ", b"t" * 1024),
}


@pytest.mark.parametrize("shape", sorted(ENDLESS_FRAMING))
@pytest.mark.parametrize("parser", PARSERS)
def test_endless_trailers_are_refused_and_a_trailer_is_no_header(tmp_path: Path, parser: str, shape: str) -> None:
    """A chunked body's trailer section is bounded as a head is, and a trailer is not taken
    for a header, with either parser. uvicorn's httptools protocol appended every trailer line
    to the request's headers until the body deadline (300 MiB of them in its 30 s grew the
    gateway by 340 MiB), and so a ``Mcp-Name`` sent as a trailer routed a call that h11 (which
    drops trailers) refused for the missing header."""
    start, more = ENDLESS_FRAMING[shape]
    with _served(tmp_path, parser) as (url, errlog):
        host = _Raw(url).host
        answer, sent = _flood(url, _chunked(host, start), more)
        assert answer.startswith(REFUSED[parser]), (shape, answer[:200], sent)
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as sock:
            sock.sendall(_chunked(host, b"Mcp-Name: d__echo\r\n\r\n", b"Connection: close\r\n"))
            answer = _answer(sock)
        assert answer.startswith(b"HTTP/1.1 400 ") and b"mcp-name header does not match" in answer, answer
        head, body, _ = _Raw(url).post(_call(2, "after the trailers", ENVELOPE), MODERN)  # the gateway serves on
        assert head.startswith(b"HTTP/1.1 200 ") and b"after the trailers" in body, (head, body)
    if parser == "httptools":
        assert "a chunked body's size line or trailers went past 16384 bytes: 431" in errlog.read_text()


def _flood(url: str, start: bytes, more: bytes, limit: int = 4 * 1024 * 1024) -> tuple[bytes, int]:
    """Send ``start`` and then ``more`` again and again, up to ``limit`` bytes, until the
    gateway answers; its whole answer (up to its close) and the bytes sent by then."""
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as sock:
        sock.sendall(start)
        sent = len(start)
        while sent < limit and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(more * 16)
            except OSError:  # closed by the gateway: its answer is waiting
                break
            sent += len(more) * 16
        return _answer(sock), sent


@pytest.mark.parametrize("parser", PARSERS)
def test_a_head_that_does_not_arrive_in_time_closes_its_connection(tmp_path: Path, parser: str) -> None:
    """A connection that sends nothing, and one whose head comes a byte at a time, each get 408
    once the deadline passes; a kept-alive connection whose answer took longer than the
    deadline is not cut, and serves its next request."""
    with _served(tmp_path, parser, rich=True) as (url, errlog):
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as idle:
            assert _answer(idle).startswith(b"HTTP/1.1 408 "), "an idle connection"
        other = _Raw(url)  # another client, answered while a head trickles in
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as trickle:
            started = time.monotonic()
            for n, byte in enumerate(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 200):
                if select.select([trickle], [], [], 0.25)[0]:
                    break
                trickle.sendall(bytes([byte]))
                if n == 2:
                    head, body, _ = other.post(_call(5, "meanwhile", ENVELOPE), MODERN)
                    assert head.startswith(b"HTTP/1.1 200 ") and b"meanwhile" in body, (head, body)
            answer = _answer(trickle)
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert answer.endswith(b"request head not received within 1.5 s"), answer
            assert time.monotonic() - started < 10
        raw = _Raw(url)
        slow = _call(3, "unused", ENVELOPE)
        slow["params"] = {"name": "demo__slow", "arguments": {"seconds": DEADLINE + 1}, "_meta": ENVELOPE}
        head, body, _ = raw.post(slow, MODERN)
        assert head.startswith(b"HTTP/1.1 200 ") and b"slept 2.5 s" in body, (head, body)
        head, body, _ = raw.post(_call(4, "same connection", ENVELOPE), MODERN)
        assert head.startswith(b"HTTP/1.1 200 ") and b"same connection" in body, (head, body)
        early = _Raw(url)  # the slow call again, and part of the next head while it runs: its answer comes whole
        early.sock.sendall(_posted(slow, early.host))
        time.sleep(0.3)
        early.sock.sendall(b"POST /mcp HTTP/1.1\r\n")
        answer = _answer(early.sock)  # then the connection closes: 408 (httptools), or uvicorn's keep-alive end (h11)
        assert answer.startswith(b"HTTP/1.1 200 ") and b"slept 2.5 s" in answer, answer
        assert answer.count(b"HTTP/1.1 ") == (2 if parser == "httptools" else 1), answer
    assert "a request head took more than 1.5 s: 408" in errlog.read_text()


def _answer(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection."""
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass  # (closed with unread bytes of ours in its buffer: after its answer, which was read)
    except TimeoutError:
        raise AssertionError(f"the connection is still open; received {answer!r}") from None
    return answer


def _posted(message: dict[str, object], host: str) -> bytes:
    """A 2026-07-28 ``tools/call`` as one HTTP request's bytes."""
    body = json.dumps(message).encode()
    params = message["params"]
    assert isinstance(params, dict)
    return (
        b"POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: %s\r\n"
        b"Mcp-Method: tools/call\r\nMcp-Name: %s\r\nContent-Length: %d\r\n\r\n%s"
    ) % (host.encode(), MODERN.encode(), params["name"].encode(), len(body), body)
