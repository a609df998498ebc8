"""A server with ``instances = "per-principal"``: one process per principal over ``serve --http``.

A stdio server that holds per-user state (a login, a browser session, a memory) is shared by
every principal of a team gateway unless it runs one process each: then A's state is never
B's, and what the server asks for (an elicitation, over its back-channel, on one pipe) is its
principal's by construction, so it is asked at once even while another principal's call is in
flight (a shared pipe refuses it as unattributable). The shared process still gives the
catalog, and is never called. Real gateway over HTTP with two bearer tokens, a real stdio
server written the classic way (tests/instance_server.py), the real SDK client in both eras.
"""

from __future__ import annotations

import functools
import os
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated

from bench.common import url_process
from gateway.upstream.http import principal_of_token
from tests.helpers import ERAS, GATEWAY, PYTHON, alive, http_gateway, sdk_client, text, wait_for, write_config
from tests.test_principals import tokens_file

INSTANCE = str(Path(__file__).resolve().parent / "instance_server.py")
MODERN = str(Path(__file__).resolve().parent / "modern_server.py")
ALICE = {"Authorization": "Bearer token-of-alice"}
BOB = {"Authorization": "Bearer token-of-bob"}

pytestmark = pytest.mark.anyio


class Principal:
    """One token's callbacks: its elicitation answered with its name, or (``hold``) not until
    told; the log lines it was sent."""

    def __init__(self, name: str, *, hold: bool = False) -> None:
        self.name = name
        self.asked: list[str] = []
        self.logs: list[str] = []
        self.release = anyio.Event()
        if not hold:
            self.release.set()

    async def elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params.message)
        await self.release.wait()
        return types.ElicitResult(action="accept", content={"name": self.name})

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(str(params.data))

    def options(self) -> dict[str, Any]:
        return {"elicitation_callback": self.elicitation, "logging_callback": self.log}


def server(log: Path, **keys: Any) -> dict[str, Any]:
    return {
        "command": PYTHON,
        "args": [INSTANCE],
        "env": {"INSTANCE_LOG": str(log)},
        "instances": "per-principal",
        **keys,
    }


@contextmanager
def team_gateway(tmp_path: Path, client: dict[str, Any] | None = None, **keys: Any) -> Iterator[tuple[str, Path, Path]]:
    """A gateway over HTTP with Alice's and Bob's tokens in front of the per-principal server
    ``s`` (``client``: the ``[client]`` table): its URL, its stderr log, and the server's own
    log (``start PID``, ``call PID TOOL``)."""
    log = tmp_path / "instances.log"
    config = write_config(tmp_path, {"s": server(log, **keys)}, client=client or {})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, stderr):
            yield url, stderr, log


def lines(log: Path, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in log.read_text().splitlines() if line.startswith(kind + " ")]


@pytest.mark.parametrize("mode", ERAS)
async def test_each_principal_has_its_own_process_and_state(tmp_path: Path, mode: str) -> None:
    """Through the tool itself and through ``tool_call`` (declarations "on-demand")."""
    with team_gateway(tmp_path, client={"declarations": "on-demand"}) as (url, _, log):
        async with sdk_client(url, mode, headers=ALICE) as a, sdk_client(url, mode, headers=BOB) as b:
            with anyio.fail_after(60):
                assert "s__remember" in {t.name for t in (await a.list_tools()).tools}
                (shared,) = [pid for (pid,) in lines(log, "start")]  # the catalog's process, started first
                assert text(await a.call_tool("s__remember", {"value": "alice's"})) == ""
                assert text(await b.call_tool("s__remember", {"value": "bob's"})) == ""
                assert text(await a.call_tool("s__remember", {"value": "again"})) == "alice's"
                assert text(await b.call_tool("s__remember", {"value": "again"})) == "bob's"
                pid_a = text(await a.call_tool("s__pid", {}))
                pid_b = text(await b.call_tool("s__pid", {}))
                assert text(await a.call_tool("tool_call", {"name": "s__pid", "arguments": {}})) == pid_a
                assert text(await b.call_tool("tool_call", {"name": "s__remember", "arguments": {"value": "x"}})) == (
                    "again"
                )
    assert len({shared, pid_a, pid_b}) == 3
    assert {pid for pid, _ in lines(log, "call")} == {pid_a, pid_b}  # the shared process is never called


