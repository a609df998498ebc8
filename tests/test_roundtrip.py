"""Input-required round trips (SEP-2322): a handshake-era server's elicitation, sampling and
roots requests reach a 2026-07-28 client (which has no back-channel) as ``input_required``
results, and the client's retry resumes the same downstream call. Real gateway, real demo
server, the real SDK client, over stdio and HTTP."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from gateway.config import ConfigError, parse_config
from tests.helpers import (
    CALLBACKS,
    ERAS,
    PYTHON,
    answers_every_input_request,
    demo,
    http_gateway,
    sdk_client,
    text,
    write_config,
)

pytestmark = pytest.mark.anyio

TRANSPORTS = ("stdio", "http")
CLASSIC = str(Path(__file__).with_name("classic_server.py"))


def config_for(tmp_path: Path, **gateway: Any) -> Path:
    return write_config(
        tmp_path,
        # A handshake-era downstream: its server-to-client requests are what this file turns into input_required.
        {"r": {**demo("--tools", 0, "--rich", "--interactive", "--name", "r"), "protocol": "legacy"}},
        gateway=gateway,
    )


@asynccontextmanager
async def modern(
    config: Path, transport: str, token: str | None = None, **options: Any
) -> AsyncIterator[tuple[Any, Path]]:
    """A 2026-07-28 SDK ``Client`` (mode "auto") on a real gateway, and the gateway's stderr."""
    if transport == "http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        extra = ("--token-file", str(config.parent / "tokens")) if (config.parent / "tokens").exists() else ()
        with http_gateway(config, *extra) as (url, stderr):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with create_mcp_http_client(headers=headers) as http:
                async with Client(streamable_http_client(url, http_client=http), mode="auto", **options) as client:
                    yield client, stderr
        return
    stderr = config.parent / f"gateway-stderr-{os.urandom(4).hex()}.log"
    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "gateway", "serve", "--config", str(config), "--log-level", "info"],
        env=dict(os.environ),
    )
    with stderr.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="auto", **options) as client:
            yield client, stderr


