"""Claims of the docs that had no test: the gate's order, errors through tool_call, a tool removed by a
catalog change, the artifacts command and retention at the gateway, with real processes and the
real SDK client in both protocol eras."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.helpers import (
    ERAS,
    GATEWAY,
    PYTHON,
    assert_unwritable_output_is_one_line,
    demo,
    keys_sorted_everywhere,
    run_cli,
    sdk_client,
    text,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.anyio

ARTIFACT = re.compile(r'artifact_read \{"id": "([A-Za-z0-9_-]+)"\}')


def mutating(state: Path) -> dict[str, Any]:
    return {"command": PYTHON, "args": ["-m", "tests.mutating_server", str(state)], "cwd": str(Path.cwd())}


async def names(client: Any) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.parametrize("mode", ERAS)
async def test_policy_comes_before_activation(tmp_path: Path, mode: str) -> None:
    """A tool both denied and not yet activated is refused for policy, directly and through
    tool_call; activating it changes nothing."""
    config = write_config(
        tmp_path,
        {"m": mutating(tmp_path / "m.json")},
        client={"declarations": "on-demand", "defer": ["m__alpha", "m__beta"]},
        policy={"deny": ["m__alpha"]},
    )
    denial = "Tool m__alpha is denied by policy (deny pattern 'm__alpha')."
    async with sdk_client(config, mode) as client:
        assert {"tool_search", "tool_call"} <= await names(client)
        direct = await client.call_tool("m__alpha", {"text": "x"})
        via = await client.call_tool("tool_call", {"name": "m__alpha", "arguments": {"text": "x"}})
        assert (direct.is_error, text(direct)) == (True, denial)
        assert (via.is_error, text(via)) == (True, denial)
        found = await client.call_tool("tool_search", {"query": "echo text"})
        assert "m__alpha" in text(found)
        again = await client.call_tool("tool_call", {"name": "m__alpha", "arguments": {"text": "x"}})
        assert (again.is_error, text(again)) == (True, denial)
        # Not denied, not active: the activation message, so the order is the cause.
        beta = await client.call_tool("tool_call", {"name": "m__beta", "arguments": {}})
        assert beta.is_error and text(beta).startswith("Call tool_search to activate m__beta first")


@pytest.mark.parametrize("mode", ERAS)
async def test_argument_and_name_errors_through_tool_call(tmp_path: Path, mode: str) -> None:
    config = write_config(
        tmp_path,
        {"m": mutating(tmp_path / "m.json")},
        client={"declarations": "on-demand", "defer": ["m__alpha", "m__beta"]},
    )
    async with sdk_client(config, mode) as client:
        await client.call_tool("tool_search", {"query": "echo text"})
        bad = await client.call_tool("tool_call", {"name": "m__alpha", "arguments": {"text": 5}})
        assert bad.is_error
        assert text(bad).startswith("Invalid arguments for m__alpha: arguments.text: ")
        missing = await client.call_tool("tool_call", {"name": "m__alpha", "arguments": {}})
        assert missing.is_error and text(missing).startswith("Invalid arguments for m__alpha: arguments: ")
        unknown = await client.call_tool("tool_call", {"name": "m__nope", "arguments": {}})
        assert (unknown.is_error, text(unknown)) == (
            True,
            "Unknown tool 'm__nope': it is not in this gateway's catalog.",
        )
        # A made-up name is quoted back cut short, through tool_call and called directly.
        for long in (
            await client.call_tool("tool_call", {"name": "m__" + "x" * 100_000, "arguments": {}}),
            await client.call_tool("m__" + "x" * 100_000, {}),
        ):
            assert long.is_error and len(text(long)) < 300, len(text(long))
            assert text(long).startswith("Unknown tool 'm__xxx") and "…': it is not in" in text(long)
        good = await client.call_tool("tool_call", {"name": "m__alpha", "arguments": {"text": "fine"}})
        assert (good.is_error, text(good)) == (False, "fine")


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_removed_by_a_catalog_change_is_no_longer_available(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"m": mutating(tmp_path / "m.json")})
    async with sdk_client(config, mode) as client:
        assert "m__beta" in await names(client)
        assert text(await client.call_tool("m__beta", {})) == "beta"
        await client.call_tool("m__mutate", {"kind": "remove"})

        async def beta_gone() -> bool:
            return "m__beta" not in await names(client)

        await wait_for(beta_gone)
        gone = await client.call_tool("m__beta", {})
        assert gone.is_error
        assert text(gone) == "Tool 'm__beta' is no longer available: the catalog changed and it was removed."
        never = await client.call_tool("m__never", {})
        assert text(never) == "Unknown tool 'm__never': it is not in this gateway's catalog."


async def _spill(config: Path, session: str, size: int) -> str:
    """One spilled payload in a stdio gateway with ``--session``; its artifact id."""
    async with sdk_client(config, "legacy", "--session", session) as client:
        result = await client.call_tool("d__payload", {"bytes": size})
        found = ARTIFACT.search(text(result))
        assert found, text(result)[-400:]
        return found.group(1)


async def test_artifacts_command_lists_reads_and_collects(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo()}, spill={"max_visible_bytes": 4096})
    first = await _spill(config, "one", 50_000)
    second = await _spill(config, "two", 60_000)

    listed = run_cli("artifacts", "list", "--config", str(config), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["id"] for r in rows] == [first, second]  # oldest first
    assert [r["size"] for r in rows] == [50_000, 60_000]

    plain = run_cli("artifacts", "list", "--config", str(config))
    assert plain.stdout.splitlines()[-1] == f"2 artifacts, {sum(r['size'] for r in rows)} bytes"

    read = subprocess_bytes("artifacts", "read", first, "--config", str(config))
    assert len(read) == rows[0]["size"] and read.startswith(b"0123456789abcdefghijklmnopqrstuvwxyz\n")
    part = subprocess_bytes("artifacts", "read", first, "--offset", "5", "--limit", "8", "--config", str(config))
    assert part == read[5:13]
    unknown = run_cli("artifacts", "read", "A" * len(first), "--config", str(config))
    assert unknown.returncode == 1 and "no artifact with id" in unknown.stderr

    # Retention by size: a limit below both keeps neither (no gateway is running to protect one).
    tight = write_config(tmp_path, {"d": demo()}, spill={"max_visible_bytes": 4096, "max_total_bytes": 1000})
    collected = run_cli("artifacts", "gc", "--config", str(tight))
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.startswith("removed 2 artifacts")
    assert json.loads(run_cli("artifacts", "list", "--config", str(tight), "--json").stdout) == []


async def test_artifacts_read_to_an_output_that_cannot_take_it_is_one_line(tmp_path: Path) -> None:
    """``artifacts read ID > /dev/full`` (a full disk) or ``| head`` stopped on a traceback
    (``OSError: [Errno 28] No space left on device`` from the copy, ``BrokenPipeError``)."""
    config = write_config(tmp_path, {"d": demo()}, spill={"max_visible_bytes": 4096})
    artifact = await _spill(config, "one", 50_000)
    args = [*GATEWAY, "artifacts", "read", artifact, "--config", str(config)]
    assert_unwritable_output_is_one_line(args)


def subprocess_bytes(*args: str) -> bytes:
    proc = subprocess.run([*GATEWAY, *args], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("mode", ERAS)
async def test_retention_runs_after_each_spill_in_the_gateway(tmp_path: Path, mode: str) -> None:
    """max_total_bytes is enforced by the serving gateway after a spill: older artifacts of other
    sessions go, oldest first, while the artifact just handed to the model stays readable."""
    config = write_config(tmp_path, {"d": demo()}, spill={"max_visible_bytes": 4096, "max_total_bytes": 150_000})
    old = await _spill(config, "old", 80_000)
    older_rows = json.loads(run_cli("artifacts", "list", "--config", str(config), "--json").stdout)
    assert [r["id"] for r in older_rows] == [old]
    async with sdk_client(config, mode, "--session", "new") as client:
        result = await client.call_tool("d__payload", {"bytes": 100_000})
        fresh = ARTIFACT.search(text(result))
        assert fresh, text(result)[-400:]
        rows = json.loads(run_cli("artifacts", "list", "--config", str(config), "--json").stdout)
        assert [r["id"] for r in rows] == [fresh.group(1)]
        again = await client.call_tool("artifact_read", {"id": fresh.group(1), "line": 1, "lines": 1})
        assert not again.is_error and "0123456789abcdefghijklmnopqrstuvwxyz" in text(again)


@pytest.mark.parametrize("mode", ERAS)
async def test_meta_passes_through_both_ways_without_the_clients_envelope(tmp_path: Path, mode: str) -> None:
    """The client's own ``_meta`` keys reach the server; its progress token and its 2026-07-28
    envelope (``io.modelcontextprotocol/*``: its identity and capabilities) do not - they belong
    to the client's connection. The server's result ``_meta`` reaches the client untouched, and
    progress the server reports reaches the client against the client's own token."""
    server = {"command": PYTHON, "args": ["-m", "tests.meta_server"], "cwd": str(Path.cwd())}
    config = write_config(tmp_path, {"s": server})
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with sdk_client(config, mode, client_info=types.Implementation(name="secret-client", version="9")) as client:
        result = await client.call_tool(
            "s__meta", {}, progress_callback=on_progress, meta={"x.example/trace": "abc", "x.example/n": [1, 2]}
        )
    assert not result.is_error
    seen = json.loads(text(result))
    # The gateway asks for progress with a token of its own connection's.
    own = {k: v for k, v in seen.items() if not k.startswith("io.modelcontextprotocol/") and k != "progressToken"}
    assert own == {"x.example/trace": "abc", "x.example/n": [1, 2]}
    assert "secret-client" not in text(result)
    meta = dict(result.meta or {})
    # On 2026-07-28 the result names the server that answered: the gateway, never the one behind it.
    assert meta.pop("io.modelcontextprotocol/serverInfo", {"name": "prefixgate"})["name"] == "prefixgate"
    assert meta == {"x.example/answer": 42}
    assert progress == [(1, 2, "half")]


@pytest.mark.parametrize("mode", ERAS)
async def test_resources_templates_and_prompts_follow_downstream_cursors(tmp_path: Path, mode: str) -> None:
    server = {"command": PYTHON, "args": ["-m", "tests.paged_server"], "cwd": str(Path.cwd())}
    config = write_config(tmp_path, {"p": server})
    async with sdk_client(config, mode) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompts = await client.list_prompts()
    assert sorted(str(r.uri) for r in resources.resources) == [f"paged://r/{i}" for i in range(3)]
    assert sorted(t.uri_template for t in templates.resource_templates) == [f"paged://t{i}/{{id}}" for i in range(3)]
    assert sorted(p.name for p in prompts.prompts) == ["p__p0", "p__p1", "p__p2"]


async def test_a_request_outside_any_call_goes_to_the_most_recent_client(tmp_path: Path) -> None:
    """Two handshake-era HTTP clients with different roots: a server's roots/list that belongs to
    no call in flight is answered by the client that connected last, whoever made the call."""
    from contextlib import AsyncExitStack

    from tests.helpers import http_gateway

    out = tmp_path / "roots.txt"
    # A request of the server's own outside any call exists only in the handshake era.
    server = {
        "command": PYTHON,
        "args": ["-m", "tests.unprompted_server", str(out)],
        "cwd": str(Path.cwd()),
        "protocol": "legacy",
    }
    config = write_config(tmp_path, {"u": server})

    def roots_of(name: str) -> Any:
        async def answer(context: Any) -> types.ListRootsResult:
            return types.ListRootsResult(roots=[types.Root(uri=f"file:///{name}")])

        return answer

    with http_gateway(config) as (url, _stderr):
        async with AsyncExitStack() as stack:
            first = await stack.enter_async_context(sdk_client(url, "legacy", list_roots_callback=roots_of("first")))
            await stack.enter_async_context(sdk_client(url, "legacy", list_roots_callback=roots_of("second")))
            assert text(await first.call_tool("u__later", {})) == "later"
            with anyio.fail_after(20):
                while not out.exists() or not out.read_text():
                    await anyio.sleep(0.05)
    assert out.read_text() == "file:///second"


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("rich", [False, True], ids=["tools-only", "rich"])
async def test_capabilities_are_the_union_of_the_servers_on_stdio_and_http(
    tmp_path: Path, mode: str, rich: bool
) -> None:
    from tests.helpers import http_gateway

    """What the servers offer is known to a start with a warm-start record (``catalog`` left
    one): initialize advertises the union at once. (A first-ever start, which answers before
    any server is up, advertises everything it may relay: tests/test_warm_start.py.)"""
    from tests.helpers import catalog_json

    # The demo is reached on 2026-07-28 (the default): it offers list changes and resource
    # subscriptions there through its subscriptions/listen stream.
    config = write_config(tmp_path, {"d": demo(*(["--rich"] if rich else []))})
    catalog_json(config)
    everything = {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {"listChanged": True},
        "completions": {},
        "logging": {},
    }
    expected = everything if rich else {"tools": {"listChanged": True}}
    async with sdk_client(config, mode) as client:
        over_stdio = client.server_capabilities.model_dump(by_alias=True, exclude_none=True)
    with http_gateway(config) as (url, _stderr):
        async with sdk_client(url, mode) as client:
            over_http = client.server_capabilities.model_dump(by_alias=True, exclude_none=True)
    assert over_stdio == expected
    assert over_http == expected


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_list_sends_canonical_bytes_on_both_eras(tmp_path: Path, mode: str) -> None:
    """Keys sorted at every depth of every tool as received, schema roots included (the SDK's
    models would put a root's properties, required and type first), and equal to catalog --json."""
    from tests.helpers import catalog_json

    config = write_config(tmp_path, {"d": demo("--rich")})
    async with sdk_client(config, mode) as client:
        params: dict[str, Any] = {}
        if mode == "auto":
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": client.protocol_version,
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        raw = await client.session._dispatcher.send_raw_request("tools/list", params, {})  # noqa: SLF001 - the bytes as sent
    tools = raw["tools"]
    assert tools and all(keys_sorted_everywhere(t) for t in tools)
    assert any(list(t["inputSchema"]) == sorted(t["inputSchema"]) and len(t["inputSchema"]) >= 3 for t in tools)
    assert tools == catalog_json(config)["declarations"]


async def test_artifacts_list_needs_no_config_for_the_default_state_directory(tmp_path: Path) -> None:
    """Issue 31: with no config file anywhere, ``artifacts list`` shows the default state directory's."""
    xdg = tmp_path / "xdg-state"
    config = write_config(
        tmp_path, {"d": demo()}, gateway={"state_dir": str(xdg / "prefixgate")}, spill={"max_visible_bytes": 4096}
    )
    spilled = await _spill(config, "one", 50_000)
    nowhere = tmp_path / "elsewhere"
    nowhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PREFIXGATE_CONFIG"}
    env |= {"XDG_STATE_HOME": str(xdg), "XDG_CONFIG_HOME": str(nowhere), "HOME": str(nowhere)}
    listed = subprocess.run(
        [*GATEWAY, "artifacts", "list", "--json"], capture_output=True, text=True, env=env, cwd=nowhere, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == [spilled]
    assert f"no config file: the artifacts under {xdg / 'prefixgate'}" in listed.stderr
