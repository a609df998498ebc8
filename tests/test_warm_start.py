"""Warm start: a start with the record of the same config answers at once, and the barrier,
run behind it, confirms the bytes or starts one new epoch. Real gateways, real servers (the
demo server and a mutating one behind ``tests.gated_server``, whose gates change how a server
starts without changing its command), the real SDK client in both eras, stdio and HTTP."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.server.subscriptions import PromptsListChanged

from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    RawGateway,
    catalog_json,
    http_gateway,
    raw_gateway,
    run_cli,
    sdk_client,
    text,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = "warm start: published the last verified catalog"


def gated(gates: Path, *server: str | int | float) -> dict[str, Any]:
    """A server table: ``server`` (a demo server's arguments, or a module's) behind ``gates``."""
    gates.mkdir(exist_ok=True)
    command = [PYTHON, "-m", *map(str, server)] if server[0] == "tests.mutating_server" else [
        PYTHON, "-m", "gateway", "demo-server", *map(str, server)
    ]
    return {"command": PYTHON, "args": ["-m", "tests.gated_server", str(gates), *command], "cwd": str(ROOT)}


def two_servers(tmp_path: Path, **gateway: Any) -> tuple[Path, Path]:
    """A fast demo server and one behind gates (``s``); the config and the gate directory."""
    gates = tmp_path / "gates"
    servers = {
        "a": {"command": PYTHON, "args": ["-m", "gateway", "demo-server", "--tools", "1", "--rich", "--name", "a"]},
        "s": {**gated(gates, "--tools", "1", "--name", "s"), "startup_timeout": 60},
    }
    return write_config(tmp_path, servers, gateway={"discovery_deadline": 120, **gateway}), gates


def remember(config: Path) -> dict[str, Any]:
    """``catalog`` leaves the warm-start record behind; its report (what a cold start publishes)."""
    report = catalog_json(config)
    assert list((config.parent / "state" / "warm").glob("*.rec")), "catalog left no warm-start record"
    return report


def names(tools: Any) -> list[str]:
    return [t.name for t in tools.tools]


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
async def test_a_client_that_lists_and_leaves_at_once_leaves_the_record(tmp_path: Path, version: str) -> None:
    """An agent that starts the gateway, lists its tools and closes its end at once (a probe, a
    one-shot run) stops it right after the barrier's answer: the record that answer was
    published from is still written, so the next start is warm. It used to be lost most
    times: the stop cancelled the publication at its first await after the answer."""
    gates = tmp_path / "gates"
    tool = {"name": "t", "description": "A tool.", "inputSchema": {"type": "object"}}
    # Says its tools changed while the gateway starts (server-everything does): the first
    # epoch is rebuilt at once after it is out, and the record is written after that.
    changing = {"tools": [tool], "tools2": [tool], "tools2_after_list": True}
    servers = {
        "c": {"command": PYTHON, "args": [str(ROOT / "tests" / "rogue_schema.py"), json.dumps(changing)]},
        "s": gated(gates, "--tools", "1", "--name", "s"),
    }
    (gates / "delay").write_text("0.5")  # the list waits for the barrier: answered as it publishes
    config = write_config(tmp_path, servers)
    records = config.parent / "state" / "warm"
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }
    for attempt in range(3):
        shutil.rmtree(records, ignore_errors=True)
        log = tmp_path / f"serve-{attempt}.log"
        with log.open("w") as stderr, raw_gateway(config, stderr) as gw:
            if version == "2026-07-28":
                gw.request(1, "tools/list", {"_meta": meta})
            else:
                gw.handshake()
                gw.request(1, "tools/list")
            assert "c__t" in json.dumps(gw.answer(1)["result"])
            assert gw.proc.stdin is not None
            gw.proc.stdin.close()  # and gone: nothing more is read
            assert gw.proc.wait(timeout=30) == 0
        assert list(records.glob("*.rec")), f"attempt {attempt + 1}: no warm-start record left\n{log.read_text()}"
    with (tmp_path / "warm.log").open("w") as stderr, raw_gateway(config, stderr, None, "--log-level", "info") as gw:
        gw.handshake()
        assert gw.proc.stdin is not None
        gw.proc.stdin.close()
        gw.proc.wait(timeout=30)
    assert PUBLISHED in (tmp_path / "warm.log").read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_warm_start_lists_every_tool_before_its_servers_are_up(tmp_path: Path, mode: str) -> None:
    config, gates = two_servers(tmp_path)
    report = remember(config)
    (gates / "delay").write_text("60")
    log = tmp_path / "serve.log"
    with anyio.fail_after(30):
        async with sdk_client(config, mode, errlog=log) as client:
            listed = await client.list_tools()
            assert names(listed) == [d["name"] for d in report["declarations"]]
            assert "s__echo" in names(listed)
            assert "[s] ready" not in log.read_text()
            # The answers came before the gateway was up; once it is, it says it started warm.
            await wait_for(lambda: PUBLISHED in log.read_text())


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_in_the_warm_window_waits_for_its_server(tmp_path: Path, mode: str) -> None:
    config, gates = two_servers(tmp_path)
    remember(config)
    (gates / "delay").write_text("1.5")
    log = tmp_path / "serve.log"
    async with sdk_client(config, mode, errlog=log) as client:
        result = await client.call_tool("s__echo", {"text": "made it"})
        assert not result.is_error and text(result) == "made it"
    assert PUBLISHED in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_prompt_change_in_the_warm_window_reaches_the_client(tmp_path: Path, mode: str) -> None:
    """A client lists prompts from the warm epoch and a call changes them while another server
    holds the barrier: it hears list_changed then, not never (the change was taken into the
    prompts served but announced only after the barrier, which had nothing left to announce).
    The same window, much shorter, follows any barrier's epoch while its history is written."""
    gates = tmp_path / "gates"
    servers = {
        "m": {"command": PYTHON, "args": [str(ROOT / "tests" / "modern_server.py")]},
        "s": {**gated(gates, "--tools", "1", "--name", "s"), "startup_timeout": 60},
    }
    config = write_config(tmp_path, servers, gateway={"discovery_deadline": 120})
    remember(config)
    (gates / "delay").write_text("60")
    log = tmp_path / "serve.log"
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    async with sdk_client(config, mode, errlog=log, message_handler=on_message) as client:
        with anyio.fail_after(30):
            assert [p.name for p in (await client.list_prompts()).prompts] == ["m__interview"]
            await wait_for(lambda: "[m] ready" in log.read_text())
            if mode == "auto":
                async with client.listen(prompts_list_changed=True) as events:
                    assert text(await client.call_tool("m__add_prompt", {})) == "prompt added"
                    async for event in events:
                        assert isinstance(event, PromptsListChanged), event
                        break
            else:
                assert text(await client.call_tool("m__add_prompt", {})) == "prompt added"
                while not any(isinstance(m, types.PromptListChangedNotification) for m in heard):
                    await anyio.sleep(0.05)
            assert [p.name for p in (await client.list_prompts()).prompts] == ["m__extra_1", "m__interview"]
            assert "[s] ready" not in log.read_text()  # all of it within the warm window


