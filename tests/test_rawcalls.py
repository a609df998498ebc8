"""Raw calls' timeouts share one loop timer, armed for the earliest deadline (issue 16)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import REQUEST_TIMEOUT

from gateway.downstream.calltime import CallTimedOut, Clock
from gateway.downstream.rawcalls import RawCalls
from gateway.downstream.stdio import ChildStdout, Deferred
from gateway.lines import encode_plain

pytestmark = pytest.mark.anyio


class Pipe:
    """The lines a RawCalls writes, as a child's stdin would receive them (one always read)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def backlog(self) -> int:
        return 0

    async def room(self) -> None:
        pass

    def write(self, item: bytes) -> None:
        self.lines.append(json.loads(item))


def reading(pipe: Pipe, tg: Any, max_message_bytes: int = 1 << 20) -> tuple[RawCalls, ChildStdout, Any]:
    """Raw calls written to ``pipe``, the server's stdout reader that hands them their replies,
    and the session's end of what the reader forwards (kept open while the test runs)."""
    to_session, from_reader = anyio.create_memory_object_stream[Any](1)
    calls = RawCalls(pipe, to_session, encode_plain, tg.start_soon, "t")
    reader = ChildStdout(max_message_bytes, "s")
    reader.calls = calls
    return calls, reader, from_reader


async def _timed(calls: RawCalls, outcomes: dict[str, Any], label: str, timeout: float) -> None:
    """One call named ``label``: its result, or its error code and how long it took."""
    started = anyio.current_time()
    try:
        outcomes[label] = await calls.request("tools/call", {"name": label}, timeout=timeout, on_progress=None)
    except MCPError as exc:
        outcomes[label] = (exc.error.code, round(anyio.current_time() - started, 1))


async def test_each_call_times_out_at_its_own_deadline_and_an_answered_one_does_not(tmp_path: Any) -> None:
    pipe = Pipe()
    to_session, _ = anyio.create_memory_object_stream[Any](1)
    async with anyio.create_task_group() as tg:
        calls = RawCalls(pipe, to_session, encode_plain, tg.start_soon, "t")
        outcomes: dict[str, Any] = {}
        tg.start_soon(_timed, calls, outcomes, "long", 1.5)
        await anyio.sleep(0.05)
        tg.start_soon(
            _timed, calls, outcomes, "short", 0.3
        )  # later, but due first: the shared timer is re-armed for it
        tg.start_soon(_timed, calls, outcomes, "answered", 0.3)
        await anyio.sleep(0.1)
        answered = next(line["id"] for line in pipe.lines if line.get("params", {}).get("name") == "answered")
        assert calls.take({"jsonrpc": "2.0", "id": answered, "result": {"content": []}})
    assert outcomes["answered"] == {"content": []}
    assert outcomes["short"][0] == REQUEST_TIMEOUT and outcomes["short"][1] < 1.0
    assert outcomes["long"][0] == REQUEST_TIMEOUT and outcomes["long"][1] >= 1.4
    cancels = [line["params"]["reason"] for line in pipe.lines if line.get("method") == "notifications/cancelled"]
    assert cancels == ["timed out after 0.3s", "timed out after 1.5s"]
    assert not calls.pending


async def test_a_reply_waits_behind_the_message_the_forwarder_holds() -> None:
    """A raw call's reply read while the forwarder holds the server's previous message (taken
    off the queue, not yet handed to the session) is not delivered before it."""
    pipe = Pipe()
    async with anyio.create_task_group() as tg:
        calls, reader, _session = reading(pipe, tg)
        answer: list[Any] = []

        async def call() -> None:
            answer.append(await calls.request("tools/call", {"name": "t"}, timeout=30, on_progress=None))

        tg.start_soon(call)
        await anyio.sleep(0.05)
        request_id = pipe.lines[0]["id"]
        log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
        reader.data_received(json.dumps(log).encode() + b"\n")
        held = reader.take()  # the forwarder has it in hand
        reply = {"jsonrpc": "2.0", "id": request_id, "result": {"content": []}}
        reader.data_received(json.dumps(reply).encode() + b"\n")
        await anyio.sleep(0.05)
        assert not answer, "the reply overtook the message before it"
        assert held.message.method == "notifications/message"
        reader.done()  # handed on: what waited behind it goes next
        deferred = reader.take()
        assert isinstance(deferred, Deferred)
        deferred.run()
        reader.done()
        with anyio.fail_after(5):
            while not answer:
                await anyio.sleep(0.01)
    assert answer == [{"content": []}]


