"""Declaration policy end to end: function limit, token budget, deferred tools,
tool_search / tool_call, the call gate and persisted activation, through real processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.upstream.server import INSTRUCTIONS
from tests.helpers import ERAS, catalog_json, demo, gateway, run_cli, sdk_client, text, wire, write_config

pytestmark = pytest.mark.anyio

GOOD_ARGS = {"owner": "o", "repo": "r", "options": {"state": "open"}}
FIXED_ARGS: dict[str, dict[str, Any]] = {"echo": {"text": "hi"}, "payload": {"bytes": 3}, "slow": {"seconds": 0}}
NOT_ACTIVE = "Call tool_search to activate {} first; a declaration does not grant execution."


def args_for(original: str) -> dict[str, Any]:
    if original in FIXED_ARGS:
        return FIXED_ARGS[original]
    if original in ("structured", "image", "fail"):
        return {}
    return GOOD_ARGS


@pytest.mark.parametrize(("spill", "tools"), [(False, 127), (True, 126)])
def test_downstream_tools_and_one_deferred_fill_exactly_128_functions(tmp_path: Path, spill: bool, tools: int) -> None:
    """127 tools + tool_search; with spilling on, artifact_read counts too (126 + 2)."""
    config = write_config(
        tmp_path, {"d": demo("--tools", tools - 7)}, client={"defer": ["d__echo"]}, spill={"enabled": spill}
    )
    report = catalog_json(config)
    assert len(report["tools"]) == tools
    assert report["mode"] == "fixed" and report["fallback"] is None
    assert report["functions"] == {"declared": 128, "limit": 128}
    names = [d["name"] for d in report["declarations"]]
    assert "tool_search" in names and "tool_call" not in names and len(names) == 128
    assert ("artifact_read" in names) is spill
    assert [t["name"] for t in report["tools"] if t["deferred"]] == ["d__echo"]

    one_more = write_config(
        tmp_path, {"d": demo("--tools", tools - 6)}, client={"defer": ["d__echo"]}, spill={"enabled": spill}
    )
    over = catalog_json(one_more)
    assert (over["mode"], over["fallback"]) == ("on-demand", "tool-count")


async def test_129_tools_fall_back_to_on_demand_and_every_tool_is_reachable(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 122)})
    report = catalog_json(config)
    assert len(report["tools"]) == 129
    assert report["mode"] == "on-demand" and report["fallback"] == "tool-count"
    assert report["functions"]["declared"] <= 128
    declared = {d["name"] for d in report["declarations"]}
    searchable = {t["name"] for t in report["tools"] if t["deferred"]}
    assert declared | searchable >= {t["name"] for t in report["tools"]}, "the catalog was truncated"

    async with gateway(config) as gw:
        published = await gw.raw("tools/list")
        assert wire(published["tools"]) == wire(report["declarations"])
        for tool in report["tools"]:
            name, original = tool["name"], tool["original"]
            if original == "crash":
                continue
            before = await gw.session.call_tool("tool_call", {"name": name, "arguments": args_for(original)})
            assert before.is_error and text(before) == NOT_ACTIVE.format(name)
            found = await gw.session.call_tool("tool_search", {"query": name, "limit": 1})
            assert not found.is_error
            assert text(found).startswith(f'Tools matching "{name}":\n\n1. {name}\n')
            assert f"Activated: {name}." in text(found)
            after = await gw.session.call_tool("tool_call", {"name": name, "arguments": args_for(original)})
            if original == "fail":  # reached the server, which reports its own error
                assert text(after) == "the demo tool failed"
            else:
                assert not after.is_error, (name, text(after))
        again = await gw.raw("tools/list")
        assert wire(again) == wire(published), "tools/list changed within the epoch"


def test_context_budget_boundary(tmp_path: Path) -> None:
    base = {"d": demo("--tools", 10)}
    tokens = catalog_json(write_config(tmp_path, base))["tokens"]["declared"]
    reserve, keep, system = 1000, 2000, 300
    exact = tokens + reserve + keep + system

    def run(window: int) -> dict[str, Any]:
        client = {
            "context_window": window,
            "reserve_tokens": reserve,
            "keep_recent_tokens": keep,
            "system_prompt_tokens": system,
        }
        return catalog_json(write_config(tmp_path, base, client=client))

    fits = run(exact)
    assert (fits["mode"], fits["fallback"]) == ("fixed", None)
    assert fits["tokens"] == {"declared": tokens, "budget": tokens}
    over = run(exact - 1)
    assert (over["mode"], over["fallback"]) == ("on-demand", "context-budget")
    assert over["tokens"]["declared"] <= over["tokens"]["budget"]


def test_fixed_over_the_limit_is_a_startup_error_naming_both_numbers(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 125)}, client={"declarations": "fixed"})
    proc = run_cli("catalog", "--config", str(config), "--log-level", "error")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "prefixgate: declarations = fixed needs 133 functions but profile openai allows 128"


def test_a_profile_no_plan_fits_is_named_where_every_profile_is_built(tmp_path: Path) -> None:
    """serve --http and catalog lock build every profile's catalog: the one that cannot fit its
    client stopped them with the bare reason, which named no profile (the default one fits)."""
    config = write_config(
        tmp_path,
        {"d": demo("--tools", 1)},
        profiles={"tight": {"client": {"declarations": "fixed", "max_functions": 2}}},
    )
    said = "prefixgate: profile tight: declarations = fixed needs 9 functions but max_functions is 2"
    for command in (["catalog", "lock"], ["serve", "--http", "127.0.0.1:0"]):
        proc = run_cli(*command, "--config", str(config), "--log-level", "error")
        assert (proc.returncode, proc.stderr.strip()) == (1, said), command


async def test_gate_order_activation_policy_and_arguments(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {"d": {**demo("--tools", 4, "--log-calls"), "deferred": True}, "e": demo("--tools", 1, "--log-calls")},
        policy={"deny": ["e__fail", "d__create_*"]},
    )
    async with gateway(config) as gw:
        listed = wire(await gw.raw("tools/list"))
        names = [t.name for t in (await gw.session.list_tools()).tools]
        assert "tool_search" in names and "d__echo" in names  # fixed mode: deferred but declared

        refused = await gw.session.call_tool("d__echo", {"text": "x"})
        assert refused.is_error and text(refused) == NOT_ACTIVE.format("d__echo")

        found = await gw.session.call_tool("tool_search", {"query": "echo text back"})
        assert "1. d__echo" in text(found) and "d__echo" in text(found).split("Activated:")[1]
        ok = await gw.session.call_tool("d__echo", {"text": "x"})
        assert not ok.is_error and text(ok) == "x"
        # The server logs each call it gets, in order: once the allowed call's line is there,
        # a refused call that had reached it would be there too.
        assert await gw.saw("[d] call echo")
        assert gw.stderr().count("[d] call echo") == 1, "a refused call reached the server"

        denied = await gw.session.call_tool("e__fail", {})
        assert denied.is_error and text(denied) == "Tool e__fail is denied by policy (deny pattern 'e__fail')."
        await gw.session.call_tool("tool_search", {"query": "create issue"})
        denied = await gw.session.call_tool("d__create_issue", GOOD_ARGS)
        assert denied.is_error and "deny pattern 'd__create_*'" in text(denied)

        bad = await gw.session.call_tool("e__get_issue", {"owner": "o", "repo": "r", "options": {"state": "maybe"}})
        assert bad.is_error
        assert text(bad).startswith(
            'Invalid arguments for e__get_issue: arguments.options.state: "maybe" is not one of'
        )
        missing = await gw.session.call_tool("e__echo", {})
        assert text(missing) == 'Invalid arguments for e__echo: arguments: "text" is a required property'
        marker = await gw.session.call_tool("e__echo", {"text": "marker"})  # allowed: the server logs it
        assert not marker.is_error and await gw.saw("[e] call echo")
        assert "[e] call get_issue" not in gw.stderr() and "[e] call fail" not in gw.stderr()
        assert gw.stderr().count("[e] call echo") == 1
        assert wire(await gw.raw("tools/list")) == listed


async def test_read_only_policy(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 3)}, policy={"read_only": True})
    async with gateway(config) as gw:
        assert text(await gw.session.call_tool("d__echo", {"text": "r"})) == "r"
        refused = await gw.session.call_tool("d__create_issue", GOOD_ARGS)
        assert refused.is_error and "read_only = true" in text(refused)


async def test_tool_search_bytes_are_stable_and_limit_is_clamped(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": {**demo("--tools", 60), "deferred": True}})
    answers = []
    for _ in range(2):
        async with gateway(config) as gw:
            first = await gw.raw(
                "tools/call", {"name": "tool_search", "arguments": {"query": "owner repo", "limit": 1000}}
            )
            second = await gw.raw(
                "tools/call", {"name": "tool_search", "arguments": {"query": "owner repo", "limit": 1000}}
            )
            assert first == second
            answers.append(wire(first))
    assert answers[0] == answers[1]
    body = json.loads(answers[0])["content"][0]["text"]
    assert "Showing 1-50 of " in body and "\n51. " not in body
    assert len(body.encode()) <= 65536


async def test_activation_persists_across_restarts_with_the_same_session(tmp_path: Path) -> None:
    servers = {"d": {**demo("--tools", 3), "deferred": True}}
    config = write_config(tmp_path, servers)
    journal_dir = tmp_path / "state" / "activation"
    async with gateway(config, "--session", "chat-1") as gw:
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
        assert text(await gw.session.call_tool("d__echo", {"text": "1"})) == "1"
    (journal,) = journal_dir.iterdir()
    assert journal.stat().st_mode & 0o777 == 0o600 and journal_dir.stat().st_mode & 0o777 == 0o700
    assert json.loads(journal.read_text().splitlines()[-1])["active"] == ["d__echo"]

    async with gateway(config, "--session", "chat-1") as gw:  # restored
        assert text(await gw.session.call_tool("d__echo", {"text": "2"})) == "2"
    async with gateway(config, "--session", "chat-2") as gw:  # another session: nothing
        assert (await gw.session.call_tool("d__echo", {"text": "3"})).is_error
    async with gateway(config, env={"PREFIXGATE_SESSION": "chat-1"}) as gw:  # from the environment
        assert not (await gw.session.call_tool("d__echo", {"text": "4"})).is_error

    changed = write_config(tmp_path, {"d": {**demo("--tools", 4), "deferred": True}})  # a new identity
    async with gateway(changed, "--session", "chat-1") as gw:
        assert text(await gw.session.call_tool("d__echo", {"text": "5"})) == NOT_ACTIVE.format("d__echo")
        assert await gw.saw("nothing restored"), gw.stderr()


async def test_torn_journal_restores_nothing_and_serves(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": {**demo("--tools", 3), "deferred": True}})
    async with gateway(config, "--session", "s") as gw:
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
    (journal,) = (tmp_path / "state" / "activation").iterdir()
    with journal.open("ab") as handle:
        handle.write(b'{"version":1,"snapshot":"ab')  # a torn write
    async with gateway(config, "--session", "s") as gw:
        assert (await gw.session.call_tool("d__echo", {"text": "x"})).is_error
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
        assert not (await gw.session.call_tool("d__echo", {"text": "x"})).is_error
    lines = journal.read_bytes().split(b"\n")
    assert json.loads(lines[-2])["active"] == ["d__echo"]  # the journal ends on a valid record again

    journal.write_bytes(b"not json at all\n")
    async with gateway(config, "--session", "s") as gw:
        assert (await gw.session.call_tool("d__echo", {"text": "x"})).is_error
        assert await gw.saw("last record is invalid"), gw.stderr()


async def test_a_journal_whose_last_record_is_too_long_is_named_in_the_log(tmp_path: Path) -> None:
    """A last record past the 4 MiB read from the end restores nothing, and the log line said
    only "the last record is longer than 4194304 bytes": not which file."""
    config = write_config(tmp_path, {"d": {**demo("--tools", 3), "deferred": True}})
    async with gateway(config, "--session", "s") as gw:
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
    (journal,) = (tmp_path / "state" / "activation").iterdir()
    with journal.open("ab") as handle:
        handle.write(b"x" * (5 << 20))
    async with gateway(config, "--session", "s") as gw:
        assert (await gw.session.call_tool("d__echo", {"text": "x"})).is_error
        line = f"activation journal {str(journal)!r}: the last record is longer than 4194304 bytes; nothing restored"
        assert await gw.saw(line), gw.stderr()


async def test_a_record_of_another_version_restores_nothing_and_the_log_names_its_file(tmp_path: Path) -> None:
    """A journal whose last record another version wrote (a later prefixgate's, read after a
    rollback) restored nothing with a line that said "activation record: ...", not which file;
    the record stays where it was, the fresh start appended after it."""
    config = write_config(tmp_path, {"d": {**demo("--tools", 3), "deferred": True}})
    async with gateway(config, "--session", "s") as gw:
        await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
    (journal,) = (tmp_path / "state" / "activation").iterdir()
    last = json.loads(journal.read_text().splitlines()[-1])
    later = json.dumps({**last, "version": 2, "since": "a later version"}, sort_keys=True).encode() + b"\n"
    with journal.open("ab") as handle:
        handle.write(later)
    async with gateway(config, "--session", "s") as gw:
        assert (await gw.session.call_tool("d__echo", {"text": "x"})).is_error
        assert await gw.saw(f"activation journal {str(journal)!r}: last record is invalid"), gw.stderr()
    assert later in journal.read_bytes()


async def test_journal_write_failure_fails_the_search_and_grants_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": {**demo("--tools", 3), "deferred": True}})
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "activation").write_text("a file where the journal directory should be")
    async with gateway(config, "--session", "s") as gw:
        found = await gw.session.call_tool("tool_search", {"query": "d__echo", "limit": 1})
        assert found.is_error
        assert text(found) == (  # what is wrong, not "write failed"; the log names the directory
            "tool_search could not record the activation (its journal cannot be used; the gateway's log says why); "
            "nothing was activated."
        )
        assert await gw.saw(
            f"activation journal write failed: directory {str(tmp_path / 'state' / 'activation')!r} is not a directory"
        )
        assert (await gw.session.call_tool("d__echo", {"text": "x"})).is_error
        assert text(await gw.session.call_tool("d__list_issue", GOOD_ARGS)) == NOT_ACTIVE.format("d__list_issue")


@pytest.mark.parametrize("mode", ERAS)
async def test_tool_search_names_the_servers_that_are_not_available(tmp_path: Path, mode: str) -> None:
    """Issue 31: a client shows "Connected" whatever failed behind the gateway; the model learns
    it from tool_search (a new result), never from the instructions or the catalog (the prefix)."""
    config = write_config(
        tmp_path,
        {"d": {**demo("--tools", 1), "deferred": True}, "gone": {"command": "no-such-command-pg"}},
    )
    async with sdk_client(config, mode) as client:
        found = text(await client.call_tool("tool_search", {"query": "echo text back"}))
        instructions = client.instructions  # initialize (2025-11-25), server/discover (2026-07-28)
    assert "1. d__echo" in found
    down = "Servers not available now (their tools are missing or fail until they are back): gone (failed)."
    assert found.endswith("\n" + down), found
    assert instructions == INSTRUCTIONS, instructions  # the same text whatever is down


@pytest.mark.parametrize("mode", ERAS)
async def test_the_instructions_name_the_configured_separator(tmp_path: Path, mode: str) -> None:
    """The instructions said tool names are '<server prefix>__<tool>' whatever ``[gateway]
    separator`` made them: with ``-`` the model read ``d__echo`` for ``d-echo``."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"separator": "-"})
    async with sdk_client(config, mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        said = client.instructions
    assert "d-echo" in names, names
    assert said == INSTRUCTIONS.replace("'<server prefix>__<tool>'", "'<server prefix>-<tool>'"), said


@pytest.mark.parametrize("mode", ERAS)
async def test_the_first_call_of_a_cold_start_runs_what_the_session_activated(tmp_path: Path, mode: str) -> None:
    """No warm start: the epoch is published by the barrier while the call waits for it, and the
    session's activation is restored as it is published; the call is gated after that, not
    refused in between."""
    servers = {"d": {**demo("--tools", 1), "deferred": True}}
    config = write_config(tmp_path, servers, gateway={"warm_start": False})
    async with sdk_client(config, mode, "--session", "s", log_level="warning") as client:
        await client.call_tool("tool_search", {"query": "d__echo", "limit": 1})
    for _ in range(2):
        async with sdk_client(config, mode, "--session", "s", log_level="warning") as client:
            result = await client.call_tool("d__echo", {"text": "hi"})
        assert (result.is_error, text(result)) == (False, "hi")


@pytest.mark.parametrize("mode", ERAS)
async def test_tool_search_and_tool_call_refuse_arguments_they_would_misread(tmp_path: Path, mode: str) -> None:
    """An offset given as a string read as page 1 again and again, an unknown key (``ofset``,
    ``argument`` for ``arguments``) was dropped: each is now an ``isError`` naming it, and
    what a model means (``"2"``, ``2.0``) is read as JSON Schema and the gate read it."""
    config = write_config(tmp_path, {"d": demo("--tools", 60)}, client={"declarations": "on-demand"})
    async with sdk_client(config, mode) as client:

        async def search(**arguments: Any) -> tuple[bool, str]:
            result = await client.call_tool("tool_search", {"query": "owner repo", **arguments})
            return bool(result.is_error), text(result)

        for bad, message in (
            ({"offset": "three"}, "tool_search: arguments.offset must be an integer of at least 0."),
            ({"offset": -7}, "tool_search: arguments.offset must be an integer of at least 0."),
            ({"limit": True}, "tool_search: arguments.limit must be an integer."),
            ({"limit": 2.5}, "tool_search: arguments.limit must be an integer."),
            ({"ofset": 3}, "tool_search: unknown argument(s): 'ofset'."),
        ):
            assert await search(**bad) == (True, message), bad
        error, quoted = await search(limit="2", offset=2.0)
        assert not error and "Showing 3-4 of " in quoted
        assert await search(limit=2, offset=2) == (False, quoted)
        name = quoted.split("\n\n")[1].split("\n")[0].split(". ", 1)[1]
        typo = await client.call_tool("tool_call", {"name": name, "argument": GOOD_ARGS})
        assert typo.is_error and text(typo) == "tool_call: unknown argument(s): 'argument'."


@pytest.mark.parametrize("mode", ERAS)
async def test_tool_search_reads_a_null_page_argument_as_left_out(tmp_path: Path, mode: str) -> None:
    """Models send ``null`` for an optional field they leave out (strict structured-output
    modes make every optional field nullable); the gate takes such a null out of a catalog
    tool's arguments, tool_call and artifact_read read it as left out, but tool_search
    refused ``"limit": null`` (``must be an integer``): a model in such a mode could not search."""
    config = write_config(tmp_path, {"d": demo("--tools", 60)}, client={"declarations": "on-demand"})
    async with sdk_client(config, mode) as client:
        plain = await client.call_tool("tool_search", {"query": "owner repo"})
        nulls = await client.call_tool("tool_search", {"query": "owner repo", "limit": None, "offset": None})
        assert (nulls.is_error, text(nulls)) == (False, text(plain)), text(nulls)
        assert "Showing 1-5 of " in text(plain)
