"""Profiles over HTTP from one gateway (issue 28): ``/mcp`` and each profile's ``/mcp/NAME``.

One ``serve --http`` process, not started for one profile, serves every profile of its
config over one set of servers (started once: the processes are counted). Each profile keeps
its own bytes, policy, activation and epochs; a token limited to some profiles gets 403 on
the others; a server's request reaches the one client that caused it, whichever profile that
client uses. Real gateway processes, real servers, the real SDK client in both eras.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from bench.common import url_process
from tests.helpers import (
    ACCEPT,
    CALLBACKS,
    ERAS,
    GATEWAY,
    INIT,
    PYTHON,
    demo,
    run_cli,
    sdk_client,
    text,
    write_config,
)
from tests.test_profiles import catalog_json_of
from tests.test_reload import children as server_children

ROOT = Path(__file__).resolve().parent.parent
PATHS = {None: "", "codex": "/codex", "review": "/review"}
LONG = "a" * 44
"""A prefix whose names fit OpenAI's 64 characters but not Claude Code's (its mcp__<entry>__ wrapper counts)."""

pytestmark = pytest.mark.real_processes  # counts the gateway's own children in /proc


def team(directory: Path, store: str) -> Path:
    """Claude Code by default, an OpenAI profile without the payload tool, a read-only profile of one server."""
    return write_config(
        directory,
        {"a": {**demo("--tools", 2, "--name", "a"), "prefix": LONG}, "b": demo("--tools", 1, "--name", "b")},
        gateway={"store": store},
        client={"profile": "claude-code"},
        profiles={
            "codex": {"client": {"profile": "openai"}, "exclude": ["*__payload"]},
            "review": {"servers": ["b"], "policy": {"read_only": True}},
        },
    )


@contextlib.contextmanager
def gateway(config: Path, *extra: str) -> Iterator[tuple[str, int, Path]]:
    """``serve --http`` on a free port: its ``/mcp`` URL, its pid and its stderr log."""
    log = config.parent / f"gateway-{len(list(config.parent.glob('gateway-*.log')))}.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", *extra]
    with log.open("w") as errlog, url_process(command, stderr=errlog) as (url, proc):
        yield url, proc.pid, log


def children(pid: int) -> list[int]:
    """The gateway's servers: its children but the warden (gateway/downstream/warden.py)."""
    return sorted(server_children(pid))


async def tools_at(url: str, mode: str, token: str | None = None) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with sdk_client(url, mode, headers=headers) as client:
        tools = (await client.list_tools()).tools
    return [t.model_dump(by_alias=True, exclude_none=True) for t in tools]


async def every_profile(url: str, mode: str) -> dict[str | None, list[dict[str, Any]]]:
    return {profile: await tools_at(url + path, mode) for profile, path in PATHS.items()}


