"""Config discovery, validation and expansion; bad configs exit 2 with one line."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from catalog.budget import ClientPolicy
from gateway.config import ConfigError, find_config, load_config, parse_config
from gateway.engine.epoch import client_policy
from tests.helpers import run_cli

BASE = {"servers": {"git": {"command": "mcp-server-git"}}}


def parse(data: dict, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse_config(data, env=env or {"HOME": "/home/u"})


def error(data: dict, env: dict[str, str] | None = None) -> str:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as info:
        parse(data, env)
    return str(info.value)


def test_defaults() -> None:
    config = parse(BASE, {"XDG_STATE_HOME": "/state"})
    assert config.gateway.state_dir == Path("/state/prefixgate")
    assert config.gateway.discovery_deadline == 60 and config.gateway.separator == "__"
    assert config.client.profile == "openai" and config.client.function_limit == 128
    (git,) = config.servers
    assert (git.id, git.prefix, git.transport, git.startup_timeout, git.call_timeout) == (
        "git", "git", "stdio", 30, 300,
    )
    assert parse({**BASE, "client": {"profile": "anthropic"}}).client.function_limit is None
    assert parse({**BASE, "client": {"profile": "anthropic", "max_functions": 40}}).client.function_limit == 40



def test_max_functions_may_be_as_low_as_the_gateways_own_tools() -> None:
    assert parse({**BASE, "client": {"max_functions": 3}}).client.function_limit == 3
    assert parse({**BASE, "client": {"max_functions": 2}, "spill": {"enabled": False}}).client.function_limit == 2
    # declarations = "fixed" never falls back to the meta tools: its limit is the catalog's (checked at each build).
    assert parse({**BASE, "client": {"max_functions": 1, "declarations": "fixed"}}).client.function_limit == 1


def test_client_defaults_are_the_policy_defaults() -> None:
    """An empty [client] table decides exactly like the catalog's default policy."""
    policy = client_policy(parse(BASE))
    assert policy == ClientPolicy(max_functions=128)
    assert policy.reserve_tokens == 16384 and policy.keep_recent_tokens == 20000 and policy.declarations == "auto"
    every: dict[str, Any] = {"profile": "anthropic", "max_functions": 7, "context_window": 9000, "reserve_tokens": 1,
             "keep_recent_tokens": 2, "system_prompt_tokens": 3, "declarations": "fixed", "defer": ["a*"],
             "account": "acc", "model": "m", "api": "x", "endpoint": "https://e"}
    assert client_policy(parse({**BASE, "client": every})) == ClientPolicy(**{**every, "defer": ("a*",)})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**BASE, "servers": {"git": {"command": "x", "startup_timeout": "5"}}},
         "servers.git.startup_timeout: expected a number"),
        ({**BASE, "servers": {"git": {"command": "x", "colour": 1}}}, "servers.git.colour: unknown key"),
        ({**BASE, "extra": {}}, "extra: unknown table"),
        ({**BASE, "gateway": {"separator": 3}}, "gateway.separator: expected a string"),
        ({**BASE, "client": {"profile": "gpt"}}, "client.profile: expected one of"),
        ({**BASE, "client": {"declarations": "sometimes"}}, "client.declarations: expected one of"),
        ({"servers": {"git": {"command": "x", "url": "http://h/mcp"}}}, "servers.git: has both command"),
        ({"servers": {"git": {"args": ["x"]}}}, "servers.git.command: missing"),
        ({"servers": {"-bad": {"command": "x"}}}, "servers.-bad: invalid server id"),
        ({"servers": {"git": {"command": "x", "prefix": "a.b"}}}, "servers.git.prefix: character '.'"),
        ({"servers": {"git": {"command": "x", "headers": {"a": "b"}}}}, "servers.git.headers: not valid for a stdio"),
        ({"servers": {"web": {"url": "ftp://h"}}}, "servers.web.url: expected an http"),
        ({"servers": {"git": {"command": "x", "enabled": False}}}, "servers: no enabled server"),
        ({"servers": {"git": {"command": "x", "args": ["a", 1]}}}, "servers.git.args: expected a list of strings"),
        ({**BASE, "spill": {"max_visible_bytes": 100}}, "spill.max_visible_bytes: expected an integer >= 1024"),
        ({**BASE, "spill": {"enabled": "yes"}}, "spill.enabled: expected true or false"),
        ({**BASE, "policy": {"deny": "x"}}, "policy.deny: expected a list of strings"),
        ({**BASE, "policy": {"allow": []}}, "policy.allow: unknown key"),
        ({**BASE, "client": {"max_functions": 0}}, "client.max_functions: expected an integer >= 1"),
        ({**BASE, "client": {"max_functions": -5}}, "client.max_functions: expected an integer >= 1"),
        # Below the gateway's own tools no plan fits once auto falls back: at load, not after the start.
        ({**BASE, "client": {"max_functions": 2}},
         "client.max_functions: 2 is below the gateway's own tools (tool_search, tool_call, artifact_read): "
         "at least 3"),
        ({**BASE, "client": {"max_functions": 1, "declarations": "on-demand"}, "spill": {"enabled": False}},
         "client.max_functions: 1 is below the gateway's own tools (tool_search, tool_call): at least 2"),
        ({**BASE, "profiles": {"p": {"client": {"max_functions": 1}}}},
         "profiles.p.client.max_functions: 1 is below the gateway's own tools (tool_search, tool_call, artifact_read): "
         "at least 3"),
        ({**BASE, "client": {"context_window": 30000}},
         "client.context_window: 30000 leaves -6384 tokens for declarations once reserve_tokens (16384), "
         "keep_recent_tokens (20000) and system_prompt_tokens (0) are taken: raise it or lower those"),
        ({**BASE, "profiles": {"p": {"client": {"context_window": 36384}}}},
         "profiles.p.client.context_window: 36384 leaves 0 tokens"),
        ({"servers": {"git": {"command": "x", "args": ["${UNCLOSED"]}}},
         "servers.git.args[0]: unterminated variable reference: a '${' without its '}' (write $${ for a literal ${)"),
        ({"servers": {"git": {"command": "x", "call_timeout": float("nan")}}},
         "servers.git.call_timeout: expected a number greater than 0"),
        ({"servers": {"git": {"command": "x", "call_timeout": 60, "max_call_time": 30}}},
         "servers.git.max_call_time: is less than call_timeout (60 s)"),
        ({"servers": {"git": {"command": "x", "call_timeout": 7200}}},
         "servers.git.call_timeout: is more than max_call_time (3600 s by default): raise that too"),
        ({"servers": {"web": {"url": "https://h/mcp", "instances": "per-principal"}}},
         "servers.web.instances: not valid for a remote server (url)"),
        ({"servers": {"web": {"url": "https://h/mcp", "idle_timeout": 60}}},
         "servers.web.idle_timeout: not valid for a remote server (url)"),
        ({"servers": {"git": {"command": "x", "instances": "each"}}},
         "servers.git.instances: expected one of 'shared', 'per-principal'"),
        ({"servers": {"git": {"command": "x", "max_instances": 4}}},
         'servers.git.max_instances: only with instances = "per-principal"'),
        ({"servers": {"git": {"command": "x", "instances": "per-principal", "max_instances": 0}}},
         "servers.git.max_instances: expected an integer >= 1"),
        # What no process can be started with: named here, not "embedded null byte" at its start.
        ({"servers": {"git": {"command": "x", "env": {"A=B": "1"}}}},
         "servers.git.env.A=B: not a valid environment variable name (empty, or holds '=')"),
        ({"servers": {"git": {"command": "x", "env": {"": "1"}}}}, "servers.git.env.: not a valid environment"),
        ({"servers": {"git": {"command": "x", "env": {"K\0": "1"}}}}, "servers.git.env.K\\u0000: contains a NUL"),
        ({"servers": {"git": {"command": "x", "env": {"K": "a\0b"}}}}, "servers.git.env.K: contains a NUL"),
        ({"servers": {"git": {"command": "x\0"}}}, "servers.git.command: contains a NUL"),
        ({"servers": {"git": {"command": "x", "args": ["a", "b\0"]}}}, "servers.git.args[1]: contains a NUL"),
        ({"servers": {"git": {"command": "x", "cwd": "/tmp\0"}}}, "servers.git.cwd: contains a NUL"),
        ({"servers": {"git": {"command": "x", "enabled": False, "env": {"A=B": "1"}}, "ok": {"command": "y"}}},
         "servers.git.env.A=B: not a valid environment variable name"),
        # A URL no connection can be made to: named here, not "ConnectError"/"OverflowError" at the start.
        ({"servers": {"web": {"url": "https://"}}}, "servers.web.url: not a valid URL: it names no host"),
        ({"servers": {"web": {"url": "http://h:99999/mcp"}}}, "servers.web.url: not a valid URL: Port out of range"),
        ({"servers": {"web": {"url": "http://[::1/mcp"}}}, "servers.web.url: not a valid URL: Invalid IPv6 URL"),
        ({"servers": {"web": {"url": "https://exa mple.com/mcp"}}}, "servers.web.url: not a valid URL: its host holds"),
        ({"servers": {"web": {"url": "http://h:0/mcp"}}}, "servers.web.url: not a valid URL: port 0"),
        # The file's own text quoted in the line stays on it (escaped), whatever it holds.
        ({"servers": {"a\nb": {"command": "x"}}}, "servers.a\\u000ab: invalid server id"),
        ({"servers": {"git": {"command": "x", "bo\ngus": 1}}}, "servers.git.bo\\u000agus: unknown key"),
        ({"servers": {"git": {"command": "x", "x\u202ey": 1}}}, "servers.git.x\\u202ey: unknown key"),
        ({"servers": {"git": {"command": "${NO\nPE}"}}},
         "servers.git.command: invalid variable reference ${NO\\u000aPE}"),
        ({**BASE, "profiles": {"a\nb": {}}}, "profiles.a\\u000ab: invalid profile name"),
    ],
)
def test_errors_name_the_key(data: dict, message: str) -> None:  # type: ignore[type-arg]
    text = error(data)
    assert text.startswith(message), text
    assert "\n" not in text


