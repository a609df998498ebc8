"""A server's requests and logs reach only the principal whose call they belong to (issue 26, item 1).

A stdio server has one pipe for every caller, and its ``elicitation/create`` (or a log line)
does not say which call it belongs to. With calls of two principals in flight, the gateway
used to hand it to the newest call, whoever made it: principal B read A's question and A's
call completed with B's answer. Now such a request is refused (an error to the server, which
the caller sees in its result) and such a log line dropped; with one principal's calls in
flight they reach that principal, and never the other. A streamable-HTTP server's request
says whose it is by the stream it comes on: it goes to that call, even with both principals
in flight. Real gateway over HTTP with two bearer tokens, real servers written the classic
way (back-channel requests) over a pipe and over HTTP, the real SDK client in both eras.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
import pytest

from gateway.downstream.related import HEADER as CALL_HEADER
from tests.helpers import ERAS, PYTHON, demo, http_gateway, sdk_client, text, url_process, wait_for, write_config
from tests.test_principals import tokens_file

CLASSIC = str(Path(__file__).resolve().parent / "classic_server.py")

pytestmark = pytest.mark.anyio
T = TypeVar("T")


class Principal:
    """One token's client callbacks, recording what reached them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []
        self.logs: list[str] = []

    async def elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": self.name})

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(str(params.data))

    def options(self) -> dict[str, Any]:
        return {"elicitation_callback": self.elicitation, "logging_callback": self.log}


ALICE = {"Authorization": "Bearer token-of-alice"}
BOB = {"Authorization": "Bearer token-of-bob"}