@pytest.mark.parametrize("mode", ERAS)
async def test_each_elicitation_goes_to_its_principal_at_once(tmp_path: Path, mode: str) -> None:
    """Alice leaves her question unanswered; Bob, meanwhile, is asked his own and answers it, in
    a tool call and in a prompts/get (the classic server asks during both)."""
    alice, bob = Principal("Alice", hold=True), Principal("Bob")
    with team_gateway(tmp_path) as (url, _, _log):
        async with (
            sdk_client(url, mode, headers=ALICE, elicitation_callback=alice.elicitation) as a,
            sdk_client(url, mode, headers=BOB, elicitation_callback=bob.elicitation) as b,
        ):
            with anyio.fail_after(90):
                answers: list[str] = []

                async def alices_call() -> None:
                    answers.append(text(await a.call_tool("s__elicit", {})))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(alices_call)
                    await wait_for(lambda: alice.asked)
                    assert text(await b.call_tool("s__elicit", {})) == "accept:{'name': 'Bob'}"
                    prompt = await b.get_prompt("s__greeting", {})
                    assert "Bob" in str(prompt.messages[0].content)
                    assert answers == []  # Alice's call still waits for her
                    alice.release.set()
                assert answers == ["accept:{'name': 'Alice'}"]
                assert alice.asked == ["What is your name?"]
                assert len(bob.asked) == 2 and all("name" in q for q in bob.asked)


@pytest.mark.parametrize("mode", ERAS)
async def test_an_instances_log_line_goes_to_its_principal_alone(tmp_path: Path, mode: str) -> None:
    """Alice's call logs while Bob's call to the server is in flight too: the line reaches Alice
    (a shared pipe would drop it: two principals in flight), never Bob."""
    alice, bob = Principal("Alice"), Principal("Bob", hold=True)
    opt_in = {"io.modelcontextprotocol/logLevel": "debug"} if mode == "auto" else None
    with team_gateway(tmp_path) as (url, _, _log):
        async with (
            sdk_client(url, mode, headers=ALICE, **alice.options()) as a,
            sdk_client(url, mode, headers=BOB, **bob.options()) as b,
        ):
            with anyio.fail_after(90):
                if mode == "legacy":
                    await a.set_logging_level("debug")
                    await b.set_logging_level("debug")
                async with anyio.create_task_group() as tg:
                    tg.start_soon(b.call_tool, "s__elicit", {})
                    await wait_for(lambda: bob.asked)
                    assert text(await a.call_tool("s__log", {}, meta=opt_in)) == "logged"
                    bob.release.set()
                assert alice.logs == ["classic log line"] and bob.logs == [], (alice.logs, bob.logs)


async def test_a_log_level_asked_after_an_instance_started_reaches_it(tmp_path: Path) -> None:
    """A 2026-07-28 server logs only at the level each request carries: the level a client asks
    for once its instance runs goes to that instance too, as to the servers."""
    alice = Principal("Alice")
    config = write_config(tmp_path, {"m": {"command": PYTHON, "args": [MODERN], "instances": "per-principal"}})
    with tokens_file(tmp_path, "token-of-alice") as tokens, http_gateway(config, "--token-file", str(tokens)) as found:
        async with sdk_client(found[0], "legacy", headers=ALICE, **alice.options()) as a:
            with anyio.fail_after(60):
                assert text(await a.call_tool("m__log", {})) == "logged"  # (its instance starts; no level yet)
                await a.set_logging_level("debug")
                assert text(await a.call_tool("m__log", {})) == "logged"
                await wait_for(lambda: alice.logs)
                assert alice.logs == ["modern log line"]


@pytest.mark.parametrize("mode", ERAS)
async def test_an_instance_that_cannot_start_fails_that_request_alone(tmp_path: Path, mode: str) -> None:
    """The shared process is up; Alice's own cannot start: her call is an isError naming the
    server and why, the process is not retried in the background (it was, with backoff, until
    idle, for nobody), the log lines name her principal, and her next call, once it can
    start, gets a process."""
    fail = tmp_path / "fail"
    env = {"INSTANCE_LOG": str(tmp_path / "i.log"), "INSTANCE_FAIL": str(fail)}
    with team_gateway(tmp_path, env=env) as (url, stderr, _log):
        async with sdk_client(url, mode, headers=ALICE) as a:
            with anyio.fail_after(60):
                assert "s__pid" in {t.name for t in (await a.list_tools()).tools}
                fail.touch()
                failed = await a.call_tool("s__pid", {})
                assert failed.is_error
                assert text(failed).startswith(
                    "Server 's': the process of this principal did not start: exited during start-up (exit status 3)"
                ), text(failed)
                assert "instance_server: told not to start" in text(failed) and "\n" not in text(failed)
                await anyio.sleep(3.5)  # past the first two steps of a supervisor's backoff (1 s, 2 s)
                alice = principal_of_token("token-of-alice")
                logged = stderr.read_text()
                assert logged.count(f"[s, principal {alice}] instance_server: told not to start") == 1, logged
                assert f"[s, principal {alice}] failed: exited during start-up (exit status 3)" in logged
                assert "; not retried in the background" in logged and "retrying in" not in logged
                assert f"the process of principal {alice} stopped" in logged
                fail.unlink()
                assert alive(int(text(await a.call_tool("s__pid", {}))))


