"""A server's ``notifications/elicitation/complete`` reaches the client its URL-mode
elicitation went to (gateway/engine/relay.py), as it does directly.

The server is tests/classic_server.py, written the classic way: ``elicit_url`` asks on its
back-channel during the call and sends the completion notice before answering;
``url_required`` fails with ``-32042`` (the elicitation in the error's data) and sends the
notice on its session a moment later. Before, the gateway dropped every such notice, and a
client that waits for it before retrying never retried. The real SDK client, over stdio
and over HTTP, with the server behind on stdio and on HTTP. A 2026-07-28 client has no
channel for the notice: its calls still work. With two principals on one gateway, only the
one the elicitation went to hears the notice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.helpers import PYTHON, Notifications, http_gateway, sdk_client, text, url_process, write_config

pytestmark = pytest.mark.anyio

CLASSIC = [PYTHON, "-m", "tests.classic_server"]
ROOT = Path(__file__).resolve().parent.parent


async def _accept(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept")


def _completed(notes: Notifications) -> list[str]:
    return [m.params.elicitation_id for m in notes.seen if isinstance(m, types.ElicitCompleteNotification)]


async def _until_completed(notes: Notifications, elicitation_id: str) -> list[str]:
    with anyio.move_on_after(10):
        while elicitation_id not in _completed(notes):
            await anyio.sleep(0.02)
    return _completed(notes)


async def _both_flows(client: Any, notes: Notifications, prefix: str) -> tuple[list[str], list[str]]:
    """The URL elicitation during a call, then the ``-32042`` one: the notices seen after each."""
    assert text(await client.call_tool(f"{prefix}elicit_url", {})) == "url:accept"
    during = await _until_completed(notes, "login-1")
    with pytest.raises(MCPError) as failed:
        await client.call_tool(f"{prefix}url_required", {})
    assert failed.value.error.code == types.URL_ELICITATION_REQUIRED
    after = await _until_completed(notes, "login-2")
    return during, after


async def test_the_notices_reach_a_client_directly() -> None:
    """The baseline the gateway is held to: the SDK client talking to the server itself."""
    from mcp import Client

    notes = Notifications()
    params = StdioServerParameters(command=CLASSIC[0], args=CLASSIC[1:], cwd=str(ROOT))
    async with Client(params, mode="legacy", elicitation_callback=_accept, message_handler=notes) as client:
        assert await _both_flows(client, notes, "") == (["login-1"], ["login-1", "login-2"])


@asynccontextmanager
async def _through_gateway(
    tmp_path: Path, front: str, behind: str, mode: str, notes: Notifications
) -> AsyncIterator[Any]:
    options = {"elicitation_callback": _accept, "message_handler": notes}
    if behind == "http":
        with url_process([*CLASSIC, "--http"]) as (url, _):
            config = write_config(tmp_path, {"classic": {"url": url}})
            async with _front(config, front, mode, options) as client:
                yield client
        return
    config = write_config(tmp_path, {"classic": {"command": CLASSIC[0], "args": CLASSIC[1:], "cwd": str(ROOT)}})
    async with _front(config, front, mode, options) as client:
        yield client


@asynccontextmanager
async def _front(config: Path, front: str, mode: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    if front == "stdio":
        async with sdk_client(config, mode, **options) as client:
            yield client
        return
    with http_gateway(config) as (url, _):
        async with sdk_client(url, mode, **options) as client:
            yield client


@pytest.mark.parametrize("behind", ["stdio", "http"])
@pytest.mark.parametrize("front", ["stdio", "http"])
async def test_the_notices_reach_a_handshake_client_through_the_gateway(
    tmp_path: Path, front: str, behind: str
) -> None:
    notes = Notifications()
    async with _through_gateway(tmp_path, front, behind, "legacy", notes) as client:
        assert await _both_flows(client, notes, "classic__") == (["login-1"], ["login-1", "login-2"])


@pytest.mark.parametrize("front", ["stdio", "http"])
async def test_a_2026_client_s_calls_work_without_the_notice(tmp_path: Path, front: str) -> None:
    from mcp.client._input_required import InputRequiredRoundsExceededError

    notes = Notifications()
    async with _through_gateway(tmp_path, front, "stdio", "auto", notes) as client:
        assert text(await client.call_tool("classic__elicit_url", {})) == "url:accept"
        # It requires its sign-in on every call: asked as input each time (no -32042,
        # which 2026-07-28 retired), until the client's own bound on rounds.
        with pytest.raises(InputRequiredRoundsExceededError):
            await client.call_tool("classic__url_required", {})
        assert text(await client.call_tool("classic__echo", {"text": "after"})) == "classic:after"


@pytest.mark.parametrize("front", ["stdio", "http"])
async def test_a_url_elicitation_required_reaches_a_2026_client_as_input_required(tmp_path: Path, front: str) -> None:
    """A handshake-era server's ``-32042`` (URL-mode elicitations to complete first, then the
    request again; tests/told_server.py's ``once`` prompt, resource and tool) reached a
    2026-07-28 client as that error, which 2026-07-28 retired and says its implementations
    must not send. The client is now asked the 2026-07-28 way (``input_required``, an
    ``elicitation/create`` of mode ``url``), and its retry runs the request anew at the
    server; one that declines the sign-in is told so."""
    asked: list[tuple[str, str]] = []
    declining: list[bool] = []

    async def sign_in(context: Any, params: Any) -> types.ElicitResult:
        asked.append((params.mode, params.url))
        return types.ElicitResult(action="decline" if declining else "accept")

    told = {"command": PYTHON, "args": ["-m", "tests.told_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"t": told})
    async with _front(config, front, "auto", {"elicitation_callback": sign_in}) as client:
        with anyio.fail_after(60):
            assert text(await client.call_tool("t__once_tool", {})) == "signed in: once-tool"
            prompt = await client.get_prompt("t__once")
            assert prompt.messages[0].content.text == "signed in: once-prompt"
            read = await client.read_resource("once://doc")
            assert read.contents[0].text == "signed in: once-doc"
            assert asked == [("url", "https://example.com/login")] * 3, asked
            declining.append(True)
            with pytest.raises(MCPError) as refused:
                await client.read_resource("once://no")
            assert refused.value.error.code == -32600, refused.value.error
            assert refused.value.error.message == (
                "prefixgate: resources/read 'once://no': server 't' requires a URL elicitation, declined"
            )


@pytest.mark.parametrize("behind", ["stdio", "http"])
async def test_a_notice_reaches_only_the_principal_it_is_for(tmp_path: Path, behind: str) -> None:
    """Two principals on one gateway over HTTP, one server behind: Alice's URL elicitations
    (during her call, and in her ``-32042``) are completed for Alice; Bob, connected all the
    while, hears neither notice."""
    from tests.test_principals import tokens_file

    alice, bob = Notifications(), Notifications()
    with ExitStack() as stack:
        if behind == "http":
            url, _ = stack.enter_context(url_process([*CLASSIC, "--http"]))
            server: dict[str, Any] = {"url": url}
        else:
            server = {"command": CLASSIC[0], "args": CLASSIC[1:], "cwd": str(ROOT)}
        config = write_config(tmp_path, {"classic": server})
        tokens = stack.enter_context(tokens_file(tmp_path, "token-of-alice", "token-of-bob"))
        gateway_url, _ = stack.enter_context(http_gateway(config, "--token-file", str(tokens)))
        as_alice = {"Authorization": "Bearer token-of-alice"}
        as_bob = {"Authorization": "Bearer token-of-bob"}
        async with (
            sdk_client(
                gateway_url, "legacy", headers=as_alice, elicitation_callback=_accept, message_handler=alice
            ) as a,
            sdk_client(gateway_url, "legacy", headers=as_bob, elicitation_callback=_accept, message_handler=bob) as b,
        ):
            assert text(await b.call_tool("classic__echo", {"text": "bob here"})) == "classic:bob here"
            assert await _both_flows(a, alice, "classic__") == (["login-1"], ["login-1", "login-2"])
            assert text(await b.call_tool("classic__echo", {"text": "still"})) == "classic:still"
            await anyio.sleep(0.5)  # a notice sent to Bob by mistake would have arrived by now
    assert _completed(bob) == []


async def test_one_principal_s_many_elicitations_do_not_cost_another_its_notice(tmp_path: Path) -> None:
    """URL-mode elicitations are remembered for their completion notice up to a bound, per
    principal: Bob's 300 (past the bound of 256) forget his own oldest, never Alice's one,
    whose notice still reaches her. Before, the bound was one for everybody, and Bob's flood
    made Alice's notice go nowhere."""
    from tests.test_principals import tokens_file

    alice, bob = Notifications(), Notifications()
    server = {"command": CLASSIC[0], "args": CLASSIC[1:], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"classic": server})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (gateway_url, _):
            as_alice = {"Authorization": "Bearer token-of-alice"}
            as_bob = {"Authorization": "Bearer token-of-bob"}
            async with (
                sdk_client(gateway_url, "legacy", headers=as_alice, message_handler=alice) as a,
                sdk_client(gateway_url, "legacy", headers=as_bob, message_handler=bob) as b,
            ):
                for client, ids in ((a, ["alice-1"]), (b, [f"bob-{i}" for i in range(300)])):
                    with pytest.raises(MCPError) as failed:
                        await client.call_tool("classic__url_pending", {"ids": ids})
                    assert failed.value.error.code == types.URL_ELICITATION_REQUIRED
                for elicitation_id in ("bob-0", "alice-1", "bob-299"):  # (Bob's oldest is forgotten)
                    assert text(await b.call_tool("classic__complete_url", {"elicitation_id": elicitation_id})) == (
                        "completed"
                    )
                assert await _until_completed(alice, "alice-1") == ["alice-1"]
                assert await _until_completed(bob, "bob-299") == ["bob-299"]


@pytest.mark.parametrize("front", ["stdio", "http"])
async def test_the_notice_after_a_prompt_or_resource_read_s_error_reaches_its_client(
    tmp_path: Path, front: str
) -> None:
    """``-32042`` from ``prompts/get`` and ``resources/read`` (tests/told_server.py): the
    completion notice that follows on the server's session reaches the client given the error,
    as it does directly. It was dropped: only a tool call's error was remembered."""
    told = {"command": PYTHON, "args": ["-m", "tests.told_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"t": told})
    notes = Notifications()
    async with _front(config, front, "legacy", {"message_handler": notes}) as client:
        with pytest.raises(MCPError) as failed:
            await client.get_prompt("t__sign_in")
        assert failed.value.error.code == types.URL_ELICITATION_REQUIRED
        assert "sign-in-prompt" in await _until_completed(notes, "sign-in-prompt")
        with pytest.raises(MCPError) as failed:
            await client.read_resource("signin://doc")
        assert failed.value.error.code == types.URL_ELICITATION_REQUIRED
        assert "sign-in-doc" in await _until_completed(notes, "sign-in-doc")
