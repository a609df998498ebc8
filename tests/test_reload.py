"""A changed config taken without a restart (issue 30): a diff, and the same bytes when they do not change.

Real gateways over stdio and HTTP, real demo servers, the real SDK client in both eras. The
config file is rewritten while the gateway serves; the gateway's own processes are read
from ``/proc`` to show which servers were left running and which were stopped.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from bench.common import url_process
from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    Notifications,
    alive,
    demo,
    run_cli,
    schemas_server,
    sdk_client,
    text,
    wait_for,
    write_config,
)

STATE: dict[str, Any] = {}

pytestmark = pytest.mark.real_processes  # counts the gateway's own children in /proc


def servers(*names: str) -> dict[str, Any]:
    return {name: demo("--tools", 1, "--name", name) for name in names}


def children(pid: int) -> set[int]:
    """The gateway's servers: its children but the warden (gateway/downstream/warden.py)."""
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split() if not is_warden(int(p))}


def is_warden(pid: int) -> bool:
    try:
        return b"warden.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def gateway_pid(config: Path) -> int:
    """The ``serve`` process of ``config`` (a stdio gateway the SDK client started)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and str(config).encode() in argv:
                return int(entry.name)
    raise AssertionError("no gateway process")


@contextlib.asynccontextmanager
async def changes(client: Any, mode: str, notes: Notifications) -> AsyncIterator[Callable[[], int]]:
    """How many tools list changes the client has heard of: on its session (handshake era) or
    on its listen stream (2026-07-28)."""
    if mode == "legacy":
        yield notes.tool_changes
        return
    events: list[object] = []
    async with client.listen(tools_list_changed=True) as subscription, anyio.create_task_group() as tg:

        async def collect() -> None:
            async for event in subscription:
                events.append(event)

        tg.start_soon(collect)
        yield lambda: len(events)
        tg.cancel_scope.cancel()


async def names(client: Any) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


@contextlib.contextmanager
def http_serving(config: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int, Path]]:
    log = config.parent / f"http-{os.urandom(3).hex()}.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", *extra]
    with log.open("w") as errlog, url_process(command, env=env, stderr=errlog) as (url, proc):
        yield url, proc.pid, log


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, transport: str, mode: str, config: Path, notes: Notifications
) -> AsyncIterator[tuple[Any, int, Path]]:
    """A gateway of ``config`` over ``transport`` and the SDK client on it: (client, gateway pid, its log)."""
    if transport == "stdio":
        log = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=log, message_handler=notes) as client:
            yield client, gateway_pid(config), log
        return
    with http_serving(config) as (url, pid, log):
        async with sdk_client(url, mode, message_handler=notes) as client:
            if mode == "legacy":
                # The SDK client opens its standalone GET stream (where list_changed comes) in
                # the background after initialize; a notification sent before it is up is lost.
                await anyio.sleep(1)
            yield client, pid, log


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_added_then_removed_is_one_epoch_each_and_the_other_keeps_running(
    tmp_path: Path, transport: str, mode: str
) -> None:
    config = write_config(tmp_path, servers("a"))
    notes = Notifications()
    async with serving(tmp_path, transport, mode, config, notes) as (client, pid, log):
        assert {n for n in await names(client) if n.startswith("a__")}
        (a_pid,) = children(pid)
        async with changes(client, mode, notes) as heard:
            write_config(tmp_path, servers("a", "b"))
            await wait_for(lambda: heard() == 1)
            listed = await names(client)
            assert "b__echo" in listed and "a__echo" in listed
            assert a_pid in children(pid) and len(children(pid)) == 2, "a kept running: the same process"
            b_pid = (children(pid) - {a_pid}).pop()
            assert text(await client.call_tool("b__echo", {"text": "new"})) == "new"

            write_config(tmp_path, servers("b"))
            await wait_for(lambda: heard() == 2)
            assert not [n for n in await names(client) if n.startswith("a__")]
            await wait_for(lambda: not alive(a_pid) and children(pid) == {b_pid})  # stopped and reaped
            assert text(await client.call_tool("b__echo", {"text": "still"})) == "still"
        assert heard() == 2, "one epoch each"
    logged = log.read_text()
    assert "config reloaded (the file changed): added 'b'" in logged
    assert "config reloaded (the file changed): removed 'a'" in logged


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_edit_made_while_a_warm_start_answers_is_reloaded(tmp_path: Path, mode: str) -> None:
    """A warm start answers from the record before the gateway has imported its machinery;
    the config is edited at once. The edit is a change: the watch compares with the file as
    it was read. It used to compare with the file as it was once the imports were done, so
    the edit was taken as the config served, and never applied."""
    config = write_config(tmp_path, servers("a"))
    assert run_cli("catalog", "--config", str(config)).returncode == 0  # leaves the warm-start record
    log = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=log) as client:
        assert "a__echo" in await names(client)  # from the record
        write_config(tmp_path, servers("a", "b"))
        await wait_for(lambda: "config reloaded (the file changed): added 'b'" in log.read_text())
        await wait_for(functools.partial(_has, client, "b__echo"))  # (published a moment after "[b] ready")
        assert text(await client.call_tool("b__echo", {"text": "new"})) == "new"
    assert "from the record before the gateway was up" in log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_restarted_server_keeps_its_tools_published_until_it_lists_its_own(
    tmp_path: Path, transport: str, mode: str
) -> None:
    """A server whose table changed restarts. Its tools stay published meanwhile (a call waits
    for the new process): the same tools are no new epoch at all (no prompt cache miss), and
    other tools one epoch. Before, the restart was two epochs: one without its tools, then one
    with them, and a call in between was refused as unknown."""
    config = write_config(tmp_path, servers("a", "b"))
    notes = Notifications()
    async with serving(tmp_path, transport, mode, config, notes) as (client, pid, log):
        before = await names(client)
        a_pid = next(p for p in children(pid) if b"name\0a" in Path(f"/proc/{p}/cmdline").read_bytes())
        async with changes(client, mode, notes) as heard:
            write_config(tmp_path, {**servers("b"), "a": {**servers("a")["a"], "env": {"ROTATED": "1"}}})
            await wait_for(lambda: a_pid not in children(pid))
            assert text(await client.call_tool("a__echo", {"text": "during"})) == "during"
            await wait_for(lambda: "config reloaded (the file changed): restarted 'a'" in log.read_text())
            await wait_for(lambda: "[a] ready" in log.read_text().split("restarted 'a'", 1)[1])
            assert await names(client) == before and heard() == 0  # the same bytes: no epoch
            write_config(tmp_path, {**servers("b"), "a": demo("--tools", 2, "--name", "a")})
            await wait_for(lambda: heard() == 1)
            after = await names(client)
            assert set(before) < set(after)
            await anyio.sleep(1)
            assert heard() == 1, "one epoch for the other tools"
    history = (tmp_path / "state" / "history" / "default.jsonl").read_text().splitlines()
    # (the reload kept the bytes: the new tools came with the server's own listing)
    assert [json.loads(line)["reason"] for line in history] == ["the discovery barrier", "server 'a' is ready"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_policy_change_refuses_at_once_and_publishes_no_new_bytes(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, servers("a"))
    notes = Notifications()
    async with serving(tmp_path, "stdio", mode, config, notes) as (client, _pid, log):
        before = [t.model_dump(by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
        assert not (await client.call_tool("a__echo", {"text": "x"})).is_error
        async with changes(client, mode, notes) as heard:
            write_config(tmp_path, servers("a"), policy={"deny": ["a__echo"]})
            await wait_for(lambda: "config reloaded" in log.read_text())
            refused = await client.call_tool("a__echo", {"text": "x"})
            assert refused.is_error and "denied by policy" in text(refused)
            after = [t.model_dump(by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
            assert after == before
            assert heard() == 0
    assert "new epoch" not in log.read_text()


@pytest.mark.anyio
async def test_a_comment_changes_nothing_a_bad_file_keeps_the_old_config_and_a_good_one_then_applies(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, servers("a"))
    notes = Notifications()
    async with serving(tmp_path, "stdio", "legacy", config, notes) as (client, pid, log):
        (a_pid,) = children(pid)
        original = config.read_text()
        config.write_text("# a comment\n" + original.replace(" = ", "  =  "))
        await wait_for(lambda: "nothing to apply" in log.read_text())

        config.write_text(original + "[servers.b\n")
        await wait_for(lambda: "refused" in log.read_text())
        refusal = [line for line in log.read_text().splitlines() if "refused" in line]
        assert len(refusal) == 1 and "is not valid TOML" in refusal[0], refusal
        assert refusal[0].endswith("; the running config keeps serving")
        assert text(await client.call_tool("a__echo", {"text": "served"})) == "served"

        write_config(tmp_path, servers("a"), client={"profile": "mcp"})
        await wait_for(lambda: "config reloaded" in log.read_text())
        assert children(pid) == {a_pid} and notes.tool_changes() == 0  # mcp names these tools alike
    assert "new epoch" not in log.read_text()


@pytest.mark.anyio
async def test_a_change_of_state_dir_refuses_the_whole_reload(tmp_path: Path) -> None:
    config = write_config(tmp_path, servers("a"))
    notes = Notifications()
    async with serving(tmp_path, "stdio", "legacy", config, notes) as (client, pid, log):
        write_config(tmp_path, servers("a", "b"), gateway={"state_dir": str(tmp_path / "elsewhere")})
        await wait_for(lambda: "refused" in log.read_text())
        assert (
            "refused: gateway.state_dir cannot change while serving (restart prefixgate to change it); "
            "the running config keeps serving, nothing of the new file is applied"
        ) in log.read_text()
        await anyio.sleep(1)
        assert len(children(pid)) == 1 and "b__echo" not in await names(client)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_audit_arguments_turned_off_applies_and_the_audit_log_itself_cannot_change(
    tmp_path: Path, mode: str
) -> None:
    """``audit_arguments`` turned off by a reload was taken ("no server changed") and
    ignored: the arguments kept being written. ``audit`` itself cannot change while serving:
    refused in one line, as ``state_dir`` is, not silently ignored."""
    config = write_config(tmp_path, servers("a"), telemetry={"audit": True, "audit_arguments": True})
    audit = tmp_path / "state" / "audit" / "calls.jsonl"
    async with serving(tmp_path, "stdio", mode, config, Notifications()) as (client, _pid, log):
        assert text(await client.call_tool("a__echo", {"text": "one"})) == "one"
        write_config(tmp_path, servers("a"), telemetry={"audit": True, "audit_arguments": False})
        await wait_for(lambda: "config reloaded" in log.read_text())
        assert text(await client.call_tool("a__echo", {"text": "two"})) == "two"
        write_config(tmp_path, servers("a"), telemetry={"audit": False})
        await wait_for(lambda: "refused" in log.read_text())
        assert "refused: telemetry.audit cannot change while serving (restart prefixgate to change it)" in (
            log.read_text()
        )
        assert text(await client.call_tool("a__echo", {"text": "three"})) == "three"
    await wait_for(lambda: audit.exists() and len(audit.read_text().splitlines()) == 3)
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    assert [line.get("arguments") for line in lines] == ['{"text":"one"}', None, None]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_in_flight_on_a_removed_server_ends_with_is_error(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, servers("a", "s"))
    notes = Notifications()
    async with serving(tmp_path, "stdio", mode, config, notes) as (client, _pid, log):
        results: list[Any] = []
        started = anyio.Event()

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        async def slow() -> None:
            results.append(await client.call_tool("s__slow", {"seconds": 30}, progress_callback=progressed))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            with anyio.fail_after(20):
                await started.wait()  # (on its server: it reports progress)
            write_config(tmp_path, servers("a"))
            with anyio.fail_after(20):
                while not results:
                    await anyio.sleep(0.05)
        (result,) = results
        assert result.is_error
        assert text(result) == "server 's' was stopped by a config reload during the call to 'slow'"
        assert text(await client.call_tool("a__echo", {"text": "fine"})) == "fine"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_sighup_reloads_an_http_gateway_and_replicas_reloading_one_file_publish_the_same_bytes(
    tmp_path: Path, mode: str
) -> None:
    config = write_config(tmp_path, servers("a"), gateway={"reload": "signal"})
    with http_serving(config) as (one, one_pid, _), http_serving(config) as (two, two_pid, log):
        write_config(tmp_path, servers("a", "b"), gateway={"reload": "signal"})
        await anyio.sleep(1)
        async with sdk_client(one, mode) as client:
            assert "b__echo" not in await names(client)  # "signal": the file alone changes nothing
        for pid in (one_pid, two_pid):
            os.kill(pid, signal.SIGHUP)
        published = []
        for url in (one, two):
            async with sdk_client(url, mode) as client:
                await wait_for(functools.partial(_has, client, "b__echo"))
                tools = (await client.list_tools()).tools
                published.append(json.dumps([t.model_dump(by_alias=True, exclude_none=True) for t in tools]))
        assert published[0] == published[1]
        assert alive(one_pid) and alive(two_pid)
    assert "config reloaded (SIGHUP): added 'b'" in log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_calls_that_race_a_reload_removing_their_server_end_as_is_error(tmp_path: Path, mode: str) -> None:
    """A reload stops and swaps out a removed server first and publishes the next epoch after
    its rebuild: a 2026-07-28 client's call resolved in the epoch before, to the server just
    removed, failed on the server lookup (``KeyError``: "Internal server error" and a traceback
    on stderr). A catalog of many tools makes the rebuild long; calls go on until one is refused."""
    kept = {"big": demo("--tools", 800, "--name", "big")}
    config = write_config(tmp_path, {**kept, **servers("a")}, client={"max_functions": 4096})
    with http_serving(config) as (url, _pid, log):
        async with sdk_client(url, mode) as client:
            assert text(await client.call_tool("a__echo", {"text": "x"})) == "x"
            write_config(tmp_path, kept, client={"max_functions": 4096})
            with anyio.fail_after(120):
                while not (result := await client.call_tool("a__echo", {"text": "x"})).is_error:
                    pass
            assert "no longer available" in text(result) or "stopped by a config reload" in text(result)
            assert not (await client.call_tool("big__echo", {"text": "y"})).is_error
    assert "Traceback" not in log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_prompts_got_while_a_reload_removes_their_server_are_refused_naming_it(tmp_path: Path, mode: str) -> None:
    """As tool calls above: a ``prompts/get`` routed by the prompts listed before the reload
    removed their server failed on the server lookup ("Internal server error")."""
    kept = {"big": demo("--tools", 800, "--name", "big")}
    config = write_config(tmp_path, {**kept, "a": demo("--tools", 1, "--name", "a", "--rich")})
    with http_serving(config) as (url, _pid, log):
        async with sdk_client(url, mode) as client:
            assert (await client.get_prompt("a__greet", {"who": "x"})).messages
            write_config(tmp_path, kept)
            with anyio.fail_after(120), pytest.raises(MCPError) as refused:
                while True:
                    await client.get_prompt("a__greet", {"who": "x"})
            message = refused.value.error.message  # (one in flight as 'a' stops: that it closed)
            assert message == "Unknown prompt: not among the prompts prefixgate lists" or "server 'a'" in message, (
                message
            )
    assert "Traceback" not in log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_reload_mode_itself_is_reloaded(tmp_path: Path, mode: str) -> None:
    """``reload`` changed while serving decides the next change: "watch" -> "signal" stops
    taking edits until SIGHUP, a SIGHUP's "watch" takes them again, and "off" leaves SIGHUP
    reloading nothing while the gateway goes on serving."""
    config = write_config(tmp_path, servers("a"))
    with http_serving(config) as (url, pid, log):
        async with sdk_client(url, mode) as client:
            write_config(tmp_path, servers("a"), gateway={"reload": "signal"})
            await wait_for(lambda: log.read_text().count("config reloaded (the file changed)") == 1)
            write_config(tmp_path, servers("a", "b"), gateway={"reload": "signal"})
            await anyio.sleep(1.5)  # three looks at the file
            assert "b__echo" not in await names(client)  # "signal" now: the edit waits
            write_config(tmp_path, servers("a", "b"), gateway={"reload": "watch"})
            os.kill(pid, signal.SIGHUP)
            await wait_for(functools.partial(_has, client, "b__echo"))
            write_config(tmp_path, servers("a", "b", "c"), gateway={"reload": "off"})  # "watch" again: taken
            await wait_for(functools.partial(_has, client, "c__echo"))
            write_config(tmp_path, servers("a"), gateway={"reload": "off"})
            os.kill(pid, signal.SIGHUP)
            await wait_for(lambda: 'SIGHUP: the config is not reloaded: [gateway] reload = "off"' in log.read_text())
            await anyio.sleep(1.5)
            assert {"b__echo", "c__echo"} <= set(await names(client))  # "off": neither the edit nor SIGHUP
            assert text(await client.call_tool("c__echo", {"text": "still"})) == "still"
            assert alive(pid)
    assert log.read_text().count("config reloaded (") == 3


async def _has(client: Any, name: str) -> bool:
    return name in await names(client)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_profiles_view_changes_in_that_profile_alone(tmp_path: Path, mode: str) -> None:
    """One HTTP gateway serving /mcp and /mcp/p: a reload that changes only profile p's view
    starts an epoch there, and /mcp keeps its bytes (and its servers, untouched)."""
    config = write_config(tmp_path, servers("a"), profiles={"p": {}})
    with http_serving(config) as (url, pid, log):
        async with sdk_client(url, mode) as default, sdk_client(url + "/p", mode) as profile:
            before = await names(default)
            assert await names(profile) == before
            (a_pid,) = children(pid)
            write_config(tmp_path, servers("a"), profiles={"p": {"exclude": ["a__echo"]}})
            await wait_for(lambda: _lacks(profile, "a__echo"))
            assert await names(default) == before and children(pid) == {a_pid}
    history = tmp_path / "state" / "history"
    reasons = {
        name: [json.loads(x)["reason"] for x in (history / f"{name}.jsonl").read_text().splitlines()]
        for name in ("default", "p")
    }
    assert reasons["default"] == ["the discovery barrier"]
    assert reasons["p"] == ["the discovery barrier", "config reload"]
    assert "config reloaded (the file changed): no server changed" in log.read_text()


async def _lacks(client: Any, name: str) -> bool:
    return name not in await names(client)


def test_a_bad_reload_setting_is_a_config_error() -> None:
    from gateway.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"^gateway\.reload: "):
        parse_config({"gateway": {"reload": "sometimes"}, "servers": {"a": {"command": "x"}}}, env={})


def _status(url: str, token: str) -> int:
    """The HTTP status of a POST bearing ``token`` (401: refused before anything)."""
    import urllib.error
    import urllib.request

    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_token_file_is_read_again_when_it_changes_and_on_sighup(tmp_path: Path, mode: str) -> None:
    """A token added or revoked took a restart, which ends every handshake-era session: the
    file is now read again when it changes (``reload = "watch"``) and on SIGHUP; a file that
    does not parse keeps the tokens in use, with one line that names no token."""
    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-alice\n")
    config = write_config(tmp_path, servers("a"))
    with http_serving(config, "--token-file", str(tokens)) as (url, pid, log):
        assert _status(url, "token-of-bob") == 401
        tokens.write_text("token-of-alice\ntoken-of-bob\n")
        await wait_for(lambda: _status(url, "token-of-bob") != 401)
        async with sdk_client(url, mode, headers={"Authorization": "Bearer token-of-bob"}) as bob:
            assert "a__echo" in await names(bob)
        tokens.write_text("token-of-bob\ntoken-of-bob\n")  # refused: the same token twice
        await wait_for(lambda: "token file reload (the token file changed) refused" in log.read_text())
        assert _status(url, "token-of-alice") != 401
        assert "token-of" not in log.read_text()  # principals are named by hash, never by token
        tokens.write_text("token-of-bob\n")  # Alice's revoked
        await wait_for(lambda: _status(url, "token-of-alice") == 401)
        async with sdk_client(url, mode, headers={"Authorization": "Bearer token-of-bob"}) as bob:
            assert "a__echo" in await names(bob)
    config = write_config(tmp_path, servers("a"), gateway={"reload": "signal"})
    tokens.write_text("token-of-alice\n")
    with http_serving(config, "--token-file", str(tokens)) as (url, pid, log):
        tokens.write_text("token-of-alice\ntoken-of-carol\n")
        await anyio.sleep(1.5)
        assert _status(url, "token-of-carol") == 401  # "signal": the file alone changes nothing
        os.kill(pid, signal.SIGHUP)
        await wait_for(lambda: _status(url, "token-of-carol") != 401)
        # (the tokens are put in force before the line is logged, by the log's own thread)
        await wait_for(lambda: "token file reloaded (SIGHUP): 2 tokens; added token-" in log.read_text())
    assert "token-of" not in log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("change", ["revoked", "profiles"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_taken_away_ends_its_open_streams(tmp_path: Path, mode: str, change: str) -> None:
    """A token revoked, or limited to another profile, was refused from its next request on,
    but what it held open stayed: a handshake-era session's GET stream and a 2026-07-28 listen
    stream, each carrying what was meant for it (changes, updates, a server's log lines and
    requests) for as long as its client read it. Both end now; another token's stay."""
    import httpx2

    from tests.helpers import ACCEPT, INIT

    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-alice\ntoken-of-bob\n")
    config = write_config(tmp_path, servers("a"), profiles={"review": {}})
    bob, alice = ({**ACCEPT, "authorization": f"Bearer token-of-{who}"} for who in ("bob", "alice"))
    with http_serving(config, "--token-file", str(tokens)) as (url, pid, log):
        async with contextlib.AsyncExitStack() as stack:
            held = {}
            for who, headers in (("bob", bob), ("alice", alice)):
                if mode == "auto":
                    client = await stack.enter_async_context(sdk_client(url, mode, headers=headers))
                    held[who] = await stack.enter_async_context(client.listen(tools_list_changed=True))
                else:
                    http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60))
                    opened = await http.post(url, json=INIT, headers=headers)
                    session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
                    await http.post(
                        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
                    )
                    stream = await stack.enter_async_context(
                        http.stream("GET", url, headers={**session, "accept": "text/event-stream"})
                    )
                    assert stream.status_code == 200
                    held[who] = stream.aiter_bytes()
            tokens.write_text("token-of-alice\n" + ("token-of-bob profiles=review\n" if change == "profiles" else ""))
            with anyio.fail_after(60):  # (the token file is watched: read again within a second or two)
                async for _ in held["bob"]:
                    pass  # (nothing is sent on a quiet stream: it ends)
            assert _status(url, "token-of-bob") == {"profiles": 403, "revoked": 401}[change]
            assert (_status(url + "/review", "token-of-bob") == 401) == (change == "revoked")
            with anyio.move_on_after(1) as alices:  # (hers stays open: still waiting for something to come)
                async for _ in held["alice"]:
                    pass
            assert alices.cancelled_caught