@pytest.mark.parametrize("mode", ERAS)
async def test_an_instance_whose_start_hangs_is_replaced_by_the_next_request(tmp_path: Path, mode: str) -> None:
    """Alice's process hangs at its start: her call fails once ``startup_timeout`` has passed,
    the hung process is stopped then, and her next one, the server able to start again, gets
    a new one. (The hung one was kept: every later call failed at once with the same words,
    and each renewed its idle time, so it was never stopped.)"""
    hang, log = tmp_path / "hang", tmp_path / "i.log"
    env = {"INSTANCE_LOG": str(log), "INSTANCE_HANG": str(hang)}
    with team_gateway(tmp_path, env=env, startup_timeout=5) as (url, _, _log):
        async with sdk_client(url, mode, headers=ALICE) as a:
            with anyio.fail_after(60):
                assert "s__pid" in {t.name for t in (await a.list_tools()).tools}
                hang.touch()
                failed = await a.call_tool("s__pid", {})
                assert failed.is_error
                assert text(failed) == (
                    "Server 's': the process of this principal did not start: not ready within startup_timeout 5 s."
                )
                ((hung,),) = lines(log, "hang")
                await wait_for(lambda: not alive(int(hung)))  # stopped at once, not kept for nobody
                hang.unlink()
                again = await a.call_tool("s__pid", {})
                assert not again.is_error, text(again)
                assert alive(int(text(again)))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_crash_costs_its_principal_alone(tmp_path: Path, mode: str) -> None:
    with team_gateway(tmp_path) as (url, _, _log):
        async with sdk_client(url, mode, headers=ALICE) as a, sdk_client(url, mode, headers=BOB) as b:
            with anyio.fail_after(60):
                await b.call_tool("s__remember", {"value": "bob's"})
                pid_b = text(await b.call_tool("s__pid", {}))
                first_a = text(await a.call_tool("s__pid", {}))
                assert (await a.call_tool("s__crash", {})).is_error
                # Alice's next call starts her a new process; Bob's process and state are untouched.
                assert text(await a.call_tool("s__remember", {"value": "alice's"})) == ""
                assert text(await a.call_tool("s__pid", {})) not in (first_a, pid_b)
                assert text(await b.call_tool("s__pid", {})) == pid_b
                assert text(await b.call_tool("s__remember", {"value": "again"})) == "bob's"


async def test_an_idle_instance_stops_and_the_next_call_starts_one(tmp_path: Path) -> None:
    with team_gateway(tmp_path, idle_timeout=0.5) as (url, stderr, _log):
        async with sdk_client(url, "legacy", headers=ALICE) as a:
            with anyio.fail_after(60):
                await a.call_tool("s__remember", {"value": "alice's"})
                first = int(text(await a.call_tool("s__pid", {})))
                await wait_for(lambda: not alive(first))
                await wait_for(lambda: "stopped: idle for 0.5 s (its idle_timeout)" in stderr.read_text())
                second = int(text(await a.call_tool("s__pid", {})))
                assert second != first
                assert text(await a.call_tool("s__remember", {"value": "new"})) == ""  # a new process