@pytest.mark.anyio
async def test_one_gateway_serves_every_profile_over_servers_started_once(tmp_path: Path, redis: Any) -> None:
    """Three profiles, three byte-stable catalogs with their own naming rules and subsets, two
    servers started once, the same bytes to clients of both eras; a second replica on the same
    Redis, and a restart, publish each profile's bytes again."""
    published = []
    with contextlib.ExitStack() as replicas:
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            config = team(tmp_path / name, redis.url)
            url, pid, _ = replicas.enter_context(gateway(config))
            published.append(await every_profile(url, "legacy"))
            assert await every_profile(url, "auto") == published[-1]
            assert len(children(pid)) == 2, "each server is started once, whatever the number of profiles"
    first = published[0]
    names = {p: [t["name"] for t in tools] for p, tools in first.items()}
    # OpenAI's rule keeps a's qualified names; Claude Code's shortens them (with a hash).
    assert f"{LONG}__echo" in names["codex"] and f"{LONG}__payload" not in names["codex"]
    assert not any(n.startswith(f"{LONG}__") for n in names[None])
    of_a = {p: [n for n in names[p] if n.startswith("a") and n != "artifact_read"] for p in (None, "codex")}
    assert len(of_a[None]) == len(of_a["codex"]) + 1  # the payload tool, excluded from codex only
    assert set(names["review"]) == {n for n in names[None] if n.startswith("b__")} | {"artifact_read"}
    for profile in ("codex", "review"):  # each profile's bytes are catalog --profile's
        report = catalog_json_of(config, profile)
        assert names[profile] == [d["name"] for d in report["declarations"]]
    assert published[1] == first
    with gateway(tmp_path / "one" / "prefixgate.toml") as (url, _, log):
        assert await every_profile(url, "auto") == first
    logged = log.read_text()
    assert f"profile codex: {url}/codex" in logged and f"profile review: {url}/review" in logged


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_tokens_policy_and_activation_are_each_profiles_own(tmp_path: Path, mode: str) -> None:
    config = write_config(
        tmp_path,
        {"d": {**demo("--tools", 1, "--name", "d"), "deferred": True}},
        profiles={"one": {}, "two": {"policy": {"read_only": True}}, "three": {}},
    )
    tokens = tmp_path / "tokens"
    tokens.write_text("alice\nbob-secret profiles=one\n")
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}

    with gateway(config, "--token-file", str(tokens)) as (url, _, log):
        async with httpx2.AsyncClient() as http:
            auth = {**ACCEPT, "authorization": "Bearer bob-secret"}
            for path, status in (("/two", 403), ("", 403), ("/one", 200), ("/nope", 404)):
                old = await http.post(url + path, json=INIT, headers=auth)
                new = await http.post(
                    url + path, json=discover, headers={**auth, "mcp-protocol-version": "2026-07-28"}
                )
                if status == 200:  # served (the bare 2026-07-28 probe lacks headers the SDK requires)
                    assert old.status_code == 200 and new.status_code not in (403, 404), path
                else:
                    assert (old.status_code, new.status_code) == (status, status), path

        async def call(path: str, name: str, search: bool = False) -> tuple[bool, str]:
            headers = {"Authorization": "Bearer alice"}
            async with sdk_client(url + path, mode, headers=headers) as client:
                if search:
                    await client.call_tool("tool_search", {"query": name, "limit": 1})
                result = await client.call_tool(name, {"text": "hi"} if name == "d__echo" else {})
            return result.is_error, text(result)

        # One principal (alice) in three profiles that publish the same bytes: a grant made in
        # "one" runs there (on later connections too) and nowhere else.
        assert await call("/one", "d__echo", search=True) == (False, "hi")
        refused, why = await call("/three", "d__echo")
        assert refused and "tool_search" in why
        assert await call("/one", "d__echo") == (False, "hi")
        # "two" is read-only: it refuses what the default allows.
        assert not (await call("", "d__image", search=True))[0]
        refused, why = await call("/two", "d__image", search=True)
        policy = "read_only = true allows only tools with readOnlyHint"
        assert refused and why == f"Tool d__image is refused by policy: {policy}."
        logged = log.read_text()
    for served in ("two", "default"):  # two requests refused in each: one line each, naming the token's profiles
        assert logged.count(f"may not use profile {served} (its token's profiles=one): 403") == 1
    assert "bob-secret" not in logged


