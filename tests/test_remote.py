"""Remote downstream servers over real loopback HTTP: streamable HTTP and SSE."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import GATEWAY, PYTHON, catalog_json, gateway, url_process, wait_for, write_config

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
