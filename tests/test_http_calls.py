"""``tools/call`` to a streamable-HTTP server posted beside the SDK's session (issue 25,
gateway/downstream/httpcalls.py) answers exactly as the SDK's session does.

The conversation of tests/test_fast_path.py goes to a real gateway twice, its servers now real
HTTP servers on loopback, with the direct path on and with ``PREFIXGATE_FAST_PATH=0``; every
line the gateway writes back is compared as bytes. Both eras on both sides, and a classic
server (``asker``: the handshake, its elicitation a request on the call's own stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import ERAS, GATEWAY, PYTHON, raw_gateway, url_process, write_config
from tests.rogue_http import TOOLS
from tests.test_fast_path import Script, conversation, opened, sdk_client_view

pytestmark = pytest.mark.anyio

LANE = "posted beside the SDK's session"
"""The gateway's debug line on a connection's first direct call."""


@contextmanager
def http_servers(tmp_path: Path, protocol: str, tag: str) -> Iterator[tuple[Path, Path]]:
    """The servers of test_fast_path's config, each a demo server on its own loopback port;
    yields the config and the file their stderr goes to (the courtesy cancels they log)."""
    stderr = tmp_path / f"servers-{tag}.log"
    (tmp_path / tag).mkdir()
    specs: dict[str, tuple[list[str], dict[str, Any]]] = {
        "demo": (["--tools", "2", "--rich"], {"protocol": protocol}),
        "slowpoke": (["--tools", "1", "--name", "slowpoke"], {"call_timeout": 1, "protocol": protocol}),
        "crashy": (["--tools", "1", "--name", "crashy"], {"protocol": protocol}),
        "asker": (["--tools", "1", "--rich", "--name", "asker"], {"protocol": "legacy"}),
    }
    with ExitStack() as stack, stderr.open("w") as errlog:
        servers = {}
        for name, (args, table) in specs.items():
            command = [*GATEWAY, "demo-server", "--transport", "http", *args]
            url, _proc = stack.enter_context(url_process(command, stderr=errlog))
            servers[name] = {"url": url, **table}
        config = write_config(
            tmp_path / tag,
            servers,
            policy={"deny": ["demo__touch"]},
            spill={"max_visible_bytes": 2048},
        )
        yield config, stderr


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_http_calls_answer_byte_identical_to_the_sdk_session(tmp_path: Path, era: str) -> None:
    """Client and servers in one era: ``auto`` reaches a demo server with the handshake, ``modern``
    with 2026-07-28 (its input is then asked with ``input_required``, not a request)."""
    modern = era == "modern"
    protocol = "modern" if modern else "auto"
    with http_servers(tmp_path, protocol, "fast") as (config, fast_servers):
        fast, fast_log = conversation(config, modern, True, tmp_path / "fast.log")
    with http_servers(tmp_path, protocol, "sdk") as (config, sdk_servers):
        sdk, sdk_log = conversation(config, modern, False, tmp_path / "sdk.log")
    assert LANE in fast_log and LANE not in sdk_log
    assert [label for label, _ in fast] == [label for label, _ in sdk]
    for (label, got), (_, want) in zip(fast, sdk, strict=True):
        assert got == want, label
    steps = dict(fast)
    assert "héllo — 日本語 🎉".encode() in steps["echo"][0]
    assert b"saved as artifact <id>" in steps["spilled"][0]
    assert len(steps["log"]) == 2 and b"logged line" in steps["log"][0]  # the call's log before its answer
    assert len(steps["progress"]) == 3 and b'"progressToken":"p-9"' in steps["progress"][0]
    assert b"still here" in steps["after cancel"][-1] and len(steps["after cancel"]) == 1
    assert b"timed out: no answer or progress in 1 s" in steps["timeout"][-1]
    # The SDK's words: the call's event stream cut (handshake era), its JSON answer's connection lost.
    crashed = b"closed during the call" if modern else b"SSE stream ended without a response"
    assert crashed in steps["crash mid-call"][-1]
    assert b"Ann" in steps["ask answered"][-1] and b"Ann" in steps["ask legacy server answered"][-1]
    # The courtesy cancels (the client's, the timeout's) reached the servers on both paths:
    # posted in the handshake era, the response stream closed at 2026-07-28.
    cancelled = [path.read_text().count("slow cancelled after step") for path in (fast_servers, sdk_servers)]
    assert cancelled == [2, 2], cancelled


@pytest.mark.parametrize("mode", ERAS)
async def test_sdk_client_through_http_calls(tmp_path: Path, mode: str) -> None:
    """The SDK client's own view, both eras: results, progress, a classic server's elicitation
    on the call's stream, a server's invalid-arguments answer."""
    with http_servers(tmp_path, "auto", "sdk") as (config, _):
        await sdk_client_view(config, mode, "asker__ask")


ROGUE = str(Path(__file__).with_name("rogue_http.py"))
ROGUE_TOOLS = sorted(
    (name for name in TOOLS if name not in ("peer", "close_idle", "gzip_json", "gzip_bomb")),
    key=lambda n: n == "status_404",
)
"""Every tool but the two whose answers differ from run to run (a port; a connection's close)
and the compressed ones (tests/test_http_answer_size.py);
``status_404`` last: a 404 in a session ends the connection (a new session follows), and what
a call meets while that happens depends on the moment."""


def rogue_conversation(tmp_path: Path, fast: bool, modern: bool) -> tuple[list[tuple[str, list[bytes]]], str]:
    """Every tool of tests/rogue_http.py called once through a gateway of its own."""
    tag = ("fast" if fast else "sdk") + ("-modern" if modern else "")
    (tmp_path / tag).mkdir()
    stderr = tmp_path / f"{tag}.log"
    env = {"PREFIXGATE_FAST_PATH": "1" if fast else "0"}
    with url_process([PYTHON, ROGUE]) as (url, _proc):
        config = write_config(tmp_path / tag, {"rogue": {"url": url}})
        with stderr.open("wb") as err, raw_gateway(config, err, env, "--log-level", "debug") as gw:
            s, opt_in = opened(gw, modern)
            for n, tool in enumerate(ROGUE_TOOLS, start=1):
                s.call(tool, n, f"rogue__{tool}", {}, meta=opt_in)
            gw.proc.stdin.close()  # type: ignore[union-attr]
            gw.proc.wait(timeout=30)
    return s.out, stderr.read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_a_misbehaving_http_server_gets_the_sdk_sessions_answers(tmp_path: Path, era: str) -> None:
    """tests/rogue_http.py: event streams cut (resumed with ``Last-Event-ID`` or not), events
    and bodies that are not JSON or hold a lone surrogate, a reply with another id, error
    statuses, 202, a redirect off the origin, a wrong content type: the same bytes on both
    paths, for a client of either era."""
    modern = era == "modern"
    fast, fast_log = rogue_conversation(tmp_path, True, modern)
    sdk, sdk_log = rogue_conversation(tmp_path, False, modern)
    assert LANE in fast_log and LANE not in sdk_log
    assert [label for label, _ in fast] == [label for label, _ in sdk]
    for (label, got), (_, want) in zip(fast, sdk, strict=True):
        assert got == want, label
    steps = {label: b"\n".join(lines) for label, lines in fast}
    assert b"plain json" in steps["echo"]
    assert steps["sse_log_then_reply"].index(b"notifications/message") < steps["sse_log_then_reply"].index(b"after a")
    assert b"the id was not ours" in steps["sse_other_id"] and b"resumed after a cut" in steps["sse_resume"]
    for tool in ("sse_not_json", "sse_surrogate", "json_surrogate", "json_not_json"):
        assert b"Failed to parse" in steps[tool], tool
        # one line: not pydantic's further lines, which quote the reply's own bytes
        assert b"input_value" not in steps[tool] and b"errors.pydantic.dev" not in steps[tool], tool
    assert b"SSE stream ended without a response" in steps["sse_cut"]
    # The transport gave up resuming: said as the transport's, not as the server's answer.
    assert b"rogue: tool 'sse_resume_fails': SSE stream ended and reconnection attempts" in steps["sse_resume_fails"]
    assert b"answered tool" not in steps["sse_resume_fails"]
    assert b"the backend is down" in steps["status_500_rpc_error"] and b"Session terminated" in steps["status_404"]
    assert b"202 Accepted" in steps["accepted"] and b"elsewhere.invalid" in steps["redirect_away"]
    assert b"Unexpected content type: text/plain" in steps["text_plain"]
    assert b"followed a redirect on the origin" in steps["redirect_same"]
    assert b"to the end" in steps["json_until_close"] and b"then closed" in steps["json_then_close"]


NO_PROXY = {name: "" for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}


def test_calls_keep_their_connection_and_outlive_its_close(tmp_path: Path) -> None:
    """The gateway's own connections to a plain-HTTP server (gateway/downstream/rawhttp.py):
    one kept for call after call; one the server closes, after an answer or while idle, replaced."""
    with url_process([PYTHON, ROGUE]) as (url, _proc):
        config = write_config(tmp_path, {"rogue": {"url": url}})
        with raw_gateway(config, None, NO_PROXY) as gw:
            s = Script(gw, False)
            gw.handshake()

            def peer(n: int) -> str:
                port = str(s.call("peer", n, "rogue__peer", {})["result"]["content"][0]["text"])
                assert port.isdigit(), port  # an answer, not an error
                return port

            kept = {peer(n) for n in range(1, 5)}
            assert len(kept) == 1, kept
            s.call("closing", 5, "rogue__close_idle", {})
            assert peer(6) == next(iter(kept))  # (still open: the server closes it 0.2 s later)
            time.sleep(0.6)
            after_idle = peer(7)
            assert after_idle not in kept
            assert "then closed" in json.dumps(s.call("closed", 8, "rogue__json_then_close", {}))
            assert peer(9) not in (after_idle, *kept)
            gw.proc.stdin.close()  # type: ignore[union-attr]
            gw.proc.wait(timeout=30)


EVENT = b"event: message\ndata: {}\n\n"


class HeldStreams:
    """A loopback HTTP server (asyncio streams) that answers every POST with an event stream:
    one event at once, the stream's end only when ``release`` is set. It notes each
    connection's port (``peers``) and sets ``gone`` when a client closes one."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.gone = asyncio.Event()
        self.peers: list[int] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer.get_extra_info("peername")[1])
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                sizes = (v for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k == b"content-length")
                await reader.readexactly(int(next(sizes)))
                start = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                writer.write(start + f"{len(EVENT):x}\r\n".encode() + EVENT + b"\r\n")
                await writer.drain()
                ended = asyncio.ensure_future(reader.read(1))  # b"": the client closed the connection
                released = asyncio.ensure_future(self.release.wait())
                await asyncio.wait({ended, released}, return_when=asyncio.FIRST_COMPLETED)
                released.cancel()
                if ended.done():
                    self.gone.set()
                    return
                ended.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ended
                self.release.clear()
                writer.write(b"0\r\n\r\n")
                await writer.drain()

    @contextlib.asynccontextmanager
    async def pool(self) -> AsyncIterator[Any]:
        from gateway.downstream.rawhttp import Pool

        server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        pool = Pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp", {})
        try:
            with anyio.fail_after(30):
                yield pool
        finally:
            pool.close()
            server.close()