@asynccontextmanager
async def as_principal(url: str, token: str) -> AsyncIterator[Any]:
    """A 2026-07-28 SDK ``Client`` (mode "auto", every callback) of the gateway at ``url``, with ``token``."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto", **CALLBACKS) as client:
            yield client


async def saw(stderr: Path, text: str, timeout: float = 20) -> bool:
    with anyio.move_on_after(timeout):
        while text not in stderr.read_text(encoding="utf-8", errors="replace"):
            await anyio.sleep(0.05)
        return True
    return False


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_elicitation_sampling_and_roots_reach_a_modern_client(tmp_path: Path, transport: str) -> None:
    async with modern(config_for(tmp_path), transport, **CALLBACKS) as (client, _):
        with anyio.fail_after(60):
            await answers_every_input_request(client)  # tools/call, prompts/get, resources/read
            # and nothing is left pending
            assert text(await client.call_tool("r__ask", {})) == "accept:{'name': 'Ann'}"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_client_without_the_capability_gets_an_error_not_a_hang(tmp_path: Path, transport: str) -> None:
    async with modern(config_for(tmp_path), transport) as (client, _):
        with anyio.fail_after(60):
            # The server's elicitation is refused at once; the server reports it as an error.
            with pytest.raises(MCPError, match="the connected client does not support elicitation"):
                await client.call_tool("r__ask", {})
            with pytest.raises(MCPError, match="the connected client does not support sampling"):
                await client.call_tool("r__sample", {})


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_tampered_request_state_is_refused(tmp_path: Path, transport: str) -> None:
    async with modern(config_for(tmp_path), transport, **CALLBACKS) as (client, _):
        with anyio.fail_after(60):
            first = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.input_requests and first.request_state
            ((key, request),) = first.input_requests.items()
            assert request.method == "elicitation/create"
            state = first.request_state
            answer = {key: types.ElicitResult(action="accept", content={"name": "Bo"})}
            tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
            for bad in (tampered, "garbage", state + "x"):
                with pytest.raises(MCPError, match="requestState refused"):
                    await client.session.call_tool("r__ask", {}, input_responses=answer, request_state=bad)
            # bound to the request too: the same state on other arguments is refused
            with pytest.raises(MCPError, match="requestState refused"):
                await client.session.call_tool("r__ask", {"x": 1}, input_responses=answer, request_state=state)
            # the genuine state still resumes the call
            done = await client.session.call_tool("r__ask", {}, input_responses=answer, request_state=state)
            assert isinstance(done, types.CallToolResult)
            assert text(done) == "accept:{'name': 'Bo'}"
            # and a second use of it finds the call over
            with pytest.raises(MCPError, match="expired"):
                await client.session.call_tool("r__ask", {}, input_responses=answer, request_state=state)


async def test_another_principals_request_state_is_refused(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    (tmp_path / "tokens").write_text("token-of-ann\ntoken-of-bo\n")
    with http_gateway(config, "--token-file", str(tmp_path / "tokens")) as (url, _stderr):
        async with as_principal(url, "token-of-ann") as ann, as_principal(url, "token-of-bo") as bo:
            with anyio.fail_after(60):
                first = await ann.session.call_tool("r__ask", {}, allow_input_required=True)
                assert isinstance(first, types.InputRequiredResult) and first.input_requests
                ((key, _request),) = first.input_requests.items()
                answer = {key: types.ElicitResult(action="accept", content={"name": "Bo"})}
                with pytest.raises(MCPError, match="requestState refused"):
                    await bo.session.call_tool("r__ask", {}, input_responses=answer, request_state=first.request_state)
                done = await ann.session.call_tool(
                    "r__ask", {}, input_responses=answer, request_state=first.request_state
                )
                assert text(done) == "accept:{'name': 'Bo'}"


async def test_a_revoked_principals_parked_calls_are_cancelled_at_once(tmp_path: Path) -> None:
    """A 2026-07-28 call parked for its client's input holds its server's call until
    ``round_trip_timeout``; once its principal's token is revoked no retry can come, so it is
    cancelled then (the server sees it), not minutes later. Another principal's is untouched.
    (A handshake-era client's questions travel on its session, which the revocation ends.)"""
    asks = {
        name: {**demo("--tools", 0, "--rich", "--interactive", "--name", name), "protocol": "legacy"} for name in "rs"
    }
    # (one server each: a stdio server's question cannot be told apart between two principals' calls)
    config = write_config(tmp_path, asks, gateway={"round_trip_timeout": 600})
    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-ann\ntoken-of-bo\n")
    with http_gateway(config, "--token-file", str(tokens)) as (url, stderr):
        async with as_principal(url, "token-of-ann") as ann, as_principal(url, "token-of-bo") as bo:
            with anyio.fail_after(60):
                parked = await ann.session.call_tool("r__ask", {}, allow_input_required=True)
                kept = await bo.session.call_tool("s__ask", {}, allow_input_required=True)
                assert isinstance(parked, types.InputRequiredResult), parked
                assert isinstance(kept, types.InputRequiredResult), kept
                tokens.write_text("token-of-bo\n")
                revoked = "[r] tools/call 'r__ask': its principal's token was revoked, cancelling the call"
                assert await saw(stderr, revoked)
                assert await saw(stderr, "[r] ask cancelled while waiting for the answer")
                ((key, _request),) = kept.input_requests.items()
                answer = {key: types.ElicitResult(action="accept", content={"name": "Bo"})}
                done = await bo.session.call_tool(
                    "s__ask", {}, input_responses=answer, request_state=kept.request_state
                )
                assert text(done) == "accept:{'name': 'Bo'}"
        assert stderr.read_text().count("its principal's token was revoked") == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_abandoned_round_trip_times_out_and_cancels_the_downstream_call(
    tmp_path: Path, transport: str
) -> None:
    config = config_for(tmp_path, round_trip_timeout=1)
    async with modern(config, transport, **CALLBACKS) as (client, stderr):
        with anyio.fail_after(60):
            first = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult) and first.input_requests
            ((key, _request),) = first.input_requests.items()
            # Nobody retries: the gateway cancels the call downstream, which the server sees.
            assert await saw(stderr, "no retry within 1 s, cancelling the call")
            assert await saw(stderr, "[r] ask cancelled while waiting for the answer")
            answer = {key: types.ElicitResult(action="accept", content={"name": "Late"})}
            with pytest.raises(MCPError, match="expired"):
                await client.session.call_tool("r__ask", {}, input_responses=answer, request_state=first.request_state)
            # the gateway keeps serving, and a fresh call completes
            assert text(await client.call_tool("r__ask", {})) == "accept:{'name': 'Ann'}"


async def test_pending_round_trips_are_bounded_per_principal(tmp_path: Path) -> None:
    config = config_for(tmp_path, max_round_trips=2)
    async with modern(config, "stdio", **CALLBACKS) as (client, _):
        with anyio.fail_after(60):
            for _ in range(2):
                pending = await client.session.call_tool("r__ask", {}, allow_input_required=True)
                assert isinstance(pending, types.InputRequiredResult)
            # A third call that asks: the server's request is refused, the call itself answered.
            refused = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert refused.is_error and "already has 2 calls waiting for its input" in text(refused)


