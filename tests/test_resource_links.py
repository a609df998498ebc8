"""A resource a tool result links to is read from the server that linked it, as directly.

The spec lets a ``resource_link`` name a URI that is not in ``resources/list`` (nor matches a
template). Directly, the client reads it from the server that gave it. Through the gateway a
URI no listed resource or template owns went to the first server offering resources, in id
order: with two such servers the other one's link was "Unknown resource", and a watch of it
went to the wrong server (gateway/engine/links.py). Two tests/told_server.py, or two
tests/surface_server.py, behind one gateway, the real SDK client in both eras.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import ERAS, PYTHON, http_gateway, sdk_client, wait_for, write_config
from tests.test_principals import tokens_file

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

ROOT = Path(__file__).resolve().parent.parent
TOLD = {"command": PYTHON, "args": ["-m", "tests.told_server"], "cwd": str(ROOT)}
SURFACE = str(ROOT / "tests" / "surface_server.py")


@pytest.mark.parametrize("mode", ERAS)
async def test_a_linked_resource_no_server_lists_is_read_from_the_server_that_linked_it(
    tmp_path: Path, mode: str
) -> None:
    config = write_config(tmp_path, {"a": TOLD, "b": TOLD})
    async with sdk_client(config, mode) as client:
        linked = await client.call_tool("b__hide", {"topic": "plan"})
        link = linked.content[0]
        assert isinstance(link, types.ResourceLink) and link.uri == "hidden://plan", linked
        read = await client.read_resource(link.uri)
        assert read.contents[0].text == "hidden plan"  # type: ignore[union-attr]
        prompt = await client.get_prompt("b__hidden", {"topic": "brief"})  # a prompt's link too
        assert prompt.messages[0].content.uri == "hidden://brief", prompt  # type: ignore[union-attr]
        read = await client.read_resource("hidden://brief")
        assert read.contents[0].text == "hidden brief"  # type: ignore[union-attr]
        # A URI nothing links to or lists still goes where it went: the first server, which refuses it.
        with pytest.raises(MCPError, match="Unknown resource"):
            await client.read_resource("hidden://elsewhere")


def logged(path: Path, method: str) -> list[str]:
    """The URIs of the ``method`` requests a surface server logged."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line["params"]["uri"] for line in lines if line["method"] == method]