class Seen:
    """The list_changed notifications a handshake-era client received."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1


@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_that_cannot_start_keeps_its_tools_and_the_epoch(tmp_path: Path, mode: str) -> None:
    config, gates = two_servers(tmp_path)
    remember(config)
    (gates / "fail").write_text("broken on purpose")
    log = tmp_path / "serve.log"
    seen = Seen()
    options = {"message_handler": seen} if mode == "legacy" else {}
    async with sdk_client(config, mode, errlog=log, **options) as client:
        before = await client.list_tools()
        result = await client.call_tool("s__echo", {"text": "x"})
        assert result.is_error
        assert text(result).startswith("Server 's' is down (exited during start-up (exit status 3)")
        assert "broken on purpose" in text(result)
        await wait_for(lambda: "warm start confirmed" in log.read_text())
        assert names(await client.list_tools()) == names(before)
        assert seen.count == 0
    assert "server 's' is failed (its recorded tools are kept)" in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_nested_past_the_recursion_limit_costs_no_warm_start(tmp_path: Path, mode: str) -> None:
    """A server lists a tool nested 2,000 levels deep: the catalog quarantines it, and the
    record, which cannot hold it (``catalog.warm.MAX_NESTING``), is written without it. It was
    not written at all, so every start of the config was cold."""
    rogue = {"command": PYTHON, "args": [str(ROOT / "tests" / "rogue_wire.py"), "--deep-schema", "1000"]}
    demo = {"command": PYTHON, "args": ["-m", "gateway", "demo-server", "--tools", "1"]}
    config = write_config(tmp_path, {"a": demo, "rogue": rogue})
    report = remember(config)
    assert {(w["server"], w["tool"]) for w in report["warnings"] if w["kind"] == "quarantined"} == {("rogue", "deep")}
    log = tmp_path / "serve.log"
    async with sdk_client(config, mode, errlog=log) as client:
        assert names(await client.list_tools()) == [d["name"] for d in report["declarations"]]
        await wait_for(lambda: "warm start confirmed" in log.read_text())
    assert PUBLISHED in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_changed_between_runs_are_one_new_epoch_after_their_server_starts(
    tmp_path: Path, mode: str
) -> None:
    gates, state = tmp_path / "gates", tmp_path / "mutations.json"
    server = {**gated(gates, "tests.mutating_server", str(state)), "startup_timeout": 60}
    config = write_config(tmp_path, {"m": server})
    remember(config)
    state.write_text(json.dumps(["add"]))  # the server now lists one more tool
    (gates / "delay").write_text("1")
    log = tmp_path / "serve.log"
    seen = Seen()
    options = {"message_handler": seen} if mode == "legacy" else {}
    async with sdk_client(config, mode, errlog=log, **options) as client:
        assert "m__gamma" not in names(await client.list_tools())
        if mode == "legacy":
            await wait_for(lambda: seen.count >= 1)
        else:
            async with client.listen(tools_list_changed=True) as events:
                with anyio.fail_after(30):
                    async for _ in events:
                        seen.count += 1
                        break
        assert "m__gamma" in names(await client.list_tools())
        await client.list_tools()  # after a round trip, a second notification would have arrived
        assert seen.count == 1
    text_log = log.read_text()
    assert "new epoch (the discovery barrier after a warm start)" in text_log
    assert "added: m__gamma" in text_log and "server 'm' lists other tools" in text_log


@pytest.mark.parametrize("locked", [False, True], ids=["unlocked", "locked"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_in_the_warm_window_to_a_tool_its_server_no_longer_lists_is_refused(
    tmp_path: Path, mode: str, locked: bool
) -> None:
    """The record has ``m__beta``; the server, started since, lists it no longer. A call made
    from the warm catalog waits for the server, then is refused naming the tool and the
    server (under a lock, as the lock refuses it), while another server still holds the
    barrier. It used to be sent to the server, which has no such tool (this one answers any
    name, as a lax server does)."""
    gates, state = tmp_path / "gates", tmp_path / "mutations.json"
    servers = {
        "m": {**gated(gates, "tests.mutating_server", str(state)), "startup_timeout": 60},
        "s": {**gated(tmp_path / "slow", "--tools", "1", "--name", "s"), "startup_timeout": 60},
    }
    config = write_config(tmp_path, servers, gateway={"discovery_deadline": 120})
    if locked:
        proc = run_cli("catalog", "lock", "--config", str(config))
        assert proc.returncode == 0, proc.stderr
    else:
        remember(config)
    state.write_text(json.dumps(["remove"]))
    (gates / "delay").write_text("1")
    (tmp_path / "slow" / "delay").write_text("60")
    log = tmp_path / "serve.log"
    async with sdk_client(config, mode, errlog=log) as client:
        assert "m__beta" in names(await client.list_tools())
        with anyio.fail_after(60):
            result = await client.call_tool("m__beta", {})
        assert result.is_error
        assert text(result) == (
            "Tool 'm__beta' is no longer available: its server no longer lists it "
            "(run prefixgate catalog approve m__beta to drop it from the lock)."
            if locked
            else "Tool 'm__beta' is no longer available: server 'm' no longer lists it."
        )
        assert "[s] ready" not in log.read_text()  # within the warm window
        assert text(await client.call_tool("m__alpha", {"text": "still here"})) == "still here"


def _changed_args(config: Path, tmp_path: Path) -> None:
    config.write_text(config.read_text().replace('"--tools", "1", "--name", "a"', '"--tools", "2", "--name", "a"'))


def _changed_env(config: Path, tmp_path: Path) -> None:
    config.write_text(config.read_text().replace('env = {"TOKEN" = "one"}', 'env = {"TOKEN" = "two"}'))


def _changed_profile(config: Path, tmp_path: Path) -> None:
    config.write_text(config.read_text() + '[client]\nprofile = "anthropic"\n')


def _changed_lock(config: Path, tmp_path: Path) -> None:
    proc = run_cli("catalog", "lock", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    shutil.rmtree(config.parent / "state" / "warm")  # catalog lock left a record for the new lock: not this test


# Every part of the key, in process: tests/test_warm_files.py. Here the four an issue named,
# end to end, the eras taking turns (the key is the same in both).
@pytest.mark.parametrize(
    ("change", "mode"),
    [(_changed_args, "legacy"), (_changed_env, "auto"), (_changed_profile, "legacy"), (_changed_lock, "auto")],
    ids=["args", "env", "profile", "lock"],
)
async def test_the_record_is_not_used_when_anything_it_is_keyed_by_differs(
    tmp_path: Path, change: Any, mode: str
) -> None:
    servers = {
        "a": {
            "command": PYTHON,
            "args": ["-m", "gateway", "demo-server", "--tools", "1", "--name", "a"],
            "env": {"TOKEN": "one"},
        }
    }
    config = write_config(tmp_path, servers)
    remember(config)
    before = config.read_text()
    change(config, tmp_path)
    assert change is _changed_lock or config.read_text() != before
    log = tmp_path / "serve.log"
    async with sdk_client(config, mode, errlog=log) as client:
        assert names(await client.list_tools())
        await wait_for(lambda: "catalog: " in log.read_text())  # the barrier's line: the gateway is up
    assert PUBLISHED not in log.read_text()
    if change is _changed_lock:
        assert "catalog lock: published the locked catalog" in log.read_text()


def _record(config: Path) -> Path:
    (found,) = (config.parent / "state" / "warm").glob("*.rec")
    return found


def _bad_json(record: Path, tmp_path: Path) -> None:
    data = record.read_bytes()
    record.write_bytes(data[: data.index(b"\n") + 1] + b"x" + data[data.index(b"\n") + 2 :])


def _another_configs(record: Path, tmp_path: Path) -> None:
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    servers = {"b": {"command": PYTHON, "args": ["-m", "gateway", "demo-server", "--name", "b"]}}
    other = write_config(other_dir, servers)
    remember(other)
    shutil.copyfile(_record(other), record)


def _loose_mode(record: Path, tmp_path: Path) -> None:
    record.chmod(0o666)


# Every kind of damage, in process: tests/test_warm_files.py. Here three, end to end.
@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_bad_json, "header is not JSON"),
        (_loose_mode, "writable by group or others"),
        (_another_configs, "belongs to another config"),
    ],
    ids=["json", "mode", "foreign"],
)
async def test_a_damaged_or_foreign_record_is_ignored_with_one_log_line(
    tmp_path: Path, damage: Any, reason: str
) -> None:
    config = write_config(tmp_path, {"a": {"command": PYTHON, "args": ["-m", "gateway", "demo-server", "--name", "a"]}})
    remember(config)
    damage(_record(config), tmp_path)
    log = tmp_path / "serve.log"
    async with sdk_client(config, "auto", errlog=log) as client:
        assert "a__echo" in names(await client.list_tools())
        await wait_for(lambda: "catalog: " in log.read_text())
    logged = log.read_text()
    assert PUBLISHED not in logged
    ignored = [line for line in logged.splitlines() if "warm-start record" in line and "ignored" in line]
    assert len(ignored) == 1 and reason in ignored[0], logged


@pytest.mark.parametrize("mode", ERAS)
async def test_a_warm_start_over_http(tmp_path: Path, mode: str) -> None:
    config, gates = two_servers(tmp_path)
    report = remember(config)
    (gates / "delay").write_text("60")
    with http_gateway(config) as (url, stderr):
        with anyio.fail_after(30):
            async with sdk_client(url, mode) as client:
                assert names(await client.list_tools()) == [d["name"] for d in report["declarations"]]
    assert "[s] ready" not in stderr.read_text()  # (the log, whole once it stopped)
    assert PUBLISHED in stderr.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_initialize_never_waits_for_the_barrier_on_a_first_start(tmp_path: Path, mode: str) -> None:
    """No record at all: the handshake (or server/discover) is answered while a server is still
    starting, advertising everything the gateway may relay; tools/list waits for the barrier."""
    config, gates = two_servers(tmp_path)
    (gates / "delay").write_text("60")
    log = tmp_path / "serve.log"
    with anyio.fail_after(30):
        async with sdk_client(config, mode, errlog=log) as client:
            caps = client.session.server_capabilities
            assert caps is not None and caps.prompts is not None and caps.resources is not None
            assert "[s] ready" not in log.read_text()
            with anyio.move_on_after(1):
                await client.list_tools()
                pytest.fail("tools/list was answered before the barrier on a first start")


async def test_under_a_lock_the_locked_catalog_is_served_at_once(tmp_path: Path) -> None:
    config, gates = two_servers(tmp_path)
    assert run_cli("catalog", "lock", "--config", str(config)).returncode == 0
    locked = sorted(t["name"] for t in tomllib.loads((tmp_path / "prefixgate.lock").read_text())["tools"])
    shutil.rmtree(tmp_path / "state" / "warm")  # no record: the lock alone
    (gates / "delay").write_text("60")
    log = tmp_path / "serve.log"
    with anyio.fail_after(30):
        async with sdk_client(config, "auto", errlog=log) as client:
            listed = names(await client.list_tools())
            assert [n for n in listed if n != "artifact_read"] == locked
    assert "catalog lock: published the locked catalog" in log.read_text()


@pytest.mark.parametrize("command", [("doctor", "--json"), ("catalog", "lock")], ids=["doctor", "catalog-lock"])
async def test_setup_commands_leave_the_record_behind(tmp_path: Path, command: tuple[str, ...]) -> None:
    config, gates = two_servers(tmp_path)
    proc = run_cli(*command, "--config", str(config), timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    (gates / "delay").write_text("60")
    log = tmp_path / "serve.log"
    with anyio.fail_after(30):
        async with sdk_client(config, "legacy", errlog=log) as client:
            assert "s__echo" in names(await client.list_tools())
            await wait_for(lambda: PUBLISHED in log.read_text())


async def test_a_server_down_three_starts_in_a_row_leaves_the_record(tmp_path: Path) -> None:
    config, gates = two_servers(tmp_path)
    remember(config)
    (gates / "fail").write_text("gone for good")
    for start in range(3):
        log = tmp_path / f"serve-{start}.log"
        async with sdk_client(config, "legacy", errlog=log) as client:
            assert "s__echo" in names(await client.list_tools())
            await wait_for(lambda log=log: "warm-start record written" in log.read_text())
    assert "server 's' has not been ready in 3 starts in a row" in log.read_text()
    log = tmp_path / "serve-last.log"
    async with sdk_client(config, "legacy", errlog=log) as client:
        assert "s__echo" not in names(await client.list_tools())
        assert "a__echo" in names(await client.list_tools())
        await wait_for(lambda: PUBLISHED in log.read_text())


# --- the stdio start before the gateway is up --------------------------------------------


def _hello(version: str) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")


def _exchange(gw: RawGateway, version: str) -> list[bytes]:
    """initialize (or server/discover) and the four lists at ``version``: the answer lines."""
    params: Any = None
    if version == "2026-07-28":
        params = {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            }
        }
        gw.request(1, "server/discover", params)
    else:
        gw.request(1, "initialize", _hello(version))
        gw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    for n, method in enumerate(LISTS, start=2):
        gw.request(n, method, params)
    return sorted(gw.read_line() for _ in range(1 + len(LISTS)))


@pytest.fixture(scope="module")
def slow_with_record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two servers, one slow to start (60 s), and the record ``catalog`` left: read only, shared
    by the tests of this module that run in one worker."""
    config, gates = two_servers(tmp_path_factory.mktemp("recorded"))
    remember(config)
    (gates / "delay").write_text("60")
    return config


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
async def test_the_first_answers_are_the_gateways_own_bytes(
    tmp_path: Path, slow_with_record: Path, version: str
) -> None:
    """What the stdio start answers from the record before the gateway is up is byte for byte
    what the gateway answers itself (PREFIXGATE_PRELUDE=0: the same warm start, without it)."""
    config = slow_with_record
    lines = {}
    for prelude in ("1", "0"):
        err = tmp_path / f"prelude-{prelude}.log"
        with err.open("w") as stderr, raw_gateway(config, stderr, {"PREFIXGATE_PRELUDE": prelude}) as gw:
            lines[prelude] = _exchange(gw, version)
            gw.request(3, "tools/call", json.loads(_call_params(version)))
            assert b"made it" in gw.read_line(), "the gateway took over and answers"
        assert ("answered 5 requests from the record" in err.read_text()) == (prelude == "1"), err.read_text()
    assert lines["1"] == lines["0"]
    assert any(b'"prompts":[{' in line for line in lines["1"]), "the demo's prompts, answered from the record"