@pytest.mark.anyio
async def test_only_a_token_that_may_use_every_profile_reads_the_metrics(tmp_path: Path) -> None:
    """``/metrics`` names every profile's servers and tools: a token limited to some of the
    profiles served gets 403 there (any token could read them), one that may use them all
    reads them, and a token file's change applies to the next scrape."""
    config = write_config(
        tmp_path,
        {"a": demo("--tools", 1, "--name", "a"), "secret": demo("--tools", 1, "--name", "secret")},
        profiles={"one": {"servers": ["a"]}},
    )
    tokens = tmp_path / "tokens"
    tokens.write_text("alice\nbob-secret profiles=one\ncarol profiles=default,one\n")
    with gateway(config, "--token-file", str(tokens)) as (url, _, _log):
        metrics = url.removesuffix("/mcp") + "/metrics"
        async with httpx2.AsyncClient() as http:

            async def scrape(token: str) -> httpx2.Response:
                return await http.get(metrics, headers={"Authorization": f"Bearer {token}"})

            for token in ("alice", "carol"):
                answer = await scrape(token)
                assert answer.status_code == 200 and 'server="secret"' in answer.text, token
            refused = await scrape("bob-secret")
            assert refused.status_code == 403 and "secret" not in refused.text
            assert refused.text.strip() == "this token may not read /metrics: it may not use every profile served"
            assert (await scrape("nobody")).status_code == 401
            tokens.write_text("alice\nbob-secret\n")  # bob may use every profile now
            with anyio.fail_after(30):
                while (await scrape("bob-secret")).status_code != 200:
                    await anyio.sleep(0.1)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_change_starts_an_epoch_only_in_the_profiles_that_see_it(tmp_path: Path, mode: str) -> None:
    state = tmp_path / "m.json"
    mutating = {"command": PYTHON, "args": ["-m", "tests.mutating_server", str(state)], "cwd": str(ROOT)}
    config = write_config(
        tmp_path,
        {"m": mutating, "d": demo("--tools", 1)},
        profiles={"no-m": {"servers": ["d"]}, "no-alpha": {"exclude": ["m__alpha"]}},
    )
    paths = {None: "", "no-m": "/no-m", "no-alpha": "/no-alpha"}
    with gateway(config) as (url, _, _log):
        before = {p: await tools_at(url + path, mode) for p, path in paths.items()}
        async with sdk_client(url, mode) as client:
            assert not (await client.call_tool("m__mutate", {"kind": "reword"})).is_error
        with anyio.fail_after(20):
            while await tools_at(url, mode) == before[None]:
                await anyio.sleep(0.1)
        after = {p: await tools_at(url + path, mode) for p, path in paths.items()}
    assert after["no-m"] == before["no-m"] and after["no-alpha"] == before["no-alpha"]

    def epochs(profile: str | None) -> list[str]:
        extra = ("--profile", profile) if profile else ()
        proc = run_cli("catalog", "history", "--config", str(config), "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        return [e["reason"] for e in json.loads(proc.stdout)]

    assert epochs(None) == ["the discovery barrier", "server 'm' changed its tools"]
    assert epochs("no-m") == epochs("no-alpha") == ["the discovery barrier"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_classic_servers_question_reaches_the_client_that_caused_it_in_any_profile(
    tmp_path: Path, mode: str
) -> None:
    """A server that asks the handshake way, seen by two profiles: alice calls it through one
    while bob is connected to the other; the question goes to alice, never to bob."""
    classic = {"command": PYTHON, "args": ["-m", "tests.backchannel_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"b": classic}, profiles={"asker": {"client": {"profile": "mcp"}}})
    tokens = tmp_path / "tokens"
    tokens.write_text("alice\nbob\n")
    asked_bob: list[Any] = []

    async def bob_elicits(*args: Any) -> Any:
        asked_bob.append(args)
        raise AssertionError("bob was asked alice's question")

    with gateway(config, "--token-file", str(tokens)) as (url, pid, _log):
        bob = {"Authorization": "Bearer bob"}
        alice = {"Authorization": "Bearer alice"}
        async with sdk_client(url, mode, headers=bob, elicitation_callback=bob_elicits) as bob_client:
            await bob_client.list_tools()
            async with sdk_client(url + "/asker", mode, headers=alice, **CALLBACKS) as client:
                assert text(await client.call_tool("b__ask", {})) == "accept:{'name': 'Ann'}"
        assert len(children(pid)) == 1
    assert asked_bob == []