async def test_progress_restarts_a_calls_clock_up_to_its_maximum() -> None:
    """With a tool call's clock, each progress for the call restarts its timeout on the shared
    timer (set for an earlier deadline, it looks again), until the maximum; without, progress
    moves nothing."""
    pipe = Pipe()
    to_session, _ = anyio.create_memory_object_stream[Any](1)
    outcomes: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        calls = RawCalls(pipe, to_session, encode_plain, tg.start_soon, "t")

        async def heard(progress: float, total: float | None, message: str | None) -> None:
            pass

        async def call(label: str, max_time: float | None) -> None:
            started = anyio.current_time()
            clock = Clock(0.3, max_time) if max_time is not None else None
            try:
                await calls.request("tools/call", {"name": label}, timeout=0.3, on_progress=heard, clock=clock)
            except CallTimedOut as exc:
                outcomes[label] = (exc.at_limit, round(anyio.current_time() - started, 1))

        tg.start_soon(call, "capped", 1.0)
        tg.start_soon(call, "plain", None)
        await anyio.sleep(0.05)
        tokens = {line["params"]["name"]: line["params"]["_meta"]["progressToken"] for line in pipe.lines}
        for step in range(12):  # every 0.1 s for 1.2 s: past the maximum
            for token in tokens.values():
                note = {"progressToken": token, "progress": step}
                calls.take({"jsonrpc": "2.0", "method": "notifications/progress", "params": note})
            await anyio.sleep(0.1)
    assert outcomes["plain"] == (False, 0.3)
    assert outcomes["capped"] == (True, 1.0)
    cancels = [line["params"]["reason"] for line in pipe.lines if line.get("method") == "notifications/cancelled"]
    assert cancels == ["timed out after 0.3s", "timed out after 1.0s"]
    assert not calls.pending


class FullPipe(Pipe):
    """A pipe its child has stopped reading, until ``read`` is called: ``room`` waits."""

    def __init__(self) -> None:
        super().__init__()
        self.read = anyio.Event()

    def backlog(self) -> int:
        return 0 if self.read.is_set() else 1 << 20

    async def room(self) -> None:
        await self.read.wait()


async def test_a_call_that_finds_the_pipe_full_times_out_having_written_nothing() -> None:
    """A call sent while its server is behind waits for room, on its clock: at its deadline it
    ends without a byte written (so without a courtesy cancel either); one still waiting when
    the server reads again is written then, and answered."""
    pipe = FullPipe()
    to_session, _ = anyio.create_memory_object_stream[Any](1)
    outcomes: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        calls = RawCalls(pipe, to_session, encode_plain, tg.start_soon, "t")
        tg.start_soon(_timed, calls, outcomes, "given up", 0.3)
        tg.start_soon(_timed, calls, outcomes, "patient", 5)
        await anyio.sleep(0.6)
        assert outcomes == {"given up": (REQUEST_TIMEOUT, 0.3)}
        assert pipe.lines == []
        pipe.read.set()
        with anyio.fail_after(5):
            while not pipe.lines:
                await anyio.sleep(0.01)
        assert [line["params"]["name"] for line in pipe.lines] == ["patient"]
        assert calls.take({"jsonrpc": "2.0", "id": pipe.lines[0]["id"], "result": {"content": []}})
    assert outcomes["patient"] == {"content": []}
    assert not calls.pending
