"""A call answered on a fast path leaves no reference cycle behind, in either era.

Reference counting frees what a finished call made only if nothing of it references
itself; what does waits for the cyclic collector, whose passes cost the calls they
interrupt. A 2026-07-28 call's client record referenced its session, whose connection
referenced the record (about 15 objects a call, on stdio and on the HTTP lane alike), and
the HTTP session lane's keep-alive timer function named itself (about 15 more a
handshake-era call). The gateway runs under tests/gc_probe.py, which counts what only the
collector finds while the real SDK client makes its calls: fewer objects than calls, so
not one cycle a call.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.helpers import ERAS, demo, sdk_client, url_process, wait_for, write_config

pytestmark = pytest.mark.real_processes  # the count is the gateway process's own

PROBE = str(Path(__file__).with_name("gc_probe.py"))
CALLS = 60
ROTATIONS = 12


def _wait_for(report: Path, armed: bool) -> Any:
    """What the probe wrote once it handled its signal: "armed", or the count."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = report.read_text(encoding="utf-8") if report.exists() else ""
        if text and (text == "armed") == armed:
            return text if armed else json.loads(text)
        time.sleep(0.02)
    raise AssertionError(f"the probe wrote no {'armed' if armed else 'count'} report")


async def _counted(pid: int, report: Path, call: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """The cyclic garbage the gateway ``pid`` is left with by ``CALLS`` calls (after a warm-up)."""
    for _ in range(10):
        await call()
    os.kill(pid, signal.SIGUSR1)
    await anyio.to_thread.run_sync(_wait_for, report, True)
    for _ in range(CALLS):
        await call()
    report.unlink()
    os.kill(pid, signal.SIGUSR1)
    found: dict[str, Any] = await anyio.to_thread.run_sync(_wait_for, report, False)
    return found


def _echo(client: Any) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool("d__echo", {"text": "cycle?"})
        assert not result.is_error and result.content[0].text == "cycle?", result

    return call


def _serve(tmp_path: Path, report: Path) -> list[str]:
    # No warm-start record: writing it once (a server built to record the answers) leaves
    # garbage of its own, which may fall in the counted calls.
    config = write_config(tmp_path, {"d": demo("--tools", 2)}, gateway={"warm_start": False})
    return [PROBE, str(report), "gateway", "serve", "--config", str(config), "--log-level", "warning"]


def _child_running(parent: int, script: str) -> int:
    """The process running ``script`` that ``parent`` started."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_text(errors="replace").split("\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if ppid == parent and script in argv:
            return int(entry.name)
    raise AssertionError(f"no process of {parent} runs {script}")


@asynccontextmanager
async def _stdio_gateway(tmp_path: Path, report: Path, mode: str, **options: Any) -> AsyncIterator[tuple[Any, int]]:
    params = StdioServerParameters(command=sys.executable, args=_serve(tmp_path, report), env=dict(os.environ))
    async with Client(stdio_client(params), mode=mode, **options) as client:
        yield client, _child_running(os.getpid(), PROBE)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_stdio_call_leaves_no_cycle(tmp_path: Path, mode: str) -> None:
    report = tmp_path / "gc.json"
    async with _stdio_gateway(tmp_path, report, mode) as (client, pid):
        found = await _counted(pid, report, _echo(client))
    assert found["garbage"] < CALLS, found


def _cancelled(client: Any) -> Callable[[], Awaitable[None]]:
    """A call cancelled by its client once it runs at the server (its first progress), then
    one answered (so the cancellation has been handled when the count is taken)."""

    async def call() -> None:
        running = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            running.set()

        async with anyio.create_task_group() as tasks:
            slow = functools.partial(
                client.call_tool, "d__slow", {"seconds": 60, "steps": 60}, progress_callback=on_progress
            )
            tasks.start_soon(slow)
            with anyio.fail_after(30):
                await running.wait()
            tasks.cancel_scope.cancel()
        await _echo(client)()

    return call


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_cancelled_stdio_call_leaves_no_cycle(tmp_path: Path, mode: str) -> None:
    """A call the client cancels on the stdio fast path: its task kept the cancellation, whose
    traceback held the call, which held the task (about 60 objects a call, 120 at 2026-07-28).
    What is left at 2026-07-28 is the SDK's own (the cancellation notice's runner, 9 objects)."""
    report = tmp_path / "gc.json"
    async with _stdio_gateway(tmp_path, report, mode) as (client, pid):
        found = await _counted(pid, report, _cancelled(client))
    kept = {name for name, _count in found["types"]}
    assert "builtins.traceback" not in kept and "gateway.upstream.fast.FastCall" not in kept, found
    if mode == "legacy":
        assert found["garbage"] < CALLS, found


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_http_call_leaves_no_cycle(tmp_path: Path, mode: str) -> None:
    report = tmp_path / "gc.json"
    with url_process([sys.executable, *_serve(tmp_path, report), "--http", "127.0.0.1:0"]) as (url, proc):
        async with sdk_client(url, mode) as client:
            found = await _counted(proc.pid, report, _echo(client))
    assert found["garbage"] < CALLS, found


async def _never_asked(context: Any, params: Any) -> Any:
    raise AssertionError("the echo tool asks nothing")


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_of_a_client_that_can_be_asked_leaves_no_cycle(tmp_path: Path, mode: str, transport: str) -> None:
    """A client that declares elicitation: a 2026-07-28 call of it runs in a task of its own
    (its server may ask), whose context names the call, which held the task: about 17 objects
    a call, every call."""
    report = tmp_path / "gc.json"
    if transport == "stdio":
        async with _stdio_gateway(tmp_path, report, mode, elicitation_callback=_never_asked) as (client, pid):
            found = await _counted(pid, report, _echo(client))
    else:
        with url_process([sys.executable, *_serve(tmp_path, report), "--http", "127.0.0.1:0"]) as (url, proc):
            async with sdk_client(url, mode, elicitation_callback=_never_asked) as client:
                found = await _counted(proc.pid, report, _echo(client))
    assert found["garbage"] < CALLS, found


def _reloaded(log: Path, times: int) -> bool:
    """Whether the gateway logging to ``log`` has read its token file again ``times`` times (SIGHUP)."""
    return log.read_text(encoding="utf-8").count("token file reloaded (SIGHUP)") >= times


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_rotated_tokens_leave_no_principal_state_behind(tmp_path: Path, mode: str) -> None:
    """A token file rotated while serving (a new token in, the old one out, SIGHUP), each
    token making one call: the state of every principal ever admitted stayed, about 3 KB
    each, for as long as the gateway ran. Now a revoked principal's state goes with its token
    once no client holds it; the gateway's live ``ClientState`` objects are counted."""
    report, tokens, log = tmp_path / "gc.json", tmp_path / "tokens", tmp_path / "gateway.log"
    tokens.write_text("rotated-token-0\n", encoding="utf-8")
    config = write_config(tmp_path, {"d": demo("--tools", 2)}, gateway={"warm_start": False, "reload": "signal"})
    serve = ["gateway", "serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file", str(tokens)]
    with (
        log.open("w") as errlog,
        url_process([sys.executable, PROBE, str(report), *serve], stderr=errlog) as (url, proc),
    ):
        for i in range(ROTATIONS):
            if i:
                tokens.write_text(f"rotated-token-{i}\n", encoding="utf-8")
                os.kill(proc.pid, signal.SIGHUP)
                await wait_for(functools.partial(_reloaded, log, i))
            async with sdk_client(url, mode, headers={"Authorization": f"Bearer rotated-token-{i}"}) as client:
                await _echo(client)()
        os.kill(proc.pid, signal.SIGUSR1)
        await anyio.to_thread.run_sync(_wait_for, report, True)
        report.unlink()
        os.kill(proc.pid, signal.SIGUSR1)
        found: dict[str, Any] = await anyio.to_thread.run_sync(_wait_for, report, False)
    assert found["live"].get("gateway.state.session.ClientState", 0) <= 2, found["live"]


def test_the_probe_counts_cycles(tmp_path: Path) -> None:
    """The count can fail: a module that makes one cycle a step, between the two signals."""
    (tmp_path / "cyclic.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        f"for _ in range({CALLS}):\n"
        "    step = []\n"
        "    step.append(step)\n"
        "del step\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n",
        encoding="utf-8",
    )
    report = tmp_path / "gc.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    subprocess.run([sys.executable, PROBE, str(report), "cyclic"], check=True, timeout=60, env=env)
    found = json.loads(report.read_text(encoding="utf-8"))
    assert found["garbage"] >= CALLS and found["types"][0] == ["builtins.list", CALLS], found