def test_a_url_a_variable_leaves_hostless_is_the_environments_not_the_configs() -> None:
    """Gemini CLI passes a variable it lacks on empty: ``https://${HOST}/mcp`` is then hostless,
    which fails that server when it connects; the other servers still start."""
    data = {"servers": {"web": {"url": "https://${HOST}/mcp"}, "git": {"command": "x"}}}
    assert {s.id for s in parse(data, {"HOST": ""}).servers} == {"web", "git"}


def test_variable_expansion_and_unset_variable() -> None:
    data = {
        "servers": {
            "gh": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "git": {"command": "${BIN}/git", "args": ["--repo", "${HOME}/r", "$${literal}"], "env": {"K": "${TOKEN}"}},
        }
    }
    env = {"HOST": "example.test", "TOKEN": "s3cret", "BIN": "/opt", "HOME": "/home/u"}
    config = parse(data, env)
    gh, git = config.servers
    assert gh.url == "https://example.test/mcp" and gh.headers == {"Authorization": "Bearer s3cret"}
    assert git.command == "/opt/git" and git.args == ("--repo", "/home/u/r", "${literal}")
    assert git.env == {"K": "s3cret"}

    # An unset variable is that server's problem (it fails alone at start-up), not the config's.
    gh, git = parse(data, {"HOST": "h", "BIN": "/opt", "HOME": "/h"}).servers
    assert gh.unset == (("TOKEN", "servers.gh.headers.Authorization"),) and gh.variables == ("HOST", "TOKEN")
    assert git.unset == (("TOKEN", "servers.git.env.K"),) and git.variables == ("BIN", "HOME", "TOKEN")
    assert gh.unset_reason is not None and "TOKEN" in gh.unset_reason and "servers.gh.headers.Authorization" in (
        gh.unset_reason
    )


