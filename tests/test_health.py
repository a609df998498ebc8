"""``/healthz`` and ``/readyz`` of ``serve --http`` (issue 29, item 4): real gateways, a real
Redis, the real SDK client beside the probes in both eras."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from gateway.state.history import EpochHistory
from tests.helpers import ERAS, demo, http_gateway, sdk_client, wait_for, write_config

pytestmark = pytest.mark.anyio


async def probe(url: str, path: str, method: str = "GET", http: httpx2.AsyncClient | None = None) -> tuple[int, bytes]:
    base = url.removesuffix("/mcp")
    if http is not None:
        response = await http.request(method, base + path)
        return response.status_code, response.content
    async with httpx2.AsyncClient() as http:
        response = await http.request(method, base + path)
    return response.status_code, response.content


@pytest.mark.parametrize("mode", ERAS)
async def test_health_before_and_after_the_barrier_without_a_token(tmp_path: Path, mode: str) -> None:
    """Live at once, ready once the catalog is published; neither needs the token, and
    neither says anything but its verdict."""
    config = write_config(tmp_path, {"late": demo("--tools", 1, "--startup-delay", 4)}, gateway={"warm_start": False})
    tokens = tmp_path / "tokens"
    tokens.write_text("secret-token\n")
    with http_gateway(config, "--token-file", str(tokens)) as (url, log):
        assert await probe(url, "/healthz") == (200, b"ok\n")
        assert await probe(url, "/readyz") == (503, b"not ready\n")  # the server is still starting
        assert await probe(url, "/readyz", "HEAD") == (503, b"")
        assert (await probe(url, "/readyz", "POST"))[0] == 405

        async def ready() -> bool:
            return await probe(url, "/readyz") == (200, b"ready\n")

        await wait_for(ready)
        headers = {"Authorization": "Bearer secret-token"}
        async with sdk_client(url, mode, headers=headers) as client:
            assert "late__echo" in {t.name for t in (await client.list_tools()).tools}
        assert (await probe(url, "/mcp"))[0] == 401  # the MCP endpoint still wants the token
        assert "secret-token" not in log.read_text()
    # serve --http keeps the epoch history as the stdio end does (tests/test_history.py)
    (record,) = EpochHistory(tmp_path / "state", None).read()
    assert (record["reason"], record["previous"], record["tools"]) == ("the discovery barrier", None, 8)


async def test_readiness_follows_the_state_store(tmp_path: Path, redis: Any) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"store": redis.url})
    with http_gateway(config) as (url, _):

        async def verdict(expected: int) -> bool:
            return (await probe(url, "/readyz"))[0] == expected

        await wait_for(lambda: verdict(200))
        redis.stop()
        await wait_for(lambda: verdict(503))
        assert await probe(url, "/healthz") == (200, b"ok\n")  # it still serves
        redis.start()
        await wait_for(lambda: verdict(200))


async def test_a_hung_store_is_not_ready_at_once(tmp_path: Path, redis: Any) -> None:
    """Redis accepts connections and never answers (SIGSTOP): ``/readyz`` said 503 only after
    the store's command timeouts (~10 s), past any orchestrator's probe timeout. Now the
    check has half a second; once Redis answers again, so does readiness."""
    import os
    import signal

    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"store": redis.url})
    assert redis.proc is not None
    with http_gateway(config) as (url, _):
        await wait_for(lambda: _ok(url))
        os.kill(redis.proc.pid, signal.SIGSTOP)
        try:
            await anyio.sleep(1.5)  # the last verdict (200) is no longer reused
            for _ in range(3):
                with anyio.fail_after(5):  # (each took ~10 s)
                    assert await probe(url, "/readyz") == (503, b"not ready\n")
        finally:
            os.kill(redis.proc.pid, signal.SIGCONT)
        await wait_for(lambda: _ok(url))


async def test_probes_in_a_burst_check_the_store_once_a_second(tmp_path: Path, redis: Any) -> None:
    """A flood of unauthenticated probes costs Redis at most one check a second."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"store": redis.url})
    import redis as redis_client

    with http_gateway(config) as (url, _):
        await wait_for(lambda: _ok(url))
        stats = redis_client.Redis.from_url(redis.url)
        before = _calls(stats.info("commandstats"))
        # One client for the burst: 50 clients made at once each build an SSL context in
        # the test's own loop, which on a loaded machine ran past their connect timeouts.
        async with httpx2.AsyncClient() as http, anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(probe, url, "/readyz", "GET", http)
        after = _calls(stats.info("commandstats"))
        stats.close()
    # A check is INFO, SET and DEL: at most two checks in the burst, and the INFO that read the counts.
    assert after - before <= 3 * 2 + 1, json.dumps([before, after])


async def _ok(url: str) -> bool:
    return (await probe(url, "/readyz"))[0] == 200


def _calls(stats: dict[str, Any]) -> int:
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_info", "cmdstat_set", "cmdstat_del"))