@pytest.mark.parametrize("profile", [None, "other"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_linked_resource_no_server_lists_is_watched_at_the_server_that_linked_it(
    tmp_path: Path, mode: str, profile: str | None
) -> None:
    """Watched (``resources/subscribe``; a 2026-07-28 client's listen stream) at the server
    that linked it, and told to stop there: it went to the first server offering resources.
    Also from a profile's endpoint of ``serve --http`` (the watches are every profile's)."""
    link = {"type": "resource_link", "uri": "hidden://b", "name": "b"}
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b")}
    servers = {
        "a": {"command": PYTHON, "args": [SURFACE, json.dumps({"log": str(logs["a"])})]},
        "b": {
            "command": PYTHON,
            "args": [
                SURFACE,
                json.dumps({"log": str(logs["b"]), "overrides": {"tools/call": {"result": {"content": [link]}}}}),
            ],
        },
    }
    if profile is None:
        config = write_config(tmp_path, servers)
        async with sdk_client(config, mode) as client:
            await _watch_the_link(client, mode, logs["b"])
    else:
        config = write_config(tmp_path, servers, profiles={profile: {}})
        with http_gateway(config) as (url, _):
            async with sdk_client(f"{url}/{profile}", mode) as client:
                await _watch_the_link(client, mode, logs["b"])
    assert logged(logs["b"], "resources/subscribe") == ["hidden://b"]
    assert logged(logs["b"], "resources/unsubscribe") == ["hidden://b"]
    assert logged(logs["a"], "resources/subscribe") == []


@pytest.mark.parametrize("mode", ERAS)
async def test_a_profile_watches_a_resource_at_a_server_it_sees_never_at_one_it_does_not(
    tmp_path: Path, mode: str
) -> None:
    """A token limited to a profile that does not see the vault server watches a URI the vault
    lists: it went to the vault (subscribed there, and acknowledged as watched), which that
    token may not use and whose resources its reads never reach; it goes where the profile's
    ``resources/read`` goes, a server the profile sees. And another token watching the URI
    at the default profile meanwhile has it watched at the vault all the same (counted per URI
    alone, the first watch stood in for every later one, wherever it was)."""
    logs = {name: tmp_path / f"{name}.log" for name in ("vault", "notes")}
    servers = {
        name: {"command": PYTHON, "args": [SURFACE, json.dumps({"log": str(logs[name]), "resources": [uri]})]}
        for name, uri in (("vault", "vault://keys"), ("notes", "notes://1"))
    }
    config = write_config(tmp_path, servers, profiles={"review": {"servers": ["notes"]}})
    with tokens_file(tmp_path, "token-of-admin", "token-of-guest profiles=review") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            guest = {"Authorization": "Bearer token-of-guest"}
            admin = {"Authorization": "Bearer token-of-admin"}
            async with (
                sdk_client(f"{url}/review", mode, headers=guest) as theirs,
                sdk_client(url, mode, headers=admin) as ours,
                _watching(theirs, mode, "vault://keys"),
            ):
                await wait_for(lambda: any(logged(log, "resources/subscribe") for log in logs.values()), 10)
                async with _watching(ours, mode, "vault://keys"):
                    await wait_for(
                        lambda: len(sum((logged(log, "resources/subscribe") for log in logs.values()), [])) > 1, 10
                    )
            await wait_for(
                lambda: len(sum((logged(log, "resources/unsubscribe") for log in logs.values()), [])) > 1, 10
            )
    assert logged(logs["notes"], "resources/subscribe") == ["vault://keys"]  # the guest's
    assert logged(logs["vault"], "resources/subscribe") == ["vault://keys"]  # the admin's alone
    assert logged(logs["notes"], "resources/unsubscribe") == logged(logs["vault"], "resources/unsubscribe")


@contextlib.asynccontextmanager
async def _watching(client: Any, mode: str, uri: str) -> AsyncIterator[None]:
    """``uri`` watched by ``client`` for the block: ``resources/subscribe``, or a listen stream."""
    if mode == "legacy":
        await client.subscribe_resource(uri)
        yield
        await client.unsubscribe_resource(uri)
    else:
        async with client.listen(resource_subscriptions=[uri]) as events:
            assert events.honored.resource_subscriptions == [uri]
            yield


async def _watch_the_link(client: Any, mode: str, log: Path) -> None:
    """Call b's tool (its result links to ``hidden://b``), watch the link, stop watching it."""
    linked = await client.call_tool("b__emit", {})
    assert linked.content[0].uri == "hidden://b", linked
    if mode == "legacy":
        await client.subscribe_resource("hidden://b")
        await client.unsubscribe_resource("hidden://b")
    else:
        async with client.listen(resource_subscriptions=["hidden://b"]) as events:
            assert events.honored.resource_subscriptions == ["hidden://b"]
    await wait_for(lambda: logged(log, "resources/unsubscribe"), 10)


def test_the_links_remembered_are_bounded_per_principal() -> None:
    from gateway.engine.links import MAX_BLOCKS, MAX_LINKS, Links

    links = Links()
    links.note("b", "s2", {"content": [{"type": "resource_link", "uri": "x://b"}]})
    for n in range(MAX_LINKS + 50):
        links.note("a", "s1", {"content": [{"type": "resource", "resource": {"uri": f"x://{n}"}}]})
    assert links.owner("a", "x://0") is None  # its oldest forgotten
    assert links.owner("a", f"x://{MAX_LINKS + 49}") == "s1"
    assert links.owner("b", "x://b") == "s2"  # another principal's kept
    many = [{"type": "resource_link", "uri": f"y://{n}"} for n in range(MAX_BLOCKS + 10)]
    links.note("c", "s3", {"content": many})
    assert links.owner("c", f"y://{MAX_BLOCKS - 1}") == "s3"
    assert links.owner("c", f"y://{MAX_BLOCKS}") is None  # only a result's first blocks are looked at


def test_a_principal_gone_for_good_takes_its_links_with_it() -> None:
    """A revoked token's principal kept its 256 links for as long as the gateway ran (a token
    file rotated while serving: 256 more with each); ``forget`` lets them go."""
    from gateway.engine.links import Links

    links = Links()
    for principal in ("gone", "kept"):
        links.note(principal, "s1", {"content": [{"type": "resource_link", "uri": "x://a"}]})
    links.forget("gone")
    assert links.owner("gone", "x://a") is None
    assert links.owner("kept", "x://a") == "s1"
    assert list(links._by) == ["kept"]  # noqa: SLF001 - what is bounded