@pytest.mark.parametrize("mode", ERAS)
async def test_max_instances_with_every_one_busy_is_a_clear_error(tmp_path: Path, mode: str) -> None:
    """One instance at most: Bob's call while Alice's holds it is refused, naming the server and
    the limit; once hers is done, Bob's next call gets the room (hers, idle, is stopped)."""
    alice = Principal("Alice", hold=True)
    with team_gateway(tmp_path, max_instances=1) as (url, _, _log):
        async with (
            sdk_client(url, mode, headers=ALICE, elicitation_callback=alice.elicitation) as a,
            sdk_client(url, mode, headers=BOB) as b,
        ):
            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(a.call_tool, "s__elicit", {})
                    await wait_for(lambda: alice.asked)
                    refused = await b.call_tool("s__pid", {})
                    assert refused.is_error
                    assert text(refused) == (
                        "Server 's' runs one process per principal, and all 1 it may run (its max_instances) "
                        "are serving other principals' requests (or resources they watch) now; try again later."
                    )
                    alice.release.set()
                pid_b = int(text(await b.call_tool("s__pid", {})))
                assert alive(pid_b)


async def test_max_instances_one_taken_in_turn_keeps_one_process(tmp_path: Path) -> None:
    """One instance at most, Alice then Bob then Bob again then Alice: each newcomer stops the
    one before, and Bob's second call finds his process and its state. (A stop that emptied
    the server's instances lost the newcomer's: each call then started one more process, and
    none was ever stopped.)"""
    with team_gateway(tmp_path, max_instances=1) as (url, _, log):
        async with sdk_client(url, "legacy", headers=ALICE) as a, sdk_client(url, "legacy", headers=BOB) as b:
            with anyio.fail_after(60):
                pid_a = int(text(await a.call_tool("s__pid", {})))
                assert text(await b.call_tool("s__remember", {"value": "bob's"})) == ""
                pid_b = int(text(await b.call_tool("s__pid", {})))
                await wait_for(lambda: not alive(pid_a))
                assert text(await b.call_tool("s__remember", {"value": "again"})) == "bob's"
                second_a = int(text(await a.call_tool("s__pid", {})))
                await wait_for(lambda: not alive(pid_b))
                assert alive(second_a)
    assert len(lines(log, "start")) == 4  # the shared process, Alice's, Bob's, Alice's again


async def test_serve_over_stdio_keeps_one_process(tmp_path: Path) -> None:
    """One principal over stdio: the shared process is its instance."""
    log = tmp_path / "instances.log"
    config = write_config(tmp_path, {"s": server(log)})
    async with sdk_client(config, "legacy") as client:
        with anyio.fail_after(60):
            assert text(await client.call_tool("s__remember", {"value": "mine"})) == ""
            pid = text(await client.call_tool("s__pid", {}))
            assert text(await client.call_tool("s__remember", {"value": "again"})) == "mine"
    assert [pid] == [p for (p,) in lines(log, "start")]


async def test_a_reload_that_changes_the_server_stops_its_instances_and_a_stop_stops_them_all(tmp_path: Path) -> None:
    """Its instances stop with a changed (or removed) server, and the gateway's stop stops the
    rest; the metrics count each server's running instances."""
    log = tmp_path / "instances.log"
    config = write_config(tmp_path, {"s": server(log)}, gateway={"reload": "signal"})
    errlog = tmp_path / "gateway.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file"]
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens, errlog.open("w") as stderr:
        with url_process([*command, str(tokens)], stderr=stderr) as (url, gateway):
            async with sdk_client(url, "legacy", headers=ALICE) as a, httpx2.AsyncClient() as http:
                with anyio.fail_after(60):
                    first = int(text(await a.call_tool("s__pid", {})))
                    metrics = await http.get(url.removesuffix("/mcp") + "/metrics", headers=ALICE)
                    assert 'prefixgate_server_instances{server="s"} 1.0' in metrics.text
                    write_config(tmp_path, {"s": server(log, idle_timeout=300)}, gateway={"reload": "signal"})
                    gateway.send_signal(signal.SIGHUP)
                    await wait_for(lambda: "config reloaded (SIGHUP): restarted 's'" in errlog.read_text())
                    await wait_for(lambda: not alive(first))
                    second = int(text(await a.call_tool("s__pid", {})))
                    assert second != first and alive(second)
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(30)
    await wait_for(lambda: not alive(second))


