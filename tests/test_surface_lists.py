"""A server's prompts and resources cost only themselves (QA of 2026-12-06).

A server whose ``resources/templates/list`` is "Method not found" lost its resources too; one
whose ``prompts/list`` never answered was never ready (its tools never published, while
directly they work); a failed re-list after ``list_changed`` emptied its prompts, as did any
rebuild while a re-list was still waiting. Real gateway over stdio, a raw stdio server
(tests/surface_server.py), the real SDK client in both eras.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import ERAS, PYTHON, demo, sdk_client, wait_for, write_config

pytestmark = pytest.mark.anyio
SERVER = str(Path(__file__).resolve().parent / "surface_server.py")


def surface(**spec: Any) -> dict[str, Any]:
    return {"command": PYTHON, "args": [SERVER, json.dumps(spec)]}


async def emit(client: Any, server: str, **arguments: Any) -> None:
    result = await client.call_tool(f"{server}__emit", arguments)
    assert not result.is_error, result


@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_without_templates_keeps_its_resources(tmp_path: Path, mode: str) -> None:
    server = surface(
        resources=["x://one", "x://two"],
        overrides={"resources/templates/list": {"error": {"code": -32601, "message": "Method not found"}}},
    )
    config = write_config(tmp_path, {"s": server})
    log = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=log) as client:
        listed = await client.list_resources()
        assert [str(r.uri) for r in listed.resources] == ["x://one", "x://two"]
        assert (await client.list_resource_templates()).resource_templates == []
    assert "not offered" not in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_silent_prompts_list_costs_its_prompts_not_its_tools(tmp_path: Path, mode: str) -> None:
    server = {**surface(prompts=["p1"], overrides={"prompts/list": "hang"}), "startup_timeout": 4}
    config = write_config(tmp_path, {"s": server})
    log = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=log) as client:
        with anyio.fail_after(30):
            assert "s__emit" in {t.name for t in (await client.list_tools()).tools}
            assert (await client.list_prompts()).prompts == []
            await emit(client, "s")
    assert "[s] its prompts not offered: no answer within 2 s (half its startup_timeout)" in log.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_failed_or_pending_relist_keeps_the_prompts_listed_before(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"s": surface(prompts=["p1"]), "t": surface(resources=["y://1"])})
    log = tmp_path / "gateway.log"
    changed = [{"method": "notifications/prompts/list_changed"}]
    async with sdk_client(config, mode, errlog=log) as client:
        with anyio.fail_after(60):
            assert [p.name for p in (await client.list_prompts()).prompts] == ["s__p1"]
            failing = {"prompts/list": {"error": {"code": -32603, "message": "temporarily unavailable"}}}
            await emit(client, "s", overrides=failing, notifications=changed)
            await wait_for(
                lambda: "[s] its prompts kept as listed before: MCPError: temporarily unavailable" in log.read_text()
            )
            assert [p.name for p in (await client.list_prompts()).prompts] == ["s__p1"]
            # A re-list that waits: another server's change rebuilds meanwhile, and s keeps p1.
            await emit(client, "s", overrides={"prompts/list": "hang"}, notifications=changed)
            await anyio.sleep(0.5)
            resources = [{"method": "notifications/resources/list_changed"}]
            await emit(
                client, "t", overrides={"resources/list": {"result": {"resources": []}}}, notifications=resources
            )

            async def resources_gone() -> bool:
                return (await client.list_resources()).resources == []

            await wait_for(resources_gone)
            assert [p.name for p in (await client.list_prompts()).prompts] == ["s__p1"]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tools_change_does_not_rebuild_the_resources_and_prompts(tmp_path: Path, mode: str) -> None:
    """Every catalog rebuild rebuilt the resources, templates and prompts of every server on
    the event loop: with 20,000 of each, a server changing its tools 100 times a second held
    every client 1.2-1.7 s again and again. Now only a change of a server's lists rebuilds
    them (counted by the debug line each build logs)."""
    config = write_config(tmp_path, {"s": surface(prompts=["p1"], resources=["x://1"]), "t": surface()})
    log = tmp_path / "gateway.log"

    def built() -> int:
        return log.read_text().count("resources and prompts: ")

    async with sdk_client(config, mode, errlog=log, log_level="debug") as client:
        with anyio.fail_after(60):
            assert [str(r.uri) for r in (await client.list_resources()).resources] == ["x://1"]
            await wait_for(lambda: "warm-start record written" in log.read_text())
            before = built()
            assert before >= 1
            for rebuilt in range(1, 4):
                await emit(client, "t", notifications=[{"method": "notifications/tools/list_changed"}])
                await wait_for(lambda n=rebuilt: log.read_text().count("changed its tools: catalog unchanged") == n)
            assert built() == before
            listed = {"result": {"resources": [{"uri": "x://2", "name": "two"}]}}
            resources = [{"method": "notifications/resources/list_changed"}]
            await emit(client, "s", overrides={"resources/list": listed}, notifications=resources)

            async def relisted() -> bool:
                return [str(r.uri) for r in (await client.list_resources()).resources] == ["x://2"]

            await wait_for(relisted)
            assert built() == before + 1


@pytest.mark.parametrize("mode", ERAS)
async def test_an_item_the_sdk_refuses_is_left_out_and_every_other_is_listed(tmp_path: Path, mode: str) -> None:
    """One prompt whose ``arguments`` is not a list, one resource whose ``size`` is not a
    number: the gateway's whole ``prompts/list`` and ``resources/list`` failed ("Handler
    returned an invalid result"), every server's items with them. Now each is left out with
    a warning naming it and its server."""
    bad = surface(
        prompts=["fine"],
        resources=["x://fine"],
        raw_prompts=[{"name": "oops", "arguments": "not-a-list"}],
        raw_resources=[{"uri": "x://bad", "name": "b", "size": "huge"}],
    )
    config = write_config(tmp_path, {"bad": bad, "good": surface(prompts=["p"], resources=["y://1"])})
    log = tmp_path / "gateway.log"
    async with sdk_client(config, mode, errlog=log) as client:
        assert [p.name for p in (await client.list_prompts()).prompts] == ["bad__fine", "good__p"]
        assert [str(r.uri) for r in (await client.list_resources()).resources] == ["x://fine", "y://1"]
    logged = log.read_text()
    assert "ignored prompt 'oops' of server 'bad': arguments: Input should be a valid list" in logged
    assert "ignored resource 'b' of server 'bad': size: Input should be a valid integer" in logged


@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_that_joins_late_announces_its_prompts_and_resources(tmp_path: Path, mode: str) -> None:
    """A server ready after the discovery barrier brings prompts and resources: clients
    were told of its tools only, and their prompt and resource lists stayed stale."""
    from mcp_types import PromptListChangedNotification, ResourceListChangedNotification

    from tests.helpers import Notifications, demo

    slow = {**demo("--rich", "--startup-delay", 4, "--name", "slow"), "startup_timeout": 1}
    config = write_config(tmp_path, {"fast": demo("--tools", 1), "slow": slow})
    notes = Notifications()
    async with sdk_client(config, mode, message_handler=notes) as client:
        assert (await client.list_prompts()).prompts == []
        heard: list[str] = []
        with anyio.fail_after(30):
            if mode == "legacy":

                def kinds() -> set[str]:
                    found = {type(m) for m in notes.seen}
                    return {
                        k
                        for k, t in (
                            ("prompts", PromptListChangedNotification),
                            ("resources", ResourceListChangedNotification),
                        )
                        if t in found
                    }

                await wait_for(lambda: kinds() == {"prompts", "resources"})
            else:
                async with client.listen(prompts_list_changed=True, resources_list_changed=True) as events:
                    async for event in events:
                        heard.append(type(event).__name__)
                        if any("Prompt" in h for h in heard) and any("Resource" in h for h in heard):
                            break
        assert [p.name for p in (await client.list_prompts()).prompts]
        assert (await client.list_resources()).resources


@pytest.mark.parametrize("mode", ERAS)
async def test_a_watched_resource_is_subscribed_again_when_its_server_is_back(tmp_path: Path, mode: str) -> None:
    """The server restarted (it crashed): its new process was never told to report the
    resource a client still watched, so updates stopped without a word (the level a client
    asked for was passed on again; the subscription not)."""
    log = tmp_path / "server.log"
    config = write_config(tmp_path, {"s": surface(resources=["x://a"], log=str(log))})
    async with sdk_client(config, mode) as client, _watching(client, mode, "x://a"):
        await wait_for(lambda: len(_subscribed(log, "x://a")) == 1)
        crashed = await client.call_tool("s__emit", {"exit": True})
        assert crashed.is_error
        await wait_for(lambda: len(set(_subscribed(log, "x://a"))) == 2)  # the new process's pid


def _subscribed(log: Path, uri: str) -> list[int]:
    """The pid of each surface server process asked to report ``uri`` (its log, a line each)."""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [m["pid"] for m in lines if m["method"] == "resources/subscribe" and m["params"]["uri"] == uri]


@contextlib.asynccontextmanager
async def _watching(client: Any, mode: str, uri: str) -> AsyncIterator[None]:
    """``uri`` watched by ``client`` as its era watches: a subscription, or a listen stream."""
    async with contextlib.AsyncExitStack() as stack:
        if mode == "legacy":
            await client.subscribe_resource(uri)
        else:
            await stack.enter_async_context(client.listen(resource_subscriptions=[uri]))
        yield


@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_that_exits_while_it_answers_a_prompt_is_named(tmp_path: Path, mode: str) -> None:
    """The client got the SDK's bare "Connection closed" (tools/call names the server)."""
    from mcp.shared.exceptions import MCPError

    config = write_config(tmp_path, {"s": surface(prompts=["p"], overrides={"prompts/get": "exit"})})
    async with sdk_client(config, mode) as client:
        with pytest.raises(MCPError) as info:
            await client.get_prompt("s__p")
    assert (
        info.value.error.message == "prefixgate: connection to server 's' closed during the request for prompt 's__p'"
    )