def test_unset_variables_fail_the_server_but_a_wrong_reference_stops_the_config() -> None:
    # Unset in a URL: the scheme check waits until it is set (the server fails meanwhile).
    (gh,) = parse({"servers": {"gh": {"url": "${BASE}/mcp"}}}).servers
    assert gh.unset == (("BASE", "servers.gh.url"),)
    # Invalid in itself, even after an unset one in the same value: exit 2.
    assert error({"servers": {"a": {"command": "x", "args": ["${UNSET}${1X}"]}}}) == (
        "servers.a.args[0]: invalid variable reference ${1X}"
    )
    assert error({**BASE, "gateway": {"state_dir": "${PG_UNSET_STATE}/s"}}) == (
        "gateway.state_dir: environment variable PG_UNSET_STATE is not set"
    )
    # Set variables expand as before and leave nothing unset.
    (git,) = parse({"servers": {"git": {"command": "x", "env": {"T": "${TOKEN}"}}}}, {"TOKEN": "v"}).servers
    assert git.env == {"T": "v"} and git.unset == () and git.unset_reason is None


def test_a_default_stands_in_for_an_unset_or_empty_variable() -> None:
    data = {
        "servers": {
            "gh": {"url": "${BASE:-https://h.test}/mcp", "headers": {"X-Team": "${TEAM:-core}"}},
            "git": {"command": "git", "args": ["${REPO:-.}", "${TOKEN:-}"], "env": {"K": "${K:-v}"}},
        }
    }
    gh, git = parse(data, {"TEAM": ""}).servers
    assert gh.url == "https://h.test/mcp" and gh.headers == {"X-Team": "core"}
    assert git.args == (".", "") and git.env == {"K": "v"}
    # Referenced (what the environment may carry), never unset: the servers can start.
    assert gh.unset == git.unset == () and gh.variables == ("BASE", "TEAM") and git.variables == ("K", "REPO", "TOKEN")
    assert (gh.defaulted, git.defaulted) == (gh.variables, git.variables)
    # Referenced once without a default: the environment must carry it.
    (both,) = parse({"servers": {"b": {"command": "x", "args": ["${V:-d}", "${V}"]}}}, {"V": "v"}).servers
    assert both.variables == ("V",) and both.defaulted == ()
    gh, git = parse(data, {"BASE": "https://o.test", "TEAM": "ops", "REPO": "/r", "TOKEN": "s3cret"}).servers
    assert gh.url == "https://o.test/mcp" and gh.headers == {"X-Team": "ops"} and git.args == ("/r", "s3cret")
    assert git.arg_values == ("/r", "s3cret")  # a variable's value in args is masked; a default is config text
    gateway = parse({**BASE, "gateway": {"state_dir": "${PG_UNSET_STATE:-/tmp/pg}/s"}}).gateway
    assert str(gateway.state_dir) == "/tmp/pg/s" and gateway.defaulted == ("PG_UNSET_STATE",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${A:-${B}}", "the default of ${A:-...} may not hold a '$' (no nested references)"),
        ("${A:-$B}", "the default of ${A:-...} may not hold a '$' (no nested references)"),
        ("${1A:-x}", "invalid variable reference ${1A:-x}"),
        ("${A:x}", "invalid variable reference ${A:x}"),
    ],
)
def test_a_wrong_default_stops_the_config(text: str, message: str) -> None:
    assert error({"servers": {"a": {"command": "x", "args": [text]}}}) == f"servers.a.args[0]: {message}"


