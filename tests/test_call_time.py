"""A tool call's timeout restarts on each progress for it, up to ``max_call_time``
(gateway/downstream/calltime.py): on every way a call is sent (a raw line to a stdio server,
a POST to an HTTP server in either era, and the SDK's session for each), for a client in
either era; and it is held while the server waits for the user's answer to its question.
Progress is what the client asked for: the gateway does not ask a server for it on its
own (that would change how the server answers: an event stream for a JSON answer, say).

Through the SDK's client used directly a job that reports progress, or a user who takes
their time, finishes; through the gateway both used to fail at ``call_timeout``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import REQUEST_TIMEOUT

from bench.common import url_process
from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    PatientUser,
    demo,
    http_gateway,
    sdk_client,
    text,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio

LIMITS = {"call_timeout": 1, "max_call_time": 3}
STUCK = {**LIMITS, "call_timeout": 0.5}
"""For calls that must all time out (their server reads nothing): no margin to keep, each waits
its ``call_timeout`` whole, four of them a test."""
SERVERS = ("stdio", "http", "modern")
"""A demo server over stdio, one over HTTP reached with the handshake, one reached at 2026-07-28."""


@pytest.mark.parametrize("own_path", [True, False], ids=["gateway's path", "sdk session"])
@pytest.mark.parametrize("mode", ERAS)
async def test_progress_keeps_a_call_going_until_max_call_time(tmp_path: Path, mode: str, own_path: bool) -> None:
    servers_log, gateway_log = tmp_path / "servers.log", tmp_path / "gateway.log"
    with ExitStack() as stack, servers_log.open("w") as errlog:
        servers = {"stdio": {**demo("--tools", 1, "--name", "stdio"), **LIMITS}}
        for name, protocol in (("http", "auto"), ("modern", "modern")):
            command = [*GATEWAY, "demo-server", "--transport", "http", "--tools", "1", "--name", name]
            url, _proc = stack.enter_context(url_process(command, stderr=errlog))
            servers[name] = {"url": url, "protocol": protocol, **LIMITS}
        config = write_config(tmp_path, servers)
        env = {"PREFIXGATE_FAST_PATH": "1" if own_path else "0"}
        answers: dict[tuple[str, str], str] = {}
        heard: list[float] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            heard.append(value)

        async with sdk_client(config, mode, env=env, errlog=gateway_log) as client:

            async def call(server: str, label: str, seconds: float, steps: int) -> None:
                arguments = {"seconds": seconds, "steps": steps}
                asked = {"progress_callback": progress} if label != "unasked" else {}
                answers[server, label] = text(await client.call_tool(f"{server}__slow", arguments, **asked))

            async with anyio.create_task_group() as tg:  # every call at once: each has its own clock
                for server in SERVERS:
                    for label, seconds, steps in (
                        ("working", 1.8, 9),
                        ("quiet", 20, 1),
                        ("endless", 20, 100),
                        ("unasked", 1.8, 9),
                    ):
                        tg.start_soon(call, server, label, seconds, steps)
    for server in SERVERS:
        # 1.8 s, past call_timeout, with progress every 0.2 s (and 1.2 s to spare under load)
        assert answers[server, "working"] == "slept 1.8 s", server
        # one progress at its start, then nothing for call_timeout
        assert answers[server, "quiet"] == f"{server}: tool 'slow' timed out: no answer or progress in 1 s"
        # progress every 0.2 s, past max_call_time
        assert answers[server, "endless"] == f"{server}: tool 'slow' ran past its 3 s limit (max_call_time)"
        # the work of "working", for a client that asked for no progress: none came
        assert answers[server, "unasked"] == f"{server}: tool 'slow' timed out: no answer or progress in 1 s"
    assert len(heard) >= 3 * 9  # (the newest only, when the client is slow to take them)
    # Each abandoned call was cancelled at its server: its courtesy cancel (a closed stream at 2026-07-28).
    with anyio.fail_after(10):
        while gateway_log.read_text().count("slow cancelled after step") < 3:
            await anyio.sleep(0.05)
    assert "[stdio] slow cancelled after step 0" in gateway_log.read_text()
    assert servers_log.read_text().count("slow cancelled after step") == 6


CLASSIC = str(Path(__file__).resolve().parent / "classic_server.py")


@pytest.mark.parametrize("own_path", [True, False], ids=["gateway's path", "sdk session"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_waiting_for_the_users_answer_does_not_time_out(tmp_path: Path, mode: str, own_path: bool) -> None:
    """A classic server asks the user during a call (over its back-channel, as most do) and the
    user takes longer than ``call_timeout`` to answer: the call is held meanwhile, as the
    server waits on the client, not the other way round; its clock restarts at the answer."""
    with ExitStack() as stack, (tmp_path / "servers.log").open("w") as errlog:
        url, _proc = stack.enter_context(url_process([PYTHON, CLASSIC, "--http"], stderr=errlog))
        config = write_config(
            tmp_path,
            {
                "stdio": {"command": PYTHON, "args": [CLASSIC], **LIMITS},
                "http": {"url": url, **LIMITS},
            },
        )

        async def slow_user(context: Any, params: Any) -> types.ElicitResult:
            await anyio.sleep(2)  # past call_timeout (1 s)
            return types.ElicitResult(action="accept", content={"name": "Ann"})

        env = {"PREFIXGATE_FAST_PATH": "1" if own_path else "0"}
        async with sdk_client(config, mode, env=env, elicitation_callback=slow_user) as client:

            async def asked_then_quiet(server: str) -> None:
                result = await client.call_tool(f"{server}__elicit", {})
                assert text(result) == "accept:{'name': 'Ann'}", (server, text(result))
                # ... and a call that goes quiet after its answer still times out
                quiet = await client.call_tool(f"{server}__sleep", {"seconds": 20})
                assert text(quiet) == f"{server}: tool 'sleep' timed out: no answer or progress in 1 s"

            async with anyio.create_task_group() as tg:  # each server's calls are its own: both at once
                for server in ("stdio", "http"):
                    tg.start_soon(asked_then_quiet, server)


@pytest.mark.parametrize("upstream", ["stdio", "http"])
async def test_a_question_of_a_call_past_its_limit_is_withdrawn_from_the_user(tmp_path: Path, upstream: str) -> None:
    """A classic server asks the user during a call and the user never answers: the call ends at
    ``max_call_time`` (its server is told) and the question is withdrawn from the user with it.
    Through ``serve --http`` it stayed open: the withdrawal came after the call's stream had
    closed, and was dropped. (A 2026-07-28 client answers in its retry: nothing stays open.)"""
    absent_user = PatientUser()
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC], **LIMITS}})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, "legacy", elicitation_callback=absent_user) as client:
            result = await client.call_tool("classic__elicit", {})
            assert text(result) == "classic: tool 'elicit' ran past its 3 s limit (max_call_time)"
            await wait_for(lambda: absent_user.withdrawn, 10)
            assert text(await client.call_tool("classic__echo", {"text": "after"})) == "classic:after"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_prompt_or_resource_waiting_for_the_users_answer_does_not_time_out(tmp_path: Path, mode: str) -> None:
    """As for a tool call: a classic server's prompt and resource ask the user first, and the
    user answers after ``call_timeout``; the request is held meanwhile (directly, the SDK's
    client waits too). One that never hears back still ends at ``max_call_time``."""
    with classic_pair(tmp_path) as (url, config):
        delays = [2.0, 2.0, 2.0, 2.0, 5.0]  # past call_timeout (1 s) ..., then past max_call_time (3 s)

        async def slow_user(context: Any, params: Any) -> types.ElicitResult:
            await anyio.sleep(delays.pop(0))
            return types.ElicitResult(action="accept", content={"name": "Ann"})

        async with sdk_client(config, mode, elicitation_callback=slow_user) as client:
            prompts = sorted(p.name for p in (await client.list_prompts()).prompts)
            assert prompts == ["h__greeting", "h__pause", "s__greeting", "s__pause"], prompts

            async def greeted(name: str) -> None:
                prompt = await client.get_prompt(name)
                assert prompt.messages[0].content.text == "Greet Ann.", (name, prompt)

            async def read_alone(server: str) -> None:
                (tmp_path / server).mkdir()
                config_path = write_config(tmp_path / server, {server: {**_only(server, url), **LIMITS}})
                async with sdk_client(config_path, mode, elicitation_callback=slow_user) as alone:
                    read = await alone.read_resource("classic://asked/tea")
                    assert read.contents[0].text == "tea for Ann", (server, read)

            async with anyio.create_task_group() as tg:  # the four held at once: each user answers in 2 s
                for name in ("h__greeting", "s__greeting"):
                    tg.start_soon(greeted, name)
                for server in ("stdio", "http"):
                    tg.start_soon(read_alone, server)

            # One after the other: while a stdio server's question waits, its other calls are held too.
            with pytest.raises(MCPError, match=r"^stdio: prompt 's__pause' timed out: no answer or progress in 1 s$"):
                await client.get_prompt("s__pause", {"seconds": "20"})
            with pytest.raises(
                MCPError, match=r"^stdio: prompt 's__greeting' ran past its 3 s limit \(max_call_time\)$"
            ):
                await client.get_prompt("s__greeting")


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_prompts_progress_reaches_its_client_and_keeps_it_going(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """A client that asks for progress on ``prompts/get`` (a token in its ``_meta``) hears the
    server's progress, which restarts ``call_timeout`` as for a tool call; the rest of its
    ``_meta`` (a trace context) reaches the server, its token goes no further than the gateway.
    The gateway over stdio, and over HTTP (the progress on the request's event stream)."""
    with classic_pair(tmp_path) as (_url, config), ExitStack() as stack:
        target: Path | str = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        heard: list[tuple[Any, float]] = []

        async def messages(message: Any) -> None:
            if isinstance(message, types.ProgressNotification):
                heard.append((message.params.progress_token, message.params.progress))

        async with sdk_client(target, mode, message_handler=messages) as client:
            for name in ("h__pause", "s__pause"):
                heard.clear()
                meta = {
                    "progressToken": f"{name}-1",
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                }
                prompt = await client.get_prompt(name, {"seconds": "2"}, meta=meta)
                assert prompt.messages[0].content.text == "Paused; _meta: progress_token,traceparent", name
                assert heard and {token for token, _ in heard} == {f"{name}-1"}, (name, heard)
                assert [value for _, value in heard] == sorted(value for _, value in heard), heard


def _only(server: str, url: str) -> dict[str, Any]:
    """The classic server over stdio, or the one at ``url``."""
    return {"command": PYTHON, "args": [CLASSIC]} if server == "stdio" else {"url": url}


@contextmanager
def classic_pair(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The classic server over HTTP (its URL), and a config with it and one over stdio,
    published as ``h__`` and ``s__``, under ``LIMITS``."""
    with ExitStack() as stack, (tmp_path / "servers.log").open("w") as errlog:
        url, _proc = stack.enter_context(url_process([PYTHON, CLASSIC, "--http"], stderr=errlog))
        servers = {"stdio": {**_only("stdio", url), "prefix": "s"}, "http": {**_only("http", url), "prefix": "h"}}
        yield url, write_config(tmp_path, {name: {**server, **LIMITS} for name, server in servers.items()})


@pytest.mark.parametrize("mode", ERAS)
async def test_one_principals_question_holds_only_its_own_call(tmp_path: Path, mode: str) -> None:
    """Two principals on one gateway over HTTP, a classic server behind over HTTP (its request's
    stream says which call it is for): while Alice's user takes 2.5 s to answer, Bob's quiet
    call still times out after ``call_timeout``, before Alice's answer; a user who never
    answers (a client that misbehaves) holds Alice's call only to ``max_call_time``."""
    from tests.helpers import http_gateway
    from tests.test_principals import tokens_file

    ended: list[str] = []
    delays = [2.5, 5]  # past call_timeout (1 s); past max_call_time (3 s), by 2 s

    async def alices_user(context: Any, params: Any) -> types.ElicitResult:
        await anyio.sleep(delays.pop(0))
        return types.ElicitResult(action="accept", content={"name": "Ann"})

    with ExitStack() as stack, (tmp_path / "servers.log").open("w") as errlog:
        url, _proc = stack.enter_context(url_process([PYTHON, CLASSIC, "--http"], stderr=errlog))
        config = write_config(tmp_path, {"http": {"url": url, **LIMITS}})
        tokens = stack.enter_context(tokens_file(tmp_path, "token-of-alice", "token-of-bob"))
        gateway_url, _ = stack.enter_context(http_gateway(config, "--token-file", str(tokens)))
        alice_headers = {"Authorization": "Bearer token-of-alice"}
        bob_headers = {"Authorization": "Bearer token-of-bob"}
        async with (
            sdk_client(gateway_url, mode, headers=alice_headers, elicitation_callback=alices_user) as alice,
            sdk_client(gateway_url, mode, headers=bob_headers) as bob,
        ):
            answers: dict[str, str] = {}

            async def call(who: str, client: Any, tool: str, arguments: dict[str, Any]) -> None:
                answers[who] = text(await client.call_tool(tool, arguments))
                ended.append(who)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "bob", bob, "http__sleep", {"seconds": 20})
                await anyio.sleep(0.2)  # his call is in flight when her question comes
                tg.start_soon(call, "alice", alice, "http__elicit", {})
            assert answers == {
                "alice": "accept:{'name': 'Ann'}",
                "bob": "http: tool 'sleep' timed out: no answer or progress in 1 s",
            }
            assert ended == ["bob", "alice"]
            never = await alice.call_tool("http__elicit", {})
            assert text(never) == "http: tool 'elicit' ran past its 3 s limit (max_call_time)"


async def _stuck_calls(call: Any, timed_out: Any, *, at_once: int) -> None:
    """While ``block`` holds the classic server's loop (so nothing is read): a call whose 1 MiB
    of arguments fills the pipe, a small call behind it, then ``at_once`` calls at once, each
    timing out."""
    with anyio.fail_after(30):
        assert await timed_out(call("echo", {"text": "x" * (1 << 20)}))
        assert await timed_out(call("echo", {"text": "small"}))
        outcomes: list[bool] = []

        async def one() -> None:
            outcomes.append(await timed_out(call("echo", {"text": "y" * (1 << 18)})))

        async with anyio.create_task_group() as tg:
            for _ in range(at_once):
                tg.start_soon(one)
        assert outcomes == [True] * at_once


async def test_directly_a_call_to_a_server_that_stopped_reading_times_out() -> None:
    """The behaviour the gateway keeps: the SDK's client times these calls out (its
    ``read_timeout_seconds``) while the server's loop is blocked. (Not all of them: it times a
    call from when its write is done, so of calls made at once behind a full pipe some wait
    until the server reads again. Through the gateway each ends at ``call_timeout``.)"""
    params = StdioServerParameters(command=PYTHON, args=[CLASSIC])
    async with Client(params, mode="legacy") as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "block", {"seconds": 30})

        async def timed_out(call: Any) -> bool:
            with pytest.raises(MCPError) as raised:
                await call
            return raised.value.error.code == REQUEST_TIMEOUT

        await anyio.sleep(0.5)
        await _stuck_calls(partial(client.call_tool, read_timeout_seconds=0.5), timed_out, at_once=0)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("own_path", [True, False], ids=["gateway's path", "sdk session"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_to_a_server_that_stopped_reading_times_out(
    tmp_path: Path, mode: str, own_path: bool, upstream: str
) -> None:
    """A classic server's tool blocks its event loop, so it reads nothing meanwhile: each call
    behind it still ends at ``call_timeout``, as directly. Its clock runs from when the call is
    sent, not from when the server has taken all of it (which could be never): through the
    gateway's own path these calls used to wait for ever. The gateway and its other servers
    go on."""
    config = write_config(
        tmp_path,
        {"classic": {"command": PYTHON, "args": [CLASSIC], **STUCK}, "demo": demo("--tools", 1, "--name", "demo")},
    )
    env = {"PREFIXGATE_FAST_PATH": "1" if own_path else "0"}

    async def timed_out(call: Any) -> bool:
        return text(await call) == "classic: tool 'echo' timed out: no answer or progress in 0.5 s"

    with ExitStack() as stack:
        target: Any = config
        if upstream == "http":
            target, _log = stack.enter_context(http_gateway(config, env=env))
        async with sdk_client(target, mode, env=env, errlog=tmp_path / "gateway.log") as client:
            blocked = await client.call_tool("classic__block", {"seconds": 30})
            assert text(blocked) == "classic: tool 'block' timed out: no answer or progress in 0.5 s"
            await _stuck_calls(
                lambda tool, arguments: client.call_tool(f"classic__{tool}", arguments), timed_out, at_once=3
            )
            assert text(await client.call_tool("demo__echo", {"text": "on"})).endswith("on")


def _serving(config: Path) -> int:
    """The pid of the ``prefixgate serve`` running ``config``."""
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in words and str(config).encode() in words:
            return int(entry.name)
    raise AssertionError(f"no gateway serving {config}")


@pytest.mark.real_processes  # the gateway's own process is stopped
@pytest.mark.parametrize("server", ["stdio", "http"])
@pytest.mark.parametrize("own_path", [True, False], ids=["gateway's path", "sdk session"])
@pytest.mark.parametrize("mode", ERAS)
async def test_an_answer_that_came_while_the_gateway_was_stopped_is_no_timeout(
    tmp_path: Path, mode: str, own_path: bool, server: str
) -> None:
    """A laptop's suspend, a ^Z: the gateway stopped (SIGSTOP) past a call's ``call_timeout``
    while its server answered in time; at SIGCONT the call timed out, its answer unread in the
    pipe or socket (the loop runs its timers before it reads, and the timer was overdue). A timer
    that fires long after its time now lets what came meanwhile be read before it times anything out."""
    import os
    import signal

    args = ("--tools", 1, "--name", "d", "--log-calls")
    log, servers_log = tmp_path / "gateway.log", tmp_path / "servers.log"
    env = {"PREFIXGATE_FAST_PATH": "1" if own_path else "0"}
    with ExitStack() as stack, servers_log.open("w") as errlog:
        if server == "stdio":
            table, heard = demo(*args), log
        else:
            command = [*GATEWAY, "demo-server", "--transport", "http", *map(str, args)]
            url, _proc = stack.enter_context(url_process(command, stderr=errlog))
            table, heard = {"url": url}, servers_log
        config = write_config(tmp_path, {"d": {**table, "call_timeout": 2}})
        async with sdk_client(config, mode, env=env, errlog=log) as client:
            pid = _serving(config)
            assert text(await client.call_tool("d__echo", {"text": "ready"})) == "ready"
            answer: list[Any] = []

            async def call() -> None:
                answer.append(await client.call_tool("d__slow", {"seconds": 1, "steps": 1}))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await wait_for(lambda: "call slow" in heard.read_text())  # at its server, which answers 1 s later
                    os.kill(pid, signal.SIGSTOP)
                    try:
                        # past call_timeout (2 s) and then STALL (1 s, gateway/downstream/calltime.py),
                        # by 1.5 s however late the stop came; its server's answer (1 s) has 3.5 s
                        await anyio.sleep(4.5)
                    finally:
                        os.kill(pid, signal.SIGCONT)
    assert not answer[0].is_error, text(answer[0])