@contextmanager
def asking_gateway(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A gateway over HTTP with Alice's and Bob's tokens, in front of one stdio server written
    the classic way (it asks and logs over its back-channel, one pipe for every caller): the
    gateway's URL and its stderr log."""
    server = {**demo("--tools", 0, "--rich", "--interactive", "--name", "r"), "protocol": "legacy"}
    config = write_config(tmp_path, {"r": server})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as found:
            yield found


async def beside_a_slow_call(other: Any, call: Awaitable[T]) -> tuple[T, Any]:
    """``call``'s outcome, awaited while ``other``'s 2 s ``r__slow`` call is in flight (from
    0.5 s into it), and that call's result."""
    slow: list[Any] = []

    async def others_call() -> None:
        slow.append(await other.call_tool("r__slow", {"seconds": 2, "steps": 2}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(others_call)
        await anyio.sleep(0.5)
        outcome = await call
    return outcome, slow[0]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_servers_request_never_reaches_another_principal(tmp_path: Path, mode: str) -> None:
    alice, bob = Principal("Alice"), Principal("Bob")
    with asking_gateway(tmp_path) as (url, stderr):
        async with (
            sdk_client(url, mode, headers=ALICE, **alice.options()) as a,
            sdk_client(url, mode, headers=BOB, **bob.options()) as b,
        ):
            with anyio.fail_after(60):
                # Alone in flight: Alice's question reaches Alice, and her answer her call.
                assert text(await a.call_tool("r__ask", {})) == "accept:{'name': 'Alice'}"
                assert (alice.asked, bob.asked) == (["What is your name?"], [])
                # Bob's call is in flight too: nobody can tell whose the question is.
                refused, slow = await beside_a_slow_call(b, a.call_tool("r__ask", {}))
                assert refused.is_error and "cannot be attributed to one client" in text(refused)
                assert text(slow) == "slept 2 s"
                assert (len(alice.asked), bob.asked) == (1, [])  # Bob never saw Alice's question
                # And Bob alone again gets his own.
                assert text(await b.call_tool("r__ask", {})) == "accept:{'name': 'Bob'}"
                assert bob.asked == ["What is your name?"] and len(alice.asked) == 1
                # Log lines likewise: to the one principal in flight, else to nobody. (Opted in
                # with logging/setLevel in the handshake era, per request on 2026-07-28.)
                opt_in = {"io.modelcontextprotocol/logLevel": "debug"} if mode == "auto" else None
                if mode == "legacy":
                    await a.set_logging_level("debug")
                    await b.set_logging_level("debug")
                await a.call_tool("r__log", {"text": "alice alone", "level": "warning"}, meta=opt_in)
                with_bob = a.call_tool("r__log", {"text": "alice with bob", "level": "warning"}, meta=opt_in)
                await beside_a_slow_call(b, with_bob)
                await anyio.sleep(0.5)
                assert alice.logs == ["alice alone"] and bob.logs == [], (alice.logs, bob.logs)
    assert "cannot be attributed" in stderr.read_text() or "refused" in stderr.read_text()


async def _outcome(call: Any) -> str:
    """A call's answer text, or its error's message: a refused request of the server may end
    either way, as the server reports it."""
    from mcp.shared.exceptions import MCPError

    try:
        return text(await call)
    except MCPError as exc:
        return exc.error.message


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_that_can_be_asked_nothing_is_still_its_principals(tmp_path: Path, mode: str) -> None:
    """Alice's 2026-07-28 client declares no capability a server's request needs, so her calls
    run in their request's own task (no round-trip task: roundtrip.py ``run_here``). They are
    still booked as hers: alone in flight, the server's question is refused as hers (she cannot
    answer it) and her log lines reach her; with Bob's call (``mode``) in flight too, the
    question is refused as anybody's, and Bob never sees it."""
    alice, bob = Principal("Alice"), Principal("Bob")
    with asking_gateway(tmp_path) as (url, _):
        async with (
            sdk_client(url, "auto", headers=ALICE, logging_callback=alice.log) as a,
            sdk_client(url, mode, headers=BOB, **bob.options()) as b,
        ):
            with anyio.fail_after(60):
                alone = await _outcome(a.call_tool("r__ask", {}))
                assert "does not support elicitation" in alone, alone
                both, slow = await beside_a_slow_call(b, _outcome(a.call_tool("r__ask", {})))
                assert "cannot be attributed to one client" in both, both
                assert text(slow) == "slept 2 s" and bob.asked == []
                opt_in = {"io.modelcontextprotocol/logLevel": "debug"}
                await a.call_tool("r__log", {"text": "alice alone", "level": "warning"}, meta=opt_in)
                await anyio.sleep(0.5)
                assert alice.logs == ["alice alone"] and bob.logs == [], (alice.logs, bob.logs)


class Rooted:
    """One token's roots callback, recording that it was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked = 0

    async def list_roots(self, context: Any) -> types.ListRootsResult:
        self.asked += 1
        return types.ListRootsResult(roots=[types.Root.model_validate({"uri": f"file:///{self.name}"})])


@pytest.mark.parametrize("mode", ERAS)
async def test_what_a_server_asks_after_a_call_never_goes_to_another_principal_left_connected(
    tmp_path: Path, mode: str
) -> None:
    """Bob's call makes the server ask for roots half a second after it has returned, outside
    any call; only Alice is connected then (Bob's client is a 2026-07-28 one, never
    connected; or a handshake-era one that has gone). The request used to go to Alice, and her
    answer to the server as Bob's. Now it cannot be attributed: refused, and Alice is never
    asked. Alice's own call afterwards still asks her (``mode``: her era)."""
    alice, bob = Rooted("alice"), Rooted("bob")
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC]}})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, stderr):
            async with sdk_client(url, "legacy", headers=ALICE, list_roots_callback=alice.list_roots) as a:
                with anyio.fail_after(60):
                    for refusals, bob_mode in enumerate(("auto", "legacy"), 1):
                        async with sdk_client(url, bob_mode, headers=BOB, list_roots_callback=bob.list_roots) as b:
                            assert text(await b.call_tool("classic__roots_later", {"n": 1})) == "asking 1 times"
                        # This round's refusal, before Alice calls: a request that came during her
                        # call would be hers (a pipe does not say which call it belongs to).
                        await wait_for(partial(_logged, stderr, "roots/list refused", refusals), 10)

                        async def ended(count: int) -> bool:
                            found = text(await a.call_tool("classic__roots_later_results", {}))
                            return len(found.split("; ")) == count

                        await wait_for(partial(ended, 1 if bob_mode == "auto" else 2), 10)
                    ends = text(await a.call_tool("classic__roots_later_results", {})).split("; ")
                    assert all("cannot be attributed to one client" in end for end in ends), ends
                    assert alice.asked == 0
            async with sdk_client(url, mode, headers=ALICE, list_roots_callback=alice.list_roots) as a:
                assert text(await a.call_tool("classic__roots", {})) == "file:///alice"


