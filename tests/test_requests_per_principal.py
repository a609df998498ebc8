"""Over HTTP, one principal's flood of calls waits behind its own: another principal's calls go on.

Each principal has at most ``PREFIXGATE_HTTP_REQUESTS_PER_PRINCIPAL`` requests answered at once
(64 by default, as a stdio client); more wait, in the order they came, for one of its own to
end. Real gateway over HTTP with two bearer tokens, a real stdio server written the classic
way behind it (which counts its ``sleep`` calls running at once), the real SDK client in
both eras.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import ERAS, PYTHON, http_gateway, sdk_client, text, url_process, wait_for, write_config
from tests.test_cycles import PROBE, _wait_for
from tests.test_principals import tokens_file

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

CLASSIC = str(Path(__file__).with_name("classic_server.py"))
ALICE = {"Authorization": "Bearer token-of-alice"}
BOB = {"Authorization": "Bearer token-of-bob"}
PLACES = 2
CALLS = 2 * PLACES  # two waves: the second waits behind the first
SECONDS = 2.0
"""Each of Alice's calls: her first ones are still running when Bob is answered."""


def sleeps(result: Any) -> tuple[int, int]:
    """The server's ``sleep`` calls running now, and the most ever at once."""
    _, now, _, peak = text(result).split()
    return int(now), int(peak)


@pytest.mark.parametrize("mode", ERAS)
async def test_one_principals_calls_wait_behind_its_own_and_not_in_front_of_anothers(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": [CLASSIC]}})
    env = {"PREFIXGATE_HTTP_REQUESTS_PER_PRINCIPAL": str(PLACES)}
    done: list[str] = []
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens), env=env) as (url, _):
            async with sdk_client(url, mode, headers=ALICE) as alice, sdk_client(url, mode, headers=BOB) as bob:

                async def alices_call(n: int) -> None:
                    result = await alice.call_tool("c__sleep", {"seconds": SECONDS, "tag": f"a{n}"})
                    assert not result.is_error, text(result)
                    done.append(text(result))

                async with anyio.create_task_group() as tg:
                    for n in range(CALLS):
                        tg.start_soon(alices_call, n)
                    # Alice's calls run in waves of PLACES; Bob's are answered during her first
                    seen: list[tuple[int, int]] = []

                    async def full() -> bool:
                        seen.append(sleeps(await bob.call_tool("c__sleeps", {})))
                        return seen[-1][0] >= PLACES

                    await wait_for(full)
                    assert seen[-1][0] == PLACES, f"{seen[-1][0]} of Alice's calls at the server at once"
                    assert not done, "Bob's call waited behind Alice's"
                    bobs = await bob.call_tool("c__sleep", {"seconds": 0})
                    assert text(bobs) == "slept 0"
                    assert not done
                assert done == [f"slept {SECONDS:g}"] * CALLS
                # never more than PLACES of Alice's at the server; Bob's one beside them at most
                _, peak = sleeps(await bob.call_tool("c__sleeps", {}))
                assert peak <= PLACES + 1, f"{peak} sleeps ran at once; Alice may have {PLACES}"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_request_whose_client_went_away_while_it_waited_is_not_served(tmp_path: Path, mode: str) -> None:
    """Alice's calls wait behind her own; her client goes away meanwhile. When their turn came
    they were served all the same: each reached its server (a 2026-07-28 one to be cancelled
    there at once), and her next requests waited behind them. Now they are dropped as their
    client goes: none reaches the server, she has her full share after, and no principal's
    places are left (the gateway runs under tests/gc_probe.py, which counts them)."""
    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": [CLASSIC]}})
    report, stderr = tmp_path / "gc.json", tmp_path / "gateway.log"
    env = {"PREFIXGATE_HTTP_REQUESTS_PER_PRINCIPAL": str(PLACES)}
    waiting = 2 * PLACES
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens, stderr.open("w") as errlog:
        serve = [*("gateway", "serve", "--config", str(config), "--http", "127.0.0.1:0"), "--token-file", str(tokens)]
        command = [sys.executable, PROBE, str(report), *serve, "--log-level", "debug"]
        with url_process(command, env=env, stderr=errlog) as (url, proc):
            async with sdk_client(url, mode, headers=BOB) as bob, sdk_client(url, mode, headers=ALICE) as alice:

                async def running(count: int) -> bool:
                    return sleeps(await bob.call_tool("c__sleeps", {}))[0] == count

                connected, go, closed = anyio.Event(), anyio.Event(), anyio.Event()

                async def goes_away() -> None:
                    # (connected first: its own handshake would wait its turn too)
                    async with sdk_client(url, mode, headers=ALICE) as gone:
                        connected.set()
                        await go.wait()
                        async with anyio.create_task_group() as calls:
                            for n in range(waiting):
                                calls.start_soon(gone.call_tool, "c__sleep", {"seconds": 60, "tag": f"gone{n}"})
                            await wait_for(lambda: stderr.read_text().count("the next waits its turn") >= waiting)
                            calls.cancel_scope.cancel()
                    closed.set()  # its connections with it

                async with anyio.create_task_group() as held:
                    held.start_soon(goes_away)
                    await connected.wait()
                    for n in range(PLACES):
                        held.start_soon(alice.call_tool, "c__sleep", {"seconds": 60, "tag": f"held{n}"})
                    await wait_for(lambda: running(PLACES))
                    go.set()
                    await closed.wait()
                    await wait_for(lambda: stderr.read_text().count("waited its turn: not served") >= waiting)
                    held.cancel_scope.cancel()
                await wait_for(lambda: running(0))
                with anyio.fail_after(60):
                    async with anyio.create_task_group() as again:  # her full share, at once
                        for n in range(PLACES):
                            again.start_soon(alice.call_tool, "c__sleep", {"seconds": 60, "tag": f"again{n}"})
                        await wait_for(lambda: running(PLACES))
                        again.cancel_scope.cancel()
                await wait_for(lambda: running(0))
                for n in range(waiting):
                    assert text(await bob.call_tool("c__cancelled", {"tag": f"gone{n}"})) == "cancelled:False", n
                _, peak = sleeps(await bob.call_tool("c__sleeps", {}))
                assert peak == PLACES
            os.kill(proc.pid, signal.SIGUSR1)
            await anyio.to_thread.run_sync(_wait_for, report, True)
            report.unlink()
            os.kill(proc.pid, signal.SIGUSR1)
            found: dict[str, Any] = await anyio.to_thread.run_sync(_wait_for, report, False)
    assert found["live"].get("gateway.engine.shares._Places", 0) == 0, found["live"]
