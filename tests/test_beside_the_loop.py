"""Work whose size a peer sets runs beside the event loop, not on it: a long line from a
server is parsed in a worker thread in its turn (over a pipe and over HTTP), a catalog is
built in one, and so is an epoch's search index; so is a client's long POST body on the
2026-07-28 lane. On the loop, a 5,000-tool server's change held up every client's calls for
0.4-0.8 s (the listing parsed, the catalog rebuilt, the index rebuilt).

The unit tests hold the work in its thread and check the loop runs meanwhile (on the loop
they would block it, and fail). A parse is one C call that holds the interpreter lock
throughout, in a thread too, unless it calls back into Python code, where the lock is given
up to a thread that waits for it: the long-text parses call back once per object, which
their own tests check. The last tests run the whole paths through real gateways in both
eras."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio
import pydantic_core
import pytest
from mcp.shared.exceptions import MCPError

import gateway.downstream.httpcalls as httpcalls
import gateway.downstream.stdio as stdio
import gateway.engine.epoch as epoch_module
import gateway.jsontext as jsontext
from catalog.lock import Lock, LockedTool
from gateway.config import load_config
from gateway.downstream.calltime import Clock
from gateway.downstream.errors import NotJsonRpc
from gateway.downstream.stdio import UNPARSABLE_REPLY, Aside, Deferred
from gateway.engine.epoch import epoch_of
from gateway.engine.hub import Hub
from gateway.jsontext import PARSE_ASIDE_BYTES
from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    demo,
    http_gateway,
    read_artifact,
    sdk_client,
    text,
    url_process,
    write_config,
)
from tests.test_publishing import up
from tests.test_rawcalls import Pipe, reading

pytestmark = pytest.mark.anyio


class Held:
    """A function run in place of ``real``: it notes its thread, then waits (in that thread)
    until the test lets it go. Run on the event loop, it would hold the loop: the test's
    own task could not let it go, and the wait fails after ``TIMEOUT``."""

    TIMEOUT = 10.0

    def __init__(self, real: Any, when: Any = lambda *args: True) -> None:
        self.real = real
        self.when = when
        """Which calls are held (the others run as they are)."""
        self.threads: list[threading.Thread] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.when(*args):
            return self.real(*args, **kwargs)
        self.threads.append(threading.current_thread())
        self.started.set()
        assert self.release.wait(self.TIMEOUT), "held on the event loop: nothing could let it go"
        return self.real(*args, **kwargs)

    async def let_go_once_the_loop_ran(self) -> None:
        """Once the held work started, the loop still turns (sleeps end); then let it go."""
        with anyio.fail_after(self.TIMEOUT):
            while not self.started.is_set():
                await anyio.sleep(0.01)
        for _ in range(3):
            await anyio.sleep(0.01)
        self.release.set()


def _log_line(size: int) -> bytes:
    data = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x" * size}}
    return json.dumps(data).encode() + b"\n"


async def test_a_long_line_is_parsed_in_a_worker_thread_and_keeps_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    parse = Held(stdio._load, lambda line: len(line) >= PARSE_ASIDE_BYTES)
    monkeypatch.setattr(stdio, "_load", parse)
    pipe = Pipe()
    async with anyio.create_task_group() as tg:
        calls, reader, _session = reading(pipe, tg, 64 << 20)
        answers: list[Any] = []

        async def call(name: str) -> None:
            answers.append(await calls.request("tools/call", {"name": name}, timeout=30, on_progress=None))

        tg.start_soon(call, "short")
        tg.start_soon(call, "long")
        with anyio.fail_after(5):
            while len(pipe.lines) < 2:
                await anyio.sleep(0.01)
        ids = {line["params"]["name"]: line["id"] for line in pipe.lines}
        long_result = {"content": [{"type": "text", "text": "y" * PARSE_ASIDE_BYTES}]}
        # A long log line, then the short call's reply, then the long call's (long) reply.
        reader.data_received(
            _log_line(PARSE_ASIDE_BYTES)
            + json.dumps({"jsonrpc": "2.0", "id": ids["short"], "result": {"content": []}}).encode()
            + b"\n"
            + json.dumps({"jsonrpc": "2.0", "id": ids["long"], "result": long_result}).encode()
            + b"\n"
        )
        assert not parse.threads, "a long line was parsed in the read callback, on the loop"
        assert [type(item) for item in reader.queue] == [Aside, Deferred, Aside]
        await anyio.sleep(0.05)
        assert not answers, "the short reply overtook the long line before it"

        # The forwarder's turn: the log line, parsed in a worker thread while the loop runs.
        first = reader.take()
        assert isinstance(first, Aside)
        async with anyio.create_task_group() as inner:
            inner.start_soon(parse.let_go_once_the_loop_ran)
            message = await reader.parsed(first)
        reader.done()
        assert message is not None and not isinstance(message, Exception)
        assert message.message.method == "notifications/message"
        assert parse.threads[0] is not threading.main_thread()
        deferred = reader.take()
        assert isinstance(deferred, Deferred)
        deferred.run()
        reader.done()
        last = reader.take()
        assert isinstance(last, Aside)
        assert await reader.parsed(last) is None  # the long call's reply: handed to its call
        reader.done()
        with anyio.fail_after(5):
            while len(answers) < 2:
                await anyio.sleep(0.01)
    assert answers == [{"content": []}, long_result]


async def test_a_long_line_a_server_botched_costs_only_the_call_it_answers() -> None:
    # A misbehaving server: a long reply cut short (not JSON) fails the call it answers, with
    # the reader's own error, and a long line of JSON that is no message becomes NotJsonRpc
    # for the session (logged, dropped), as short ones do; the reader goes on.
    pipe = Pipe()
    async with anyio.create_task_group() as tg:
        calls, reader, _session = reading(pipe, tg, 64 << 20)
        outcome: list[Any] = []

        async def call() -> None:
            try:
                outcome.append(await calls.request("tools/call", {"name": "t"}, timeout=30, on_progress=None))
            except MCPError as exc:
                outcome.append(exc.error)

        tg.start_soon(call)
        with anyio.fail_after(5):
            while not pipe.lines:
                await anyio.sleep(0.01)
        request_id = pipe.lines[0]["id"]
        cut = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"x": "y" * PARSE_ASIDE_BYTES}})[:-3]
        stray = json.dumps({"not": "a message", "pad": "z" * PARSE_ASIDE_BYTES})
        reader.data_received(stray.encode() + b"\n" + cut.encode() + b"\n")
        first = reader.take()
        assert isinstance(first, Aside)
        assert isinstance(await reader.parsed(first), NotJsonRpc)
        reader.done()
        second = reader.take()
        assert isinstance(second, Aside)
        assert await reader.parsed(second) is None  # the error went to the call it answers
        reader.done()
        with anyio.fail_after(5):
            while not outcome:
                await anyio.sleep(0.01)
    assert outcome[0].code == UNPARSABLE_REPLY and outcome[0].message.startswith("unparsable reply: "), outcome


async def test_a_long_answer_over_http_is_parsed_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    parse = Held(jsontext.loads_as_jiter)
    monkeypatch.setattr(jsontext, "loads_as_jiter", parse)
    call = httpcalls._Call(cast(httpcalls.HttpCalls, None), "pg-1", None, Clock(30, None))
    result = {"tools": [{"name": f"t{i}", "description": "x" * 100} for i in range(PARSE_ASIDE_BYTES // 100)]}
    body = json.dumps({"jsonrpc": "2.0", "id": "pg-1", "result": result}).encode()
    short = json.dumps({"jsonrpc": "2.0", "id": "pg-1", "result": {"tools": []}}).encode()
    assert await call._message(short, "JSON response", any_id=False) == {"tools": []}  # parsed on the spot
    assert not parse.threads
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(parse.let_go_once_the_loop_ran)
            assert await call._message(body, "JSON response", any_id=False) == result
    assert parse.threads[0] is not threading.main_thread()


async def test_a_rebuild_is_built_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one")
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks))
    build = Held(epoch_module.build_epoch)
    monkeypatch.setattr(epoch_module, "build_epoch", build)
    up(hub, "a", "one", "two")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(build.let_go_once_the_loop_ran)
            await hub.publisher.rebuild("server 'a' changed its tools")
    assert build.threads and build.threads[0] is not threading.main_thread()
    assert hub.router.epoch is not None
    assert sorted(hub.router.epoch.catalog.by_name) == ["a__one", "a__two"]


async def test_under_a_catalog_lock_a_rebuild_gates_calls_in_the_step_that_sees_the_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lock's call gate (a tool changed since the lock is refused) must not lag a build's
    # time behind the server's new tools: under a lock the build stays on the loop.
    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one")
    listed = epoch_of(hub.config, hub.downstreams, hub.checks)
    approved = Lock(tuple(LockedTool(e.name, e.server, e.original, e.declaration) for e in listed.catalog.entries))
    hub.lock.current = approved
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks, approved))
    assert hub.router.epoch is not None and not hub.router.epoch.lock_refusals
    threads: list[threading.Thread] = []
    real = epoch_module.build_epoch

    def noted(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(epoch_module, "build_epoch", noted)
    hub.by_id["a"].tools = ({"name": "one", "description": "changed", "inputSchema": {"type": "object"}},)
    await hub.publisher.rebuild("server 'a' changed its tools")
    assert threads == [threading.main_thread()]
    assert "a__one" in hub.router.epoch.lock_refusals


async def test_the_first_searches_of_an_epoch_share_one_index_built_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one", "two")
    epoch = epoch_of(hub.config, hub.downstreams, hub.checks)
    index = Held(epoch_module.SearchIndex)
    monkeypatch.setattr(epoch_module, "SearchIndex", index)
    found: list[Any] = []

    async def search() -> None:
        found.append(await epoch.searchable())

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(search)
            tg.start_soon(index.let_go_once_the_loop_ran)
    assert len(index.threads) == 1 and index.threads[0] is not threading.main_thread()
    assert len(found) == 3 and found[0] is found[1] is found[2] is epoch.index
    assert [m.name for m in found[0].query("two").matches] == ["a__two"]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("protocol", ["legacy", "modern"])
@pytest.mark.parametrize(("server", "front"), [("pipe", "stdio"), ("http", "stdio"), ("http", "http")])
async def test_a_large_server_changes_its_tools_through_the_gateway(
    tmp_path: Path, server: str, front: str, protocol: str, mode: str
) -> None:
    # 1,000 tools: the server's listing is ~0.5 MB (one line on a pipe, one answer over HTTP),
    # parsed aside at discovery and at each re-list; the catalog (on demand) is rebuilt and
    # its index built in a thread. The server speaks either era to the gateway (a handshake
    # session's re-list goes beside it too), the client either era to the gateway, over
    # stdio or HTTP.
    args = ["--tools", 1000, "--rich", "--name", "r"]
    errlog = tmp_path / "gateway.log"
    with contextlib.ExitStack() as stack:
        if server == "http":
            command = [*GATEWAY, "demo-server", "--transport", "http", *map(str, args)]
            url, _ = stack.enter_context(url_process(command))
            config = write_config(tmp_path, {"r": {"url": url, "protocol": protocol}})
        else:
            config = write_config(tmp_path, {"r": {**demo(*args), "protocol": protocol}})
        if front == "http":
            target, errlog = stack.enter_context(http_gateway(config, "--log-level", "debug"))
            async with sdk_client(target, mode) as client:
                await _grow_and_call(client)
        else:
            async with sdk_client(config, mode, errlog=errlog, log_level="debug") as client:
                await _grow_and_call(client)
    said = errlog.read_text()
    assert said.count("[r] tools/list made beside the SDK's session") == 1, said[-3000:]  # the re-list, not the first
    assert f"[r] protocol {'2025-11-25' if protocol == 'legacy' else '2026-07-28'}" in said, said[-3000:]


async def _grow_and_call(client: Any) -> None:
    found = text(await client.call_tool("tool_search", {"query": "r__mutate"}))
    assert "r__mutate" in found, found
    grown = await client.call_tool("tool_call", {"name": "r__mutate", "arguments": {"kind": "grow"}})
    assert text(grown) == "mutated:grow"
    with anyio.fail_after(30):
        while "r__grown_1" not in (said := text(await client.call_tool("tool_search", {"query": "grown"}))):
            await anyio.sleep(0.1)
    assert said.startswith('Tools matching "grown"'), said
    # A result longer than a line parsed on the loop: the call's own reply, parsed aside.
    size = PARSE_ASIDE_BYTES * 2
    await client.call_tool("tool_search", {"query": "r__payload"})
    big = await client.call_tool("tool_call", {"name": "r__payload", "arguments": {"bytes": size}})
    assert not big.is_error, text(big)
    assert "artifact" in text(big), text(big)[:300]


def _turns(work: Callable[[], Any]) -> int:
    """How often ``work`` called ``jsontext._turn``, its C code's calls included: each is a
    point where a worker thread gives the interpreter lock up to the event loop."""
    turns = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal turns
        if event == "call" and frame.f_code is jsontext._turn.__code__:
            turns += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return turns


def test_a_long_text_is_parsed_yielding_the_interpreter_lock_between_objects() -> None:
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object", "properties": {}}} for i in range(4000)]
    message = {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}
    text_ = json.dumps(message)
    assert len(text_) >= PARSE_ASIDE_BYTES
    objects = 2 + 3 * len(tools)
    assert _turns(lambda: jsontext.loads(text_, yielding=True)) == objects
    assert _turns(lambda: jsontext.loads_yielding(text_.encode())) == objects
    assert _turns(lambda: stdio._load_aside(Aside(text_.encode()))) == objects  # a server's long line
    assert _turns(lambda: jsontext.loads(text_)) == 0  # on the loop: no detour
    assert jsontext.loads(text_, yielding=True) == jsontext.loads_yielding(text_.encode()) == message
    # The same verdicts: what json.loads refuses, cut or trailed, and the deep retry.
    for bad in (text_[:-1], text_ + " x"):
        with pytest.raises(ValueError) as yielding:
            jsontext.loads(bad, yielding=True)
        with pytest.raises(ValueError) as plain:
            jsontext.loads(bad)
        assert str(yielding.value) == str(plain.value)
    deep = '{"a":' * 3000 + "{}" + "}" * 3000
    assert _turns(lambda: jsontext.loads(deep, yielding=True)) == 3001
    node, depth = jsontext.loads(deep, yielding=True), 0
    while node:
        node, depth = node["a"], depth + 1
    assert depth == 3000


def _long(value: str) -> str:
    """JSON text at least ``PARSE_ASIDE_BYTES`` long around ``value`` (an array's last item)."""
    return '{"jsonrpc":"2.0","id":"pg-1","result":{"pad":["' + "p" * PARSE_ASIDE_BYTES + '",' + value + "]}}"


def _jiter(data: bytes | str) -> Any:
    """The SDK's parser's value, or None where it refuses."""
    try:
        return pydantic_core.from_json(data)
    except ValueError:
        return None


def _as_jiter(data: bytes | str) -> Any:
    """``jsontext.loads_as_jiter``'s value, or None where it refuses (as a long answer is read)."""
    try:
        return jsontext.loads_as_jiter(data)
    except ValueError:
        return None


def test_a_long_answer_over_http_is_read_yielding_with_the_sdk_parsers_verdicts() -> None:
    # json's parser gives the lock up between objects, where jiter (the SDK's) holds it
    # throughout; on every text here both end the same: the same values, or None.
    nested = 10 * ('{"a":' * 20 + '"x"' + "}" * 20 + ",")  # many objects: many turns
    texts = {
        "listing": _long(nested + "1.7976931348623157e308,-0.0,123456789012345678901234567890,NaN"),
        "200 deep": _long("[" * 197 + "1" + "]" * 197),  # with the envelope's three: jiter's most
        "201 deep": _long("[" * 198 + "1" + "]" * 198),
        "lone surrogate": _long('"\\ud800"'),
        "a pair": _long('"\\ud83d\\ude00"'),
        "cut": _long("1")[:-1],
        "trailing": _long("1") + " x",
    }
    for label, data in texts.items():
        for given in (data, data.encode()):
            assert repr(_as_jiter(given)) == repr(_jiter(given)), label  # (NaN != NaN)
    assert _jiter(texts["201 deep"]) is None and _jiter(texts["200 deep"]) is not None
    assert _jiter(texts["lone surrogate"]) is None  # jiter refuses it, json would not
    for label, data_ in (
        ("a mark", b"\xef\xbb\xbf" + texts["listing"].encode()),
        ("not UTF-8", _long('"\xff"').encode("latin-1")),
    ):
        assert _as_jiter(data_) is _jiter(data_) is None, label
    assert _turns(lambda: _as_jiter(texts["listing"])) >= 200


async def test_a_long_body_on_the_2026_lane_is_parsed_beside_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    parse = Held(jsontext.loads_yielding)
    monkeypatch.setattr(jsontext, "loads_yielding", parse)
    short = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}).encode()
    assert await jsontext.parsed_aside(short, "a test body") == json.loads(short)  # on the spot
    assert not parse.threads
    long = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"x": "y" * PARSE_ASIDE_BYTES}})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(parse.let_go_once_the_loop_ran)
            assert await jsontext.parsed_aside(long.encode(), "a test body") == json.loads(long)
    assert parse.threads[0] is not threading.main_thread()


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("server", ["pipe", "http"])
async def test_a_long_argument_reaches_a_classic_server_whole(tmp_path: Path, server: str, mode: str) -> None:
    # A client's call longer than PARSE_ASIDE_BYTES, through a gateway over HTTP to a server
    # written the classic way, whose echo comes back as an artifact: byte for byte what was
    # sent. Its body is parsed beside the loop, on the lane of its era; the request to the
    # server is encoded beside it, in pieces.
    with contextlib.ExitStack() as stack:
        if server == "http":
            url, _ = stack.enter_context(url_process([PYTHON, "-m", "tests.classic_server", "--http"]))
            config = write_config(tmp_path, {"c": {"url": url}})
        else:
            config = write_config(tmp_path, {"c": {"command": PYTHON, "args": ["-m", "tests.classic_server"]}})
        await _echo_a_long_argument(config, mode)