async def test_a_request_retried_after_a_reload_removed_its_server_starts_no_process(tmp_path: Path) -> None:
    """Alice's ``prompts/get`` of a 2026-07-28 server asks her a question (its ``input_required``,
    put to her handshake-era client), and a reload removes the server meanwhile: her answer's
    retry is refused, as the server's shared process refuses it, and starts no process of the
    removed server (it started one, which answered and ran on until its idle_timeout). A
    2026-07-28 client's retry is a new request, which finds no such server."""
    alice = Principal("Alice", hold=True)
    modern = {"command": PYTHON, "args": [MODERN], "instances": "per-principal"}
    other = {"command": PYTHON, "args": [INSTANCE]}  # (a config keeps one server at least)
    config = write_config(tmp_path, {"m": modern, "o": other}, gateway={"reload": "signal"})
    errlog = tmp_path / "gateway.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file"]
    with tokens_file(tmp_path, "token-of-alice") as tokens, errlog.open("w") as stderr:
        with url_process([*command, str(tokens)], stderr=stderr) as (url, gateway):
            async with sdk_client(url, "legacy", headers=ALICE, elicitation_callback=alice.elicitation) as a:
                with anyio.fail_after(60):
                    refused: list[MCPError] = []
                    async with anyio.create_task_group() as tg:

                        async def interview() -> None:
                            with pytest.raises(MCPError) as failed:
                                await a.get_prompt("m__interview", {})
                            refused.append(failed.value)

                        tg.start_soon(interview)
                        await wait_for(lambda: alice.asked)
                        write_config(tmp_path, {"o": other}, gateway={"reload": "signal"})
                        gateway.send_signal(signal.SIGHUP)
                        await wait_for(lambda: "config reloaded (SIGHUP): removed 'm'" in errlog.read_text())
                        alice.release.set()
                    assert "Server 'm'" in refused[0].error.message, refused
    assert errlog.read_text().count("[m] starting the process of principal") == 1


async def test_a_roots_change_reaches_its_principals_instance_alone(tmp_path: Path) -> None:
    """Alice's ``notifications/roots/list_changed`` (a handshake-era client's: a 2026-07-28 one
    has none) reaches her own process of the server, which hears it and lists her new roots;
    Bob's process, running meanwhile, hears nothing and keeps listing his."""
    from tests.test_roots_changed import Roots, _said

    alice_roots, bob_roots = Roots(), Roots()
    bob_roots.uri = "file:///bob"
    with team_gateway(tmp_path) as (url, _, _log):
        async with (
            sdk_client(url, "legacy", headers=ALICE, list_roots_callback=alice_roots.list_roots) as a,
            sdk_client(url, "legacy", headers=BOB, list_roots_callback=bob_roots.list_roots) as b,
        ):
            with anyio.fail_after(60):
                assert text(await a.call_tool("s__roots", {})) == "file:///work/one"  # each starts its process
                assert text(await b.call_tool("s__roots", {})) == "file:///bob"
                alice_roots.uri = "file:///work/two"
                await a.send_roots_list_changed()
                await wait_for(functools.partial(_said, a, "s__roots_changed", "roots changed: 1"), 10)
                assert text(await a.call_tool("s__roots", {})) == "file:///work/two"
                assert text(await b.call_tool("s__roots_changed", {})) == "roots changed: 0"
                assert text(await b.call_tool("s__roots", {})) == "file:///bob"


@pytest.mark.parametrize("mode", ERAS)
async def test_the_shared_process_asks_no_principal_for_anything(tmp_path: Path, mode: str) -> None:
    """The server lists its client's roots as soon as it is initialized (server-filesystem
    does). The shared process, which gives the catalog only, is refused at once; Alice's own
    process asks her and gets her roots. (The shared process's question used to wait for the
    next call, and Alice's call answered it: it learned her roots.)"""
    from tests.test_roots_changed import Roots

    asked: list[str] = []
    alice = Roots()
    alice.uri = "file:///alice"

    async def list_roots(context: Any) -> types.ListRootsResult:
        asked.append("roots")
        return await alice.list_roots(context)

    with team_gateway(tmp_path, args=[INSTANCE, "--roots-at-start"]) as (url, stderr, _log):
        await wait_for(lambda: "gives the catalog only" in stderr.read_text(), 30)
        async with sdk_client(url, mode, headers=ALICE, list_roots_callback=list_roots) as a:
            with anyio.fail_after(60):
                await a.call_tool("s__pid", {})  # her process starts and asks her

                async def listed() -> bool:
                    return text(await a.call_tool("s__startup_roots_listed", {})) == "file:///alice"

                await wait_for(listed, 20)
                await a.call_tool("s__pid", {})
    assert asked == ["roots"]