def _call_params(version: str) -> str:
    params: dict[str, Any] = {"name": "a__echo", "arguments": {"text": "made it"}}
    if version == "2026-07-28":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return json.dumps(params)


async def test_what_the_start_cannot_answer_waits_for_the_gateway_in_order(tmp_path: Path) -> None:
    """A request before initialize, a malformed one, a cursor: nothing is answered early, and
    the gateway answers all of it, in the order sent (raw pipes, one line each)."""
    config, _ = two_servers(tmp_path)
    remember(config)
    with (tmp_path / "serve.log").open("w") as stderr, raw_gateway(config, stderr) as gw:
        gw.request(1, "ping")
        gw.send(b"{not json")
        gw.request(2, "initialize", _hello("2025-11-25"))
        gw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        gw.request(3, "tools/list", {"cursor": "x"})
        answers = {message["id"]: message for message in (json.loads(gw.read_line()) for _ in range(4))}
    assert answers[1] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert answers[None]["error"]["code"] == -32700
    assert answers[2]["result"]["protocolVersion"] == "2025-11-25"
    assert answers[3]["error"]["code"] == -32602  # the gateway's answer: it issues no cursor
    assert answers[3]["error"]["message"].startswith("Invalid cursor: ")
    assert "answered" not in (tmp_path / "serve.log").read_text()


