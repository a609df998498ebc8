"""A stop signal lets ``serve --http`` finish the requests in flight (``[gateway] drain_timeout``).

Directly, an SDK server under uvicorn finishes its requests in flight on SIGTERM. The
gateway exited at once, so every deploy or restart of a shared gateway cut its agents'
calls mid-way. Now the first stop signal refuses new connections and waits, up to
``drain_timeout``, for the POSTs in flight (not for GET or listen streams, which stay open
for as long as their clients listen), then stops every server; a second signal stops at
once. Real gateway over HTTP, a real classic server behind it, the real SDK client in both
eras, real signals.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from tests.helpers import ERAS, GATEWAY, PYTHON, sdk_client, text, url_process, wait_for, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

CLASSIC = str(Path(__file__).with_name("classic_server.py"))
DRAINING = "stopping: no new connections"


@contextmanager
def gateway(tmp_path: Path, **gateway_table: Any) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": [CLASSIC]}}, gateway=gateway_table)
    stderr = tmp_path / "gateway.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--log-level", "info"]
    with stderr.open("w") as errlog, url_process(command, stderr=errlog) as (url, proc):
        yield url, proc, stderr


async def exited(proc: subprocess.Popen[str], seconds: float = 20) -> int:
    """The process's exit status, once it has exited (within ``seconds``)."""
    with anyio.fail_after(seconds):
        while proc.poll() is None:
            await anyio.sleep(0.05)
    return proc.returncode


def refused(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_in_flight_is_answered_before_the_gateway_stops(tmp_path: Path, mode: str) -> None:
    with gateway(tmp_path) as (url, proc, stderr):
        async with sdk_client(url, mode) as client:
            # (the client lists the tools after its first call: done now, not while it stops)
            assert text(await client.call_tool("c__echo", {"text": "a"})) == "classic:a"
            running = anyio.Event()
            answers: list[str] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                running.set()

            async def call() -> None:
                result = await client.call_tool("c__sleep", {"seconds": 1.5}, progress_callback=on_progress)
                answers.append(text(result))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                with anyio.fail_after(20):
                    await running.wait()  # the server is sleeping: the call is in flight
                proc.send_signal(signal.SIGTERM)
                await wait_for(lambda: DRAINING in stderr.read_text(), 10)
                assert refused(url)  # no new connection meanwhile
        assert answers == ["slept 1.5"]
        assert await exited(proc) == 128 + signal.SIGTERM
    logged = stderr.read_text()
    assert "1 request in flight may finish" in logged
    # One signal, one stop: uvicorn raised the signal again once it had shut down, which the
    # gateway took for a second one (said twice; stopped at once, its answers not awaited).
    assert logged.count("SIGTERM received") == 1, logged


async def test_open_streams_are_not_waited_for(tmp_path: Path) -> None:
    """A handshake-era client's standalone stream and a 2026-07-28 listen stream stay open for
    as long as their clients listen: with nothing else in flight the gateway stops at once."""
    with gateway(tmp_path, drain_timeout=120) as (url, proc, stderr):
        async with sdk_client(url, "legacy") as old, sdk_client(url, "auto") as new:
            assert text(await old.call_tool("c__echo", {"text": "a"})) == "classic:a"
            async with new.listen(tools_list_changed=True):
                proc.send_signal(signal.SIGTERM)
                assert await exited(proc, 30) == 128 + signal.SIGTERM  # not after 120 s
    logged = stderr.read_text()
    assert "0 requests in flight may finish" in logged and logged.count("SIGTERM received") == 1, logged


async def in_flight_then(proc: subprocess.Popen[str], client: Any, stderr: Path, *signals: signal.Signals) -> str:
    """Call a long sleep and, once it runs, send ``signals`` to the gateway (each after the
    first once the drain has begun); the call's outcome: its text, or the name of the error
    that ended it."""
    running = anyio.Event()
    outcome: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        running.set()

    async def call() -> None:
        try:
            outcome.append(text(await client.call_tool("c__sleep", {"seconds": 300}, progress_callback=on_progress)))
        except Exception as exc:  # noqa: BLE001 - whatever ended it, named
            outcome.append(type(exc).__name__)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(20):
            await running.wait()
        for n, each in enumerate(signals):
            if n:
                await wait_for(lambda: DRAINING in stderr.read_text(), 10)
            proc.send_signal(each)
        with anyio.fail_after(30):
            while not outcome:
                await anyio.sleep(0.05)
    return outcome[0]


async def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    with gateway(tmp_path, drain_timeout=120) as (url, proc, stderr):
        async with sdk_client(url, "legacy") as client:
            assert text(await client.call_tool("c__echo", {"text": "a"})) == "classic:a"
            ended = await in_flight_then(proc, client, stderr, signal.SIGTERM, signal.SIGINT)
            assert ended != "slept 300"
            assert await exited(proc, 30) == 128 + signal.SIGINT  # not after 120 s


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_longer_than_the_drain_is_cut_at_its_end(tmp_path: Path, mode: str) -> None:
    with gateway(tmp_path, drain_timeout=1) as (url, proc, stderr):
        async with sdk_client(url, mode) as client:
            assert text(await client.call_tool("c__echo", {"text": "a"})) == "classic:a"
            ended = await in_flight_then(proc, client, stderr, signal.SIGTERM)
            # answered in either era: its server stopped, so the call is an isError saying so
            assert ended.startswith("server 'c' exited during the call"), ended
            assert await exited(proc, 30) == 128 + signal.SIGTERM
    assert "stopping with 1 request still in flight after 1 s" in stderr.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_reloaded_drain_timeout_is_the_one_a_stop_waits(tmp_path: Path, mode: str) -> None:
    with gateway(tmp_path, drain_timeout=120) as (url, proc, stderr):
        config = write_config(tmp_path, {"c": {"command": PYTHON, "args": [CLASSIC]}}, gateway={"drain_timeout": 1})
        await wait_for(lambda: "config reloaded (the file changed)" in stderr.read_text())
        assert config.exists()
        async with sdk_client(url, mode) as client:
            assert text(await client.call_tool("c__echo", {"text": "a"})) == "classic:a"
            ended = await in_flight_then(proc, client, stderr, signal.SIGTERM)
            assert ended != "slept 300"
            assert await exited(proc, 30) == 128 + signal.SIGTERM  # not after 120 s
    assert "stopping with 1 request still in flight after 1 s" in stderr.read_text()