def _logged(log: Path, line: str, times: int) -> bool:
    return log.read_text().count(line) >= times


class Confidant:
    """One token's elicitation callback, which answers only once both principals were asked."""

    def __init__(self, name: str, both_asked: anyio.Event, asked: list[str]) -> None:
        self.name = name
        self.both_asked = both_asked
        self.everyone = asked
        self.asked: list[str] = []

    async def elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params.message)
        self.everyone.append(params.message)
        if len(self.everyone) >= 2:
            self.both_asked.set()
        with anyio.fail_after(30):
            await self.both_asked.wait()  # both calls are in flight, both questions out
        return types.ElicitResult(action="accept", content={"name": self.name})


@contextmanager
def classic_http_gateway(tmp_path: Path, **gateway: Any) -> Iterator[tuple[str, Path]]:
    """A gateway over HTTP with Alice's and Bob's tokens, in front of the classic server over
    streamable HTTP (each request and log line on its call's stream): the URL and the log.
    ``gateway``: more of its ``[gateway]`` table."""
    with url_process([PYTHON, "-m", "tests.classic_server", "--http"]) as (server_url, _):
        config = write_config(tmp_path, {"c": {"url": server_url}}, gateway=gateway)
        with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
            with http_gateway(config, "--token-file", str(tokens)) as found:
                yield found


@pytest.mark.parametrize("mode", ERAS)
async def test_an_http_servers_request_goes_to_the_call_whose_stream_it_came_on(tmp_path: Path, mode: str) -> None:
    """With calls of two principals in flight to one streamable-HTTP server, each server request
    reaches the principal whose call's stream it came on, with that call's secret, and each
    answer goes back to its own call; the gateway's private header never reaches the server."""
    both_asked, everyone = anyio.Event(), list[str]()
    alice = Confidant("Alice", both_asked, everyone)
    bob = Confidant("Bob", both_asked, everyone)
    results: dict[str, str] = {}
    with classic_http_gateway(tmp_path) as (url, stderr):
        async with (
            sdk_client(url, mode, headers=ALICE, elicitation_callback=alice.elicitation) as a,
            sdk_client(url, mode, headers=BOB, elicitation_callback=bob.elicitation) as b,
        ):
            with anyio.fail_after(60):

                async def confide(who: str, client: Any) -> None:
                    results[who] = text(await client.call_tool("c__confide", {"secret": f"{who}-secret"}))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(confide, "alice", a)
                    tg.start_soon(confide, "bob", b)
                names = text(await a.call_tool("c__header_names", {}))
        assert "more than one principal" not in stderr.read_text()
    assert alice.asked == ["Is alice-secret yours?"] and bob.asked == ["Is bob-secret yours?"], everyone
    assert results == {
        "alice": "alice-secret:accept:{'name': 'Alice'}",
        "bob": "bob-secret:accept:{'name': 'Bob'}",
    }
    assert "authorization" not in names.split(",") and "mcp-protocol-version" in names.split(",")
    assert CALL_HEADER not in names.split(","), names  # (the gateway's own header, selfloop.py's, is meant to go)


@pytest.mark.parametrize("mode", ERAS)
async def test_an_http_servers_log_line_goes_to_the_call_whose_stream_it_came_on(tmp_path: Path, mode: str) -> None:
    """A streamable-HTTP server's log line sent during Alice's call (on that call's stream)
    reaches Alice while Bob's call to the same server is in flight, as it does directly; Bob
    never sees it. (On a pipe nobody can tell whose it is: dropped, the test above.)"""
    alice, bob = Principal("Alice"), Principal("Bob")
    with classic_http_gateway(tmp_path) as (url, _):
        async with (
            sdk_client(url, mode, headers=ALICE, logging_callback=alice.log) as a,
            sdk_client(url, mode, headers=BOB, logging_callback=bob.log) as b,
        ):
            with anyio.fail_after(60):
                opt_in = {"io.modelcontextprotocol/logLevel": "debug"} if mode == "auto" else None
                if mode == "legacy":
                    await a.set_logging_level("debug")
                    await b.set_logging_level("debug")

                async def bobs_call() -> None:
                    await b.call_tool("c__sleep", {"seconds": 2}, meta=opt_in)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(bobs_call)
                    await anyio.sleep(0.5)
                    assert text(await a.call_tool("c__log", {}, meta=opt_in)) == "logged"
                await anyio.sleep(0.5)
    assert alice.logs == ["classic log line"] and bob.logs == [], (alice.logs, bob.logs)