async def test_a_list_in_the_other_eras_envelope_is_refused_as_the_gateway_refuses_it(tmp_path: Path) -> None:
    """After a handshake, a list whose ``_meta`` carries the 2026-07-28 envelope is refused by
    the gateway's session (as by a server of both eras directly): the start leaves it to the
    gateway rather than answering it from the record, which it did (raw pipes)."""
    config, _ = two_servers(tmp_path)
    remember(config)
    envelope = {**_MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    with (tmp_path / "serve.log").open("w") as stderr, raw_gateway(config, stderr) as gw:
        gw.request(1, "initialize", _hello("2025-11-25"))
        gw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        gw.request(2, "tools/list", {"_meta": envelope})
        gw.request(3, "prompts/list", {"_meta": {"progressToken": 7, "io.modelcontextprotocol/other": 1}})
        assert gw.answer(1)["result"]["protocolVersion"] == "2025-11-25"
        refused = gw.answer(2)
        assert refused["error"]["code"] == -32600 and "2026-07-28 envelope" in refused["error"]["message"]
        assert "prompts" in gw.answer(3)["result"]  # the gateway's own answer: only the version key is refused


async def test_a_client_that_never_reads_meets_back_pressure_before_the_gateway_is_up(
    tmp_path: Path, slow_with_record: Path
) -> None:
    """20,000 ``tools/list`` sent at once by a client that reads none of the answers: the start
    answers until ``OUT_LIMIT`` bytes of them wait on the client's pipe, then stops reading,
    instead of keeping a catalog per request; the gateway, taking over, reads no more than
    its own bound either (what the start read and left is queued, then the pipe paused)."""
    from gateway.upstream.prelude import OUT_LIMIT

    log = tmp_path / "serve.log"
    data = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n' * 20_000
    with log.open("w") as stderr, raw_gateway(slow_with_record, stderr) as gw:
        gw.request(1, "initialize", _hello("2025-11-25"))
        assert gw.proc.stdin is not None
        fd = gw.proc.stdin.fileno()
        os.set_blocking(fd, False)
        with anyio.fail_after(120):
            # Until the gateway has taken over (it logs what the start answered) and stopped reading.
            while data and not ("from the record" in log.read_text() and not select.select([], [fd], [], 5)[1]):
                try:
                    data = data[os.write(fd, data[: 1 << 16]) :]
                except BlockingIOError:
                    await anyio.sleep(0.01)
        assert data, "the gateway read every request although no answer was taken"
        gw.read_line()  # initialize's answer
        listed = len(gw.read_line()) + 1
    answered = int(log.read_text().split("answered ")[1].split(" ")[0]) - 1
    assert answered * listed <= OUT_LIMIT + (1 << 20), f"{answered} answers of {listed} bytes kept for the client"


def _opening(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


_MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
REFUSED_OPENINGS = {
    "icons-not-a-list": _opening(
        "initialize", {**_hello("2025-11-25"), "clientInfo": {"name": "raw", "version": "0", "icons": 5}}
    ),
    "sampling-tools-not-an-object": _opening(
        "server/discover",
        {"_meta": {**_MODERN, "io.modelcontextprotocol/clientCapabilities": {"sampling": {"tools": 5}}}},
    ),
    "byte-order-mark": b"\xef\xbb\xbf" + _opening("initialize", _hello("2025-11-25")),
}


AGENT_OPENINGS = {
    # What the agents this start exists for send (recorded from Claude Code 2.1.197 and Codex
    # 0.171.0): fields the SDK ignores (``websiteUrl``, an ``experimental`` capability) and a
    # list with a progress token. A start that leaves these to the gateway is no warm start.
    "claude-code": (
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"roots": {}, "elicitation": {}},
            "clientInfo": {
                "name": "claude-code",
                "title": "Claude Code",
                "version": "2.1.197",
                "description": "Anthropic's agentic coding tool",
                "websiteUrl": "https://claude.com/claude-code",
            },
        },
        None,
    ),
    "codex": (
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"codex/auth-change": {}}, "elicitation": {"form": {}, "url": {}}},
            "clientInfo": {"name": "codex-mcp-client", "title": "Codex", "version": "0.171.0"},
        },
        {"_meta": {"progressToken": 0}},
    ),
}


