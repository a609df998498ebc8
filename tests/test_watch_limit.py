"""Each principal watches at most so many resources (gateway/engine/watches.py ``MAX_URIS``).

The limit was one for all clients together: a principal that watched URI after URI (a server
with templates accepts any) used it up, and every other principal's ``resources/subscribe``
or listen stream was refused from then on. Now it is per principal. Real gateway over HTTP
with two bearer tokens, the demo server behind it, the real SDK client in both eras.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import demo, http_gateway, sdk_client, wait_for, write_config
from tests.test_demo_modern import hears_the_readme_touched
from tests.test_principals import tokens_file

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

LIMIT = {"PREFIXGATE_WATCHED_URIS_PER_PRINCIPAL": "3"}
ALICE = {"Authorization": "Bearer token-of-alice"}
BOB = {"Authorization": "Bearer token-of-bob"}
ITEMS = [f"demo://r/items/{i}" for i in range(4)]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, {"r": demo("--tools", 0, "--rich", "--name", "r")})


async def test_one_principal_at_its_limit_refuses_only_its_own_next_subscription(tmp_path: Path, config: Path) -> None:
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens), env=LIMIT) as (url, _):
            async with sdk_client(url, "legacy", headers=ALICE) as alice, sdk_client(url, "legacy", headers=BOB) as bob:
                for uri in ITEMS[:3]:
                    await alice.subscribe_resource(uri)
                with pytest.raises(MCPError, match="watches 3 resources already"):
                    await alice.subscribe_resource(ITEMS[3])
                await alice.subscribe_resource(ITEMS[0])  # one it watches already: no new one
                for uri in ITEMS:  # Bob is not held back by Alice
                    if uri == ITEMS[3]:
                        with pytest.raises(MCPError, match="watches 3 resources already"):
                            await bob.subscribe_resource(uri)
                    else:
                        await bob.subscribe_resource(uri)
                await alice.unsubscribe_resource(ITEMS[1])
                await alice.subscribe_resource(ITEMS[3])  # room again
            # Her client gone, the principal holds nothing: a new one has the whole limit.
            async with sdk_client(url, "legacy", headers=ALICE) as again:
                for uri in ITEMS[:3]:
                    await again.subscribe_resource(uri)


async def test_a_listen_stream_past_its_principals_limit_holds_back_no_other(tmp_path: Path, config: Path) -> None:
    """2026-07-28: Alice's streams watch three resources; the fourth she names is not watched
    (the stream serves the rest), and Bob's stream still watches it and hears its update."""
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens), "--log-level", "info", env=LIMIT) as (url, stderr):
            async with sdk_client(url, "auto", headers=ALICE) as alice, sdk_client(url, "auto", headers=BOB) as bob:
                async with alice.listen(resource_subscriptions=ITEMS[:3]):
                    async with alice.listen(resource_subscriptions=["demo://r/readme"]):
                        await wait_for(lambda: "watches 3 resources already" in stderr.read_text(), 10)
                        await hears_the_readme_touched(bob)
    refused = [line for line in stderr.read_text().splitlines() if "watches 3 resources already" in line]
    assert len(refused) == 1 and "demo://r/readme" in refused[0]


async def test_one_principal_s_listen_streams_leave_room_for_another_s(tmp_path: Path, config: Path) -> None:
    """2026-07-28 (a handshake-era client has one GET stream per session, and its sessions are
    bounded per principal): Alice at her limit of open listen streams (2 here) is refused a
    third, Bob's stream is acknowledged and hears a change, and Alice has room again once one
    of hers ends. The SDK's bound (1,024 streams) was one for every principal together."""
    env = {"PREFIXGATE_LISTEN_STREAMS_PER_PRINCIPAL": "2"}
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens), env=env) as (url, _):
            async with sdk_client(url, "auto", headers=ALICE) as alice, sdk_client(url, "auto", headers=BOB) as bob:
                async with alice.listen(tools_list_changed=True):
                    async with alice.listen(tools_list_changed=True):
                        with pytest.raises(MCPError, match="2 listen streams open already"):
                            async with alice.listen(tools_list_changed=True):
                                pass
                        await hears_the_readme_touched(bob)

                    async def room_again() -> bool:  # (once the gateway has seen one of hers end)
                        try:
                            async with alice.listen(tools_list_changed=True):
                                return True
                        except MCPError as exc:
                            assert "2 listen streams open already" in str(exc)
                            return False

                    await wait_for(room_again, 10)