@pytest.mark.anyio
@pytest.mark.parametrize("change", ["revoked", "profiles"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_taken_away_stops_its_calls_and_their_servers_are_told(
    tmp_path: Path, mode: str, change: str
) -> None:
    """A token revoked, or limited to another profile, ended its sessions and listen streams,
    but a 2026-07-28 call already running ran to its end on its server, and its answer was
    delivered; a call waiting its turn among the principal's places was served when its turn
    came. Each stops now: the running call is cancelled (its server told), the waiting one
    never reaches a server, and both are answered with the refusal. Another token's call runs on."""
    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-alice\ntoken-of-bob\n")
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--name", "d")}, profiles={"review": {}})
    env = {"PREFIXGATE_HTTP_REQUESTS_PER_PRINCIPAL": "1"}  # (Bob's second call waits for his first)
    with http_serving(config, "--token-file", str(tokens), "--log-level", "debug", env=env) as (url, pid, log):
        bearer = {who: {"Authorization": f"Bearer token-of-{who}"} for who in ("alice", "bob")}
        async with (
            sdk_client(url, mode, headers=bearer["bob"]) as bob,
            sdk_client(url, mode, headers=bearer["alice"]) as alice,
        ):
            outcomes: dict[str, str] = {}
            started = anyio.Event()

            async def progressed(progress: float, total: float | None, message: str | None) -> None:
                started.set()

            async def call(name: str, client: Any, seconds: float, **options: Any) -> None:
                try:
                    result = await client.call_tool("d__slow", {"seconds": seconds, "steps": 600}, **options)
                    outcomes[name] = text(result)
                except MCPError as exc:
                    outcomes[name] = exc.error.message

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(functools.partial(call, "running", bob, 600, progress_callback=progressed))
                    await started.wait()  # (on its server: it reports progress)
                    tg.start_soon(call, "waiting", bob, 0.1)
                    # (hers outlasts the token file's next read, a poll of 0.5 s and a settling of
                    # 0.3 s, by 3x: it runs on after Bob's calls are refused, and is answered last)
                    tg.start_soon(call, "alice's", alice, 4)
                    await wait_for(lambda: "requests being answered: the next waits its turn" in log.read_text())
                    kept = "token-of-bob profiles=review\n" if change == "profiles" else ""
                    tokens.write_text("token-of-alice\n" + kept)
        refused = "prefixgate: this token may no longer use this endpoint"
        assert outcomes == {"running": refused, "waiting": refused, "alice's": "slept 4 s"}
        assert list(outcomes)[-1] == "alice's"  # (still running when Bob's were refused)
        await wait_for(lambda: "[d] slow cancelled after step" in log.read_text())
        assert log.read_text().count("slow cancelled") == 1  # (the waiting call reached no server)


@pytest.mark.anyio
async def test_a_listen_stream_whose_token_is_revoked_while_it_opens_is_refused(tmp_path: Path) -> None:
    """A 2026-07-28 listen stream watches its resources before it opens (a server may take its
    time to subscribe): a token revoked meanwhile had its stream opened after the streams it
    held were ended, and served for as long as its client read it. It is refused now. (A
    handshake-era session opened meanwhile serves nothing: its every next request is refused.)"""
    surface = str(Path(__file__).resolve().parent / "surface_server.py")
    log = tmp_path / "slow.log"
    slow = {"log": str(log), "resources": ["slow://1"], "overrides": {"resources/subscribe": "hang"}}
    # (the subscribe hangs until this timeout; the token is revoked well before it: the token
    # file is read again within a poll of 0.5 s and a settling of 0.3 s, a third of it)
    config = write_config(
        tmp_path, {"slow": {"command": PYTHON, "args": [surface, json.dumps(slow)], "call_timeout": 4}}
    )
    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-alice\ntoken-of-bob\n")
    with http_serving(config, "--token-file", str(tokens)) as (url, pid, _):
        async with sdk_client(url, "auto", headers={"Authorization": "Bearer token-of-bob"}) as bob:
            refused: list[str] = []

            async def listen() -> None:
                try:
                    async with bob.listen(resource_subscriptions=["slow://1"]):
                        pass
                except MCPError as exc:
                    refused.append(str(exc))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(listen)
                    await wait_for(lambda: log.exists() and "resources/subscribe" in log.read_text())
                    tokens.write_text("token-of-alice\n")
                    await wait_for(lambda: _status(url, "token-of-bob") == 401)
            assert refused == ["prefixgate: this token may no longer use this endpoint"]


@pytest.mark.anyio
async def test_a_server_changed_while_the_barrier_waits_for_it_is_waited_for(tmp_path: Path) -> None:
    """An edit that changes a server still starting (before the first epoch) restarts it, and
    the barrier waits for the new process (and for the server it adds). It used to settle on the stopped one: the first
    epoch went out without the server (and a second once it was up), and a ``required`` one,
    still starting when the barrier ended, stopped the gateway ("is starting: no reason")."""
    slow = {**demo("--tools", 1, "--name", "a", "--startup-delay", 4), "required": True}
    config = write_config(tmp_path, {"a": slow, **servers("b")}, gateway={"warm_start": False})
    with http_serving(config) as (url, pid, log):
        changed = {**demo("--tools", 2, "--name", "a", "--startup-delay", 1), "required": True}
        write_config(tmp_path, {"a": changed, **servers("b", "c")}, gateway={"warm_start": False})
        await wait_for(lambda: "config reloaded (the file changed): added 'c'; restarted 'a'" in log.read_text())
        async with sdk_client(url, "auto") as client:
            await wait_for(lambda: "catalog: " in log.read_text())
            assert "a__list_issue" in await names(client)  # the new table's (--tools 2)
            assert text(await client.call_tool("a__echo", {"text": "up"})) == "up"
        assert alive(pid)
    stderr = log.read_text()
    assert stderr.index("restarted 'a'") < stderr.index("catalog: ")  # the reload came during the barrier
    # The servers counted are the config's in force (it said "from 3 of 2 servers": the file started with).
    assert "catalog: 25 tools from 3 of 3 servers" in stderr and "new epoch" not in stderr


@pytest.mark.anyio
async def test_a_reloaded_max_age_days_sets_the_expiry_of_the_next_artifacts_in_redis(
    tmp_path: Path, redis: Any
) -> None:
    """``[spill]`` is taken by the next request, ``max_age_days`` too: a Redis store gives each
    new artifact that expiry. It kept the one it was started with (a principal's artifacts were
    opened once), so a reload to a longer age still lost the artifacts at the old one."""
    import redis as redis_client

    def config(days: int) -> Path:
        return write_config(tmp_path, servers("a"), gateway={"store": redis.url}, spill={"max_age_days": days})

    def artifact_ttls() -> list[int]:
        client = redis_client.Redis.from_url(redis.url)
        return sorted(int(client.ttl(key)) for key in client.scan_iter("prefixgate:*:artifact:*"))

    with http_serving(config(1)) as (url, _, log):
        async with sdk_client(url, "auto") as client:
            await client.call_tool("a__payload", {"bytes": 200_000})
            config(30)
            await wait_for(lambda: "config reloaded (the file changed)" in log.read_text())
            await client.call_tool("a__payload", {"bytes": 200_000})
    first, second = artifact_ttls()
    assert first <= 86_400 < 29 * 86_400 < second <= 30 * 86_400


@pytest.mark.anyio
async def test_a_max_functions_below_the_gateways_own_tools_is_refused_as_a_config_error(tmp_path: Path) -> None:
    """A limit below the meta tools is the config's error, the line ``serve`` exits 2 with; a
    reload to it is refused with that line. It was found only once a catalog was built from
    the servers' lists (exit 1 after the start; a reload refused naming the plan, not the key)."""
    line = (
        "client.max_functions: 2 is below the gateway's own tools (tool_search, tool_call, artifact_read): at least 3"
    )
    config = write_config(tmp_path, servers("a"))
    with http_serving(config) as (url, _, log):
        async with sdk_client(url, "auto") as client:
            await wait_for(lambda: "catalog: " in log.read_text())
            write_config(tmp_path, servers("a"), client={"max_functions": 2}, policy={"deny": ["a__*"]})
            refusal = f"config reload (the file changed) refused: {line}; the running config keeps serving"
            await wait_for(lambda: refusal in log.read_text())
            assert text(await client.call_tool("a__echo", {"text": "still"})) == "still"  # its deny is not taken
    proc = run_cli("serve", "--config", str(config))
    assert proc.returncode == 2 and proc.stderr.splitlines() == [f"prefixgate: config error: {line}"]


@pytest.mark.anyio
async def test_a_file_whose_catalog_cannot_be_declared_is_refused_whole(tmp_path: Path) -> None:
    """``declarations = "fixed"`` over the client's function limit exits 1 at start; a reload
    to it is refused whole, one line, as a file that does not parse. It was half applied: its
    policy took effect, the catalog stayed the old one, and the log said it had reloaded."""
    config = write_config(tmp_path, servers("a"))
    with http_serving(config) as (url, _, log):
        async with sdk_client(url, "auto") as client:
            await wait_for(lambda: "catalog: " in log.read_text())  # (the servers' lists are what it is built from)
            write_config(
                tmp_path, servers("a"), client={"declarations": "fixed", "max_functions": 3}, policy={"deny": ["a__*"]}
            )
            refusal = (
                "config reload (the file changed) refused: declarations = fixed needs 9 functions but max_functions "
                "is 3; the running config keeps serving, nothing of the new file is applied"
            )
            await wait_for(lambda: refusal in log.read_text())
            assert text(await client.call_tool("a__echo", {"text": "still"})) == "still"  # its deny is not taken
            write_config(tmp_path, servers("a"), policy={"deny": ["a__*"]})
            await wait_for(lambda: "config reloaded (the file changed)" in log.read_text())
            assert (await client.call_tool("a__echo", {"text": "now"})).is_error
    assert "catalog change refused" not in log.read_text()


_HELD_WORKER = """
import os, pathlib, sys, time
if "gateway.engine.validation_worker" in sys.orig_argv:  # held until the test lets it start
    held = pathlib.Path(os.environ["PREFIXGATE_TEST_HOLD"])
    (held / "started").touch()
    for _ in range(500):
        if (held / "go").exists():
            break
        time.sleep(0.05)
"""


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_validating_while_a_reload_removes_its_server_ends_as_is_error(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call past the router's check that its server is still configured, its arguments in a
    validation worker (a referencing schema) as a reload removed the server, failed on the
    server lookup after: "Internal server error" (a traceback on stderr). The worker is held
    (a ``sitecustomize`` on its path) until the reload is in."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "sitecustomize.py").write_text(_HELD_WORKER, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(held))
    monkeypatch.setenv("PREFIXGATE_TEST_HOLD", str(held))
    schema = {"type": "object", "$defs": {"s": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/s"}}}
    refs = schemas_server(tmp_path, [{"name": "refs", "description": "d", "inputSchema": schema}])
    kept = servers("b")
    config = write_config(tmp_path, {**kept, "r": refs}, gateway={"reload": "signal"})
    results: list[Any] = []
    with http_serving(config) as (url, pid, log):
        async with sdk_client(url, mode) as client:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:

                    async def call() -> None:
                        results.append(await client.call_tool("r__refs", {"x": "y"}))

                    tg.start_soon(call)
                    await wait_for(lambda: (held / "started").exists())
                    write_config(tmp_path, kept, gateway={"reload": "signal"})
                    os.kill(pid, signal.SIGHUP)
                    await wait_for(lambda: "config reloaded (SIGHUP)" in log.read_text())
                    (held / "go").touch()
                assert not (await client.call_tool("b__echo", {"text": "y"})).is_error
    (result,) = results
    assert result.is_error and "server 'r' was removed from the config" in text(result), result
    assert "Traceback" not in log.read_text()


_HELD_SERVER = """
import os, pathlib, time
held = pathlib.Path(os.environ["PREFIXGATE_TEST_HOLD"])
if (held / "hold").exists():  # the server never comes up
    (held / "started").touch()
    time.sleep(60)
"""


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_waiting_for_its_server_to_start_as_a_reload_removes_it_ends_as_is_error(
    tmp_path: Path, mode: str
) -> None:
    """A warm start's catalog has the tools of a server not up yet: a call waits for it. A
    reload that removed it ended the wait, then the call failed on the server lookup
    ("Internal server error", a traceback on stderr)."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "sitecustomize.py").write_text(_HELD_SERVER, encoding="utf-8")
    kept = servers("b")
    a = {**servers("a")["a"], "env": {"PYTHONPATH": str(held), "PREFIXGATE_TEST_HOLD": str(held)}}
    config = write_config(tmp_path, {**kept, "a": a})
    assert run_cli("catalog", "--config", str(config)).returncode == 0  # leaves the warm-start record
    (held / "hold").touch()
    log = tmp_path / "gateway.log"
    results: list[Any] = []
    async with sdk_client(config, mode, errlog=log) as client:
        with anyio.fail_after(60):
            await wait_for(lambda: (held / "started").exists())
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    results.append(await client.call_tool("a__echo", {"text": "x"}))

                tg.start_soon(call)
                assert "b__echo" in await names(client)  # (answered after the call was taken)
                write_config(tmp_path, kept)
                await wait_for(lambda: "config reloaded (the file changed): removed 'a'" in log.read_text())
            assert not (await client.call_tool("b__echo", {"text": "y"})).is_error
    (result,) = results
    assert result.is_error and "server 'a' was removed from the config" in text(result), result
    assert "Traceback" not in log.read_text()