async def test_a_start_a_reload_cuts_short_says_so(tmp_path: Path) -> None:
    """Alice's first call waits for her process, which hangs at its start; a reload changes the
    server meanwhile and stops it: her call is told that, not "did not start: starting."."""
    log, hang = tmp_path / "instances.log", tmp_path / "hang"
    env = {"INSTANCE_LOG": str(log), "INSTANCE_HANG": str(hang)}
    config = write_config(tmp_path, {"s": server(log, env=env)}, gateway={"reload": "signal"})
    errlog = tmp_path / "gateway.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file"]
    with tokens_file(tmp_path, "token-of-alice") as tokens, errlog.open("w") as stderr:
        with url_process([*command, str(tokens)], stderr=stderr) as (url, gateway):
            async with sdk_client(url, "legacy", headers=ALICE) as a:
                with anyio.fail_after(60):
                    assert "s__pid" in {t.name for t in (await a.list_tools()).tools}
                    hang.touch()
                    async with anyio.create_task_group() as tg:
                        answers: list[Any] = []

                        async def first_call() -> None:
                            answers.append(await a.call_tool("s__pid", {}))

                        tg.start_soon(first_call)
                        await wait_for(lambda: log.exists() and "hang " in log.read_text())
                        write_config(
                            tmp_path, {"s": server(log, env=env, idle_timeout=300)}, gateway={"reload": "signal"}
                        )
                        gateway.send_signal(signal.SIGHUP)
                    (failed,) = answers
                    assert failed.is_error
                    assert text(failed) == (
                        "Server 's': the process of this principal was stopped before it was ready (config reload)."
                    ), text(failed)
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(30)


ROOT = str(Path(__file__).resolve().parent.parent)
UPDATES = {"command": PYTHON, "args": ["-m", "tests.updates_server"], "cwd": ROOT}
REPORTING = {
    "reports every change": ({**UPDATES, "env": {"UPDATES_SUBSCRIBED_ONLY": "0"}}, "updates://notes"),
    "reports what it is asked to": ({**UPDATES, "env": {"UPDATES_SUBSCRIBED_ONLY": "1"}}, "updates://notes"),
    "2026-07-28, its listen filter": ({"command": PYTHON, "args": [MODERN]}, "modern://roots"),
}
"""A server with a resource its ``touch`` tool changes, as it reports changes; the resource."""


class Watcher:
    """One client's watch of a resource, in its era's way: ``resources/subscribe`` (its updates
    on the session) or a 2026-07-28 listen stream naming it (its events); what it ``heard``."""

    def __init__(self, mode: str, uri: str) -> None:
        self.mode, self.uri = mode, uri
        self.heard: list[str] = []
        self.stream = anyio.CancelScope()

    def options(self) -> dict[str, Any]:
        """The client's options: a handshake-era session's updates come to its message handler."""

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                self.heard.append(str(message.params.uri))

        return {"message_handler": on_message} if self.mode == "legacy" else {}

    async def start(self, client: Any, tg: anyio.abc.TaskGroup) -> None:
        if self.mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (deprecated in 2026-07-28, not in this era)
                await client.subscribe_resource(self.uri)
            return
        ready = anyio.Event()
        tg.start_soon(self._listen, client, ready)
        await ready.wait()

    async def _listen(self, client: Any, ready: anyio.Event) -> None:
        with self.stream:
            async with client.listen(resource_subscriptions=[self.uri]) as events:
                ready.set()
                async for event in events:
                    if isinstance(event, ResourceUpdated):
                        self.heard.append(event.uri)

    async def stop(self, client: Any) -> None:
        if self.mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.unsubscribe_resource(self.uri)
        else:
            self.stream.cancel()  # (its listen stream closed)


