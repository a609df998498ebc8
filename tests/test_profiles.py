"""Profiles (issue 28, first part): one config, several views of the same servers.

``[profiles.NAME]`` starts as the default profile (the top-level ``[client]`` and ``[policy]``)
and changes what it sets: its client naming profile and limits, its policy, the servers it
sees and globs on published names. ``serve --profile NAME`` (or ``$PREFIXGATE_PROFILE``),
``catalog --profile`` and ``doctor --profile`` use that view. Real gateway processes, the
real SDK client in both eras.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from catalog.build import build
from catalog.model import ServerTools
from catalog.names import PROFILES
from gateway.config import ConfigError, parse_config
from tests.helpers import (
    ACCEPT,
    ERAS,
    INIT,
    PYTHON,
    catalog_json,
    demo,
    http_gateway,
    run_cli,
    sdk_client,
    text,
    write_config,
)

ROOT = Path(__file__).resolve().parent.parent
SERVERS = {"a": {"command": "x"}, "b": {"command": "y", "prefix": "bee"}}


def parsed(**tables: Any) -> Any:
    return parse_config({"servers": SERVERS, **tables}, env={})


# --- the config -------------------------------------------------------------------------


def test_a_profile_starts_as_the_default_and_changes_what_it_sets() -> None:
    config = parsed(
        client={"profile": "claude-code", "context_window": 200000},
        policy={"deny": ["a__*"]},
        profiles={
            "codex": {"client": {"profile": "openai"}, "servers": ["b"], "exclude": ["*secret*"]},
            "review": {"policy": {"read_only": True}},
        },
    )
    assert config.profile is None and config.view(None) is config
    codex = config.view("codex")
    assert (codex.profile, codex.client.profile, codex.client.context_window) == ("codex", "openai", 200000)
    assert codex.policy == config.policy  # not set there: the default's
    assert [s.id for s in codex.servers] == ["b"] and codex.exclude == ("*secret*",) and codex.include == ()
    review = config.view("review")
    assert review.client == config.client and [s.id for s in review.servers] == ["a", "b"]
    assert (review.policy.deny, review.policy.read_only) == (("a__*",), True)


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ({"Codex": {}}, "profiles.Codex: invalid profile name"),
        ({"default": {}}, "profiles.default: 'default' is the top-level [client] and [policy]"),
        ({"p": {"servers": ["a", "nope"]}}, "profiles.p.servers: unknown server 'nope' (known: a, b)"),
        ({"p": {"colour": "red"}}, "profiles.p.colour: unknown key (known: client, exclude, include, policy, servers)"),
        ({"p": {"client": {"profil": "openai"}}}, "profiles.p.client.profil: unknown key"),
        ({"p": {"policy": {"read_only": "yes"}}}, "profiles.p.policy.read_only: expected true or false"),
        ({"p": {"client": "openai"}}, "profiles.p.client: expected a table"),
        ({"p": {"client": {"profile": "claude-code", "entry": "e" * 46}}}, "profiles.p.client.entry: too long"),
    ],
)
def test_a_bad_profile_is_one_line_naming_its_key(profiles: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parsed(profiles=profiles)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_prefix_is_checked_against_each_profile_that_sees_its_server() -> None:
    servers = {"a": {"command": "x"}, "b": {"command": "y", "prefix": "b.x"}}
    fine = parse_config({"servers": servers, "client": {"profile": "mcp"}, "profiles": {"o": {"servers": ["a"]}}})
    assert fine.view("o").servers[0].id == "a"
    with pytest.raises(ConfigError, match=r"^servers\.b\.prefix: character '\.' is not allowed in openai tool names"):
        parse_config(
            {"servers": servers, "client": {"profile": "mcp"}, "profiles": {"o": {"client": {"profile": "openai"}}}}
        )


def test_an_unknown_profile_names_the_known_ones(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo()}, profiles={})  # an empty [profiles] table
    proc = run_cli("catalog", "--config", str(config), "--profile", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "prefixgate: config error: profile: no profile 'nope' in the config (known: none: add a [profiles.NAME] table)"
    ]
    # Set in the environment (perhaps long before), the variable is named: it is what to fix.
    for command in (["serve"], ["catalog"]):
        proc = run_cli(*command, "--config", str(config), env={"PREFIXGATE_PROFILE": "nope"})
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == (
            "prefixgate: config error: $PREFIXGATE_PROFILE: no profile 'nope' in the config "
            "(known: none: add a [profiles.NAME] table)"
        )
    proc = run_cli("doctor", "--config", str(config), env={"PREFIXGATE_PROFILE": "nope"})
    assert "config error: $PREFIXGATE_PROFILE: no profile 'nope'" in proc.stdout


@pytest.mark.anyio
async def test_a_catalog_lock_covers_every_profile(tmp_path: Path) -> None:
    """``catalog lock`` writes one file a profile; each profile is served under its own (a
    missing one is exit 2, naming it), to clients of both eras alike; a change is pending in
    the profiles that see it, and ``approve`` records it in each of them."""
    state = tmp_path / "m.json"
    mutating = {"command": PYTHON, "args": ["-m", "tests.mutating_server", str(state)], "cwd": str(ROOT)}
    config = write_config(
        tmp_path,
        {"m": mutating, "d": demo("--tools", 1)},
        profiles={"codex": {"client": {"profile": "openai"}, "exclude": ["m__beta"]}, "review": {"servers": ["d"]}},
    )
    locks = {None: tmp_path / "prefixgate.lock"}
    locks |= {p: tmp_path / f"prefixgate.{p}.lock" for p in ("codex", "review")}
    proc = run_cli("catalog", "lock", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == [f"wrote {locks[p]}" for p in locks]
    with http_gateway(config) as (url, _):
        locked = {p: await tools_of(url + (f"/{p}" if p else ""), "legacy") for p in locks}
        assert {p: await tools_of(url + (f"/{p}" if p else ""), "auto") for p in locks} == locked
    assert "m__beta" not in [t["name"] for t in locked["codex"]]

    state.write_text(json.dumps(["reword"]))  # m rewords alpha: pending where m__alpha is published
    diff = run_cli("catalog", "diff", "--lock", "--json", "--config", str(config))
    assert diff.returncode == 1, diff.stderr
    report = json.loads(diff.stdout)
    assert [p["name"] for p in report["pending"]] == ["m__alpha"]
    assert {n: [p["name"] for p in r["pending"]] for n, r in report["profiles"].items()} == {
        "codex": ["m__alpha"],
        "review": [],
    }
    with http_gateway(config) as (url, _):  # the locked bytes are served, in every profile and era
        for mode in ERAS:
            assert {p: await tools_of(url + (f"/{p}" if p else ""), mode) for p in locks} == locked
    codex = catalog_json_of(config, "codex")  # and shown, alone and beside the default's
    shown = [(d["name"], d.get("description")) for d in codex["declarations"]]
    assert shown == [(t["name"], t.get("description")) for t in locked["codex"]]
    assert catalog_json(config)["profiles"]["codex"]["fingerprint"] == codex["fingerprint"]
    approved = run_cli("catalog", "approve", "m__alpha", "--yes", "--config", str(config))
    assert approved.returncode == 0, approved.stderr
    done = [": ".join(line.split(": ")[:2]) for line in approved.stdout.splitlines() if line.startswith("approved")]
    assert done == [f"approved 1 change: {locks[p]}" for p in (None, "codex")], approved.stdout
    assert run_cli("catalog", "diff", "--lock", "--config", str(config)).returncode == 0

    locks["review"].unlink()
    proc = run_cli("serve", "--config", str(config), "--profile", "review")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"prefixgate: catalog lock: {locks['review']}: lock file not found (write one with prefixgate catalog lock)"
    )


async def tools_of(url: str, mode: str) -> list[dict[str, Any]]:
    async with sdk_client(url, mode) as client:
        tools = (await client.list_tools()).tools
    return [t.model_dump(by_alias=True, exclude_none=True) for t in tools]


# --- the catalog ------------------------------------------------------------------------


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": name, "inputSchema": {"type": "object"}}


def test_name_globs_apply_to_published_names_after_naming() -> None:
    """A profile's filter never renames what it keeps: the kept tools have the names they have
    without it, and each tool it hides is a warning naming the pattern."""
    servers = [ServerTools("s", "s", (_tool("read"), _tool("write"), _tool("read_secret")))]
    everything = build(servers, PROFILES["openai"])
    kept = build(servers, PROFILES["openai"], include=["s__read*"], exclude=["*secret*"])
    assert [e.name for e in kept.entries] == ["s__read"]
    assert kept.entries[0] == everything.by_name["s__read"]
    assert [(w.kind, w.tool, w.detail) for w in kept.warnings] == [
        (
            "excluded",
            "read_secret",
            "published as 's__read_secret', which matches the profile's exclude pattern '*secret*'",
        ),
        ("excluded", "write", "published as 's__write', which matches none of the profile's include patterns"),
    ]
    assert kept.fingerprint != everything.fingerprint


# --- serving ----------------------------------------------------------------------------


def team_config(directory: Path, **client: Any) -> Path:
    """A Claude Code default, an OpenAI profile without one tool, a read-only profile of one server."""
    return write_config(
        directory,
        {"a": demo("--tools", 2, "--name", "a"), "b": demo("--tools", 1, "--name", "b")},
        client={"profile": "claude-code", **client},
        profiles={
            "codex": {"client": {"profile": "openai"}, "exclude": ["a__payload"]},
            "review": {"servers": ["b"], "policy": {"read_only": True}},
        },
    )


async def listed(config: Path, mode: str, *extra: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    async with sdk_client(config, mode, *extra, env=env, log_level="warning") as client:
        tools = (await client.list_tools()).tools
    return [t.model_dump(by_alias=True, exclude_none=True) for t in tools]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_each_profile_publishes_its_own_catalog_byte_stable_across_restarts(tmp_path: Path, mode: str) -> None:
    config = team_config(tmp_path)
    default = await listed(config, mode)
    codex = await listed(config, mode, "--profile", "codex")
    review = await listed(config, mode, env={"PREFIXGATE_PROFILE": "review"})

    names = {t["name"] for t in default}
    assert {"a__payload", "b__echo"} <= names
    assert {t["name"] for t in codex} == names - {"a__payload"}
    assert {t["name"] for t in review} == {n for n in names if n.startswith("b__")} | {"artifact_read"}
    # The naming rules differ (claude-code counts the mcp__<entry>__ wrapper), the names here
    # are short enough for both: the same tool is the same declaration in every profile.
    by_name = {t["name"]: t for t in default}
    assert all(by_name[t["name"]] == t for t in codex)

    # Across a restart, each profile's bytes are its own and the same; catalog --profile agrees.
    assert await listed(config, mode, "--profile", "codex") == codex
    report = catalog_json_of(config, "codex")
    assert report["profile"] == "codex"
    assert [d["name"] for d in report["declarations"]] == [t["name"] for t in codex]
    everything = catalog_json(config)  # the default profile's, with every profile's view beside it
    assert everything["profile"] is None and everything["fingerprint"] != report["fingerprint"]
    assert sorted(everything["profiles"]) == ["codex", "review"]
    assert everything["profiles"]["codex"]["declarations"] == report["declarations"]
    assert everything["profiles"]["codex"]["fingerprint"] == report["fingerprint"]


def test_catalog_json_shows_each_profile_as_catalog_json_profile_name_does(tmp_path: Path) -> None:
    """docs/commands.md: ``profiles.NAME`` is the object ``catalog --json --profile NAME`` prints:
    its resources, templates and prompts (of the servers it sees) and its lock were missing."""
    config = write_config(
        tmp_path,
        {"a": demo("--tools", 1, "--rich", "--name", "a"), "b": demo("--tools", 1, "--name", "b")},
        profiles={"review": {"servers": ["b"]}, "codex": {"client": {"profile": "openai"}}},
    )
    everything = catalog_json(config)
    assert everything["prompts"] and everything["resources"]
    for name in ("review", "codex"):
        alone, beside = catalog_json_of(config, name), everything["profiles"][name]
        assert sorted(beside) == sorted(alone), (name, set(alone) ^ set(beside))
        for key in ("resources", "resource_templates", "prompts", "declarations", "fingerprint"):
            assert beside[key] == alone[key], (name, key)
    assert everything["profiles"]["review"]["prompts"] == [] and everything["profiles"]["review"]["resources"] == 0
    assert everything["profiles"]["codex"]["prompts"] == everything["prompts"]


def catalog_json_of(config: Path, profile: str) -> dict[str, Any]:
    proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "warning", "--profile", profile)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_profiles_policy_refuses_what_the_default_allows(tmp_path: Path, mode: str) -> None:
    config = team_config(tmp_path)
    async with sdk_client(config, mode, log_level="warning") as client:
        allowed = await client.call_tool("b__image", {})
        assert not allowed.is_error and allowed.content[0].type == "image"
    async with sdk_client(config, mode, "--profile", "review", log_level="warning") as client:
        refused = await client.call_tool("b__image", {})
        assert refused.is_error
        policy = "read_only = true allows only tools with readOnlyHint"
        assert text(refused) == f"Tool b__image is refused by policy: {policy}."
        assert text(await client.call_tool("b__echo", {"text": "hi"})) == "hi"  # read-only: allowed


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_activation_in_one_profile_does_not_run_the_tool_in_another(tmp_path: Path, mode: str) -> None:
    """Two profiles that publish the very same catalog (so the same activation identity), one
    session: a grant stays in the profile it was made in, and neither clears the other's."""
    config = write_config(
        tmp_path,
        {"d": {**demo("--tools", 1), "deferred": True}},
        profiles={"one": {"policy": {"deny": ["x__*"]}}, "two": {}},
    )

    async def echo(profile: str, search: bool = False) -> tuple[bool, str]:
        async with sdk_client(config, mode, "--profile", profile, "--session", "s", log_level="warning") as client:
            if search:
                await client.call_tool("tool_search", {"query": "d__echo", "limit": 1})
            result = await client.call_tool("d__echo", {"text": "hi"})
        return result.is_error, text(result)

    assert await echo("one", search=True) == (False, "hi")
    refused, why = await echo("two")
    assert refused and "tool_search" in why
    assert await echo("one") == (False, "hi")  # restored: "two" did not clear it