@pytest.mark.parametrize("agent", list(AGENT_OPENINGS))
async def test_the_agents_openings_are_answered_from_the_record(
    tmp_path: Path, slow_with_record: Path, agent: str
) -> None:
    hello, list_params = AGENT_OPENINGS[agent]
    err = tmp_path / "serve.log"
    with err.open("w") as stderr, raw_gateway(slow_with_record, stderr) as gw:
        gw.request(1, "initialize", hello)
        gw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        gw.request(2, "tools/list", list_params)
        assert json.loads(gw.read_line())["result"]["protocolVersion"] == hello["protocolVersion"]
        assert "a__echo" in gw.read_line().decode()
        gw.request(3, "tools/call", json.loads(_call_params(hello["protocolVersion"])))
        assert b"made it" in gw.read_line(), "the gateway took over and answers"
    assert "answered 2 requests from the record" in err.read_text(), err.read_text()


CLAUDE_CODE_ENVELOPE = {
    # Every 2026-07-28 request of Claude Code 2.1.332 over stdio carries this.
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {
        "name": "claude-code",
        "title": "Claude Code",
        "version": "2.1.332",
        "description": "Anthropic's agentic coding tool",
        "websiteUrl": "https://claude.com/claude-code",
    },
    "io.modelcontextprotocol/clientCapabilities": {
        "roots": {"listChanged": True},
        "elicitation": {"form": {}, "url": {}},
    },
}


