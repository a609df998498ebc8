"""``serve`` runs on uvloop where it is installed (gateway/commands/eventloop.py), and on asyncio's loop
with ``PREFIXGATE_UVLOOP=0``: the same answers either way, in both eras, over stdio and
HTTP, including a classic server's request to the client during a call."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.commands.eventloop import UVLOOP_ENV, backend_options
from tests.helpers import ERAS, GATEWAY, demo, elicitation, http_gateway, sdk_client, text, write_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_serve_answers_alike_on_either_loop(tmp_path: Path, mode: str, loop: str, transport: str) -> None:
    servers = {
        "demo": demo("--tools", 1, "--rich"),
        "asker": {**demo("--tools", 1, "--rich", "--name", "asker"), "protocol": "legacy"},
    }
    config = write_config(tmp_path, servers)
    env = {UVLOOP_ENV: "1" if loop == "uvloop" else "0"}
    if transport == "http":
        with http_gateway(config, "--log-level", "debug", env=env) as (url, errlog):
            await _calls(url, mode)
    else:
        errlog = tmp_path / "serve.log"
        await _calls(config, mode, env=env, log_level="debug", errlog=errlog)
    assert f"event loop: {loop}" in errlog.read_text()


async def _calls(target: Path | str, mode: str, **options: Any) -> None:
    """A call, one with progress, and one whose classic server asks the client during it."""
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with sdk_client(target, mode, elicitation_callback=elicitation, **options) as client:
        assert text(await client.call_tool("demo__echo", {"text": "hi"})) == "hi"
        result = await client.call_tool("demo__slow", {"seconds": 0.2, "steps": 2}, progress_callback=progress)
        assert text(result) == "slept 0.2 s" and seen == [0.0, 1.0]
        result = await client.call_tool("asker__ask", {})  # a classic server asks the client during the call
        assert not result.is_error and "accept" in text(result)


def test_the_loop_is_chosen_from_the_environment() -> None:
    assert backend_options({}) == {"use_uvloop": True}
    assert backend_options({UVLOOP_ENV: "1"}) == {"use_uvloop": True}
    for off in ("0", "off", " False "):
        assert backend_options({UVLOOP_ENV: off}) == {}


def _closed_stdin() -> None:
    os.close(0)


@pytest.mark.real_processes  # file descriptors are what it is about: not through the fork server's launcher
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_serve_with_its_stdin_closed(tmp_path: Path, mode: str, loop: str) -> None:
    """Started with file descriptor 0 closed (``serve --http <&-``, a daemon manager that
    closes it), the first pipe the gateway opened took that number: on uvloop its server
    then failed to start ("Bad file descriptor") and libuv aborted the process when it
    closed the pipe. Now /dev/null is opened there first: the servers start, calls are
    answered, and a stdio gateway, whose stdin is then /dev/null (a character device epoll
    refuses: asyncio's loop never saw its end, uvloop aborted), reads it as a file and exits 0."""
    config = write_config(tmp_path, {"demo": demo("--tools", 1)})
    env = {**os.environ, UVLOOP_ENV: "1" if loop == "uvloop" else "0"}
    stderr = tmp_path / "serve.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    with stderr.open("w") as errlog:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errlog, text=True, env=env, preexec_fn=_closed_stdin
        )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url, stderr.read_text()
        async with sdk_client(url, mode) as client:
            assert text(await client.call_tool("demo__echo", {"text": "hi"})) == "hi"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 143, stderr.read_text()  # stopped by SIGTERM, not aborted (-6)
    assert "Bad file descriptor" not in stderr.read_text()
    stdio = subprocess.run(
        [*GATEWAY, "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_closed_stdin,
        timeout=60,
    )
    assert stdio.returncode == 0, stdio.stderr
    assert "Bad file descriptor" not in stdio.stderr


@pytest.mark.real_processes
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_start_that_exits_2_stops_its_early_servers_quietly(tmp_path: Path, loop: str) -> None:
    """A stdio gateway starts its servers before it reads the catalog lock; a missing one
    exits 2. On uvloop the early server's pipes were closed under its start, which the
    supervisor reported as a failure with a retry after the reason: the reason is the last
    line, and a stop is not a failed start."""
    config = write_config(tmp_path, {"demo": demo("--tools", 1)}, gateway={"lock": "missing.lock"})
    env = {**os.environ, UVLOOP_ENV: "1" if loop == "uvloop" else "0"}
    proc = subprocess.run(
        [*GATEWAY, "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "lock file not found" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert "retrying" not in proc.stderr and "cannot start" not in proc.stderr, proc.stderr


def _closed_stdout() -> None:
    os.close(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.real_processes
@pytest.mark.parametrize("mode", ERAS)
async def test_serve_http_with_its_stdout_closed(tmp_path: Path, mode: str) -> None:
    """Started with file descriptor 1 closed (a daemon manager that closes it), Python leaves
    ``sys.stdout`` None: printing the URL stopped ``serve --http`` with a traceback (exit 1)
    before it served anything. Now stdout is /dev/null there and the gateway serves."""
    config = write_config(tmp_path, {"demo": demo("--tools", 1)})
    port = _free_port()
    stderr = tmp_path / "serve.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", f"127.0.0.1:{port}"]
    with stderr.open("w") as errlog:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=errlog, preexec_fn=_closed_stdout)
    try:
        for _ in range(300):
            assert proc.poll() is None, stderr.read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            await anyio.sleep(0.1)
        async with sdk_client(f"http://127.0.0.1:{port}/mcp", mode) as client:
            assert text(await client.call_tool("demo__echo", {"text": "hi"})) == "hi"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 143, stderr.read_text()
    assert "Traceback" not in stderr.read_text()


@pytest.mark.real_processes
def test_commands_with_their_stdout_closed(tmp_path: Path) -> None:
    """``catalog``, ``catalog diff`` and ``import`` with stdout closed (``>&-``) did their work
    and then stopped on a traceback writing it (exit 1): now the output goes to /dev/null and
    each exits with its own status."""
    config = write_config(tmp_path, {"demo": demo("--tools", 1)})
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"declarations": [], "fingerprint": "f"}))
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps({"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}))
    for args in (
        ["catalog", "--config", str(config), "--json"],
        ["catalog", "diff", str(report), str(report)],
        ["import", str(claude)],
    ):
        proc = subprocess.run(
            [*GATEWAY, *args],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_closed_stdout,
            timeout=60,
        )
        assert proc.returncode == 0, (args, proc.stderr)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