def test_a_profile_pattern_that_matches_no_tool_is_reported(tmp_path: Path) -> None:
    """A typo in a profile's exclude (``a__Payload`` for ``a__payload``) leaves its clients the
    tool, and one in its include keeps nothing: catalog and doctor said neither (they say it of
    a ``[policy] deny`` pattern), and doctor's run was all well."""
    config = write_config(
        tmp_path,
        {"a": demo("--tools", 2, "--name", "a")},
        profiles={"codex": {"exclude": ["a__Payload", "a__crash"], "include": ["a__*", "A__echo"]}},
    )
    report = catalog_json(config)
    assert report["profile_unmatched"] == {"include": [], "exclude": []}
    codex = report["profiles"]["codex"]
    assert codex["profile_unmatched"] == {"include": ["A__echo"], "exclude": ["a__Payload"]}
    assert "a__payload" in [t["name"] for t in codex["tools"]]  # what the typo left in
    said = "matches no tool (patterns are case-sensitive globs on published names): it excludes nothing"
    shown = run_cli("catalog", "--config", str(config), "--profile", "codex", "--log-level", "warning").stdout
    assert f"  profile: exclude pattern 'a__Payload' {said}\n" in shown
    doctor = run_cli("doctor", "--config", str(config), "--profile", "codex", "--json")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    warned = [c["message"] for c in json.loads(doctor.stdout)["checks"] if c["verdict"] == "warn"]
    assert f"[profiles.codex] exclude pattern 'a__Payload' {said}" in warned
    assert any(w.startswith("[profiles.codex] include pattern 'A__echo' matches no tool") for w in warned)
    every = run_cli("doctor", "--config", str(config), "--json")
    assert every.returncode == 1, every.stdout + every.stderr
    lines = [(c["verdict"], c["message"]) for c in json.loads(every.stdout)["checks"] if c["section"] == "profiles"]
    assert lines[0][0] == "ok" and ("warn", f"codex: exclude pattern 'a__Payload' {said}") in lines[1:]