@pytest.mark.parametrize("mode", ERAS)
async def test_a_cursor_the_gateway_never_issued_is_refused(tmp_path: Path, mode: str) -> None:
    """Every list is one page (no ``nextCursor``): a cursor was answered as if absent, the
    list from its start, where the spec asks -32602 for an invalid cursor. (A cursor that is
    not a string: tests/test_fast_path.py and tests/test_http_lane.py, raw.)"""
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--rich", "--name", "d")})
    async with sdk_client(config, mode) as client:
        lists = (client.list_tools, client.list_prompts, client.list_resources, client.list_resource_templates)
        for listing in lists:
            whole = await listing()
            assert getattr(whole, "next_cursor", None) is None, whole
            with pytest.raises(MCPError) as refused:
                await listing(cursor="page-2")
            assert refused.value.error.code == -32602, listing
            assert refused.value.error.message == "Invalid cursor: prefixgate issues none (every list is one page)"


def reads_as(text: str, *templates: str) -> dict[str, Any]:
    """A server with these templates whose every ``resources/read`` answers ``text``."""
    answer = {"result": {"contents": [{"uri": "any://", "text": text}]}}
    return surface(templates=list(templates), overrides={"resources/read": answer})


@pytest.mark.parametrize("mode", ERAS)
async def test_a_template_the_sdk_cannot_match_still_routes_its_uris(tmp_path: Path, mode: str) -> None:
    """RFC 6570's explode (``{q*}``) and prefix (``{v:3}``) modifiers, which the SDK's parser
    refuses: such a template's URIs went to the first server offering resources, in id order,
    not to the server that offers the template. A template the SDK matches comes first."""
    servers = {
        "a": reads_as("from a", "a://{x}", "x://{p}/{q*}"),
        "b": reads_as("from b", "b://{p}/{q*}", "x://{p}/z"),
        "c": reads_as("from c", "c://{v:3}"),
    }
    config = write_config(tmp_path, servers)
    async with sdk_client(config, mode) as client:
        for uri, owner in [
            ("a://1", "a"),
            ("b://1/2", "b"),
            ("b://1/2,3", "b"),
            ("c://abc", "c"),
            ("x://1/z", "b"),  # b's template the SDK matches, before a's it cannot
            ("x://1/y", "a"),
        ]:
            read = await client.read_resource(uri)
            assert read.contents[0].text == f"from {owner}", uri  # type: ignore[union-attr]