async def test_a_session_is_served_only_to_the_principal_that_created_it(tmp_path: Path) -> None:
    """Issue 26, item 9: Bob's token with Alice's ``Mcp-Session-Id`` is answered as an unknown
    session (404), so Bob cannot attach to Alice's session or its streams."""
    import httpx2

    from tests.helpers import ACCEPT, INIT

    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, stderr):
            async with httpx2.AsyncClient(timeout=30) as http:
                alice = {**ACCEPT, "authorization": "Bearer token-of-alice"}
                opened = await http.post(url, json=INIT, headers=alice)
                session = opened.headers["mcp-session-id"]
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                await http.post(url, json=initialized, headers={**alice, "mcp-session-id": session})
                listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                for token, status in (("token-of-bob", 404), ("token-of-alice", 200)):
                    headers = {**ACCEPT, "authorization": f"Bearer {token}", "mcp-session-id": session}
                    response = await http.post(url, json=listing, headers=headers)
                    assert response.status_code == status, (token, response.status_code, response.text[:300])
                    if status == 404:
                        assert "Session not found" in response.text
                # A call in Alice's session (the session lane's, once the SDK served her there).
                params = {"name": "d__echo", "arguments": {"text": "hers"}}
                call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}
                for token, status in (("token-of-alice", 200), ("token-of-bob", 404), ("token-of-alice", 200)):
                    headers = {**ACCEPT, "authorization": f"Bearer {token}", "mcp-session-id": session}
                    headers["mcp-protocol-version"] = "2025-11-25"
                    response = await http.post(url, json=call, headers=headers)
                    assert response.status_code == status, (token, response.status_code, response.text[:300])
                    assert ("hers" in response.text) == (status == 200), response.text[:300]
                # (written by the log thread: a moment after the answer, on a busy machine)
                await wait_for(lambda: "on the HTTP session lane" in stderr.read_text(), 10)


@pytest.mark.parametrize("mode", ERAS)
async def test_one_principal_leaving_a_servers_questions_unanswered_costs_another_none(
    tmp_path: Path, mode: str
) -> None:
    """Alice leaves 64 questions of one streamable-HTTP server unanswered (a call
    each, in flight); Bob's own question of that server still reaches Bob, and his call
    completes with his answer. The server's questions waiting for a client were counted for
    the connection: Alice's filled it, and Bob's was refused at once."""
    asking = 64  # (``relay.MAX_ASKING``: one principal's; the count was once the connection's)
    asked, answer = anyio.Event(), anyio.Event()
    alices: list[str] = []

    async def silent(context: Any, params: Any) -> types.ElicitResult:
        alices.append(params.message)
        if len(alices) >= asking:
            asked.set()
        await answer.wait()  # (until Bob's call is done)
        return types.ElicitResult(action="decline")

    bob = Principal("Bob")
    # (a 2026-07-28 client's calls waiting for its input are 16 a principal unless configured)
    with classic_http_gateway(tmp_path, max_round_trips=asking) as (url, _):
        async with (
            sdk_client(url, mode, headers=ALICE, elicitation_callback=silent) as a,
            sdk_client(url, mode, headers=BOB, **bob.options()) as b,
        ):
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(asking):
                        tg.start_soon(partial(a.call_tool, "c__confide", {"secret": f"alice-{i}"}))
                    await asked.wait()
                    answered = await _outcome(b.call_tool("c__confide", {"secret": "bob-secret"}))
                    assert answered == "bob-secret:accept:{'name': 'Bob'}", answered
                    assert bob.asked == ["Is bob-secret yours?"]
                    answer.set()
            assert len(alices) == asking