async def test_claude_codes_listen_stream_is_acknowledged_before_the_gateway_is_up(tmp_path: Path) -> None:
    """Claude Code 2.1.332 opens with a ``server/discover`` probe, then a listen stream, and sends
    ``server/discover`` and ``tools/list`` only once the stream is acknowledged: the start
    acknowledges it and answers both from the record (it left the stream's acknowledgment to
    the gateway, so the lists waited for the gateway's imports). The gateway, taking over,
    serves the stream, without a second acknowledgment: a catalog that changed since the
    record reaches the client on it (raw pipes, as Claude Code sends them)."""
    gates, state = tmp_path / "gates", tmp_path / "mutations.json"
    server = {**gated(gates, "tests.mutating_server", str(state)), "startup_timeout": 60}
    config = write_config(tmp_path, {"m": server})
    remember(config)
    state.write_text(json.dumps(["add"]))  # the server now lists one more tool
    (gates / "delay").write_text("3")  # ... once it is up, well after the gateway
    meta = {"_meta": CLAUDE_CODE_ENVELOPE}
    err = tmp_path / "serve.log"
    with err.open("w") as stderr, raw_gateway(config, stderr) as gw:
        gw.request("server-discover-probe-1", "server/discover", meta)
        assert "capabilities" in gw.answer("server-discover-probe-1")["result"]
        gw.request("listen:0", "subscriptions/listen", {**meta, "notifications": {"toolsListChanged": True}})
        assert gw.read() == {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "_meta": {"io.modelcontextprotocol/subscriptionId": "listen:0"},
                "notifications": {"toolsListChanged": True},
            },
        }
        gw.request(0, "server/discover", meta)
        gw.request(1, "tools/list", meta)
        assert "capabilities" in gw.answer(0)["result"]
        assert "m__gamma" not in json.dumps(gw.answer(1)["result"])  # the record's catalog
        seen = [gw.read()]
        while seen[-1].get("method") != "notifications/tools/list_changed":
            seen.append(gw.read())
        assert seen[-1]["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "listen:0"}
        assert all("acknowledged" not in message.get("method", "") for message in seen), seen
        gw.request(2, "tools/list", meta)
        assert "m__gamma" in json.dumps(gw.answer(2)["result"])
    assert "answered 3 requests from the record" in err.read_text(), err.read_text()


@pytest.mark.parametrize("opening", REFUSED_OPENINGS.values(), ids=list(REFUSED_OPENINGS))
async def test_an_opening_the_gateway_refuses_is_refused_before_it_is_up(
    tmp_path: Path, slow_with_record: Path, opening: bytes
) -> None:
    """The start answers an ``initialize`` or ``server/discover`` only when the gateway's
    session takes it too (the SDK's own models say so): one it refuses gets the gateway's own
    refusal, as on a start without the record's answers, not an answer from the record while
    the session behind it was never opened (the capabilities the client declared lost)."""
    answers = {}
    for prelude in ("1", "0"):
        with (tmp_path / f"prelude-{prelude}.log").open("w") as stderr:
            with raw_gateway(slow_with_record, stderr, {"PREFIXGATE_PRELUDE": prelude}) as gw:
                gw.send(opening)
                answers[prelude] = gw.read()
    assert answers["0"]["error"]["code"] in (-32602, -32700), answers["0"]
    assert answers["1"] == answers["0"]


async def test_a_line_nested_past_the_parsers_limit_is_the_gateways_to_answer(tmp_path: Path) -> None:
    """A request nested deeper than ``json.loads`` goes by default (but within what the
    gateway reads) is not lost at the start: the gateway answers it, and the start goes on
    answering from the record."""
    config, _ = two_servers(tmp_path)
    remember(config)
    deep = '{"a":' * 3000 + "1" + "}" * 3000
    with (tmp_path / "serve.log").open("w") as stderr, raw_gateway(config, stderr) as gw:
        gw.request(1, "initialize", _hello("2025-11-25"))
        gw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        gw.send(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"deep":' + deep.encode() + b"}}}")
        gw.request(3, "tools/list")
        answers = {message["id"]: message for message in (json.loads(gw.read_line()) for _ in range(3))}
        # The line comes when the gateway is up and takes over (the record may have answered all
        # three before: on a busy machine, a while later), and the context kills the process.
        await wait_for(lambda: "from the record" in (tmp_path / "serve.log").read_text(), 30)
    assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert "a__echo" in [t["name"] for t in answers[3]["result"]["tools"]]
    log = (tmp_path / "serve.log").read_text()
    assert "answered 2 requests from the record" in log and "stopped answering early" not in log, log


async def test_a_stop_signal_during_the_start_leaves_no_server_running(tmp_path: Path) -> None:
    """The servers are started before the gateway is imported; a SIGTERM in that moment ends
    them too (each in its own process group), with the gateway's exit status 143."""
    config, gates = two_servers(tmp_path)
    (gates / "delay").write_text("60")
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(20):
            while not (gates / "pid").exists():
                await anyio.sleep(0.01)
        pid = int((gates / "pid").read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await anyio.sleep(0.05)
    pytest.fail(f"server {pid} outlived the gateway")


def test_the_prelude_keys_match_the_sdk() -> None:
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
    from mcp_types.version import LATEST_HANDSHAKE_VERSION

    from gateway.upstream import prelude

    assert prelude.PROTOCOL_VERSION == PROTOCOL_VERSION_META_KEY
    assert prelude.CLIENT_CAPABILITIES == CLIENT_CAPABILITIES_META_KEY
    assert prelude.CLIENT_INFO == CLIENT_INFO_META_KEY
    assert prelude.LATEST_HANDSHAKE == LATEST_HANDSHAKE_VERSION


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)
"""One strategy for every JSON value of ``_shaped``: a strategy built anew for each draw is
validated anew, which was most of the property test's time (~0.5 s an example)."""


def _shaped(shape: Any, required: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """Every value ``shape`` admits (``gateway.upstream.prelude._fits``), ``required`` keys
    always there, and in an object fields the shape does not name (the SDK ignores them)."""
    from gateway.upstream import prelude

    json_values = _JSON_VALUES
    if shape is prelude.ANY:
        return json_values
    if isinstance(shape, type):
        return st.booleans() if shape is bool else st.text()
    if isinstance(shape, tuple):
        return st.text() | st.integers()
    if isinstance(shape, prelude._Each):
        return st.dictionaries(st.text(max_size=8), _shaped(shape.of), max_size=3)
    parts = {key: _shaped(item) for key, item in shape.items() if item is not prelude.GATEWAY}
    named = st.fixed_dictionaries({key: parts.pop(key) for key in required}, optional=parts)
    unnamed = st.text(max_size=8).filter(lambda key: key not in shape and not key.startswith(prelude._RESERVED))
    others = st.dictionaries(unnamed, json_values, max_size=2)
    return st.tuples(named, others).map(lambda both: {**both[1], **both[0]})


@given(st.data())
def test_every_opening_the_start_answers_is_one_the_gateways_session_takes(data: st.DataObject) -> None:
    """The start vouches for an opening request by its shape, not by the SDK's models (importing
    them would cost its first answer ~0.7 s): every request of those shapes passes the SDK's own
    checks of it (``ServerRunner``: the method's model at the connection's version, and
    ``initialize``'s params model), so the record never answers what the gateway refuses."""
    from mcp_types import InitializeRequestParams, jsonrpc_message_adapter, methods
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    from gateway.upstream import prelude

    capabilities, client = _shaped(prelude.CAPABILITIES), _shaped(prelude.CLIENT, ("name", "version"))
    meta = _shaped(prelude.META)
    opening = {"protocolVersion": st.text(), "capabilities": capabilities, "clientInfo": client}
    hello = data.draw(st.fixed_dictionaries(opening, optional={"_meta": meta}))
    assert prelude._handshake_version(hello) is not None
    jsonrpc_message_adapter.validate_python({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
    methods.validate_client_request("initialize", prelude.LATEST_HANDSHAKE, hello)
    InitializeRequestParams.model_validate(hello, by_name=False)
    envelope = data.draw(
        st.fixed_dictionaries(
            {
                prelude.PROTOCOL_VERSION: st.sampled_from(MODERN_PROTOCOL_VERSIONS),
                prelude.CLIENT_CAPABILITIES: capabilities,
            },
            optional={prelude.CLIENT_INFO: client},
        )
    )
    assert prelude._modern_version({"_meta": envelope}) is not None
    for method in ("server/discover", *LISTS):
        methods.validate_client_request(method, envelope[prelude.PROTOCOL_VERSION], {"_meta": envelope})
    for version in HANDSHAKE_PROTOCOL_VERSIONS:  # the lists of a handshake the start answered
        for method in LISTS:
            for params in (None, {}, {"_meta": {}}, {"_meta": data.draw(meta)}):
                assert prelude._list_params(params)
                methods.validate_client_request(method, version, params)


def test_the_early_servers_inherit_what_the_sdk_passes_on() -> None:
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

    from gateway.downstream.spawn import INHERITED_ENV

    assert list(INHERITED_ENV) == list(DEFAULT_INHERITED_ENV_VARS)


async def test_the_warm_record_is_shared_through_redis(tmp_path: Path) -> None:
    """A replica with an empty state_dir starts warm from the record another one kept in Redis."""
    from tests.helpers import redis_server

    with redis_server(tmp_path / "redis") as redis:
        servers = {"a": {"command": PYTHON, "args": ["-m", "gateway", "demo-server", "--name", "a"]}}
        first_dir, second_dir = tmp_path / "one", tmp_path / "two"
        first_dir.mkdir()
        second_dir.mkdir()
        store = {"store": redis.url}
        first = write_config(first_dir, servers, gateway=store)
        with http_gateway(first) as (url, stderr):
            await wait_for(lambda: "warm-start record written" in stderr.read_text())
        second = write_config(second_dir, servers, gateway=store)
        assert not (second_dir / "state" / "warm").exists()
        with http_gateway(second) as (url, stderr):
            async with sdk_client(url, "auto") as client:
                assert "a__echo" in names(await client.list_tools())
        assert PUBLISHED in stderr.read_text()  # (the log, whole once it stopped)
        third_dir = tmp_path / "three"  # over stdio: the start finds no file, the gateway finds Redis's
        third_dir.mkdir()
        third = write_config(third_dir, servers, gateway=store)
        log = third_dir / "serve.log"
        async with sdk_client(third, "legacy", errlog=log) as client:
            assert "a__echo" in names(await client.list_tools())
            await wait_for(lambda: PUBLISHED in log.read_text())


async def test_a_record_that_does_not_rebuild_to_its_bytes_is_dropped_and_the_client_relists(tmp_path: Path) -> None:
    """The stdio start answers from the record before the gateway can check it; when the
    gateway finds that the record's servers do not build the bytes it recorded (here: its
    fingerprint forged), it publishes nothing from it, and a client that already listed is
    told to list again."""
    config, gates = two_servers(tmp_path)
    remember(config)
    record = _record(config)
    data = record.read_bytes()
    head_end = data.index(b"\n", data.index(b"\n") + 1)
    header = json.loads(data[data.index(b"\n") + 1 : head_end])
    forged = json.dumps({**header, "fingerprint": "0" * 64}, separators=(",", ":"), sort_keys=True).encode()
    record.write_bytes(data[: data.index(b"\n") + 1] + forged + data[head_end:])
    log = tmp_path / "serve.log"
    seen = Seen()
    async with sdk_client(config, "legacy", errlog=log, message_handler=seen) as client:
        assert "s__echo" in names(await client.list_tools())  # answered from the record
        await wait_for(lambda: seen.count >= 1)
        assert "s__echo" in names(await client.list_tools())
    logged = log.read_text()
    assert "answered" in logged and "warm-start record ignored: its servers' lists build fingerprint" in logged
    assert PUBLISHED not in logged


@pytest.mark.parametrize("mode", ERAS)
async def test_a_classic_server_asks_for_input_in_the_warm_window(tmp_path: Path, mode: str) -> None:
    """A server written the classic way (it asks with an elicitation request of its own), still
    starting when the call comes from the warm catalog: the call waits for it, and its question
    reaches the client as it would directly (a handshake-era client's callback, or a 2026-07-28
    client's input_required round)."""
    from tests.helpers import CALLBACKS

    gates = tmp_path / "gates"
    gates.mkdir()
    server = {
        "command": PYTHON,
        "args": ["-m", "tests.gated_server", str(gates), PYTHON, "-m", "tests.backchannel_server"],
        "cwd": str(ROOT),
        "protocol": "legacy",
    }
    config = write_config(tmp_path, {"b": server})
    remember(config)
    (gates / "delay").write_text("1.5")
    log = tmp_path / "serve.log"
    async with sdk_client(config, mode, errlog=log, **CALLBACKS) as client:
        assert text(await client.call_tool("b__ask", {})) == "accept:{'name': 'Ann'}"
    assert PUBLISHED in log.read_text()
