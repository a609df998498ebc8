"""Supervision claims: the restart backoff (1 s doubling to 60 s, reset after 5 minutes
healthy) as a pure policy and in a real gateway, and a remote server reconnected after a
failed liveness check (ping on the handshake, ``server/discover`` on 2026-07-28)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.downstream.backoff import Backoff
from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    alive,
    demo,
    gateway,
    sdk_client,
    text,
    url_process,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio

ROGUE = Path(__file__).with_name("rogue_life.py")


def test_backoff_doubles_to_60_s() -> None:
    policy = Backoff()
    assert [policy.delay(None) for _ in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_backoff_resets_after_5_minutes_healthy_only() -> None:
    policy = Backoff()
    assert [policy.delay(None) for _ in range(4)] == [1, 2, 4, 8]
    assert policy.delay(299.0) == 16  # ready, but not for 5 minutes: still backing off
    assert policy.delay(300.0) == 1  # 5 minutes healthy: the failures are history
    assert policy.delay(None) == 2


async def test_a_server_that_keeps_exiting_is_retried_after_1_2_4_s(tmp_path: Path) -> None:
    dying = {"command": PYTHON, "args": ["-c", "import sys; sys.exit(9)"]}
    config = write_config(tmp_path, {"dying": dying, "good": demo("--tools", 1, "--name", "good")})
    async with gateway(config) as gw:
        with anyio.fail_after(90):
            assert await gw.saw("[dying] failed: ", "; retrying in 4 s", timeout=60), gw.stderr()
            # One line per failure, its reason and its retry (it was logged twice: "failed: ...", "retrying").
            lines = [line for line in gw.stderr().splitlines() if "[dying] " in line]
            assert all("[dying] failed: " in line and "exit status 9" in line for line in lines[:3]), lines
            assert [line.split("; retrying in ")[1] for line in lines[:3]] == ["1 s", "2 s", "4 s"], lines


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_after_a_crash_waits_for_the_restart(tmp_path: Path, mode: str) -> None:
    # Claude Code restarts a server it runs itself at the next call to it: through the
    # gateway that call was refused for the backoff's first second ("is down ... retried in 1 s").
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--name", "d")})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            crashed = await client.call_tool("d__crash", {"status": 9})
            assert crashed.is_error and "exited during the call" in text(crashed), text(crashed)
            back = await client.call_tool("d__echo", {"text": "back"})
            assert not back.is_error and text(back) == "back", text(back)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_after_a_crash_whose_restart_fails_says_so(tmp_path: Path, mode: str) -> None:
    # Serves once; every later start exits: the waiting call is answered with that start's end.
    once = (
        "import sys; from pathlib import Path; m = Path(sys.argv[1]); m.exists() and sys.exit(3); m.touch(); "
        "from gateway.commands.demo import main; sys.exit(main(['--tools', '1', '--name', 'd']))"
    )
    config = write_config(tmp_path, {"d": {"command": PYTHON, "args": ["-c", once, str(tmp_path / "started")]}})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            assert (await client.call_tool("d__crash", {"status": 9})).is_error
            down = await client.call_tool("d__echo", {"text": "x"})
            assert down.is_error, text(down)
            assert text(down).startswith("Server 'd' is down (exited during start-up (exit status 3)"), text(down)
            assert text(down).endswith("it will be retried in 2 s."), text(down)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_restart_that_hangs_is_stopped_and_tried_again(tmp_path: Path, mode: str) -> None:
    """A server closes its stdout and is restarted; the restart's process hangs (never answers
    ``initialize``). It stayed "late" for good: every call failed, the server never back, though
    a new process would have started. A restart not ready within its ``startup_timeout`` (or
    twice its longest start) is stopped and tried again with the backoff, as the log and a call's
    error say; once a new process starts, the server is back."""
    hang = tmp_path / "hang"
    rogue = {"command": PYTHON, "args": [str(ROGUE), "--hang-if", str(hang)], "startup_timeout": 1}
    config = write_config(tmp_path, {"r": rogue})
    log = tmp_path / "serve.log"
    stopped = re.compile(r"\[r\] failed: its restart was not ready within [0-9.]+ s: stopped; retrying in 2 s")
    async with sdk_client(config, mode, errlog=log) as client:
        with anyio.fail_after(120):
            # Its first start done first: a start slowed past its 1 s (a loaded machine) that finds
            # the file hangs as a first start, which keeps "late" and joins when ready (documented).
            await wait_for(lambda: "[r] ready:" in log.read_text(), 60)
            hang.touch()
            assert (await client.call_tool("r__mute", {})).is_error  # its process ends: restarted, and hangs
            # (within 1 s, its startup_timeout, or twice its first start, should that take longer)
            await wait_for(lambda: stopped.search(log.read_text()), 60)
            down = await client.call_tool("r__storm", {})
            assert down.is_error and "not ready within " in text(down), text(down)
            hang.unlink()
            await wait_for(lambda: log.read_text().count("[r] ready:") == 2, 60)
            assert text(await client.call_tool("r__storm", {})) == "storm done"


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # (resources/subscribe)
async def test_a_prompt_or_resource_of_a_server_that_is_down_is_an_internal_error(tmp_path: Path, mode: str) -> None:
    """A tool of a server that is down answers an isError naming it (above); ``prompts/get``,
    ``resources/read``, ``completion/complete`` and ``resources/subscribe`` have no such result,
    and were answered -32602 (invalid params), which says the client's arguments were wrong:
    they were not. Now -32603, in the same words."""
    import mcp_types as types

    once = (
        "import sys; from pathlib import Path; m = Path(sys.argv[1]); m.exists() and sys.exit(3); m.touch(); "
        "from gateway.commands.demo import main; sys.exit(main(['--tools', '1', '--name', 'd', '--rich']))"
    )
    config = write_config(tmp_path, {"d": {"command": PYTHON, "args": ["-c", once, str(tmp_path / "started")]}})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            uri = (await client.list_resources()).resources[0].uri
            assert (await client.call_tool("d__crash", {"status": 9})).is_error
            greet = types.PromptReference(type="ref/prompt", name="d__greet")
            errors = [
                await _refused(client.get_prompt("d__greet", {"who": "x"})),
                await _refused(client.read_resource(uri)),
                await _refused(client.complete(greet, {"name": "who", "value": "a"})),
            ]
            if mode == "legacy":  # (a 2026-07-28 client watches over a listen stream: no request to refuse)
                errors.append(await _refused(client.subscribe_resource(uri)))
    for error in errors:
        assert error.code == -32603, error
        assert error.message.startswith("Server 'd' is down (exited during start-up"), error


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # (resources/subscribe)
async def test_a_server_that_exits_on_subscribe_is_named_in_the_error(tmp_path: Path) -> None:
    """``resources/subscribe`` to a server that exits before answering (found by fuzzing) was
    answered with the SDK's bare "Connection closed", naming neither the server nor the URI,
    where ``resources/read`` names both. Handshake era only: a 2026-07-28 client watches over a
    listen stream, with no request to answer."""
    import json

    surface = str(Path(__file__).resolve().parent / "surface_server.py")
    spec = json.dumps({"resources": ["x://1"], "overrides": {"resources/subscribe": "exit"}})
    config = write_config(tmp_path, {"s": {"command": PYTHON, "args": [surface, spec]}, "demo": demo("--tools", 1)})
    async with sdk_client(config, "legacy") as client:
        with anyio.fail_after(60):
            error = await _refused(client.subscribe_resource("x://1"))
            assert error.code == -32000, error
            assert error.message == "prefixgate: connection to server 's' closed during resources/subscribe 'x://1'"
            assert text(await client.call_tool("demo__echo", {"text": "still here"})) == "still here"


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # (resources/subscribe)
async def test_a_subscribe_to_a_server_that_does_not_offer_it_names_the_server(tmp_path: Path) -> None:
    """A resource of a server whose capabilities have no ``resources.subscribe`` (the classic
    FastMCP server; found by chaos: a URI no server lists goes to the first server offering
    resources) was subscribed there anyway, and its bare "Method not found" reached the client,
    from a gateway that advertises subscribe. The refusal now names the server and the URI,
    and the server is not asked. Handshake era only (a 2026-07-28 client has no subscribe)."""
    root = str(Path(__file__).resolve().parent.parent)
    classic = {"command": PYTHON, "args": ["-m", "tests.classic_server"], "cwd": root}
    config = write_config(tmp_path, {"c": classic, "d": demo("--tools", 1, "--rich", "--name", "d")})
    async with sdk_client(config, "legacy") as client:
        with anyio.fail_after(60):
            error = await _refused(client.subscribe_resource("classic://asked/x"))
            assert error.code == -32602, error
            assert error.message == (
                "prefixgate: server 'c' does not offer resources/subscribe (resource 'classic://asked/x')"
            ), error
            await client.unsubscribe_resource("classic://asked/x")  # (nothing was watched)
            await client.subscribe_resource("demo://d/readme")  # a server that offers it still watches
            assert text(await client.call_tool("d__echo", {"text": "still here"})) == "still here"


async def test_a_listen_stream_acknowledges_only_the_resources_it_watches(tmp_path: Path) -> None:
    """2026-07-28's ``subscriptions/listen`` acknowledges "the subset the server agreed to
    honor": a resource whose server does not offer subscribe (the classic FastMCP server) is
    not watched, and was acknowledged all the same, so a client waited for updates that could
    never come, told nothing. It is now left out of the acknowledgment; the rest is watched.
    (A handshake-era client's resources/subscribe of it is refused, the test above.)"""
    from mcp.client.subscriptions import ResourceUpdated

    root = str(Path(__file__).resolve().parent.parent)
    classic = {"command": PYTHON, "args": ["-m", "tests.classic_server"], "cwd": root}
    config = write_config(tmp_path, {"c": classic, "d": demo("--tools", 1, "--rich", "--name", "d")})
    async with sdk_client(config, "auto") as client:
        with anyio.fail_after(60):
            wanted = ["classic://asked/x", "demo://d/readme"]
            async with client.listen(tools_list_changed=True, resource_subscriptions=wanted) as events:
                assert events.honored.resource_subscriptions == ["demo://d/readme"], events.honored
                assert events.honored.tools_list_changed is True, events.honored
                assert text(await client.call_tool("d__touch", {})) == "touched"
                async for event in events:
                    assert isinstance(event, ResourceUpdated) and event.uri == "demo://d/readme", event
                    break


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # (resources/subscribe)
@pytest.mark.parametrize("mode", ERAS)
async def test_a_2026_server_that_does_not_offer_subscribe_is_not_watched(tmp_path: Path, mode: str) -> None:
    """A 2026-07-28 server whose capabilities lack ``resources.subscribe`` (it serves no
    ``subscriptions/listen``: tests/modern_server.py with ``$MODERN_SERVER_DEAF``) had its
    resource "watched" all the same, as a filter entry of a listen stream the gateway never
    opens: after a 10 s wait for that stream, a handshake-era client's subscribe succeeded
    and a listen stream acknowledged the URI, though no update could ever come. Both now go
    as for a handshake-era server that does not offer it: refused at once, naming it."""
    root = str(Path(__file__).resolve().parent.parent)
    deaf = {"command": PYTHON, "args": ["-m", "tests.modern_server"], "cwd": root, "env": {"MODERN_SERVER_DEAF": "1"}}
    config = write_config(tmp_path, {"m": deaf, "d": demo("--tools", 1, "--rich", "--name", "d")})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            if mode == "legacy":
                error = await _refused(client.subscribe_resource("modern://roots"))
                assert (error.code, error.message) == (
                    -32602,
                    "prefixgate: server 'm' does not offer resources/subscribe (resource 'modern://roots')",
                ), error
                return
            wanted = ["modern://roots", "demo://d/readme"]
            async with client.listen(resource_subscriptions=wanted) as events:
                assert events.honored.resource_subscriptions == ["demo://d/readme"], events.honored


async def _refused(request: Awaitable[Any]) -> Any:
    """The error a request is answered with (it must be one)."""
    from mcp.shared.exceptions import MCPError

    with pytest.raises(MCPError) as refused:
        await request
    return refused.value.error


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.real_processes  # the server's own child, by its pid
async def test_a_server_whose_child_holds_its_stdout_ends_with_its_exit(tmp_path: Path, mode: str) -> None:
    # The server forks a child that keeps its stdout open and exits during a call: the call
    # waited for call_timeout ("timed out"), and so did every later one, the server never
    # restarted. Its exit is the end, as without the child: the child's group is ended too.
    held = (
        "import os, sys, time; from pathlib import Path\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    time.sleep(600); os._exit(0)\n"
        "Path(sys.argv[1]).write_text(str(pid))\n"
        "from gateway.commands.demo import main; sys.exit(main(['--tools', '1', '--name', 'd']))"
    )
    child = tmp_path / "child.pid"
    server = {"command": PYTHON, "args": ["-c", held, str(child)], "call_timeout": 20}
    config = write_config(tmp_path, {"d": server})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            first = int(child.read_text())
            crashed = await client.call_tool("d__crash", {"status": 9})
            assert text(crashed) == "server 'd' exited during the call to 'crash' (exit status 9)", text(crashed)
            await wait_for(lambda: not alive(first))
            back = await client.call_tool("d__echo", {"text": "back"})
            assert not back.is_error and text(back) == "back", text(back)


@contextmanager
def http_demo(port: int = 0) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``demo-server --transport http`` on loopback; yields its URL and process."""
    command = [*GATEWAY, "demo-server", "--transport", "http", "--tools", "1", "--name", "web", "--port", str(port)]
    with url_process(command) as (url, proc):
        assert url.startswith("http://127.0.0.1:"), url
        yield url, proc


@pytest.mark.parametrize("protocol", ["auto", "modern"])
async def test_a_remote_server_is_reconnected_after_a_failed_liveness_check(tmp_path: Path, protocol: str) -> None:
    with http_demo() as (url, first):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        config = write_config(tmp_path, {"web": {"url": url, "protocol": protocol}})
        async with gateway(config, env={"PREFIXGATE_LIVENESS_INTERVAL": "0.5"}) as gw:
            with anyio.fail_after(90):
                echo = await gw.session.call_tool("web__echo", {"text": "one"})
                assert not echo.is_error
                first.kill()
                first.wait(timeout=10)
                # The liveness check fails: the connection is noted lost and a retry scheduled.
                # main: every 15 s, fixed; and the loss was reported as a start-up "failed".
                assert await gw.saw("; retrying in 1 s", timeout=10), gw.stderr()
                retry = next(line for line in gw.stderr().splitlines() if "[web] " in line and "retrying" in line)
                assert "[web] exited: connection lost: " in retry, retry
                down = await gw.session.call_tool("web__echo", {"text": "two"})
                assert down.is_error and "Server 'web'" in down.content[0].text  # type: ignore[union-attr]
                with http_demo(port):
                    while gw.stderr().count("[web] ready") < 2:
                        await anyio.sleep(0.1)
                    again = await gw.session.call_tool("web__echo", {"text": "three"})
                    assert not again.is_error, again