@pytest.mark.parametrize("reporting", list(REPORTING))
@pytest.mark.parametrize("mode", ERAS)
async def test_an_update_from_a_principals_own_process_reaches_its_principal_alone(
    tmp_path: Path, mode: str, reporting: str
) -> None:
    """A per-principal server reports its resource changed: that principal's clients watching it
    hear of it, on a handshake-era session (``resources/subscribe``) and on a 2026-07-28 listen
    stream, and no other principal does. A listen stream heard nothing: the update went to the
    handshake-era sessions alone. And a server that reports only what it was asked to (as the
    spec's subscriptions have it) never reported at all: the watch was taken at the shared
    process, which is never called; each principal's own process is asked now (a 2026-07-28
    server: through the filter of the gateway's listen stream to that process)."""
    server, uri = REPORTING[reporting]
    config = write_config(tmp_path, {"u": {**server, "instances": "per-principal"}})
    alices, bobs = Watcher(mode, uri), Watcher(mode, uri)
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            async with (
                sdk_client(url, mode, headers=ALICE, **alices.options()) as alice,
                sdk_client(url, mode, headers=BOB, **bobs.options()) as bob,
                anyio.create_task_group() as tg,
            ):
                with anyio.fail_after(60):
                    await alices.start(alice, tg)
                    await bobs.start(bob, tg)
                    assert text(await alice.call_tool("u__touch", {})) == "touched"
                    await wait_for(lambda: alices.heard == [uri])
                    await anyio.sleep(0.5)  # (hers would have reached him by now: same loop, no queue of his)
                    assert bobs.heard == []
                    assert text(await bob.call_tool("u__touch", {})) == "touched"
                    await wait_for(lambda: bobs.heard == [uri])
                    await anyio.sleep(0.5)
                    assert alices.heard == [uri]  # (none of his)
                tg.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_watched_process_is_kept_and_its_next_one_is_asked_again(tmp_path: Path, mode: str) -> None:
    """A principal's process of a per-principal server asked to report a resource is kept past
    its ``idle_timeout`` (stopped, it would report nothing), and when it dies the process that
    replaces it is asked again: a client watching the resource hears its next change too."""
    server, uri = REPORTING["reports what it is asked to"]
    config = write_config(tmp_path, {"u": {**server, "instances": "per-principal", "idle_timeout": 0.5}})
    watcher = Watcher(mode, uri)
    with tokens_file(tmp_path, "token-of-alice") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, log):
            async with (
                sdk_client(url, mode, headers=ALICE, **watcher.options()) as alice,
                anyio.create_task_group() as tg,
            ):
                with anyio.fail_after(60):
                    await watcher.start(alice, tg)
                    await anyio.sleep(1.5)  # (three idle_timeouts)
                    assert "idle for 0.5 s" not in log.read_text()
                    assert text(await alice.call_tool("u__touch", {})) == "touched"
                    await wait_for(lambda: watcher.heard == [uri])
                    os.kill(int(text(await alice.call_tool("u__pid", {}))), signal.SIGKILL)
                    await wait_for(lambda: log.read_text().count("] ready:") >= 3)  # (the shared, hers, her next)
                    assert text(await alice.call_tool("u__touch", {})) == "touched"
                    await wait_for(lambda: watcher.heard == [uri, uri])
                    await watcher.stop(alice)  # no longer watched: it idles out as any process
                    await wait_for(lambda: "idle for 0.5 s" in log.read_text())
                tg.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_watched_process_a_reload_stops_is_started_again_for_its_watch(tmp_path: Path, mode: str) -> None:
    """A reload that changes a per-principal server stops its processes; one a principal's watch
    kept was started again only by that principal's next request, so a client that only listens
    heard no more of the resource's changes. It is started again, and asked again, at once."""
    server, uri = REPORTING["reports what it is asked to"]
    ticking = {**server, "instances": "per-principal", "env": {**server["env"], "UPDATES_EVERY": "0.2"}}
    config = write_config(tmp_path, {"u": ticking}, gateway={"reload": "signal"})
    watcher = Watcher(mode, uri)
    errlog = tmp_path / "gateway.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file"]
    with tokens_file(tmp_path, "token-of-alice") as tokens, errlog.open("w") as stderr:
        with url_process([*command, str(tokens)], stderr=stderr) as (url, gateway):
            async with (
                sdk_client(url, mode, headers=ALICE, **watcher.options()) as alice,
                anyio.create_task_group() as tg,
            ):
                with anyio.fail_after(60):
                    await watcher.start(alice, tg)
                    await wait_for(lambda: len(watcher.heard) >= 2)  # (her process reports, every 0.2 s)
                    changed = {**ticking, "env": {**ticking["env"], "UPDATES_CHANGED": "1"}}
                    write_config(tmp_path, {"u": changed}, gateway={"reload": "signal"})
                    gateway.send_signal(signal.SIGHUP)
                    await wait_for(lambda: "config reloaded (SIGHUP): restarted 'u'" in errlog.read_text())
                    await wait_for(lambda: errlog.read_text().count("] ready:") >= 4)  # (both again)
                    watcher.heard.clear()
                    await wait_for(lambda: len(watcher.heard) >= 2)  # (no request of hers meanwhile)
                tg.cancel_scope.cancel()
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(30)