def test_a_default_a_header_cannot_carry_is_the_configs_error() -> None:
    data = {"servers": {"gh": {"url": "https://h/mcp", "headers": {"X-A": "${A:-v }"}}}}
    assert error(data).startswith("servers.gh.headers")
    (gh,) = parse(data, {"A": "ok"}).servers
    assert gh.headers == {"X-A": "ok"} and gh.unusable == ()


def test_secrets_never_appear_in_errors() -> None:
    data = {"servers": {"gh": {"url": "https://h/mcp", "headers": {"Authorization": 5}}}}
    assert "5" not in error(data).split(":", 1)[1].replace("headers", "")
    data = {"servers": {"gh": {"url": "nope-${TOKEN}"}}}
    assert "s3cret" not in error(data, {"TOKEN": "s3cret"})


def test_disabled_server_is_not_expanded() -> None:
    data = {"servers": {"a": {"command": "x"}, "b": {"command": "${UNSET}", "enabled": False}}}
    assert [s.enabled for s in parse(data).servers] == [True, False]


def test_discovery_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    xdg = tmp_path / "xdg"
    (xdg / "prefixgate").mkdir(parents=True)
    (xdg / "prefixgate" / "config.toml").write_text("")
    assert find_config(None, {"XDG_CONFIG_HOME": str(xdg)}) == xdg / "prefixgate" / "config.toml"
    (tmp_path / "prefixgate.toml").write_text("")
    assert find_config(None, {"XDG_CONFIG_HOME": str(xdg)}) == Path("prefixgate.toml")
    assert find_config(None, {"PREFIXGATE_CONFIG": "/e.toml"}) == Path("/e.toml")
    assert find_config("/c.toml", {"PREFIXGATE_CONFIG": "/e.toml"}) == Path("/c.toml")
    (tmp_path / "prefixgate.toml").unlink()
    with pytest.raises(ConfigError, match="no config file"):
        find_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "none")})


