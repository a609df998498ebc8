"""Remote downstream servers over real loopback HTTP: streamable HTTP and SSE."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    catalog_json,
    gateway,
    sdk_client,
    text,
    url_process,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio


@contextmanager
def remote_demo(transport: str, name: str) -> Iterator[str]:
    """A demo server on a free loopback port; yields its URL."""
    command = [*GATEWAY, "demo-server", "--transport", transport, "--tools", "2", "--name", name]
    with url_process(command) as (url, _proc):
        assert url.startswith("http://127.0.0.1:"), url
        yield url


async def test_streamable_http_and_sse_servers_behind_the_gateway(tmp_path: Path) -> None:
    with remote_demo("http", "web") as http_url, remote_demo("sse", "old") as sse_url:
        config = write_config(
            tmp_path,
            {
                "web": {"url": http_url, "headers": {"X-Demo": "1"}},
                "old": {"url": sse_url, "transport": "sse"},
            },
        )
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        async with gateway(config) as gw:
            names = [t.name for t in (await gw.session.list_tools()).tools]
            assert "web__echo" in names and "old__echo" in names
            assert len(names) == 2 * (2 + 7) + 1
            for server in ("web", "old"):
                result = await gw.session.call_tool(f"{server}__echo", {"text": f"via {server}"})
                assert result.content[0].text == f"via {server}" and not result.is_error
                structured = await gw.session.call_tool(f"{server}__structured", {"count": 1})
                assert structured.structured_content == {"count": 1, "items": ["item-0"]}
            slow = await gw.session.call_tool("web__slow", {"seconds": 0.2, "steps": 2}, progress_callback=on_progress)
            assert slow.content[0].text == "slept 0.2 s"
        assert seen == [0, 1]


def test_unreachable_remote_server_is_reported_failed(tmp_path: Path) -> None:
    import socket

    from tests.helpers import demo

    with socket.socket() as sock:  # a port that is free, so nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = write_config(
        tmp_path,
        {"ok": demo("--tools", 1), "down": {"url": f"http://127.0.0.1:{port}/mcp", "startup_timeout": 10}},
    )
    report = catalog_json(config)
    status = {s["id"]: s for s in report["servers"]}
    assert status["ok"]["status"] == "ready"
    assert status["down"]["status"] == "failed", status["down"]
    assert "connect" in status["down"]["error"].lower(), status["down"]["error"]
    assert status["down"]["error"].endswith(f" (127.0.0.1:{port})"), status["down"]["error"]  # which host (issue 31)


async def test_an_sse_endpoint_on_another_origin_fails_its_start_at_once(tmp_path: Path) -> None:
    """The SDK's SSE client refuses an ``endpoint`` event naming another origin, but from a
    task that had not said it started: the connection hung, the server was ``late`` at its
    startup_timeout with the SDK's traceback in the log, and never retried. Now its start
    fails at once with one line naming the origin (never the path or query), and is retried."""
    rogue = str(Path(__file__).with_name("rogue_http.py"))
    with url_process([PYTHON, rogue]) as (url, _proc):
        sse_url = url.removesuffix("/mcp") + "/sse-elsewhere"
        config = write_config(tmp_path, {"far": {"url": sse_url, "transport": "sse", "startup_timeout": 30}})
        (far,) = catalog_json(config)["servers"]
        assert far["status"] == "failed", far
        origin = sse_url.removesuffix("/sse-elsewhere")
        assert far["error"] == (
            "ForeignEndpoint: its endpoint event names another origin, http://elsewhere.example:8080, "
            f"than its URL's, {origin}; messages are posted only to the URL's origin"
        ), far
        async with gateway(config) as gw:
            await wait_for(lambda: gw.stderr().count("[far] failed: ForeignEndpoint") >= 2)
            log = gw.stderr()
        assert "origin; retrying in 1 s" in log and "late" not in log, log
        assert "Traceback" not in log and "s3cr3t" not in log, log


@pytest.mark.parametrize("mode", ERAS)
async def test_an_sse_servers_refused_message_costs_only_its_call(tmp_path: Path, mode: str) -> None:
    """An SSE server (or its proxy) answers one message POST with 503: through the SDK's SSE
    client that raised out of its writer, so the call waited for its whole timeout and every
    later call failed as "closed during the call" until the liveness check reconnected. Now
    the refused call is answered with the error at once, and the next ones go through."""
    command = [PYTHON, "-m", "tests.classic_server", "--http", "--sse"]
    with url_process(command) as (url, _proc):
        config = write_config(tmp_path, {"old": {"url": url, "transport": "sse", "call_timeout": 30}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600"}
        async with sdk_client(config, mode, env=env, errlog=tmp_path / "gw.log") as client:
            with anyio.fail_after(20):
                refused = await client.call_tool("old__echo", {"text": "refuse me"})
                assert refused.is_error and "Server returned an error response" in text(refused), text(refused)
                for word in ("one", "two"):
                    result = await client.call_tool("old__echo", {"text": word})
                    assert not result.is_error and text(result) == f"classic:{word}", text(result)
    log = (tmp_path / "gw.log").read_text()
    assert f"{url} answered a message with HTTP 503" in log and "Traceback" not in log, log


@pytest.mark.parametrize("mode", ERAS)
async def test_an_sse_server_that_no_longer_knows_the_session_is_reconnected_at_once(tmp_path: Path, mode: str) -> None:
    """A message answered 404: the server no longer knows the session (its stream still open,
    behind a balancer that sent the message elsewhere). Every later message met the same until
    the liveness check (15 s) found the connection dead; now the connection ends at once and
    the next call goes through a new one (the check is pushed out of the way here)."""
    command = [PYTHON, "-m", "tests.classic_server", "--http", "--sse"]
    with url_process(command) as (url, _proc):
        config = write_config(tmp_path, {"old": {"url": url, "transport": "sse", "call_timeout": 30}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600"}
        log = tmp_path / "gw.log"
        async with sdk_client(config, mode, env=env, errlog=log) as client:
            forgotten = await client.call_tool("old__echo", {"text": "forget me"})
            assert forgotten.is_error, text(forgotten)
            await wait_for(lambda: "no longer knows its session (HTTP 404 to a message)" in log.read_text())
            with anyio.fail_after(60):  # (a hang: the new connection is opened at once)
                back = await client.call_tool("old__echo", {"text": "back"})
            assert not back.is_error and text(back) == "classic:back", text(back)


@pytest.mark.parametrize("mode", ERAS)
async def test_the_call_an_sse_server_refused_for_a_forgotten_session_goes_again_on_the_next(
    tmp_path: Path, mode: str
) -> None:
    """A message answered 404 was not taken (the server no longer knows the session): the call
    that met it failed, though a streamable-HTTP server's 404 has its call sent again. It goes
    once more on the new connection now, and the model sees its answer. The wait for a retry
    that is scheduled is set to 10 minutes here: a wait that misses the reconnect is a hang."""
    command = [PYTHON, "-m", "tests.classic_server", "--http", "--sse"]
    with url_process(command) as (url, _proc):
        config = write_config(tmp_path, {"old": {"url": url, "transport": "sse", "call_timeout": 30}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600", "PREFIXGATE_RETRY_SCHEDULED_WAIT": "600"}
        log = tmp_path / "gw.log"
        async with sdk_client(config, mode, env=env, errlog=log) as client:
            with anyio.fail_after(60):  # (a hang: the new connection is opened at once)
                again = await client.call_tool("old__echo", {"text": "forget me once"})
                assert not again.is_error and text(again) == "classic:forget me once", text(again)
                after = await client.call_tool("old__echo", {"text": "after"})
            assert not after.is_error and text(after) == "classic:after", text(after)
        assert "no longer knows its session (HTTP 404 to a message)" in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_an_sse_servers_lost_stream_is_a_lost_connection_at_once(tmp_path: Path, mode: str) -> None:
    """The SSE server restarts: its event stream, which is the connection, ends. That was seen
    only at the next liveness check (15 s), every call failing meanwhile as "closed during the
    call", with the SDK's traceback in the log. Now the end is the connection's, at once: one
    line says so, and the next connection is opened (the check is pushed out of the way here)."""
    command = [PYTHON, "-m", "tests.classic_server", "--http", "--sse"]
    with url_process(command) as (url, proc):
        config = write_config(tmp_path, {"old": {"url": url, "transport": "sse"}})
        env = {"PREFIXGATE_LIVENESS_INTERVAL": "600"}
        async with sdk_client(config, mode, env=env, errlog=tmp_path / "gw.log") as client:
            with anyio.fail_after(30):
                assert text(await client.call_tool("old__echo", {"text": "before"})) == "classic:before"
                proc.kill()
                proc.wait()
                port = url.split(":")[2].split("/")[0]
                with url_process([*command, "--port", port]) as (again, _):
                    assert again == url
                    while (result := await client.call_tool("old__echo", {"text": "after"})).is_error:
                        await anyio.sleep(0.2)
                    assert text(result) == "classic:after"
    log = (tmp_path / "gw.log").read_text()
    assert "[old] exited: connection lost: its event stream failed: RemoteProtocolError" in log, log
    assert "Traceback" not in log and "Error in sse_reader" not in log, log


@pytest.mark.parametrize("mode", ERAS)
async def test_an_sse_servers_result_over_a_mebibyte_is_spilled_not_refused(tmp_path: Path, mode: str) -> None:
    """An SSE server's events were bounded by the SDK client's 1 MiB, not ``max_message_bytes``:
    a 1.2 MB result (which a direct client without that cap reads, and a stdio or
    streamable-HTTP server's is spilled) failed, and took the connection with it. Now it is
    spilled as theirs are, and the connection goes on."""
    command = [PYTHON, "-m", "tests.classic_server", "--http", "--sse"]
    with url_process(command) as (url, _proc):
        config = write_config(tmp_path, {"old": {"url": url, "transport": "sse"}})
        async with sdk_client(config, mode) as client:
            with anyio.fail_after(30):
                result = await client.call_tool("old__echo", {"text": "x" * 1_200_000})
                assert not result.is_error and "saved as artifact" in text(result), text(result)[-300:]
                assert text(await client.call_tool("old__echo", {"text": "next"})) == "classic:next"
