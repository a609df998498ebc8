"""Over HTTP, one principal's flood of calls waits behind its own: another principal's calls go on.

Each principal has at most ``PREFIXGATE_HTTP_REQUESTS_PER_PRINCIPAL`` requests answered at once
(64 by default, as a stdio client); more wait, in the order they came, for one of its own to
end. Real gateway over HTTP with two bearer tokens, a real stdio server written the classic
way behind it (which counts its ``sleep`` calls running at once), the real SDK client in
both eras.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import ERAS, PYTHON, http_gateway, sdk_client, text, wait_for, write_config
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