async def _echo_a_long_argument(config: Path, mode: str) -> None:
    sent = "".join(f"{i:05d} é日本\n" for i in range(PARSE_ASIDE_BYTES // 8))
    with http_gateway(config, "--log-level", "debug") as (url, errlog):
        async with sdk_client(url, mode) as client:
            answer = await client.call_tool("c__echo", {"text": sent})
            assert not answer.is_error, text(answer)[:300]
            found = text(answer)
            artifact = found.split("artifact ", 1)[1].split()[0].strip(".;,")
            assert await read_artifact(client, artifact) == f"classic:{sent}"  # (its echo says who answered)
    said = errlog.read_text()
    body = "a 2026-07-28 POST body: " if mode == "auto" else "a handshake-era POST body: "
    assert said.count(body) == 1 and "bytes parsed beside the event loop" in said, said[-3000:]
    assert said.count("a long tools/call to ") == 1 and "encoded beside the event loop" in said, said[-3000:]


@pytest.mark.parametrize("mode", ERAS)
async def test_one_principals_long_calls_leave_anothers_calls_whole(tmp_path: Path, mode: str) -> None:
    # Two principals at once through one gateway, in front of a server written the classic
    # way: Alice's calls are long (parsed and encoded beside the loop), Bob's short ones go
    # on meanwhile, and each gets its own answers, Alice's back byte for byte from her store.
    from tests.test_principal_requests import ALICE, BOB
    from tests.test_principals import tokens_file

    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": ["-m", "tests.classic_server"]}})
    sent = "".join(f"{i:05d} é日本\n" for i in range(PARSE_ASIDE_BYTES // 8))
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens), "--log-level", "debug") as (url, errlog):
            async with sdk_client(url, mode, headers=ALICE) as alice, sdk_client(url, mode, headers=BOB) as bob:
                short: list[str] = []

                async def bob_calls() -> None:
                    for i in range(20):
                        short.append(text(await bob.call_tool("c__echo", {"text": f"bob {i}"})))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(bob_calls)
                    for _ in range(2):
                        answer = await alice.call_tool("c__echo", {"text": sent})
                        assert not answer.is_error, text(answer)[:300]
                        artifact = text(answer).split("artifact ", 1)[1].split()[0].strip(".;,")
                        assert await read_artifact(alice, artifact) == f"classic:{sent}"
                assert short == [f"classic:bob {i}" for i in range(20)]
    assert errlog.read_text().count("bytes parsed beside the event loop") >= 2


async def test_resources_and_prompts_are_rebuilt_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's re-listed resources rebuilt every server's resources, templates and prompts
    on the loop: with 20,000 of each, a server announcing changes held every client 1-3 s."""
    import gateway.engine.publishing as publishing

    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one")
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks))
    assert hub.publisher.surface.resources == []
    build = Held(publishing.surface_of)
    monkeypatch.setattr(publishing, "surface_of", build)
    hub.by_id["a"].resources = ({"uri": "x://1", "name": "one"},)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(build.let_go_once_the_loop_ran)
            await hub.publisher.relisted("resources")
    assert build.threads and build.threads[0] is not threading.main_thread()
    assert hub.publisher.surface.resources == [{"name": "one", "uri": "x://1"}]
    assert hub.publisher.surface.owner_of_uri("x://1") == "a"


async def test_a_tools_change_captures_the_other_lists_for_the_warm_start_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-start record's answers are captured after every rebuild, each list through the
    SDK's pipeline once a protocol version, on the loop: beside 100,000 resources, templates
    and prompts a server changing its tools held every client ~3 s at each change. The lists
    after ``tools/list`` are captured again only when they change; the answers are the same."""
    import mcp_types.version as versions

    import gateway.upstream.answers as answers

    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one")
    hub.by_id["a"].resources = ({"uri": "x://1", "name": "one"},)
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks))
    asked: list[str] = []
    exchange = answers._exchange  # noqa: SLF001

    async def noted(hub: Hub, requests: list[Any]) -> list[bytes]:
        asked.extend(request[0] for request in requests if request is not None)
        return await exchange(hub, requests)

    monkeypatch.setattr(answers, "_exchange", noted)
    each = len(versions.HANDSHAKE_PROTOCOL_VERSIONS) + len(versions.MODERN_PROTOCOL_VERSIONS)
    with anyio.fail_after(60):
        await answers.capture(hub)
        assert asked.count("resources/list") == asked.count("prompts/list") == each
        up(hub, "a", "one", "two")
        await hub.publisher.rebuild("server 'a' changed its tools")
        asked.clear()
        captured = await answers.capture(hub)
        assert asked.count("tools/list") == each
        assert asked.count("resources/list") == asked.count("resources/templates/list") == 0
        answers._surface_answers.clear()  # noqa: SLF001
        assert await answers.capture(hub) == captured  # what a whole capture gives
        hub.by_id["a"].resources = ({"uri": "x://2", "name": "two"},)
        await hub.publisher.relisted("resources")
        asked.clear()
        captured = await answers.capture(hub)
        assert asked.count("resources/list") == each
        assert any(a.method == "resources/list" and b"x://2" in a.result for a in captured)
    kept = [line for lines in answers._surface_answers[hub][1].values() for line in lines]  # noqa: SLF001
    assert len({id(line) for line in kept}) == len(set(kept))  # versions that answer alike share the bytes