def test_doctor_checks_a_profile_and_registers_it(tmp_path: Path) -> None:
    config = team_config(tmp_path)
    every = run_cli("doctor", "--config", str(config), "--json")
    assert every.returncode == 0, every.stdout + every.stderr
    lines = [c for c in json.loads(every.stdout)["checks"] if c["section"] == "profiles"]
    assert [(c["verdict"], c["message"].split(":")[0]) for c in lines] == [("ok", "codex"), ("ok", "review")]
    assert lines[1]["message"].startswith("review: 8 tools, fixed, 9 declared, 0 deferred; fingerprint ")
    assert lines[1]["message"].endswith(", the same in both discoveries")
    proc = run_cli("doctor", "--config", str(config), "--profile", "codex", "--client", "codex", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    parsed_line = next(c["message"] for c in report["checks"] if c["section"] == "config")
    assert parsed_line.startswith("parsed: 2 servers (2 enabled) as [profiles.codex] sees them, profile openai,")
    register = report["register"]
    assert register["args"][-4:] == ["--config", str(config), "--profile", "codex"]
    assert '"--profile", "codex"]' in register["snippet"]


def test_a_change_moves_only_the_fingerprints_of_the_profiles_that_see_it(tmp_path: Path) -> None:
    """The mutating server rewords its tool ``alpha``: the default profile and a profile that
    sees alpha get new bytes; a profile without that server, and one that excludes alpha, keep theirs."""
    state = tmp_path / "m.json"
    mutating = {"command": PYTHON, "args": ["-m", "tests.mutating_server", str(state)], "cwd": str(ROOT)}
    config = write_config(
        tmp_path,
        {"m": mutating, "d": demo("--tools", 1)},
        profiles={
            "all": {"client": {"profile": "mcp"}},
            "no-m": {"servers": ["d"]},
            "no-alpha": {"exclude": ["m__alpha"]},
        },
    )

    def fingerprints() -> dict[str | None, str]:
        report = catalog_json(config)
        return {None: report["fingerprint"], **{n: r["fingerprint"] for n, r in report["profiles"].items()}}

    before = fingerprints()
    # mcp's naming rule renames none of these tools: the same bytes as the default's (openai).
    assert before[None] == before["all"] and len({before[None], before["no-m"], before["no-alpha"]}) == 3
    state.write_text(json.dumps(["reword"]))
    after = fingerprints()
    assert {n for n in before if before[n] != after[n]} == {None, "all"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_replicas_on_one_redis_publish_a_profiles_bytes_alike(tmp_path: Path, redis: Any, mode: str) -> None:
    """Two ``serve --http --profile codex`` replicas (each its own state directory, one Redis
    store) publish the same bytes, the profile's own: what catalog --profile prints."""
    published = []
    with contextlib.ExitStack() as replicas:
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            config = team_config(tmp_path / name)
            text_ = config.read_text().replace("[gateway]\n", f"[gateway]\nstore = {json.dumps(redis.url)}\n", 1)
            config.write_text(text_)
            url, _ = replicas.enter_context(http_gateway(config, "--profile", "codex"))
            async with sdk_client(url, mode) as client:
                tools = (await client.list_tools()).tools
            published.append([t.model_dump(by_alias=True, exclude_none=True) for t in tools])
    assert published[0] == published[1]
    assert [t["name"] for t in published[0]] == [d["name"] for d in catalog_json_of(config, "codex")["declarations"]]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_limited_to_profiles_gets_403_from_a_gateway_serving_another(tmp_path: Path, mode: str) -> None:
    config = team_config(tmp_path)
    tokens = tmp_path / "tokens"
    tokens.write_text("alice\nbob-secret profiles=codex\ncarol profiles=default,review\n")
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}

    async def status(url: str, token: str) -> tuple[int, int]:
        """What the token gets for a handshake-era initialize and a 2026-07-28 request."""
        async with httpx2.AsyncClient() as http:
            auth = {**ACCEPT, "authorization": f"Bearer {token}"}
            old = await http.post(url, json=INIT, headers=auth)
            new = await http.post(url, json=discover, headers={**auth, "mcp-protocol-version": "2026-07-28"})
        return old.status_code, new.status_code

    for profile, barred in (("review", "bob-secret"), (None, "bob-secret")):
        extra = ("--profile", profile) if profile else ()
        with http_gateway(config, "--token-file", str(tokens), *extra) as (url, log):
            assert await status(url, barred) == (403, 403)
            for allowed in ("alice", "carol"):
                async with sdk_client(url, mode, headers={"Authorization": f"Bearer {allowed}"}) as client:
                    names = {t.name for t in (await client.list_tools()).tools}
                assert ("a__echo" in names) is (profile is None), (allowed, profile)
            logged = log.read_text()
        served = profile or "default"
        assert logged.count(f"may not use profile {served} (its token's profiles=codex): 403") == 1  # of 2 refused
        assert "bob-secret" not in logged


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("tok profile=codex", "a token cannot contain spaces; after it only profiles=NAME,... may follow"),
        ("tok profiles=nope", "unknown profile 'nope' (known: codex, default, review)"),
        ("tok profiles=", "profiles= names no profile (known: codex, default, review)"),
        ("tok profiles=codex profiles=review", "profiles= given twice; list every profile in one, comma-separated"),
    ],
)
def test_a_bad_profiles_field_in_the_token_file_exits_2_naming_its_line(
    tmp_path: Path, line: str, problem: str
) -> None:
    config = team_config(tmp_path)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# tokens\n{line}\n")
    proc = run_cli("serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file", str(tokens), timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"prefixgate: --token-file: {tokens} line 2: {problem}"


@pytest.mark.parametrize("later", ["tok-9f2c profiles=codex", "tok-9f2c"])
def test_a_token_on_two_lines_exits_2_naming_both_lines_not_the_token(tmp_path: Path, later: str) -> None:
    """The later line's ``profiles=`` used to be dropped without a word (the token then used
    every profile); which line should hold is a guess either way."""
    config = team_config(tmp_path)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"tok-9f2c\nother\n{later}\n")
    proc = run_cli("serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file", str(tokens), timeout=30)
    assert proc.returncode == 2
    expected = f"prefixgate: --token-file: {tokens} line 3: the same token as line 1; give each token one line"
    assert proc.stderr.strip() == expected
    assert "9f2c" not in proc.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_classic_server_asks_through_a_profile_cold_and_warm(tmp_path: Path, mode: str) -> None:
    """A server written the classic way (an elicitation request of its own, over the
    back-channel) behind a profile: its question reaches the client as it would directly, on
    the profile's first start and on the next one, which answers at once from the profile's own
    warm-start record (an agent that gives its servers about a second)."""
    from tests.helpers import CALLBACKS

    classic = {"command": PYTHON, "args": ["-m", "tests.backchannel_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"b": classic, "d": demo("--tools", 1)}, profiles={"asker": {"servers": ["b"]}})
    for start in ("cold", "warm"):
        log = tmp_path / f"{start}.log"
        async with sdk_client(config, mode, "--profile", "asker", errlog=log, **CALLBACKS) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= {"b__ask"}
            assert text(await client.call_tool("b__ask", {})) == "accept:{'name': 'Ann'}"
        warm = "warm start: published the last verified catalog" in log.read_text()
        assert warm is (start == "warm"), log.read_text()[-2000:]