@pytest.mark.parametrize("kind", ["directory", "broken link", "link loop"])
def test_a_config_found_that_cannot_be_read_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A ./prefixgate.toml that is there but unreadable is the config found, and its read says
    why: passed over, the XDG config was used instead (or the error said to create it)."""
    monkeypatch.chdir(tmp_path)
    xdg = tmp_path / "xdg"
    (xdg / "prefixgate").mkdir(parents=True)
    (xdg / "prefixgate" / "config.toml").write_text('[servers.git]\ncommand = "x"\n')
    local = tmp_path / "prefixgate.toml"
    if kind == "directory":
        local.mkdir()
    else:
        local.symlink_to(tmp_path / ("gone.toml" if kind == "broken link" else "prefixgate.toml"))
    assert find_config(None, {"XDG_CONFIG_HOME": str(xdg)}) == Path("prefixgate.toml")
    with pytest.raises(ConfigError, match="^cannot read config prefixgate.toml: "):
        load_config(find_config(None, {"XDG_CONFIG_HOME": str(xdg)}))


def test_an_empty_config_path_is_refused(tmp_path: Path) -> None:
    """``--config "$CONFIG"`` with the variable unset: not read as "no --config given"."""
    for command in ("serve", "catalog"):
        proc = run_cli(command, "--config", "", env={"PREFIXGATE_CONFIG": str(tmp_path / "other.toml")})
        assert proc.returncode == 2
        assert proc.stderr.strip() == "prefixgate: config error: --config: an empty path: name the config file"


def test_example_config_is_valid_and_runs_on_this_machine() -> None:
    example = Path(__file__).resolve().parent.parent / "config.example.toml"
    config = load_config(example, env={"HOME": "/home/u"})
    assert config.enabled_servers
    # Every documented key is a real one: the example is parsed by the strict validator.
    assert tomllib.loads(example.read_text())["servers"]


@pytest.mark.parametrize(
    ("body", "first_line"),
    [
        ('[servers.git]\ncommand = "x"\nstartup_timeout = "soon"\n', "servers.git.startup_timeout: expected a number"),
        ('[servers.git]\ncommand = "x"\nbogus = 1\n', "servers.git.bogus: unknown key"),
        ('[servers.git]\ncommand = "x"\nargs = ["${1X}"]\n', "servers.git.args[0]: invalid variable reference ${1X}"),
        ('[gateway]\nstate_dir = "${PG_TEST_UNSET_VAR}"\n[servers.git]\ncommand = "x"\n',
         "gateway.state_dir: environment variable PG_TEST_UNSET_VAR is not set"),
        ('[servers.git]\nargs = ["x"]\n', "servers.git.command: missing"),
        ('[servers.web]\nurl = "https://h/mcp"\ninstances = "per-principal"\n',
         "servers.web.instances: not valid for a remote server (url)"),
        ("[servers.git\n", "config"),
        ('[servers."a\\nb"]\ncommand = "x"\n', "servers.a\\u000ab: invalid server id"),
        ('[servers.git]\ncommand = "x"\nenv = { "A=B" = "1" }\n', "servers.git.env.A=B: not a valid environment"),
        ('[servers.git]\ncommand = "x"\nargs = ["\\u0000"]\n', "servers.git.args[0]: contains a NUL"),
        ('[servers.web]\nurl = "http://127.0.0.1:99999/mcp"\n', "servers.web.url: not a valid URL: Port out of range"),
        ('[client]\nmax_functions = 2\n[servers.git]\ncommand = "x"\n', "client.max_functions: 2 is below"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "catalog"])
def test_cli_exits_2_with_one_line(tmp_path: Path, body: str, first_line: str, command: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    proc = run_cli(command, "--config", str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("prefixgate: config error: ")
    assert first_line in lines[0]


@pytest.mark.parametrize(
    ("url", "env", "expected"),
    [
        ("redis://127.0.0.1:6379/0", {}, "redis://127.0.0.1:6379/0"),
        ("rediss://cache.internal:6380/2", {}, "rediss://cache.internal:6380/2"),
        ("redis://cache", {}, "redis://cache"),
        ("redis://:${PG_TEST_PW}@cache:6379/0", {"PG_TEST_PW": "s3cret"}, "redis://:s3cret@cache:6379/0"),
    ],
)
def test_the_store_url(url: str, env: dict[str, str], expected: str) -> None:
    config = parse_config({"gateway": {"store": url}, "servers": {"s": {"command": "x"}}}, env=env)
    assert config.gateway.store == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://cache:6379/0", "scheme is 'http': expected redis:// or rediss://"),
        ("cache:6379", "scheme is 'cache'"),
        ("redis://:6379/0", "the URL names no host"),
        ("redis://cache:6379/db0", "the path must be a database number"),
        ("redis://cache:99999/0", "not a valid URL"),
        ("redis://:hunter2@cache:6379/0?x=1", "expected redis://HOST:PORT/DB with no query or fragment"),
        # a password with '/' (base64 has them): what urllib took for the port is the password
        ("redis://:hunter2/x@cache:6379/0", "its port is not a number (a password holding '/'"),
        ("redis://:hunter2#x@cache:6379/0", "written percent-encoded: %2F, %3F, %23, %40"),
    ],
)
def test_a_bad_store_url_names_gateway_store_and_never_the_password(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"gateway": {"store": url}, "servers": {"s": {"command": "x"}}}, env={})
    assert str(caught.value).startswith("gateway.store: ") and problem in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_the_default_store_is_the_file_store() -> None:
    assert parse_config({"servers": {"s": {"command": "x"}}}, env={}).gateway.store is None


@pytest.mark.parametrize(
    ("name", "body", "pointer"),
    [
        (".mcp.json", '{"mcpServers": {"git": {"command": "mcp-server-git"}}}', "prefixgate import {path} writes"),
        ("codex.toml", '[mcp_servers.git]\ncommand = "mcp-server-git"\n', "prefixgate import --from codex writes"),
    ],
)
def test_an_agents_own_config_points_to_import(tmp_path: Path, name: str, body: str, pointer: str) -> None:
    """Issue 31: ``--config .mcp.json`` or a Codex ``[mcp_servers.x]`` table says how to convert it."""
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert pointer.format(path=path) in str(caught.value), str(caught.value)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le", "utf-16-be"])
def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path: Path, encoding: str) -> None:
    """What Windows writes loads as the same config: Notepad's UTF-8 byte order mark (tomllib
    alone refuses it), and the UTF-16 of a PowerShell 5 redirect (``prefixgate import >``)."""
    path = tmp_path / "windows.toml"
    body = '[servers.git]\r\ncommand = "mcp-server-git"\r\n'
    path.write_bytes(("\ufeff" + body).encode(encoding))  # (each with its byte order mark)
    assert [s.id for s in load_config(path).enabled_servers] == ["git"]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'[servers.git]\ncommand = "caf\xe9"\n', "not valid UTF-8 (byte 28)"),
        (b'\xef\xbb\xbf[servers.git]\ncommand = "caf\xe9"\n', "not valid UTF-8 (byte 31)"),  # (the mark counted)
        (b"\xff\xfe[\x00s", "not valid UTF-16-LE (byte 4)"),  # (cut mid-character)
    ],
)
def test_a_config_that_does_not_decode_names_the_byte(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"config {path} is {problem}"


def test_a_config_named_by_mistake_is_not_read_without_end() -> None:
    """``--config /dev/zero`` was read until memory ran out: refused once past 16 MiB."""
    with pytest.raises(ConfigError) as caught:
        load_config(Path("/dev/zero"))
    assert str(caught.value) == "cannot read config /dev/zero: larger than 16 MiB"


def test_a_redis_store_without_the_redis_package_is_a_config_error(tmp_path: Path) -> None:
    """The Redis client is an extra (``prefixgate[redis]``): without it, a config that names a
    Redis store exits 2 before anything starts, with the install command (issue 27)."""
    import subprocess
    import sys

    path = tmp_path / "prefixgate.toml"
    path.write_text('[gateway]\nstore = "redis://127.0.0.1:6379/0"\n[servers.git]\ncommand = "x"\n')
    without_redis = "import sys; sys.modules['redis'] = None; from gateway.commands.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", without_redis, "catalog", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "prefixgate: config error: gateway.store: the Redis store needs the redis package: "
        "pip install 'prefixgate[redis]'"
    )
