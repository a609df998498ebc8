"""A tool that runs only as a task (``execution.taskSupport: "required"``, SEP-1686) works
through the gateway for every client.

Directly, only a client that makes tasks can call server-everything's
``simulate-research-query``; the gateway offers its clients no tasks, so it used to publish
the tool and let every call fail. Now it publishes the tool for plain calls and runs each one
as a task at the server: ``tools/call`` with a ``task``, then ``tasks/result``. The task's
status messages reach the caller as progress, the server's question while the task waits
for input reaches the caller as any call's question does, and a call cancelled before its
task ends cancels the task. The real server-everything (npm)
over a pipe, the real gateway, the real SDK client in both eras (over stdio, and over HTTP
for the question to a 2026-07-28 client, whose answer comes back on a retried call).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.conformance.runner import node_binary
from tests.helpers import ERAS, PYTHON, free_port, http_gateway, sdk_client, text, wait_for, write_config
from tests.test_transparency import everything_script, stop, wait_for_port

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

TOOL = "ev__simulate-research-query"


def everything(tmp_path: Path, npm_packages: Path, url: str | None = None) -> Path:
    """A config with server-everything over a pipe, or at ``url`` (streamable HTTP)."""
    if url is not None:
        server: dict[str, Any] = {"url": url, "prefix": "ev"}
    else:
        server = {"command": str(node_binary()), "args": [everything_script(npm_packages), "stdio"], "prefix": "ev"}
    return write_config(tmp_path, {"everything": server}, client={"profile": "mcp"})


@contextmanager
def everything_over_http(npm_packages: Path) -> Iterator[str]:
    """server-everything's streamable HTTP mode on a free port: its endpoint's URL."""
    port = free_port()
    command = [str(node_binary()), everything_script(npm_packages), "streamableHttp"]
    proc = subprocess.Popen(command, env={**os.environ, "PORT": str(port)}, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


class Asked:
    """An elicitation callback that answers every question with one interpretation."""

    def __init__(self, answer: str = "felines") -> None:
        self.answer = answer
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content={"interpretation": self.answer})


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_that_runs_only_as_a_task_is_published_plain_and_answers(
    tmp_path: Path, npm_packages: Path, mode: str
) -> None:
    config = everything(tmp_path, npm_packages)
    errlog = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=errlog) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        declared = tools[TOOL].model_dump(by_alias=True, exclude_none=True)
        assert "taskSupport" not in json.dumps(declared), declared  # a plain call is what to make
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        result = await client.call_tool(TOOL, {"topic": "cats"}, progress_callback=on_progress)
        assert not result.is_error, text(result)
        assert text(result).startswith("# Research Report: cats"), text(result)[:200]
        # the task's status messages, as progress of the call (the first came before the task did)
        assert "Analyzing content..." in [m for _, m in progress], progress
        assert [v for v, _ in progress] == sorted(set(v for v, _ in progress)), progress
        assert "related-task" not in json.dumps(result.model_dump(by_alias=True, exclude_none=True))
        echo = await client.call_tool("ev__echo", {"message": "and the rest as before"})
        assert "and the rest as before" in text(echo)
    assert "task-only" not in errlog.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tasks_question_reaches_the_caller_and_its_answer_the_task(
    tmp_path: Path, npm_packages: Path, mode: str
) -> None:
    config = everything(tmp_path, npm_packages)
    asked = Asked()
    with http_gateway(config) as (url, _):
        async with sdk_client(url, mode, elicitation_callback=asked) as client:
            result = await client.call_tool(TOOL, {"topic": "cats", "ambiguous": True})
    assert not result.is_error, text(result)
    assert len(asked.questions) == 1 and "cats" in asked.questions[0]
    assert text(result).startswith("# Research Report: cats (felines)"), text(result)[:200]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_cancelled_call_cancels_its_task(tmp_path: Path, npm_packages: Path, mode: str) -> None:
    """The call's client gives up after 1.5 s of the task's 4: the gateway cancels the task
    (tasks/cancel). server-everything's task then finds itself cancelled at its next stage
    and says so on its stderr, which the gateway logs."""
    config = everything(tmp_path, npm_packages)
    errlog = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=errlog) as client:
        with anyio.move_on_after(1.5):
            await client.call_tool(TOOL, {"topic": "dogs"})
            pytest.fail("the task takes 4 s")
        await wait_for(lambda: 'from terminal status "cancelled"' in errlog.read_text())
        echo = await client.call_tool("ev__echo", {"message": "still serving"})
        assert "still serving" in text(echo)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_task_tool_of_a_streamable_http_server_asks_and_answers(
    tmp_path: Path, npm_packages: Path, mode: str
) -> None:
    """The same over streamable HTTP toward the server: its statuses and its question come on
    the stream of the ``tasks/result`` the gateway made for the call."""
    asked = Asked()
    messages: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    with everything_over_http(npm_packages) as url:
        config = everything(tmp_path, npm_packages, url)
        async with sdk_client(config, mode, elicitation_callback=asked) as client:
            plain = await client.call_tool(TOOL, {"topic": "dogs"}, progress_callback=on_progress)
            assert text(plain).startswith("# Research Report: dogs"), text(plain)[:200]
            assert "Analyzing content..." in messages, messages
            result = await client.call_tool(TOOL, {"topic": "cats", "ambiguous": True})
    assert not result.is_error, text(result)
    assert len(asked.questions) == 1
    assert text(result).startswith("# Research Report: cats (felines)"), text(result)[:200]


TASK_SERVER = str(Path(__file__).with_name("task_server.py"))


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_misbehaving_task_server_costs_only_its_own_calls(tmp_path: Path, mode: str, transport: str) -> None:
    """tests/task_server.py: a task that never ends, a flood of statuses, a task-only tool
    answered without a task, a task whose result is not an object. Each call gets a clear
    answer (or is given up by its client, which cancels the task), and the gateway serves on."""
    config = write_config(tmp_path, {"t": {"command": PYTHON, "args": [TASK_SERVER]}})
    with contextlib.ExitStack() as stack:
        target: Path | str = config
        errlog = tmp_path / "gateway.log"
        if transport == "http":
            target, errlog = stack.enter_context(http_gateway(config))
        async with sdk_client(target, mode, errlog=errlog if transport == "stdio" else None) as client:
            plain = await client.call_tool("t__no_task", {})
            assert not plain.is_error and text(plain) == "answered without a task"

            bad = await client.call_tool("t__bad_result", {})
            assert bad.is_error and "t" in text(bad), text(bad)

            values: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                values.append(value)
                assert message is not None and len(message) <= 1000

            flooded = await client.call_tool(
                "t__flood_status", {"n": 3000, "size": 2000}, progress_callback=on_progress
            )
            assert text(flooded) == "flood_status done", text(flooded)
            # (statuses that lack fields a task has: still passed on, newest first when the client is slow)
            assert values and values == sorted(set(values)) and all(0 < v <= 3000 for v in values), values[:10]

            with anyio.move_on_after(1):
                await client.call_tool("t__hang", {})
                pytest.fail("its task never ends")
            seen: list[str] = []

            async def cancelled() -> bool:
                seen.append(text(await client.call_tool("t__cancelled", {})))
                return "task-3" in seen[-1].split()

            await wait_for(cancelled)  # the hanging task: the gateway cancelled it
            # and the one whose result it could not read; never the two that ended well
            assert seen[-1].split() == ["task-1", "task-3"], seen
        assert "Failed to validate notification" not in errlog.read_text()  # 3,000 tracebacks, before


@pytest.mark.parametrize("mode", ERAS)
async def test_two_principals_tasks_each_ask_their_own_caller(tmp_path: Path, npm_packages: Path, mode: str) -> None:
    """Alice and Bob (two tokens) call the task-only tool at once, through a gateway over HTTP,
    server-everything behind it over streamable HTTP: each task's question comes on the stream
    of its own ``tasks/result``, so each reaches its own caller, and each answer its own task."""
    from tests.test_principals import tokens_file

    alice, bob = Asked("snake"), Asked("comedy")
    results: dict[str, str] = {}
    with everything_over_http(npm_packages) as url, tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        config = everything(tmp_path, npm_packages, url)
        with http_gateway(config, "--token-file", str(tokens)) as (gateway_url, _):

            async def research(who: str, asked: Asked) -> None:
                headers = {"Authorization": f"Bearer token-of-{who}"}
                async with sdk_client(gateway_url, mode, headers=headers, elicitation_callback=asked) as client:
                    result = await client.call_tool(TOOL, {"topic": "python", "ambiguous": True})
                    assert not result.is_error, text(result)
                    results[who] = text(result)

            async with anyio.create_task_group() as tg:
                tg.start_soon(research, "alice", alice)
                tg.start_soon(research, "bob", bob)
    assert len(alice.questions) == 1 and len(bob.questions) == 1
    assert results["alice"].startswith("# Research Report: python (snake)"), results["alice"][:100]
    assert results["bob"].startswith("# Research Report: python (comedy)"), results["bob"][:100]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_warm_start_publishes_the_task_only_tool_as_the_cold_one_did(
    tmp_path: Path, npm_packages: Path, mode: str
) -> None:
    """An agent that gives its servers about a second gets the catalog from the warm-start
    record: the task-only tool published plain there too (the record keeps the server's
    capabilities), the same fingerprint as a cold start, and a call of it made as a task."""
    from tests.helpers import catalog_json
    from tests.test_warm_start import PUBLISHED

    config = everything(tmp_path, npm_packages)
    cold = catalog_json(config)  # a cold start, which leaves the record
    errlog = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=errlog) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "taskSupport" not in json.dumps(tools[TOOL].model_dump(by_alias=True, exclude_none=True))
        result = await client.call_tool(TOOL, {"topic": "owls"})
        assert text(result).startswith("# Research Report: owls"), text(result)[:200]
    log = errlog.read_text()
    assert PUBLISHED in log and cold["fingerprint"][:16] in log, log[-2000:]