async def test_expired_round_trips_free_their_place(tmp_path: Path) -> None:
    config = config_for(tmp_path, max_round_trips=1, round_trip_timeout=1)
    async with modern(config, "stdio", **CALLBACKS) as (client, stderr):
        with anyio.fail_after(60):
            first = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            refused = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert refused.is_error and "already has 1 calls waiting" in text(refused)
            assert await saw(stderr, "no retry within 1 s, cancelling the call")
            again = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_calls_that_never_ask_take_no_round_trip_slot(tmp_path: Path, transport: str) -> None:
    """Issue 25: with every slot of the principal held by a call waiting for input, 64
    concurrent calls that never ask are all answered; an answered round trip frees its slot."""
    async with modern(config_for(tmp_path), transport, **CALLBACKS) as (client, _):
        with anyio.fail_after(120):
            parked = []
            for _ in range(16):  # the default max_round_trips
                pending = await client.session.call_tool("r__ask", {}, allow_input_required=True)
                assert isinstance(pending, types.InputRequiredResult)
                parked.append(pending)
            answers: list[Any] = []

            async def echo(n: int) -> None:
                answers.append((n, await client.call_tool("r__echo", {"text": f"call {n}"})))

            async with anyio.create_task_group() as tg:
                for n in range(64):
                    tg.start_soon(echo, n)
            assert sorted((n, r.is_error, text(r)) for n, r in answers) == [(n, False, f"call {n}") for n in range(64)]
            refused = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert refused.is_error and "already has 16 calls waiting for its input" in text(refused)
            first = parked[0]
            ((key, _request),) = (first.input_requests or {}).items()
            answer = {key: types.ElicitResult(action="accept", content={"name": "Di"})}
            done = await client.session.call_tool(
                "r__ask", {}, input_responses=answer, request_state=first.request_state
            )
            assert text(done) == "accept:{'name': 'Di'}"
            again = await client.session.call_tool("r__ask", {}, allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult)


async def test_a_handshake_clients_request_is_not_taken_by_a_parked_modern_call(tmp_path: Path) -> None:
    from tests.helpers import sdk_client

    with http_gateway(config_for(tmp_path)) as (url, _stderr):
        async with sdk_client(url, "auto", **CALLBACKS) as modern_client:
            with anyio.fail_after(60):
                parked = await modern_client.session.call_tool("r__ask", {}, allow_input_required=True)
                assert isinstance(parked, types.InputRequiredResult)
                async with sdk_client(url, "legacy", **CALLBACKS) as legacy:
                    assert text(await legacy.call_tool("r__ask", {})) == "accept:{'name': 'Ann'}"
                ((key, _request),) = (parked.input_requests or {}).items()
                answer = {key: types.ElicitResult(action="accept", content={"name": "Cy"})}
                done = await modern_client.session.call_tool(
                    "r__ask", {}, input_responses=answer, request_state=parked.request_state
                )
                assert text(done) == "accept:{'name': 'Cy'}"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_cancelled_modern_call_is_cancelled_downstream(tmp_path: Path, transport: str) -> None:
    async with modern(config_for(tmp_path), transport, **CALLBACKS) as (client, stderr):
        with anyio.fail_after(60):
            running = anyio.Event()

            async def progressed(progress: float, total: float | None, message: str | None) -> None:
                running.set()

            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await client.call_tool("r__slow", {"seconds": 60, "steps": 60}, progress_callback=progressed)
                    pytest.fail("the call should have been cancelled")

                tg.start_soon(call)
                # Its first progress says the call runs downstream (a fixed sleep was not always
                # enough under load: the server may still be starting behind a first-ever start).
                await running.wait()
                tg.cancel_scope.cancel()
            assert await saw(stderr, "[r] slow cancelled after step")
            assert text(await client.call_tool("r__ask", {})) == "accept:{'name': 'Ann'}"


async def test_a_retry_after_a_restart_is_told_the_round_trip_expired(tmp_path: Path) -> None:
    from tests.helpers import sdk_client

    config = config_for(tmp_path)
    with http_gateway(config) as (url, _stderr):
        async with sdk_client(url, "auto", **CALLBACKS) as before:
            with anyio.fail_after(60):
                first = await before.session.call_tool("r__ask", {}, allow_input_required=True)
                assert isinstance(first, types.InputRequiredResult) and first.input_requests
    ((key, _request),) = first.input_requests.items()
    answer = {key: types.ElicitResult(action="accept", content={"name": "Di"})}
    with http_gateway(config) as (url, _stderr):
        async with sdk_client(url, "auto", **CALLBACKS) as after:
            with anyio.fail_after(60):
                with pytest.raises(MCPError, match="expired: the gateway that began it has restarted"):
                    await after.session.call_tool(
                        "r__ask", {}, input_responses=answer, request_state=first.request_state
                    )


