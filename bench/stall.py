"""How long other clients wait while a large server changes its tools, or a client sends long calls.

    python -m bench.stall [--tools 5000] [--changes 5] [--bodies 5] [--json]   (also ``stall`` in bench.run)

``prefixgate serve --http`` with one demo server of ``--tools`` tools (and ``--rich``'s
``mutate``). A probe client (2025-11-25, ``ping``, answered by the gateway itself) calls in a
loop; another client makes the server grow its list by one tool (``mutate grow`` through
``tool_call``), ``--changes`` times, 2 s apart. Each change is one long listing line from the
server to parse, a catalog to rebuild and a search index to build: what the probe waits
meanwhile is what every other client waits. Reported: the probe's median and longest wait
in the quiet second before each change and in the 2 s after it, and the first
``tool_search`` after each change (context: no target; on the event loop this work held the
probe up 0.4-0.8 s a change at 5,000 tools on 2 cores).

Before the changes (``SETTLE`` seconds after the first catalog is out, past the gateway's
one-time collection then), the same client makes ``--bodies`` calls of ``echo`` 0.5 s
apart, each with an argument of 400,000 small objects (~4.0 MB, under the 4 MiB body
limit): the worst a client's call can cost the gateway to parse. Reported: the probe's
waits meanwhile, and each call's time. Each wait counts in the window it began in. (Until
commit 9c8ec21 the changes came first, at once after start; until 8b344fb a wait counted in
the window it ended in.)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from bench.common import PYTHON, demo_args, gateway_config, http_client, summary, url_process
from bench.httpcalls import client

SETTLE = 8.0
"""Seconds after the first catalog is out before anything is measured (see ``_measure``): the
gateway's one-time collection comes 3 s after its first catalog and warm-start record are
saved, which for 5,000 tools takes a second or two more."""
PAD_OBJECTS = 400_000
"""``{"a": 1}`` objects in each long call: ~4.0 MB, below the 4 MiB body limit (the SDK's)."""


_LONG_CALL_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
    "mcp-name": "tool_call",
}