async def test_a_capture_a_new_epoch_overtakes_is_dropped_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that changes its tools twice in a row (or a crash and a restart): the second
    epoch began while the first one's answers were being captured, and the capture logged a
    warning, ``warm-start answers not captured: tools/list ...: the answer does not carry the
    epoch's tools first``, for what is no fault: those answers belong to an epoch that is over,
    and the next capture takes the new one's. Now they are dropped quietly, as when the new
    epoch begins after the lists were read."""
    import logging

    import gateway.upstream.answers as answers

    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one")
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks))
    exchange = answers._exchange  # noqa: SLF001
    overtook: list[bool] = []

    async def overtaken(hub: Hub, requests: list[Any]) -> list[bytes]:
        if not overtook:
            overtook.append(True)
            up(hub, "a", "one", "two")
            await hub.publisher.rebuild("server 'a' changed its tools")
        return await exchange(hub, requests)

    monkeypatch.setattr(answers, "_exchange", overtaken)
    with anyio.fail_after(60), caplog.at_level(logging.INFO, logger="prefixgate"):
        assert await answers.capture(hub) == []
    assert not [r.getMessage() for r in caplog.records if "not captured" in r.getMessage()]
    monkeypatch.setattr(answers, "_exchange", exchange)
    with anyio.fail_after(60):
        assert await answers.capture(hub) != []  # the new epoch's, at the next capture


async def test_lists_a_server_re_lists_alike_are_not_kept_twice(tmp_path: Path) -> None:
    """A re-list that brings the same resources changes nothing, and only the newest lists are
    held (the ones the surface was built from went, not the server's current ones)."""
    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one")
    hub.by_id["a"].resources = ({"uri": "x://1", "name": "one"},)
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks))
    surface = hub.publisher.surface
    again = hub.by_id["a"].resources = ({"uri": "x://1", "name": "one"},)
    await hub.publisher.relisted("resources")
    assert hub.publisher.surface is surface
    held = hub.publisher._surfaced  # noqa: SLF001
    assert held is not None and held[2][0][2] is again