def test_round_trip_limits_are_configurable_and_checked() -> None:
    servers = {"servers": {"r": {"command": "x"}}}
    defaults = parse_config(servers, env={"HOME": "/home/u"}).gateway
    assert (defaults.round_trip_timeout, defaults.max_round_trips) == (120.0, 16)
    set_ = parse_config({**servers, "gateway": {"round_trip_timeout": 5, "max_round_trips": 2}}, env={"HOME": "/h"})
    assert (set_.gateway.round_trip_timeout, set_.gateway.max_round_trips) == (5.0, 2)
    for bad in ({"round_trip_timeout": 0}, {"max_round_trips": 0}, {"max_round_trips": "many"}):
        with pytest.raises(ConfigError):
            parse_config({**servers, "gateway": bad}, env={"HOME": "/h"})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_the_capability_gets_the_one_refusal_in_either_era(tmp_path: Path, mode: str) -> None:
    """A server asks for elicitation during the call of a client that declared none: the
    server's request fails with -32021 naming the capability, whether the gateway relays it
    over a back-channel (2025-11-25) or holds it for a round trip (2026-07-28), and the
    server passes it on to the call (one check, one code: gateway/engine/capabilities.py)."""
    from tests.helpers import sdk_client

    config = write_config(tmp_path, {"b": {"command": PYTHON, "args": ["-m", "tests.backchannel_server"]}})
    async with sdk_client(config, mode) as client:  # no elicitation callback: none declared
        with anyio.fail_after(30), pytest.raises(MCPError) as caught:
            await client.call_tool("b__ask", {})
    assert caught.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY, caught.value.error
    assert caught.value.error.data == {"requiredCapabilities": {"elicitation": {}}}
    assert caught.value.error.message == "prefixgate: the connected client does not support elicitation"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", ERAS)
async def test_progress_after_an_input_round_reaches_the_request_waiting_then(
    tmp_path: Path, transport: str, mode: str
) -> None:
    """A classic server that asks, then reports progress: directly, or through the gateway to a
    handshake-era client, every step reaches the call's progress callback; to a 2026-07-28
    client the call outlives its first request (``input_required``), and its retry, under its
    own progress token, gets the steps. Before, they went to the answered first request: none arrived."""
    config = write_config(tmp_path, {"c": {"command": PYTHON, "args": [CLASSIC]}})
    steps: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append(progress)

    async def elicitation(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ann"})

    target: Path | str
    with contextlib.ExitStack() as stack:
        target = stack.enter_context(http_gateway(config))[0] if transport == "http" else config
        async with sdk_client(target, mode, elicitation_callback=elicitation) as client:
            with anyio.fail_after(60):
                result = await client.call_tool("c__ask_then_progress", {"steps": 3}, progress_callback=on_progress)
                assert text(result) == "accept:progressed 3"
                assert steps == [1, 2, 3]
                steps.clear()  # and a call with no question, after it
                assert text(await client.call_tool("c__progress", {"steps": 2}, progress_callback=on_progress)) == (
                    "progressed 2"
                )
                assert steps == [1, 2]


async def test_pending_round_trips_are_bounded_per_principal_across_profiles(tmp_path: Path) -> None:
    """``max_round_trips`` is the principal's, whichever profile's endpoint its calls wait at: a
    principal has a state per profile (its activation is each profile's own), and the bound was
    counted per state, so each profile served gave the principal ``max_round_trips`` more."""
    config = write_config(
        tmp_path,
        {"r": {**demo("--tools", 0, "--rich", "--interactive", "--name", "r"), "protocol": "legacy"}},
        gateway={"max_round_trips": 2},
        profiles={"codex": {}},
    )
    with http_gateway(config) as (url, _):
        async with sdk_client(url, "auto", **CALLBACKS) as one, sdk_client(url + "/codex", "auto", **CALLBACKS) as two:
            with anyio.fail_after(60):
                for client in (one, two):
                    pending = await client.session.call_tool("r__ask", {}, allow_input_required=True)
                    assert isinstance(pending, types.InputRequiredResult)
                refused = await two.session.call_tool("r__ask", {}, allow_input_required=True)
                assert refused.is_error and "already has 2 calls waiting for its input" in text(refused)


@pytest.mark.parametrize("mode", ERAS)
async def test_the_demo_asks_for_input_without_warnings_on_its_stderr(tmp_path: Path, mode: str) -> None:
    """The demo's sampling and roots requests (deprecated on 2026-07-28, served here) printed
    the SDK's MCPDeprecationWarning to its stderr (found by chaos): the gateway logged it as
    the server's, and the last line of it, a line of demo.py, became the reason shown for the
    server being down once it had exited."""
    errlog = tmp_path / "gateway.err"
    async with sdk_client(config_for(tmp_path), mode, errlog=errlog, **CALLBACKS) as client:
        with anyio.fail_after(60):
            await answers_every_input_request(client)
    assert "Warning" not in errlog.read_text(encoding="utf-8"), errlog.read_text(encoding="utf-8")