def _long_call(objects: int) -> bytes:
    """A 2026-07-28 ``tool_call`` of the demo's ``echo``, its argument ``objects`` small objects."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench-stall", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    arguments = {"name": "d__echo", "arguments": {"text": "hi", "pad": [{"a": 1}] * objects}}
    params = {"name": "tool_call", "arguments": arguments, "_meta": meta}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()


async def _measure(url: str, changes: int, bodies: int) -> dict[str, Any]:
    from mcp.shared.exceptions import MCPDeprecationWarning

    quiet: list[float] = []
    changing: list[float] = []
    searches: list[float] = []
    posting: list[float] = []
    calls: list[float] = []
    body = _long_call(PAD_OBJECTS if bodies > 1 else PAD_OBJECTS // 10)
    async with client(url, "legacy") as probe, client(url, "auto") as actor:
        window: list[float] = []  # where the probe's waits go now (rebound below; [] counts nowhere)
        stop = anyio.Event()

        async def probing() -> None:
            while not stop.is_set():
                started, into = time.perf_counter(), window  # (counted in the window it began in)
                with warnings.catch_warnings():  # (ping is of the 2025-11-25 era, which the probe speaks)
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await probe.send_ping()
                into.append(time.perf_counter() - started)

        async with anyio.create_task_group() as tg:
            tg.start_soon(probing)
            # A gateway up for a while: its catalog out (a call waits for it), and past the
            # one-time full collection that follows it (gateway/engine/frozen.py), which no
            # window here counts.
            window = []
            await actor.call_tool("tool_search", {"query": "d__echo"})
            await anyio.sleep(SETTLE)
            # A client's long calls, the catalog as it started: an argument of small objects,
            # each parsed into a Python object of its own (the body encoded before the probe
            # started: encoding it holds this process's loop, the probe's).
            window = posting
            async with http_client(_LONG_CALL_HEADERS) as poster:
                for _ in range(bodies):
                    started = time.perf_counter()
                    answer = await poster.post(url, content=body)
                    calls.append(time.perf_counter() - started)
                    if answer.status_code != 200 or b'"isError":false' not in answer.content:
                        raise RuntimeError(f"a long call failed: {answer.status_code} {answer.content[:300]!r}")
                    await anyio.sleep(0.5)
            for _ in range(changes):
                window = quiet
                await anyio.sleep(1.0)
                window = []  # (the search that activates mutate: in no window)
                await actor.call_tool("tool_search", {"query": "mutate"})  # (activation ends with each epoch)
                window = changing
                done = await actor.call_tool("tool_call", {"name": "d__mutate", "arguments": {"kind": "grow"}})
                if done.is_error:
                    raise RuntimeError(f"mutate failed: {done.content[0]}")
                await anyio.sleep(0.5)
                started = time.perf_counter()
                await actor.call_tool("tool_search", {"query": "grown"})
                searches.append(time.perf_counter() - started)
                await anyio.sleep(1.5)
            window = []
            stop.set()
    return {
        "quiet": summary(quiet),
        "changing": summary(changing),
        "first_search": summary(searches),
        "posting": summary(posting),
        "long_calls": summary(calls),
    }


async def measure(tmp: Path, tools: int, changes: int, stderr: Any = None, bodies: int = 5) -> dict[str, Any]:
    config = gateway_config(tmp / "stall", {"d": demo_args("--tools", tools, "--rich", "--name", "d")})
    command = [PYTHON, "-m", "gateway", "serve", "--log-level", "warning", "--http", "127.0.0.1:0", "--config"]
    with url_process([*command, str(config)], **({"stderr": stderr} if stderr else {})) as (url, _):
        results = await _measure(url, changes, bodies)
    return {"settings": {"tools": tools, "changes": changes, "bodies": bodies}, **results}


async def run(ctx: Any) -> dict[str, Any]:
    """The ``stall`` section of ``bench.run``."""
    tools, changes, bodies = (300, 1, 1) if ctx.quick else (5000, 5, 5)
    with ctx.errlog.open("a", encoding="utf-8") as err:
        return await measure(ctx.tmp, tools, changes, err, bodies)


def rows(
    results: dict[str, Any], ms: Callable[[float | None], str], spread: Callable[[Any], str]
) -> list[tuple[str, str, str, str, str]]:
    st = results["settings"]
    label = f"a {st['tools']}-tool server changes its tools ({st['changes']} changes, 2 s apart): other clients' waits"
    out = []
    for key, what in (
        ("quiet", "ping, the quiet second before each change"),
        ("changing", "ping, the 2 s after each change"),
        ("first_search", "the first tool_search after each change"),
    ):
        s = results[key]
        out.append((label, what, ms(s.get("median")), spread(s), f"longest {ms(s.get('max'))}"))
    if "posting" in results:  # (runs from before 2026-12-06 measured only the changes)
        objects = PAD_OBJECTS if st["bodies"] > 1 else PAD_OBJECTS // 10
        label = (
            f"another client's calls of {objects:,} small objects ({st['bodies']}, 0.5 s apart): other clients' waits"
        )
        for key, what in (("posting", "ping, while they arrive"), ("long_calls", "each long call, answered")):
            s = results[key]
            out.append((label, what, ms(s.get("median")), spread(s), f"longest {ms(s.get('max'))}"))
    return out


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _range(s: dict[str, Any]) -> str:
    return f"{_ms(s.get('min'))}-{_ms(s.get('max'))} (n={s.get('n', 0)})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__.split("\n\n")[0])
    p.add_argument("--tools", type=int, default=5000)
    p.add_argument("--changes", type=int, default=5)
    p.add_argument("--bodies", type=int, default=5, help="long calls a client makes before the changes")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prefixgate-stall-") as tmp:
        results = anyio.run(measure, Path(tmp), args.tools, args.changes, None, args.bodies)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("| what | measured | median | range | longest |")
    print("| --- | --- | ---: | --- | ---: |")
    for row in rows(results, _ms, _range):
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