def test_a_loose_template_matches_in_linear_time() -> None:
    from gateway.engine.surface import _fits

    pieces = ("x://", *["-"] * 30, "!")
    assert not _fits(pieces, "x://" + "-" * 100_000)  # at once (a regular expression backtracked)
    assert _fits(pieces, "x://" + "-" * 100_000 + "!")
    assert _fits(("b://", "/", ""), "b://1/2")
    assert not _fits(("ab", "ba"), "aba")  # the first and last pieces may not overlap


def test_a_read_tries_only_the_templates_its_uri_could_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read (subscribe, completion) of a URI no resource lists tried the templates one by
    one, on the loop: with 20,000 templates ~65 ms a read, and 200 reads held every other
    client ~7 s. Now only the templates whose literal head the URI starts with, in the same
    order (the first server in id order; those the SDK parses before those it cannot)."""
    from mcp.shared.uri_template import UriTemplate

    from catalog.names import PROFILES
    from gateway.engine.surface import build_surface

    tried: list[str] = []
    match = UriTemplate.match

    def counted(self: UriTemplate, uri: str, **options: Any) -> Any:
        tried.append(str(self))
        return match(self, uri, **options)

    monkeypatch.setattr(UriTemplate, "match", counted)

    def server(sid: str, *extra: str) -> SimpleNamespace:
        templates = [f"{sid}://t{i}/{{id}}" for i in range(1000)] + list(extra)
        listed = [{"uriTemplate": t, "name": t} for t in templates]
        return SimpleNamespace(
            id=sid, listed=True, config=SimpleNamespace(prefix=sid), resources=[], prompts=[], templates=listed
        )

    surface = build_surface([server("b", "x://{p}/z"), server("a", "x://{p}/{q*}")], PROFILES["mcp"], "__")  # type: ignore[list-item]
    for uri, owner, matched in [
        ("a://t999/1", "a", 1),
        ("b://t7/1", "b", 1),
        ("b://t7", None, 0),
        ("zzz://t7/1", None, 0),
        ("x://1/z", "b", 1),  # b's template the SDK matches, before a's it cannot
        ("x://1/y", "a", 1),
    ]:
        tried.clear()
        assert surface.owner_of_uri(uri) == owner, uri
        assert len(tried) == matched, (uri, len(tried))
    assert surface.owner_of_template("a://t5/{id}") == "a"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_watched_resource_is_subscribed_again_when_a_reload_restarts_its_server(
    tmp_path: Path, mode: str
) -> None:
    """A reload that changed the server's table restarts it as a new server: the watch stayed
    with the one stopped, so the new process was never told to report the resource a client
    still watched (as after a crash, above), and updates stopped without a word."""
    log = tmp_path / "server.log"
    server = surface(resources=["x://a"], log=str(log))
    config = write_config(tmp_path, {"s": server})
    async with sdk_client(config, mode) as client, _watching(client, mode, "x://a"):
        await wait_for(lambda: len(_subscribed(log, "x://a")) == 1)
        write_config(tmp_path, {"s": {**server, "env": {"ROTATED": "1"}}})
        await wait_for(lambda: len(set(_subscribed(log, "x://a"))) == 2)  # the new process's pid


@pytest.mark.parametrize("mode", ERAS)
async def test_a_resource_over_max_message_bytes_is_refused_naming_its_server(tmp_path: Path, mode: str) -> None:
    """A resource (a prompt, a completion) whose answer is over ``max_message_bytes`` was refused
    as 'result of N bytes exceeds max_message_bytes L': which server, and which request, unsaid."""
    answer = {"result": {"contents": [{"uri": "x://big", "text": "a" * 70_000}]}}
    server = surface(resources=["x://big"], overrides={"resources/read": answer})
    config = write_config(tmp_path, {"s": server}, gateway={"max_message_bytes": 1 << 16})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60), pytest.raises(MCPError) as refused:
            await client.read_resource("x://big")
        assert [str(r.uri) for r in (await client.list_resources()).resources] == ["x://big"]
    message = refused.value.error.message
    assert message.startswith("prefixgate: server 's': resource 'x://big': result of "), message
    assert message.endswith(" bytes exceeds max_message_bytes 65536"), message


@pytest.mark.parametrize("mode", ERAS)
async def test_an_invalid_result_of_a_resource_prompt_or_completion_names_its_server(tmp_path: Path, mode: str) -> None:
    """A server's result the protocol's model refuses (a resource content with neither text
    nor blob, a prompt message of no known role, a completion without values) reached the
    client as the SDK's "Handler returned an invalid result", naming neither the server nor
    the request, with a traceback in the log. It is -32603 naming both, the field and the
    problem, one line; the server goes on serving."""
    import mcp_types as types

    overrides = {
        "resources/read": {"result": {"contents": [{"uri": "x://1"}]}},
        "prompts/get": {"result": {"messages": [{"role": "robot", "content": {"type": "text", "text": "t"}}]}},
        "completion/complete": {"result": {"completion": {}}},
    }
    caps = {"tools": {}, "prompts": {}, "resources": {}, "completions": {}}
    config = write_config(tmp_path, {"s": surface(caps=caps, resources=["x://1"], prompts=["p"], overrides=overrides)})
    log = tmp_path / "gateway.log"
    refusals = []
    async with sdk_client(config, mode, errlog=log) as client:
        with anyio.fail_after(60):
            for request in (
                lambda: client.read_resource("x://1"),
                lambda: client.get_prompt("s__p"),
                lambda: client.complete(
                    types.PromptReference(type="ref/prompt", name="s__p"), {"name": "a", "value": ""}
                ),
            ):
                with pytest.raises(MCPError) as refused:
                    await request()
                refusals.append((refused.value.error.code, refused.value.error.message))
            fixed = {"resources/read": {"result": {"contents": [{"uri": "x://1", "text": "fine"}]}}}
            await emit(client, "s", overrides=fixed)
            assert (await client.read_resource("x://1")).contents[0].text == "fine"
    said = "prefixgate: server 's': {}: its result is not a valid {} result: {}"
    assert refusals == [
        (
            -32603,
            said.format("resource 'x://1'", "resources/read", "contents.0.TextResourceContents.text: Field required"),
        ),
        (-32603, said.format("prompt 's__p'", "prompts/get", "messages.0.role: Input should be 'assistant' or 'user'")),
        (
            -32603,
            said.format("completion for prompt 's__p'", "completion/complete", "completion.values: Field required"),
        ),
    ]
    text = log.read_text()
    assert "Traceback" not in text and "Handler returned an invalid result" not in text, text


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_initialized_while_a_server_is_late_is_told_what_it_may_bring(tmp_path: Path, mode: str) -> None:
    """A client that initialized after the barrier, while a server was still starting (late),
    was told only the capabilities of the servers up: no prompts, resources, completions or
    logging, and a client keeps them for its session, so one that asks only for what it was
    told never listed the prompts and resources the late server brought. What a server not
    known yet may offer is advertised, as a first start advertises everything."""
    from tests.helpers import http_gateway

    slow = {**demo("--rich", "--startup-delay", 600, "--name", "slow"), "startup_timeout": 1}
    config = write_config(tmp_path, {"fast": surface(caps={"tools": {}}), "slow": slow})
    with http_gateway(config) as (url, stderr):
        with anyio.fail_after(60):
            await wait_for(lambda: "[slow] late" in stderr.read_text())
            async with sdk_client(url, mode) as client:
                caps = client.server_capabilities.model_dump(by_alias=True, exclude_none=True)
    assert caps == {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {"listChanged": True},
        "completions": {},
        "logging": {},
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_a_uri_a_re_list_makes_two_servers_offer_is_warned_of(tmp_path: Path, mode: str) -> None:
    """A URI two servers offer goes to the first, and a warning says so: only at the barrier.
    One that a server's re-list (or its late start) brought was shadowed without a word."""
    config = write_config(tmp_path, {"a": surface(resources=["x://same"]), "b": surface(resources=["x://b"])})
    log = tmp_path / "gateway.log"
    warning = "resource 'x://same' is offered by 'a' and 'b': served by 'a'"
    async with sdk_client(config, mode, errlog=log) as client:
        assert [str(r.uri) for r in (await client.list_resources()).resources] == ["x://b", "x://same"]
        assert warning not in log.read_text()
        listed = {"result": {"resources": [{"uri": "x://b", "name": "b"}, {"uri": "x://same", "name": "b's"}]}}
        changed = {"method": "notifications/resources/list_changed"}
        await emit(client, "b", overrides={"resources/list": listed}, notifications=[changed])
        with anyio.fail_after(60):
            await wait_for(lambda: warning in log.read_text())
        assert [r.name for r in (await client.list_resources()).resources] == ["b", "x://same"]
    assert log.read_text().count(warning) == 1