async def first_event(pool: Any) -> Any:
    """A POST's response, read to its first event (the call's answer; the stream goes on)."""
    response = await pool.post(b"{}", {"content-type": "application/json"})
    async for chunk in response.aiter_raw():
        assert chunk == EVENT
        break
    return response


async def test_an_event_stream_is_read_to_its_end_behind_the_answer() -> None:
    """A call's answer is in before its event stream ends (a server ends it right after): the
    call goes on at once, and the rest is read behind it, so the connection is kept. Here the
    stream ends only when the test says, after the response was closed; the gateway used to
    wait up to 50 ms for that end before answering, then give the connection up. One that
    never ends is still given up behind the answer."""
    held = HeldStreams()
    async with held.pool() as pool:
        for _ in range(2):
            response = await first_event(pool)
            await response.aclose()  # returns before the end: the server has not sent it yet
            held.release.set()
            while pool._draining:  # noqa: SLF001 - the end, read behind the answer
                await asyncio.sleep(0.01)
        assert len(held.peers) == 1, held.peers  # one connection, kept after each stream's end
        assert not held.gone.is_set()
        await (await first_event(pool)).aclose()  # a stream that never ends is given up
        await held.gone.wait()


async def test_a_connection_idle_past_its_time_is_not_used_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server closes an idle connection after its keep-alive timeout (uvicorn's and Node's
    5 s), and a call sent on it just as it does fails: the gateway kept idle connections for
    ever. One idle for ``IDLE_SECONDS`` (under those) is closed, and a new one opened."""
    from gateway.downstream import rawhttp

    monkeypatch.setattr(rawhttp, "IDLE_SECONDS", 0.3)
    held = HeldStreams()

    async def call(pool: Any) -> None:
        response = await first_event(pool)
        await response.aclose()
        held.release.set()
        while pool._draining:  # noqa: SLF001 - the end, read behind the answer
            await asyncio.sleep(0.01)

    async with held.pool() as pool:
        await call(pool)
        await call(pool)
        assert len(held.peers) == 1, held.peers  # kept while it is fresh
        await asyncio.sleep(0.6)
        await call(pool)
        assert len(held.peers) == 2, held.peers


async def test_a_cancelled_calls_event_stream_is_closed_at_once() -> None:
    """Closing a call's stream is how a server hears it was cancelled (at 2026-07-28 the only
    way): a response closed while its call is being cancelled is not read on behind it."""
    held = HeldStreams()
    async with held.pool() as pool:
        with anyio.CancelScope() as scope:
            response = await pool.post(b"{}", {"content-type": "application/json"})
            try:
                async for chunk in response.aiter_raw():
                    assert chunk == EVENT
                    scope.cancel()  # while the rest of the stream is awaited, as a call's is
            finally:
                await response.aclose()
        assert scope.cancelled_caught
        assert not pool._draining  # noqa: SLF001
        await held.gone.wait()


def test_which_urls_get_the_gateways_own_connections() -> None:
    from gateway.downstream.transports import plain_http

    assert plain_http("http://127.0.0.1:8000/mcp", {}) and plain_http("http://h/mcp", {"HTTP_PROXY": ""})
    assert not plain_http("https://example.com/mcp", {})  # TLS: httpx's
    for name in ("http_proxy", "HTTPS_PROXY", "all_proxy"):  # a proxy httpx would honour: httpx's
        assert not plain_http("http://h/mcp", {name: "http://proxy:3128"}), name
    assert not plain_http("http://user:pass@h/mcp", {})  # credentials httpx sends as Basic auth: httpx's


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("server", ["sticky", "basic"])
async def test_calls_to_a_server_that_needs_its_cookie_or_url_credentials_work_as_directly(
    tmp_path: Path, mode: str, server: str
) -> None:
    """A server behind a sticky load balancer (its cookie, set at initialize, routes each later
    request to the backend holding the session), and one whose URL carries ``user:password@``:
    httpx (the SDK's client, and so a direct connection) sends both; the gateway's own call
    connections sent neither, so every tools/call failed ("Session not found", a 401) while
    listing worked."""
    from tests.helpers import sdk_client, text

    args = ["--sticky"] if server == "sticky" else ["--basic", "gw:pa55word"]
    with url_process([PYTHON, "-m", "tests.classic_server", "--http", *args]) as (url, _):
        if server == "basic":
            url = url.replace("http://", "http://gw:pa55word@")
        config = write_config(tmp_path, {"c": {"url": url, "protocol": "legacy"}})
        async with sdk_client(config, mode, log_level="debug", errlog=tmp_path / "gw.log") as client:
            with anyio.fail_after(60):
                for word in ("one", "two"):
                    result = await client.call_tool("c__echo", {"text": word})
                    assert not result.is_error and text(result) == f"classic:{word}", text(result)
    assert "pa55word" not in (tmp_path / "gw.log").read_text()


async def test_a_closed_connection_closes_its_sockets_to_the_server() -> None:
    """Each connection to a streamable-HTTP server (a reconnect after a 404 or a lost
    liveness check, a stop) closes its HTTP connections as it closes. The transport that
    watches for 404s had lost its ``aclose`` (it ended up inside a function below it), so
    the pool beneath was never closed: every connection left its sockets to the server open
    (three here) until the garbage collector happened on them. Counted with the collector off."""
    import gc

    import psutil
    from mcp.client.session import ClientSession
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    from gateway.config import ServerConfig
    from gateway.downstream.transports import StreamableHttpTransport

    async def no_auth() -> None:
        return None

    def sockets_to(port: int) -> int:
        return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port)

    with url_process([PYTHON, "-m", "tests.classic_server", "--http"]) as (url, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        transport = StreamableHttpTransport(ServerConfig(id="c", transport="http", url=url), no_auth)
        gc.disable()
        try:
            with anyio.fail_after(30):
                for _ in range(2):
                    async with transport.open() as (read, write):
                        async with ClientSession(dispatcher=JSONRPCDispatcher(read, write)) as session:
                            await session.initialize()
                            assert (await session.list_tools()).tools
                        assert sockets_to(port) > 0
                    assert sockets_to(port) == 0
        finally:
            gc.enable()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_session_the_server_ended_is_replaced_at_once(tmp_path: Path, mode: str) -> None:
    """The server answers 404 for the session (it restarted, or timed the session out): the
    spec has the client start a new one. The calls failed with "Session not found" until the
    next liveness check (15 s); then the call that met the 404 failed, either with the 404's
    words or as "closed during the call" (whichever reached it first), and the next started
    a new session. The server did not run that call: it now goes again on the new session.
    (The liveness check is pushed out of the way: it must not be what heals it.)
    Calls go to a new connection from its handshake on, before its start has listed the
    tools: each round waits for that, or the next round's expiry would end the session under
    the start's own ``tools/list`` (a fresh-clone CI run failed so)."""
    from tests.helpers import sdk_client, text, wait_for

    with url_process([PYTHON, "-m", "tests.classic_server", "--http", "--expiring"]) as (url, _):
        config = write_config(tmp_path, {"c": {"url": url, "protocol": "legacy"}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600"}
        log = tmp_path / "gateway.log"
        async with sdk_client(config, mode, env=env, errlog=log) as client:
            with anyio.fail_after(60):
                for round in range(2):
                    await wait_for(lambda round=round: log.read_text().count("[c] ready:") == round + 1)
                    assert text(await client.call_tool("c__expire_session", {})) == "expired"
                    met = await client.call_tool("c__echo", {"text": f"lost {round}"})
                    assert not met.is_error and text(met) == f"classic:lost {round}", text(met)
                    assert text(await client.call_tool("c__echo", {"text": "back"})) == "classic:back"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_call_a_server_refused_for_its_ended_session_goes_again_without_a_wait(
    tmp_path: Path, mode: str
) -> None:
    """The call that met the 404 waits for the new session, which is opened at once; but the
    wait looked for a scheduled retry every 10 ms, and a retry at once is scheduled and begun
    in between: it missed it and waited out its 3 s fallback, each time (3.0 s against 0.05 s).
    The fallback is set to 10 minutes here: a wait that misses the retry is a hang."""
    from tests.helpers import sdk_client, text, wait_for

    with url_process([PYTHON, "-m", "tests.classic_server", "--http", "--expiring"]) as (url, _):
        config = write_config(tmp_path, {"c": {"url": url, "protocol": "legacy"}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600", "PREFIXGATE_RETRY_SCHEDULED_WAIT": "600"}
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, env=env, errlog=errlog) as client:
            assert text(await client.call_tool("c__echo", {"text": "first"})) == "classic:first"
            with anyio.fail_after(120):  # (a hang, not a speed: each round takes well under a second)
                for round in range(3):
                    # The new session listing still (calls go to it from its handshake on) would meet
                    # the expiry too: "closed during the call". Each round expires a ready one.
                    await wait_for(lambda n=round: errlog.read_text().count("[c] ready") > n)
                    assert text(await client.call_tool("c__expire_session", {})) == "expired"
                    met = await client.call_tool("c__echo", {"text": f"lost {round}"})
                    assert not met.is_error and text(met) == f"classic:lost {round}", text(met)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_refused_for_an_ended_session_after_another_goes_again_too(tmp_path: Path, mode: str) -> None:
    """Two calls in flight as the server ends the session: one is refused (404) at once, which
    ends the connection; the other's 404 comes a second later. That one was cut with the
    connection ("closed during the call", or not, by a race) though the server never ran it: the
    connection now waits for the status of the calls it posted, and it goes again on the new
    session too. The wait's bound is set to 10 minutes here: a wait that misses it is a hang."""
    from tests.helpers import sdk_client, text, wait_for

    with url_process([PYTHON, "-m", "tests.classic_server", "--http", "--expiring"]) as (url, _):
        config = write_config(tmp_path, {"c": {"url": url, "protocol": "legacy"}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600", "PREFIXGATE_REFUSAL_WAIT": "600"}
        errlog = tmp_path / "gateway.log"
        posted = tmp_path / "posted"
        late: list[Any] = []
        async with sdk_client(config, mode, env=env, errlog=errlog) as client:
            with anyio.fail_after(120):
                await wait_for(lambda: "[c] ready" in errlog.read_text())
                assert text(await client.call_tool("c__expire_session", {})) == "expired"

                async def refused_late() -> None:
                    late.append(await client.call_tool("c__echo", {"text": f"late-refusal:{posted}"}))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(refused_late)
                    await wait_for(posted.exists)  # (its POST is at the server, its 404 a second away)
                    met = await client.call_tool("c__echo", {"text": "at once"})
        assert not met.is_error and text(met) == "classic:at once", text(met)
        assert not late[0].is_error and text(late[0]) == f"classic:late-refusal:{posted}", text(late[0])


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_lost_session_whose_delete_is_never_answered_holds_up_no_reconnect(tmp_path: Path, mode: str) -> None:
    """The liveness check finds a session lost (its ping fails) and the gateway deletes it, as
    a courtesy: a server that no longer answers (a network black hole) held that DELETE, and
    the reconnect behind it, for the HTTP client's read timeout (300 s). It gives up after 5 s."""
    from tests.helpers import sdk_client, text, wait_for

    with url_process([PYTHON, "-m", "tests.classic_server", "--http", "--stalling"]) as (url, _):
        config = write_config(tmp_path, {"c": {"url": url, "protocol": "legacy"}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "1", "PREFIXGATE_RETRY_SCHEDULED_WAIT": "600"}
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, env=env, errlog=errlog) as client:
            assert text(await client.call_tool("c__stall_session", {})) == "stalled"
            await wait_for(lambda: "connection lost" in errlog.read_text(), 60)
            with anyio.fail_after(120):  # (a hang: without the bound the reconnect waits 300 s)
                back = await client.call_tool("c__echo", {"text": "back"})
            assert not back.is_error and text(back) == "classic:back", text(back)
