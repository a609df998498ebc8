"""OAuth 2.1 toward remote servers, end to end: a real OAuth-protected MCP server on loopback
(tests/oauth_server.py, the mcp SDK's authorization-server helpers), ``prefixgate login`` with a
stand-in browser that follows redirects, the real gateway, the real SDK client in both eras."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ERAS,
    PYTHON,
    catalog_json,
    demo,
    gateway,
    run_cli,
    sdk_client,
    text,
    url_process,
    wait_for,
    write_config,
)
from tests.oauth_server import PRESENTED

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).with_name("oauth_server.py"))
BROWSER = """#!{python}
import sys, httpx2
response = httpx2.get(sys.argv[1], follow_redirects=True, timeout=30)
sys.exit(0 if response.status_code < 400 else 1)
"""


@contextmanager
def oauth_server(tmp_path: Path, *args: str) -> Iterator[str]:
    """The OAuth-protected demo server; every secret it issues is logged to tmp_path/secrets.log."""
    env = {"OAUTH_SERVER_LOG": str(tmp_path / "secrets.log")}
    with url_process([PYTHON, SERVER, *args], env=env) as (url, _proc):
        yield url


EXPIRED = 1.5
"""Seconds after tokens of ``--lifetime 2`` were stored (by a login, a run, a call's refresh)
at which the gateway takes them for expired: past their early expiry (half the lifetime,
gateway/downstream/oauth.py), counted from a store done before the wait began, so a loaded
machine only makes the wait longer. (A refresh needs nothing of the server's own expiry.)"""


def browser(tmp_path: Path) -> dict[str, str]:
    """``$BROWSER`` set to a script that just follows the redirects (the server approves at once)."""
    script = tmp_path / "browser.py"
    script.write_text(BROWSER.format(python=PYTHON))
    script.chmod(0o700)
    return {"BROWSER": str(script)}


def secrets(tmp_path: Path) -> list[str]:
    """Every secret the server issued, in order."""
    return [value for kind, value in _logged(tmp_path) if kind != PRESENTED]


def presented(tmp_path: Path) -> list[str]:
    """Every refresh token presented at the server's ``/token``, in order (refused ones too)."""
    return [value for kind, value in _logged(tmp_path) if kind == PRESENTED]


def _logged(tmp_path: Path) -> list[tuple[str, str]]:
    log = tmp_path / "secrets.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(entry["kind"], entry["value"]) for entry in map(json.loads, lines)]


def login(tmp_path: Path, config: Path, server: str = "remote", *extra: str) -> str:
    proc = run_cli("login", server, "--config", str(config), "--timeout", "60", *extra, env=browser(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def command(config: Path, server: str = "remote") -> str:
    return f"prefixgate login {server} --config {config.resolve()}"


def token_files(config: Path) -> list[Path]:
    return sorted((config.parent / "state" / "oauth").glob("*.json"))


def without_discovery(config: Path) -> Path:
    """The config's one token file made as an older prefixgate wrote it: without the discovery
    stored beside its tokens (where they came from). Returns its path."""
    (path,) = token_files(config)
    record = json.loads(path.read_text())
    del record["discovery"]
    path.write_text(json.dumps(record, sort_keys=True))
    return path


def assert_no_secret(tmp_path: Path, *outputs: str) -> None:
    issued = secrets(tmp_path)
    assert issued, "the server issued nothing"
    for output in outputs:
        for secret in issued:
            assert secret not in output


def test_no_tokens_is_failed_with_the_login_command_not_a_hang(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        report = catalog_json(config)
    (server,) = report["servers"]
    assert server["status"] == "failed"
    assert server["error"] == f"not logged in: run {command(config)}"


@pytest.mark.parametrize("mode", ERAS)
async def test_login_then_calls_and_refresh_without_the_client_noticing(tmp_path: Path, mode: str) -> None:
    with oauth_server(tmp_path, "--lifetime", "2") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        said = login(tmp_path, config)
        assert "logged in to 'remote' (scopes: mcp:read)" in said
        (token_file,) = token_files(config)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        async with sdk_client(config, mode) as client:
            first = await client.call_tool("remote__whoami", {})
            assert not first.is_error and "scopes=mcp:read" in text(first)
            import anyio

            for round_ in range(3):  # each past the 2 s lifetime: refreshed every time
                await anyio.sleep(1.5)
                result = await client.call_tool("remote__echo", {"text": f"round {round_}"})
                assert not result.is_error, text(result)
                assert text(result) == f"round {round_}"
        refreshes = [line for line in (tmp_path / "secrets.log").read_text().splitlines() if "access_token" in line]
        assert len(refreshes) >= 3  # the login's token and at least two refreshed ones
        proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "debug")
        assert json.loads(proc.stdout)["servers"][0]["status"] == "ready"
        assert_no_secret(tmp_path, said, proc.stdout, proc.stderr)


async def test_logout_makes_the_server_failed_with_the_login_command(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        assert catalog_json(config)["servers"][0]["status"] == "ready"
        out = run_cli("logout", "remote", "--config", str(config))
        assert out.returncode == 0 and "stored tokens are removed" in out.stdout
        assert token_files(config) == []
        again = run_cli("logout", "remote", "--config", str(config))
        assert again.returncode == 0 and "had no stored tokens" in again.stdout
        report = catalog_json(config)
        assert report["servers"][0]["status"] == "failed"
        assert command(config) in report["servers"][0]["error"]
        for mode in ERAS:
            async with sdk_client(config, mode) as client:
                result = await client.call_tool("remote__echo", {"text": "x"})
                assert result.is_error and command(config) in text(result)
        async with gateway(config) as gw:
            result = await gw.session.call_tool("remote__echo", {"text": "x"})
            assert result.is_error and command(config) in text(result)
            assert_no_secret(tmp_path, gw.stderr())


_KILLED_STORING_TOKENS = """
import os, signal, sys
from pathlib import Path
from gateway.config import load_config
from gateway.engine.oauth import token_file
config = load_config(Path(sys.argv[1]))
tokens = token_file(config, config.servers[0])
record = tokens.read()
os.replace = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)  # killed before its rename
tokens.write(record)
"""


def test_a_logout_removes_the_copy_of_the_tokens_a_killed_write_left(tmp_path: Path) -> None:
    """A process killed while it stored tokens (a refresh, a login) left its temporary file,
    a copy of the tokens beside the token file; ``logout`` removed the file alone, so the
    refresh token stayed on disk after the logout, for ever."""
    import subprocess
    import sys

    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        killed = subprocess.run([sys.executable, "-c", _KILLED_STORING_TOKENS, str(config)], timeout=60)
        assert killed.returncode == -9
        oauth = tmp_path / "state" / "oauth"
        (copy,) = [p for p in oauth.iterdir() if p not in token_files(config)]
        assert any(secret in copy.read_text() for secret in secrets(tmp_path))
        out = run_cli("logout", "remote", "--config", str(config))
        assert out.returncode == 0 and "stored tokens are removed" in out.stdout
        assert list(oauth.iterdir()) == []


def test_a_logout_of_a_token_file_it_cannot_remove_says_so_in_one_line(tmp_path: Path) -> None:
    """A directory where the token file should be (a bad restore, a mistaken mkdir): logout
    ended in a traceback (IsADirectoryError); it says what it could not remove, exit 1."""
    from gateway.state.oauthtokens import TokenFile

    url = "http://127.0.0.1:9/mcp"
    config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
    file = TokenFile(tmp_path / "state", "remote", url)
    file.directory.mkdir(parents=True, mode=0o700)
    file.path.mkdir()
    proc = run_cli("logout", "remote", "--config", str(config))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"prefixgate: logout remote: cannot remove {file.label}: Is a directory\n", proc.stderr
    assert file.path.is_dir()


def marker_browser(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """``$BROWSER`` that only records that it was started: serve must never start it."""
    marker = tmp_path / "browser-was-opened"
    script = tmp_path / "marker-browser.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o700)
    return {"BROWSER": str(script)}, marker


async def test_a_login_in_another_process_reaches_the_running_gateway(tmp_path: Path) -> None:
    env, marker = marker_browser(tmp_path)
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        async with gateway(config, env=env) as gw:
            assert await gw.saw("not logged in: run prefixgate login remote")
            import anyio

            said = await anyio.to_thread.run_sync(lambda: login(tmp_path, config))
            assert "logged in" in said

            async def listed() -> bool:
                return "remote__echo" in {t.name for t in (await gw.session.list_tools()).tools}

            await wait_for(listed, 30)
            result = await gw.session.call_tool("remote__echo", {"text": "after login"})
            assert not result.is_error and text(result) == "after login"
            assert_no_secret(tmp_path, gw.stderr())
    assert not marker.exists()


def test_sse_server_logs_in_and_lists(tmp_path: Path) -> None:
    with oauth_server(tmp_path, "--transport", "sse") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "transport": "sse", "auth": "oauth"}})
        assert catalog_json(config)["servers"][0]["status"] == "failed"
        login(tmp_path, config)
        report = catalog_json(config)
    assert report["servers"][0]["status"] == "ready", report["servers"]
    assert {t["original"] for t in report["tools"]} == {"admin", "echo", "hold", "release", "whoami"}


def test_login_asks_for_configured_and_extra_scopes(tmp_path: Path) -> None:
    with oauth_server(tmp_path, "--scopes", "mcp:read,mcp:write,admin") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth", "scopes": ["mcp:write"]}})
        said = login(tmp_path, config, "remote", "--scope", "admin")
    granted = said.split("(scopes: ", 1)[1].split(")", 1)[0].split()
    assert set(granted) >= {"mcp:write", "admin"}


def test_a_new_login_never_narrows_the_grant(tmp_path: Path) -> None:
    """A later login asks for what the stored grant holds too (a step-up's ``--scope`` adds to
    it), so the new tokens never lose a scope an earlier login had."""
    with oauth_server(tmp_path, "--step-up", "admin") as url:  # the server challenges for mcp:read only
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        first = login(tmp_path, config, "remote", "--scope", "admin")
        second = login(tmp_path, config, "remote")

    def granted(said: str) -> set[str]:
        return set(said.split("(scopes: ", 1)[1].split(")", 1)[0].split())

    assert granted(first) == {"mcp:read", "admin"}, first
    assert granted(second) == {"mcp:read", "admin"}, second


def test_a_planted_symlink_or_group_writable_token_file_is_refused(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        saved = token_file.read_bytes()
        decoy = tmp_path / "decoy.json"
        decoy.write_bytes(saved)
        decoy.chmod(0o600)
        token_file.unlink()
        token_file.symlink_to(decoy)
        report = catalog_json(config)
        assert report["servers"][0]["status"] == "failed"
        assert "is a symlink" in report["servers"][0]["error"]
        token_file.unlink()
        token_file.write_bytes(saved)
        token_file.chmod(0o620)
        report = catalog_json(config)
        assert report["servers"][0]["status"] == "failed"
        assert "writable by group or others" in report["servers"][0]["error"]
        token_file.chmod(0o600)
        os.chmod(token_file.parent, 0o750)  # the shared opener tightens our own directory back
        assert catalog_json(config)["servers"][0]["status"] == "ready"
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        moved = token_file.parent.rename(tmp_path / "elsewhere")
        token_file.parent.symlink_to(moved)
        report = catalog_json(config)
        assert report["servers"][0]["status"] == "failed"
        assert "is a symlink" in report["servers"][0]["error"]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("damage", ["garbage", "mode"])
async def test_a_token_file_refused_at_start_names_the_login_that_replaces_it(
    tmp_path: Path, mode: str, damage: str
) -> None:
    """A token file damaged (or left writable by others) before the gateway starts: the server
    is reported down with why, and the others serve. That reason named no fix, and the login
    a user then ran met the same refusal and failed with it; the reason names the login, which
    replaces the file (one line says so), and the running gateway takes its tokens."""
    import anyio

    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}, "local": demo()})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        if damage == "garbage":
            token_file.write_text("{not json")
        else:
            token_file.chmod(0o666)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            refused = await client.call_tool("remote__echo", {"text": "before"})
            assert refused.is_error and f"run {command(config)} to replace it" in text(refused), text(refused)
            assert not (await client.call_tool("local__echo", {"text": "local"})).is_error
            said = await anyio.to_thread.run_sync(lambda: login(tmp_path, config))
            assert "; removed, this login replaces it" in said and "logged in to 'remote'" in said, said

            async def served() -> bool:
                return not (await client.call_tool("remote__echo", {"text": "after"})).is_error

            await wait_for(served, 30)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert_no_secret(tmp_path, errlog.read_text(), said)


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("damage", ["garbage", "symlink"])
async def test_a_token_file_damaged_under_a_running_gateway_costs_no_call(
    tmp_path: Path, mode: str, damage: str
) -> None:
    """The token file edited badly (or replaced by a symlink) while a gateway uses it: the
    tokens read from it before stay in use, one line says why the file was refused, and the
    next refresh writes it whole again. It was an exception inside the HTTP client: the
    connection died, with every call in flight on it, each answered "connection closed"."""
    with oauth_server(tmp_path, "--lifetime", "2") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
            if damage == "garbage":
                token_file.write_text("{not json")
            else:
                decoy = tmp_path / "decoy.json"
                decoy.write_bytes(token_file.read_bytes())
                decoy.chmod(0o600)
                token_file.unlink()
                token_file.symlink_to(decoy)
            result = await client.call_tool("remote__echo", {"text": "damaged"})
            assert not result.is_error and text(result) == "damaged", text(result)
            import anyio

            await anyio.sleep(1.5)  # past the early expiry (half the 2 s lifetime): a refresh
            result = await client.call_tool("remote__echo", {"text": "refreshed"})
            assert not result.is_error and text(result) == "refreshed", text(result)
        assert json.loads(token_file.read_text())["tokens"]["access_token"] == secrets(tmp_path)[-2]
        assert not token_file.is_symlink() and stat.S_IMODE(token_file.stat().st_mode) == 0o600
        refused = [line for line in errlog.read_text().splitlines() if str(token_file) in line]
        assert len(refused) == 1 and "stay in use" in refused[0], refused
        assert_no_secret(tmp_path, errlog.read_text())


@pytest.mark.parametrize("mode", ERAS)
async def test_refreshed_tokens_that_cannot_be_stored_are_used_from_memory(tmp_path: Path, mode: str) -> None:
    """The token directory cannot be written when a refresh comes back (here replaced by a
    symlink; a full disk is the same error): the refresh was done at the authorization server
    (its refresh token used), but the store's error was raised inside the HTTP client, which
    ended the connection with every call on it, and the next one asked for a new login."""
    import anyio

    with oauth_server(tmp_path, "--lifetime", "2") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
            moved = token_file.parent.rename(tmp_path / "elsewhere")
            token_file.parent.symlink_to(moved)
            for round_ in range(2):  # each past the early expiry (1 s): refreshed, never stored
                await anyio.sleep(1.3)
                result = await client.call_tool("remote__echo", {"text": f"round {round_}"})
                assert not result.is_error and text(result) == f"round {round_}", text(result)
        log = errlog.read_text()
        assert "exited" not in log and "connection lost" not in log, log
        assert "used from memory" in log, log
        assert_no_secret(tmp_path, log)


def test_a_changed_url_never_reuses_tokens(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        moved = write_config(tmp_path, {"remote": {"url": url + "/", "auth": "oauth"}})
        report = catalog_json(moved)
    assert report["servers"][0]["status"] == "failed"
    assert "not logged in" in report["servers"][0]["error"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"command": "x", "auth": "oauth"}, "servers.s.auth: not valid for a stdio server (command)"),
        ({"url": "http://h/mcp", "scopes": ["a"]}, "servers.s.scopes: only with auth ="),
        (
            {"url": "http://h/mcp", "auth": "oauth", "client_id": "c", "client_secret": "hunter22"},
            "servers.s.client_secret: must be a ${VAR} reference",
        ),
        ({"url": "http://h/mcp", "auth": "client_credentials"}, "servers.s.client_id: missing"),
        ({"url": "http://h/mcp", "auth": "password"}, "servers.s.auth: expected one of"),
        ({"url": "http://h/mcp", "auth": "oauth", "redirect_port": 70000}, "servers.s.redirect_port: expected a port"),
        (
            {"url": "http://h/mcp", "auth": "oauth", "headers": {"Authorization": "Bearer x"}},
            "servers.s.headers.Authorization: not with auth",
        ),
    ],
)
def test_auth_config_errors_name_the_key(tmp_path: Path, table: dict[str, object], message: str) -> None:
    config = write_config(tmp_path, {"s": table})
    proc = run_cli("catalog", "--config", str(config))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "hunter22" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_doctor_shows_the_auth_state_and_the_fix_never_a_token(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        before = run_cli("doctor", "--config", str(config))
        assert f"remote: not logged in: run {command(config)}" in before.stdout
        assert before.returncode == 1
        login(tmp_path, config)
        after = run_cli("doctor", "--config", str(config), "--log-level", "debug")
        as_json = run_cli("doctor", "--config", str(config), "--json")
    assert "remote: logged in (scopes mcp:read); access token valid until " in after.stdout
    (entry,) = json.loads(as_json.stdout)["auth"]
    assert entry["logged_in"] is True and entry["scopes"] == "mcp:read" and entry["refreshable"] is True
    assert entry["fix"] == command(config)
    assert_no_secret(tmp_path, after.stdout, after.stderr, as_json.stdout, as_json.stderr)


@pytest.mark.parametrize("edit", ["not-a-header", "not-a-token"])
def test_doctor_never_calls_logged_in_what_the_gateway_will_not_use(tmp_path: Path, edit: str) -> None:
    """Stored tokens the gateway ignores (as logged out: an access token with a newline, a
    record that is no token) were shown by ``doctor`` as "logged in ... valid until", beside
    the server's own "not logged in" failure."""
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        record = json.loads(token_file.read_text())
        access = record["tokens"]["access_token"]
        record["tokens"]["access_token"] = access + "\n" if edit == "not-a-header" else 5
        token_file.write_text(json.dumps(record))
        doctor = run_cli("doctor", "--config", str(config))
        as_json = run_cli("doctor", "--config", str(config), "--json")
    lines = [line for line in doctor.stdout.splitlines() if "remote:" in line and "logged" in line]
    assert not any("logged in (" in line for line in lines), lines
    why = "not a valid HTTP header value" if edit == "not-a-header" else "not a valid token record"
    assert any(line.split()[0] == "FAIL" and why in line and command(config) in line for line in lines), lines
    (entry,) = json.loads(as_json.stdout)["auth"]
    assert entry["logged_in"] is False and why in entry["error"]
    assert_no_secret(tmp_path, doctor.stdout, doctor.stderr, as_json.stdout, as_json.stderr)


def test_a_server_that_asks_for_no_login_works_without_one(tmp_path: Path) -> None:
    from tests.helpers import GATEWAY

    with url_process([*GATEWAY, "demo-server", "--transport", "http", "--tools", "1"]) as (url, _proc):
        config = write_config(tmp_path, {"open": {"url": url, "auth": "oauth"}})
        report = catalog_json(config)
    assert report["servers"][0]["status"] == "ready"
    assert token_files(config) == []


@pytest.mark.parametrize("mode", ERAS)
async def test_client_credentials_needs_no_browser_and_renews_itself(tmp_path: Path, mode: str) -> None:
    secret = "svc-secret-" + os.urandom(8).hex()
    with oauth_server(tmp_path, "--lifetime", "2", "--client-credentials", f"svc:{secret}") as url:
        table = {"url": url, "auth": "client_credentials", "client_id": "svc", "client_secret": "${SVC_SECRET}"}
        config = write_config(tmp_path, {"remote": table})
        env = {"SVC_SECRET": secret}
        async with sdk_client(config, mode, env=env) as client:
            import anyio

            for round_ in range(3):
                if round_:
                    await anyio.sleep(1.5)  # past the early expiry (half the 2 s lifetime): renewed
                result = await client.call_tool("remote__whoami", {})
                assert not result.is_error, text(result)
                assert "client=svc" in text(result)
        proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "debug", env=env)
        assert json.loads(proc.stdout)["servers"][0]["status"] == "ready", proc.stderr
        time.sleep(EXPIRED)  # the token that run stored has expired (--lifetime 2): a new one needs the secret
        wrong = run_cli("catalog", "--config", str(config), "--json", env={"SVC_SECRET": "wrong-secret-value"})
        assert json.loads(wrong.stdout)["servers"][0]["status"] == "failed"
        doctor = run_cli("doctor", "--config", str(config), env=env)
        assert "remote: client_credentials as client 'svc'" in doctor.stdout
    for output in (proc.stdout, proc.stderr, wrong.stdout, wrong.stderr, doctor.stdout, doctor.stderr):
        assert secret not in output
    assert_no_secret(tmp_path, proc.stdout, proc.stderr, doctor.stdout)


async def test_step_up_fails_that_call_with_the_command_and_a_wider_login_fixes_it_without_restart(
    tmp_path: Path,
) -> None:
    with oauth_server(tmp_path, "--step-up", "admin") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        async with gateway(config) as gw:
            refused = await gw.session.call_tool("remote__admin", {})
            assert refused.is_error
            assert "needs a wider grant (scope admin; step-up)" in text(refused)
            assert f'{command(config)} --scope "admin"' in text(refused)
            still = await gw.session.call_tool("remote__echo", {"text": "still here"})
            assert not still.is_error and text(still) == "still here"  # one tool's step-up, not the server's
            import anyio

            said = await anyio.to_thread.run_sync(lambda: login(tmp_path, config, "remote", "--scope", "admin"))
            assert "admin" in said
            done = await gw.session.call_tool("remote__admin", {})
            assert not done.is_error and text(done) == "admin done"
            whoami = await gw.session.call_tool("remote__whoami", {})
            assert "admin" in text(whoami).split("scopes=", 1)[1]
            assert_no_secret(tmp_path, gw.stderr())


async def test_logout_reaches_a_running_gateway(tmp_path: Path) -> None:
    env, marker = marker_browser(tmp_path)
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        async with gateway(config, env=env) as gw:
            ok = await gw.session.call_tool("remote__echo", {"text": "in"})
            assert not ok.is_error
            assert run_cli("logout", "remote", "--config", str(config)).returncode == 0
            gone = await gw.session.call_tool("remote__echo", {"text": "out"})
            assert gone.is_error and f"not logged in: run {command(config)}" in text(gone)
        assert token_files(config) == []  # the running gateway wrote nothing back
    assert not marker.exists()  # and opened no browser


def test_a_refused_refresh_is_failed_with_the_login_command(tmp_path: Path) -> None:
    from gateway.state.oauthtokens import TokenFile

    with oauth_server(tmp_path, "--lifetime", "1") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        time.sleep(1.5)  # the access token is expired at the server too
        file = TokenFile(tmp_path / "state", "remote", url)
        record = file.read()
        assert record is not None
        record["tokens"]["refresh_token"] = "rt-revoked"
        record["expires_at"] = 1.0  # long expired: a refresh comes first, and is refused
        file.write(record)
        report = catalog_json(config)
    (server,) = report["servers"]
    assert server["status"] == "failed"
    assert server["error"].startswith("needs a new login") and server["error"].endswith(f"run {command(config)}")


@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_the_server_dropped_is_refreshed_once_and_the_call_goes_through(
    tmp_path: Path, mode: str
) -> None:
    """A 401 on an access token that has not expired by its own account (the server restarted,
    revoked it, or its clock runs ahead): the refresh token still works, so the gateway
    refreshes once and resends; only a refused refresh asks for a new login."""
    with oauth_server(tmp_path, "--revocable") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        async with sdk_client(config, mode) as client:
            assert not (await client.call_tool("remote__whoami", {})).is_error
            issued = len(secrets(tmp_path))
            assert text(await client.call_tool("remote__revoke", {})) == "revoked"
            result = await client.call_tool("remote__echo", {"text": "after"})
            assert not result.is_error and text(result) == "after", text(result)
            assert len(secrets(tmp_path)) == issued + 2  # one refresh: an access and a refresh token
            assert text(await client.call_tool("remote__revoke", {"everything": True})) == "revoked"
            refused = await client.call_tool("remote__echo", {"text": "again"})
            assert refused.is_error and "needs a new login" in text(refused), text(refused)
            assert command(config) in text(refused)
            assert len(secrets(tmp_path)) == issued + 2  # the refused refresh issued nothing


@pytest.mark.parametrize("mode", ERAS)
async def test_a_refused_refresh_token_is_not_sent_again_until_a_new_login(tmp_path: Path, mode: str) -> None:
    """A refresh token the authorization server refused (revoked, expired) was sent again by
    every later call, each of which then waited ``FOLLOW_WAIT`` (2 s) for another process's
    tokens before failing. The first call still waits once; later ones fail at once with the
    same reason, the refused token not sent; a new login's tokens are taken as they come."""
    with oauth_server(tmp_path, "--revocable") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        async with sdk_client(config, mode) as client:
            assert not (await client.call_tool("remote__whoami", {})).is_error
            assert text(await client.call_tool("remote__revoke", {"everything": True})) == "revoked"
            first = await client.call_tool("remote__echo", {"text": "one"})
            assert first.is_error and "needs a new login" in text(first), text(first)
            refused = presented(tmp_path)
            assert len(refused) == 1, refused
            for attempt in ("two", "three"):
                again = await client.call_tool("remote__echo", {"text": attempt})
                assert again.is_error and text(again) == text(first), text(again)
            assert presented(tmp_path) == refused  # not sent again
            login(tmp_path, config)
            result = await client.call_tool("remote__echo", {"text": "after login"})
            assert not result.is_error and text(result) == "after login", text(result)


def test_the_example_configs_oauth_tables_are_valid(tmp_path: Path) -> None:
    from gateway.config import load_config

    example = (Path(__file__).resolve().parent.parent / "config.example.toml").read_text()
    start = example.index("# [servers.issues]")
    lines = example[start:].splitlines()
    tables = "\n".join(line[2:] for line in lines if re.match(r"# (\[|[a-z_]+ = )", line))
    path = tmp_path / "oauth.toml"
    path.write_text(tables)
    config = load_config(path, env={"ISSUES_CLIENT_SECRET": "s1", "CI_CLIENT_SECRET": "s2"})
    issues, ci = sorted(config.servers, key=lambda s: s.id != "issues")
    assert (issues.auth, issues.scopes, issues.redirect_port) == ("oauth", ("issues:read",), 8765)
    assert (ci.auth, ci.client_id, ci.client_secret) == ("client_credentials", "svc-ci", "s2")


@pytest.mark.parametrize("mode", ERAS)
async def test_login_of_a_server_that_lists_its_tools_to_anyone_asks_for_the_login_its_calls_need(
    tmp_path: Path, mode: str
) -> None:
    """A server that serves initialize and tools/list without a token and refuses a call
    without one (publishing its protected-resource metadata): the gateway said "not logged in:
    run prefixgate login ...", and that login, whose connection got through without a 401,
    said "asked for no login (nothing stored)", so no call of the server could ever be made.
    The login starts the flow as a call's 401 would."""
    with oauth_server(tmp_path, "--open-listing") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        said = login(tmp_path, config)
        assert "logged in to 'remote' (scopes: mcp:read)" in said, said
        async with sdk_client(config, mode) as client:
            result = await client.call_tool("remote__echo", {"text": "called"})
            assert not result.is_error and text(result) == "called", text(result)
        assert_no_secret(tmp_path, said)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_login_reaches_a_gateway_connected_without_a_token(tmp_path: Path, mode: str) -> None:
    """The same server under a gateway started before the login: its connection needed no
    token, so it stayed up and was never made again, and every call kept failing with "not
    logged in" after the login. The next request after the token file appears takes it."""
    import anyio

    with oauth_server(tmp_path, "--open-listing") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            refused = await client.call_tool("remote__echo", {"text": "before"})
            assert refused.is_error and f"not logged in: run {command(config)}" in text(refused), text(refused)
            said = await anyio.to_thread.run_sync(lambda: login(tmp_path, config))
            assert "logged in to 'remote'" in said, said
            result = await client.call_tool("remote__echo", {"text": "after"})
            assert not result.is_error and text(result) == "after", text(result)
        assert_no_secret(tmp_path, errlog.read_text())


def test_doctor_tells_a_server_whose_calls_want_a_login_from_one_that_wants_none(tmp_path: Path) -> None:
    """``doctor`` said "not logged in, and the server asked for no login" (info) of a server
    that lists its tools to anyone but refuses a call without a token, whose calls could
    then never be made. Its protected-resource metadata tells the two apart."""
    from tests.helpers import GATEWAY

    with (
        oauth_server(tmp_path, "--open-listing") as url,
        url_process([*GATEWAY, "demo-server", "--transport", "http", "--tools", "1"]) as (open_url, _proc),
    ):
        config = write_config(
            tmp_path, {"remote": {"url": url, "auth": "oauth"}, "open": {"url": open_url, "auth": "oauth"}}
        )
        doctor = run_cli("doctor", "--config", str(config))
    lines = [line for line in doctor.stdout.splitlines() if "not logged in" in line]
    wants = "remote: not logged in: the server lists its tools to anyone, but publishes OAuth metadata"
    assert any(wants in line and f"run {command(config)}" in line for line in lines), doctor.stdout
    assert any("open: not logged in, and the server asked for no login" in line for line in lines), doctor.stdout
    assert len(lines) == 2, doctor.stdout


def test_login_of_a_server_that_asks_for_none_stores_nothing(tmp_path: Path) -> None:
    from tests.helpers import GATEWAY

    with url_process([*GATEWAY, "demo-server", "--transport", "http", "--tools", "1"]) as (url, _proc):
        config = write_config(tmp_path, {"open": {"url": url, "auth": "oauth"}})
        said = login(tmp_path, config, "open")
    assert "'open' asked for no login (nothing stored)" in said
    assert token_files(config) == []


@pytest.mark.parametrize("mode", ERAS)
async def test_an_http_gateway_refreshes_behind_both_eras(tmp_path: Path, mode: str) -> None:
    from tests.helpers import http_gateway

    with oauth_server(tmp_path, "--lifetime", "2") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        with http_gateway(config) as (gateway_url, stderr):
            async with sdk_client(gateway_url, mode) as client:
                import anyio

                for round_ in range(3):
                    if round_:
                        await anyio.sleep(1.5)  # past the early expiry (half the 2 s lifetime): a refresh
                    result = await client.call_tool("remote__echo", {"text": f"http {round_}"})
                    assert not result.is_error and text(result) == f"http {round_}", text(result)
            assert_no_secret(tmp_path, stderr.read_text())


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_held_by_a_json_answering_server_holds_up_no_other_call(tmp_path: Path, mode: str) -> None:
    """A server that answers each POST with JSON sends nothing until the call's result: the
    SDK's OAuth flow held its lock that long, so one agent's slow call held up every other
    call to that server, another agent's too (here the call that would end the first)."""
    from tests.helpers import http_gateway

    with oauth_server(tmp_path, "--json-response") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        with http_gateway(config) as (gateway_url, _stderr):
            async with sdk_client(gateway_url, mode) as first, sdk_client(gateway_url, mode) as second:
                import anyio

                held: list[str] = []

                async def hold() -> None:
                    held.append(text(await first.call_tool("remote__hold", {})))

                with anyio.fail_after(30):  # (a guard against the hang, not a timing)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(hold)
                        await anyio.sleep(0.5)  # the hold is on its way first
                        assert text(await second.call_tool("remote__release", {})) == "done"
                assert held == ["released"]


def test_a_token_that_is_not_a_header_value_is_refused_and_never_printed(tmp_path: Path) -> None:
    """Issue 26, item 4: an authorization server that answers ``"access_token": "at-...\\n"``.
    The token is refused before it is stored, and no output (login, catalog, doctor) quotes it."""
    with oauth_server(tmp_path, "--sloppy") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        proc = run_cli("login", "remote", "--config", str(config), "--timeout", "60", env=browser(tmp_path))
        report = run_cli("catalog", "--json", "--config", str(config))
        doctor = run_cli("doctor", "--config", str(config))
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "not a valid HTTP header value" in said, said[-2000:]
    assert "Traceback" not in said and "Illegal header value" not in said
    stored = "".join(p.read_text() for p in token_files(config))  # the registration, not the token
    assert '"tokens"' not in stored and "at-" not in stored
    assert_no_secret(tmp_path, said, report.stdout + report.stderr, doctor.stdout + doctor.stderr)


@pytest.mark.parametrize("how", ["--huge-metadata", "--gzip-metadata"])
def test_a_huge_metadata_document_is_refused_with_one_line(tmp_path: Path, how: str) -> None:
    """Issue 26, item 5: discovery answers are read up to 1 MiB (here 5 MB, chunked, no length).
    Gzip-encoded (5 KB on the wire) it was counted as sent and decoded whole after: the cap
    counts the decoded bytes now."""
    with oauth_server(tmp_path, how) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        proc = run_cli("login", "remote", "--config", str(config), "--timeout", "30", env=browser(tmp_path))
        report = catalog_json(config)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "larger than 1024 KiB; refused" in said, said[-2000:]
    assert "Traceback" not in said
    (server,) = report["servers"]
    assert server["status"] == "failed"


def test_a_huge_token_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """Issue 26, item 11: a huge token would be written to a file every later read refuses
    (a 200 KB one here; a 10 MB answer is refused before it is parsed, as any over 1 MiB)."""
    with oauth_server(tmp_path, "--huge-token") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        proc = run_cli("login", "remote", "--config", str(config), "--timeout", "60", env=browser(tmp_path))
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "an access token of 2048" in said and "characters (at most 16384)" in said
    assert len(said) < 10_000 and all(p.stat().st_size < 100_000 for p in token_files(config))


def test_a_huge_scope_is_never_asked_for(tmp_path: Path) -> None:
    """Issue 26, item 11: a 60 KB scope list (what the server names in WWW-Authenticate) is not
    copied into the authorization URL or stored."""
    scopes = ",".join(f"scope-{n:05d}" for n in range(5000))  # 55 KB
    with oauth_server(tmp_path, "--scopes", scopes) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        proc = run_cli("login", "remote", "--config", str(config), "--timeout", "30", env=browser(tmp_path))
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "characters long (at most 4096)" in said, said[-1500:]
    assert "scope-04999" not in said and len(said) < 10_000


FORGER = """#!{python}
import sys, urllib.parse, httpx2
query = urllib.parse.parse_qs(urllib.parse.urlparse(sys.argv[1]).query)
callback = query["redirect_uri"][0]
forged = {forged!r}
httpx2.get(callback + "?" + urllib.parse.urlencode(forged), timeout=30)
"""


@pytest.mark.parametrize("kind", ["escape", "state"])
def test_a_forged_redirect_is_reported_escaped_and_without_the_expected_state(tmp_path: Path, kind: str) -> None:
    """Issue 26, item 11: any local process can reach the callback first. Its text is printed
    escaped (no ESC or CR reaches the terminal); a wrong ``state`` is not answered with the right one."""
    forged = (
        {"error": "access_denied", "error_description": "\x1b[2J\rprefixgate: logged in to 'remote'"}
        if kind == "escape"
        else {"code": "forged-code", "state": "not-the-state"}
    )
    script = tmp_path / "forger.py"
    script.write_text(FORGER.format(python=PYTHON, forged=forged))
    script.chmod(0o700)
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        proc = run_cli("login", "remote", "--config", str(config), "--timeout", "30", env={"BROWSER": str(script)})
    said = [line for line in proc.stderr.splitlines() if line.startswith("prefixgate: login remote: ")]
    assert proc.returncode != 0 and len(said) == 1, proc.stderr[-1500:]
    last = said[0]
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr
    if kind == "escape":
        assert "access_denied" in last and "\\u001b[2J" in last
    else:
        state = re.search(r"[?&]state=([^&\s]+)", proc.stderr).group(1)  # type: ignore[union-attr]
        assert "not this login's" in last and state not in last and "!=" not in last


def test_an_answer_that_is_not_utf8_is_named_plainly() -> None:
    from gateway.downstream.errors import short as _short

    said = _short(UnicodeDecodeError("utf-8", b"\xff\xfe", 0, 1, "invalid start byte"))
    assert said == "UnicodeDecodeError: an answer that is not UTF-8 text (byte 0)"


@pytest.mark.parametrize("grant", ["oauth", "client_credentials"])
async def test_a_new_process_refreshes_at_the_authorization_server_not_the_resource(tmp_path: Path, grant: str) -> None:
    """The MCP server (the resource) and its authorization server on different origins, as for
    most hosted servers. The login (or another run) stored tokens; a new gateway process had not
    discovered the authorization server, so the SDK sent the refresh token (and the client's
    secret) to the resource's own /token, which failed the call as "needs a new login". Where
    the tokens came from is now stored with them."""
    import anyio

    with fronted_with_tokens(tmp_path, grant) as (config, env, front_log):
        await anyio.sleep(EXPIRED)  # expired: the next process refreshes before its first request
        for process in range(2):  # two processes, each refreshing first
            async with sdk_client(config, "auto", env=env) as client:
                for call in range(2):
                    result = await client.call_tool("remote__echo", {"text": "hi"})
                    assert not result.is_error and text(result) == "hi", text(result)
                    if (process, call) != (1, 1):  # (after the last call nothing is left to refresh)
                        await anyio.sleep(1.5)  # past the early expiry: the next call refreshes first
        assert not front_log.exists(), front_log.read_text()  # nothing but the MCP endpoint was asked there
    refreshed = [json.loads(line) for line in (tmp_path / "secrets.log").read_text().splitlines()]
    assert sum(entry["kind"] == "access_token" for entry in refreshed) >= 3


@contextmanager
def fronted_with_tokens(tmp_path: Path, grant: str, *extra: str) -> Iterator[tuple[Path, dict[str, str], Path]]:
    """The test server as a resource on its own origin (``--front``) with its authorization
    server on another, tokens lasting 2 s, and a config whose ``grant`` has stored tokens (a
    login, or a first run of the headless grant): yields the config, the environment its
    processes need, and the front's log of anything asked there but the MCP endpoint."""
    secret = "svc-secret-" + os.urandom(8).hex()
    front_log = tmp_path / "front.log"
    args = ["--lifetime", "2", "--front", "--client-credentials", f"svc:{secret}", *extra]
    with url_process(
        [PYTHON, SERVER, *args],
        env={"OAUTH_SERVER_LOG": str(tmp_path / "secrets.log"), "OAUTH_FRONT_LOG": str(front_log)},
    ) as (url, _):
        table: dict[str, object] = {"url": url, "auth": grant}
        env = {"SVC_SECRET": secret}
        if grant == "client_credentials":
            table |= {"client_id": "svc", "client_secret": "${SVC_SECRET}"}
        config = write_config(tmp_path, {"remote": table})
        if grant == "oauth":
            login(tmp_path, config)
        else:  # a first run stores a token (and its refresh token)
            assert catalog_json_env(config, env)["servers"][0]["status"] == "ready"
        yield config, env, front_log


def catalog_json_env(config: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = run_cli("catalog", "--config", str(config), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


async def test_a_token_endpoint_outage_is_named_as_one_and_the_next_call_refreshes(tmp_path: Path) -> None:
    """A 503 from the token endpoint when a refresh was due read "needs a new login (the stored
    tokens were refused ...)": a login would not have helped, and the next call got through."""
    import anyio

    with oauth_server(tmp_path, "--lifetime", "2", "--outages") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        async with sdk_client(config, "auto") as client:
            # down for 3 s: the refresh below comes 1.5 s in (EXPIRED), the call after it 3.5 s in
            assert text(await client.call_tool("remote__token_outage", {"seconds": 3})) == "down"
            await anyio.sleep(EXPIRED)  # expired: the next call refreshes, and the endpoint is down
            down = await client.call_tool("remote__echo", {"text": "now"})
            assert down.is_error and "token endpoint answered HTTP 503" in text(down), text(down)
            assert "new login" not in text(down)
            await anyio.sleep(2)  # the outage is over
            again = await client.call_tool("remote__echo", {"text": "later"})
            assert not again.is_error and text(again) == "later", text(again)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_refresh_answered_200_without_tokens_is_named_as_such_not_a_login(tmp_path: Path, mode: str) -> None:
    """The token endpoint answering a refresh with 200 and no tokens (a proxy's sign-in page,
    a broken JSON): the call read "needs a new login (the stored tokens were refused ...)",
    though nothing refused them and the next call got through without one."""
    import anyio

    page = tmp_path / "page.html"
    with oauth_server(tmp_path, "--lifetime", "2", "--token-page", str(page)) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
            page.write_text("<html>sign in to the network</html>")
            await anyio.sleep(EXPIRED)  # expired: the next call refreshes first
            failed = await client.call_tool("remote__echo", {"text": "page"})
            said = text(failed)
            assert failed.is_error and "needs a new login" not in said, said
            assert said.endswith(
                "its authorization server's token endpoint answered HTTP 200 without tokens (text/html);"
                " the next call tries again"
            ), said
            page.unlink()
            later = await client.call_tool("remote__echo", {"text": "later"})
            assert not later.is_error and text(later) == "later", text(later)
        log = errlog.read_text()
        assert "Traceback" not in log and "connection lost" not in log, log
        assert_no_secret(tmp_path, log, said)


@pytest.mark.parametrize("mode", ERAS)
async def test_an_authorization_server_out_of_reach_costs_the_call_not_the_connection(
    tmp_path: Path, mode: str
) -> None:
    """The authorization server (on a host of its own, as most are) cannot be reached when a
    refresh is due, while the MCP server is up: the connect error was raised inside the HTTP
    client, so the connection ended with every call in flight on it, and the server was
    reported down ("ConnectError") though it was not. Now that call fails naming the
    authorization server, and the next call, the server in reach again, refreshes."""
    import anyio

    from tests.helpers import free_port

    with oauth_server(tmp_path, "--lifetime", "4") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "in reach"})).is_error
            record = json.loads(token_file.read_text())
            metadata = record["discovery"]["authorization_server"]
            kept, metadata["token_endpoint"] = metadata["token_endpoint"], f"http://127.0.0.1:{free_port()}/token"
            token_file.write_text(json.dumps(record))  # (a new file: the gateway reads it again)
            await anyio.sleep(max(0.0, record["expires_at"] - 2 - time.time()) + 0.3)  # early expiry: 2 s before
            down = await client.call_tool("remote__echo", {"text": "out of reach"})
            assert down.is_error and "authorization server" in text(down) and "could not be reached" in text(down)
            assert "new login" not in text(down), text(down)
            metadata["token_endpoint"] = kept
            token_file.write_text(json.dumps(record))
            again = await client.call_tool("remote__echo", {"text": "again"})
            assert not again.is_error and text(again) == "again", text(again)
        assert "exited" not in errlog.read_text() and "connection lost" not in errlog.read_text()


@pytest.mark.parametrize("mode", ERAS)
async def test_an_authorization_server_that_never_answers_costs_seconds_not_minutes(tmp_path: Path, mode: str) -> None:
    """A token endpoint that takes the request and never answers: the refresh waited for the
    connection's read timeout (300 s, meant for event streams), holding every call that needed
    a token, each ending at its call_timeout with "timed out" and no word of why. Serve's own
    OAuth requests have a timeout of their own ($PREFIXGATE_OAUTH_TIMEOUT, 30 s; 1 s here)."""
    import socket

    with oauth_server(tmp_path, "--lifetime", "4") as url, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections are taken (the kernel's backlog), never answered
        table = {"url": url, "auth": "oauth", "call_timeout": 15}
        config = write_config(tmp_path, {"remote": table})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        env = {"PREFIXGATE_OAUTH_TIMEOUT": "1"}
        async with sdk_client(config, mode, env=env) as client:
            assert not (await client.call_tool("remote__echo", {"text": "in reach"})).is_error
            record = json.loads(token_file.read_text())
            metadata = record["discovery"]["authorization_server"]
            metadata["token_endpoint"] = f"http://127.0.0.1:{silent.getsockname()[1]}/token"
            token_file.write_text(json.dumps(record))
            import anyio

            await anyio.sleep(max(0.0, record["expires_at"] - 2 - time.time()) + 0.3)  # early expiry: 2 s before
            down = await client.call_tool("remote__echo", {"text": "silence"})
            assert down.is_error and "authorization server could not be reached" in text(down), text(down)
            assert "no answer within 1 s" in text(down), text(down)


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("answer", ["sloppy", "huge"])
async def test_a_refresh_answered_with_tokens_that_cannot_be_sent_costs_the_call_not_the_connection(
    tmp_path: Path, mode: str, answer: str
) -> None:
    """The authorization server answers a refresh with an access token that cannot go into a
    header (a newline): it is refused before it is stored, as at login, but the refusal was
    raised inside the HTTP client, so the connection ended with every call in flight on it
    ("connection closed") and the reason was left in the log. So did an answer declaring
    10 MB (refused unread). Now that call fails with the reason; the refused token is never
    sent, and the connection stays."""
    import anyio

    with oauth_server(tmp_path, "--lifetime", "4", "--sloppy-later") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            tool = "remote__go_sloppy" if answer == "sloppy" else "remote__huge_token_answers"
            assert text(await client.call_tool(tool, {})) == answer
            expires_at = json.loads(token_file.read_text())["expires_at"]
            await anyio.sleep(max(0.0, expires_at - 2 - time.time()) + 0.3)  # early expiry: 2 s before
            refused = await client.call_tool("remote__echo", {"text": "sloppy"})
            why = "not a valid HTTP header value" if answer == "sloppy" else "is 10485760 bytes, over 1024 KiB"
            assert refused.is_error and why in text(refused), text(refused)
            again = await client.call_tool("remote__echo", {"text": "again"})
            # sloppy: its refresh token was used, a login is needed; huge: the next refresh meets the same
            assert again.is_error and (command(config) if answer == "sloppy" else why) in text(again), text(again)
        log = errlog.read_text()
        assert "exited" not in log and "connection lost" not in log, log
        assert_no_secret(tmp_path, log, text(refused), text(again))


async def test_a_call_arriving_during_another_calls_outage_does_not_change_its_reason(tmp_path: Path) -> None:
    """Each call's OAuth flow kept what its refresh met (503, out of reach) on the connection,
    and every new request cleared it: a call made while another's flow was still discovering
    turned that one's "token endpoint answered HTTP 503" into "needs a new login"."""
    import anyio

    with oauth_server(tmp_path, "--lifetime", "2", "--outages", "--slow-discovery", "0.6") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        async with sdk_client(config, "legacy") as client:
            assert text(await client.call_tool("remote__token_outage", {"seconds": 30})) == "down"
            await anyio.sleep(EXPIRED)  # expired: the next call refreshes, and the endpoint is down
            answers: list[str] = []

            async def call(label: str) -> None:
                answers.append(text(await client.call_tool("remote__echo", {"text": label})))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "first")
                await anyio.sleep(0.3)  # the first is discovering (0.6 s) after its refused refresh
                tg.start_soon(call, "second")
    assert len(answers) == 2
    for answer in answers:
        assert "token endpoint answered HTTP 503" in answer and "new login" not in answer, answers


async def test_two_gateways_on_one_token_store_share_rotating_refreshes(tmp_path: Path) -> None:
    """Two gateways (or a gateway and a catalog run) on the same state, the server rotating
    refresh tokens: when both refresh at once one is refused, and its call failed with "needs a
    new login" though the other had just stored fresh tokens. It now takes those."""
    import anyio

    with oauth_server(tmp_path, "--lifetime", "2") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        failed: list[str] = []
        async with sdk_client(config, "auto") as one, sdk_client(config, "legacy") as two:
            for round_ in range(3):
                await anyio.sleep(EXPIRED)  # expired in both: each call below refreshes first, at once

                async def call(client: Any, said: str) -> None:
                    result = await client.call_tool("remote__echo", {"text": said})
                    if result.is_error or text(result) != said:
                        failed.append(text(result))

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call, one, f"one {round_}")
                        tg.start_soon(call, two, f"two {round_}")
        assert failed == []


@pytest.mark.parametrize("mode", ERAS)
async def test_resource_metadata_answering_5xx_during_a_run_costs_the_call_not_the_connection(
    tmp_path: Path, mode: str
) -> None:
    """A 401 the refresh cannot answer (every token dropped at the server) sends the flow to
    discover again, and the MCP server's own protected-resource metadata answered 503: the
    SDK raised inside the HTTP client, which ended the connection and every call on it. Now
    that call fails saying so; the next one finds the flow again, and a login made meanwhile
    is taken without a reconnect."""
    import anyio

    outage = tmp_path / "metadata-outage"
    with oauth_server(tmp_path, "--revocable", "--metadata-outage", str(outage)) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            outage.touch()
            assert text(await client.call_tool("remote__revoke", {"everything": True})) == "revoked"
            down = await client.call_tool("remote__echo", {"text": "down"})
            said = text(down)
            assert down.is_error and "Protected resource metadata request failed: HTTP 503" in said, said
            assert "closed" not in said, said
            outage.unlink()
            await anyio.to_thread.run_sync(lambda: login(tmp_path, config))
            again = await client.call_tool("remote__echo", {"text": "again"})
            assert not again.is_error and text(again) == "again", text(again)
        log = errlog.read_text()
        assert "exited" not in log and "connection lost" not in log, log
        assert sum("HTTP 503" in line for line in log.splitlines()) == 1, log
        assert_no_secret(tmp_path, log, said)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_registration_that_cannot_be_stored_is_kept_in_memory_and_costs_at_most_the_call(
    tmp_path: Path, mode: str
) -> None:
    """The stored tokens have no client beside them (a login with a pre-registered client_id,
    since removed from the config), so a 401 the gateway cannot refresh sends the flow to
    register a client; the token directory refuses the write (a full disk is the same error).
    The store's error was raised inside the HTTP client and ended the connection with every
    call on it. Now the registration is kept in memory with one warning (the next call uses
    it, registering nothing), that call fails with the login command, and the connection stays."""
    with oauth_server(tmp_path, "--revocable") as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        record = json.loads(token_file.read_text())
        del record["client"]
        token_file.write_text(json.dumps(record))
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
            moved = token_file.parent.rename(tmp_path / "elsewhere")
            token_file.parent.symlink_to(moved)
            assert text(await client.call_tool("remote__revoke", {})) == "revoked"
            for said in ("refused", "again"):
                refused = await client.call_tool("remote__echo", {"text": said})
                assert refused.is_error and command(config) in text(refused), text(refused)
                assert "closed" not in text(refused) and "not connected" not in text(refused), text(refused)
        log = errlog.read_text()
        assert "exited" not in log and "connection lost" not in log, log
        kept = [line for line in log.splitlines() if "client registration" in line]
        assert len(kept) == 1 and "used from memory" in kept[0], log
        assert_no_secret(tmp_path, log, text(refused))


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("grant", ["oauth", "client_credentials"])
async def test_a_token_endpoint_redirecting_to_another_origin_costs_the_call_and_is_not_followed(
    tmp_path: Path, mode: str, grant: str
) -> None:
    """The token endpoint answers a refresh with a redirect to another origin (here the MCP
    server's own, which logs whatever reaches it): the connection ended with every call on it.
    Now that call fails saying so, nothing (no refresh token, no client secret) is sent to the
    other origin, and the next call, the redirect gone, refreshes."""
    import anyio

    redirect = tmp_path / "token-redirect"
    front_log = tmp_path / "front.log"
    secret = "svc-secret-" + os.urandom(8).hex()
    args = ["--lifetime", "4", "--front", "--token-redirect", str(redirect), "--client-credentials", f"svc:{secret}"]
    with url_process(
        [PYTHON, SERVER, *args],
        env={"OAUTH_SERVER_LOG": str(tmp_path / "secrets.log"), "OAUTH_FRONT_LOG": str(front_log)},
    ) as (url, _):
        table: dict[str, object] = {"url": url, "auth": grant}
        if grant == "client_credentials":
            table |= {"client_id": "svc", "client_secret": "${SVC_SECRET}"}
        config = write_config(tmp_path, {"remote": table})
        env = {"SVC_SECRET": secret}
        if grant == "oauth":
            login(tmp_path, config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, env=env, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
            front = url.rsplit("/", 1)[0]
            redirect.write_text(front + "/token")
            (token_file,) = token_files(config)
            expires_at = json.loads(token_file.read_text())["expires_at"]
            await anyio.sleep(max(0.0, expires_at - 2 - time.time()) + 0.3)  # early expiry: 2 s before
            refused = await client.call_tool("remote__echo", {"text": "redirected"})
            said = text(refused)
            assert refused.is_error and "307" in said and f"{front}/token" in said and "not followed" in said, said
            assert "new login" not in said and "closed" not in said, said
            assert not front_log.exists(), front_log.read_text()
            redirect.unlink()
            again = await client.call_tool("remote__echo", {"text": "again"})
            assert not again.is_error and text(again) == "again", text(again)
        log = errlog.read_text()
        assert "exited" not in log and "connection lost" not in log, log
        assert_no_secret(tmp_path, log, said)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_logout_during_a_refresh_is_not_undone_by_it(tmp_path: Path, mode: str) -> None:
    """``prefixgate logout`` removes the token file while a running gateway's refresh is on its
    way: the refreshed tokens were written back (the logout undone, the gateway going on with
    them). They are now neither stored nor used: that call and the next say "not logged in"."""
    import anyio

    hold = tmp_path / "hold-token"
    with oauth_server(tmp_path, "--lifetime", "4", "--hold-token", str(hold)) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
            hold.touch()
            expires_at = json.loads(token_file.read_text())["expires_at"]
            await anyio.sleep(max(0.0, expires_at - 2 - time.time()) + 0.3)  # early expiry: 2 s before
            answers: list[Any] = []

            async def call() -> None:
                answers.append(await client.call_tool("remote__echo", {"text": "during"}))

            with anyio.fail_after(60):  # (a guard against a hang, not a timing)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await wait_for(lambda: Path(str(hold) + ".held").exists(), 30)  # the refresh is held
                    out = await anyio.to_thread.run_sync(lambda: run_cli("logout", "remote", "--config", str(config)))
                    assert out.returncode == 0 and "stored tokens are removed" in out.stdout, out.stdout + out.stderr
                    hold.unlink()
            assert token_files(config) == [], "the refresh wrote the tokens back"
            (during,) = answers
            assert during.is_error and f"not logged in: run {command(config)}" in text(during), text(during)
            after = await client.call_tool("remote__echo", {"text": "after"})
            assert after.is_error and f"not logged in: run {command(config)}" in text(after), text(after)
        assert token_files(config) == []
        assert_no_secret(tmp_path, errlog.read_text())


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("client", ["bound", "unbound"])
async def test_a_resource_naming_another_authorization_server_gets_none_of_its_credentials(
    tmp_path: Path, mode: str, client: str
) -> None:
    """A hostile (or taken over) MCP server answers 401 and names, in its protected-resource
    metadata, an authorization server on another origin. The SDK's flow registered a client
    there (dropping the stored one, bound to its own issuer) and, reloading the stored tokens,
    sent it the refresh token at the next refresh. A gateway, which never logs in, now sends
    nothing there, for a client bound to no issuer either (stored before binding, or
    pre-registered): the call fails naming it, and the next refresh goes where the tokens
    came from."""
    import anyio

    hostile = tmp_path / "hostile"
    evil_log = tmp_path / "evil.log"
    with url_process(
        [PYTHON, SERVER, "--lifetime", "4", "--hostile", str(hostile)],
        env={"OAUTH_SERVER_LOG": str(tmp_path / "secrets.log"), "OAUTH_EVIL_LOG": str(evil_log)},
    ) as (url, _):
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        (token_file,) = token_files(config)
        record = json.loads(token_file.read_text())
        if client == "unbound":  # stored before issuer binding (or pre-registered): bound to no issuer
            record["client"].pop("issuer", None)
            token_file.write_text(json.dumps(record))
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as gw:
            assert not (await gw.call_tool("remote__echo", {"text": "before"})).is_error
            hostile.touch()
            refused = await gw.call_tool("remote__echo", {"text": "hostile"})
            hostile.unlink()
            expires_at = json.loads(token_file.read_text())["expires_at"]
            await anyio.sleep(max(0.0, expires_at - 2 - time.time()) + 0.3)  # early expiry: 2 s before
            later = await gw.call_tool("remote__echo", {"text": "later"})
        assert not evil_log.exists(), evil_log.read_text()
        said = text(refused)
        assert refused.is_error and "names another authorization server" in said, said
        assert "nothing was sent there" in said and command(config) in said, said
        assert not later.is_error and text(later) == "later", text(later)
        assert json.loads(token_file.read_text())["client"]["client_id"] == record["client"]["client_id"]
        log = errlog.read_text()
        assert sum("names another authorization server" in line for line in log.splitlines()) == 1, log
        assert "exited" not in log and "connection lost" not in log, log


@pytest.mark.parametrize("mode", ERAS)
async def test_a_login_after_a_logout_under_a_running_gateway_takes_the_next_call(tmp_path: Path, mode: str) -> None:
    """``logout`` then ``login`` while a gateway runs: the login registers a new client, and the
    server refuses the session made with the old one (404), which the gateway replaces. The
    call that met it failed with the reason an earlier call had met ("not logged in"), though
    the login was done."""
    with oauth_server(tmp_path) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            assert not (await client.call_tool("remote__echo", {"text": "in"})).is_error
            assert run_cli("logout", "remote", "--config", str(config)).returncode == 0
            gone = await client.call_tool("remote__echo", {"text": "out"})
            assert gone.is_error and f"not logged in: run {command(config)}" in text(gone), text(gone)
            import anyio

            await anyio.to_thread.run_sync(lambda: login(tmp_path, config))
            back = await client.call_tool("remote__echo", {"text": "back"})
            assert not back.is_error and text(back) == "back", text(back)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_resource_naming_another_authorization_server_never_gets_the_client_secret(
    tmp_path: Path, mode: str
) -> None:
    """The headless grant (``client_credentials``, no ``issuer`` configured) under a running
    gateway, its server turning hostile as above: the SDK's flow fetched the other server's
    metadata and sent it the configured client secret for a token. Once a token has come
    from one authorization server, the gateway sends the secret nowhere else."""
    secret = "svc-secret-" + os.urandom(8).hex()
    hostile = tmp_path / "hostile"
    evil_log = tmp_path / "evil.log"
    args = ["--hostile", str(hostile), "--client-credentials", f"svc:{secret}"]
    with url_process(
        [PYTHON, SERVER, *args],
        env={"OAUTH_SERVER_LOG": str(tmp_path / "secrets.log"), "OAUTH_EVIL_LOG": str(evil_log)},
    ) as (url, _):
        table = {"url": url, "auth": "client_credentials", "client_id": "svc", "client_secret": "${SVC_SECRET}"}
        config = write_config(tmp_path, {"remote": table})
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, env={"SVC_SECRET": secret}, errlog=errlog) as gw:
            assert not (await gw.call_tool("remote__echo", {"text": "before"})).is_error
            hostile.touch()
            refused = await gw.call_tool("remote__echo", {"text": "hostile"})
            hostile.unlink()
            later = await gw.call_tool("remote__echo", {"text": "later"})
        assert not evil_log.exists(), evil_log.read_text()
        said = text(refused)
        assert refused.is_error and "names another authorization server" in said, said
        assert f"set its issuer, or run prefixgate logout remote --config {config.resolve()}" in said, said
        assert not later.is_error and text(later) == "later", text(later)
        log = errlog.read_text()
        assert secret not in log and secret not in said
        assert "exited" not in log and "connection lost" not in log, log


@pytest.mark.parametrize("grant", ["oauth", "client_credentials"])
async def test_a_token_file_from_before_discovery_was_stored_refreshes_at_the_authorization_server(
    tmp_path: Path, grant: str
) -> None:
    """A token file written before the discovery was stored beside the tokens (the same record
    without ``discovery``: a login or run of a prefixgate before 2026-12-06), read after an upgrade
    with its access token expired. The new process refreshed at the resource's own origin, sending
    the refresh token (and the client secret) there; it now discovers first, as after a 401."""
    import anyio

    with fronted_with_tokens(tmp_path, grant) as (config, env, front_log):
        path = without_discovery(config)
        await anyio.sleep(EXPIRED)  # expired: the next process refreshes before its first request
        async with sdk_client(config, "auto", env=env) as client:
            result = await client.call_tool("remote__echo", {"text": "hi"})
            assert not result.is_error and text(result) == "hi", text(result)
        assert not front_log.exists(), front_log.read_text()  # nothing but the MCP endpoint was asked there
        assert "discovery" in json.loads(path.read_text())  # stored with the refreshed tokens


@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_file_from_before_discovery_follows_a_metadata_redirect_within_the_origin(
    tmp_path: Path, mode: str
) -> None:
    """The same file, the resource's metadata answering its well-known paths with a redirect
    within its origin (a 307 to where it moved), which the SDK's own flow follows (the login
    did): the discovery before the refresh did not, took the resource for a 2025-03-26 server,
    refreshed at its origin and asked for a new login."""
    import anyio

    with fronted_with_tokens(tmp_path, "oauth", "--front-moved") as (config, env, front_log):
        path = without_discovery(config)
        await anyio.sleep(EXPIRED)  # expired: the next process refreshes before its first request
        async with sdk_client(config, mode, env=env) as client:
            result = await client.call_tool("remote__echo", {"text": "hi"})
            assert not result.is_error and text(result) == "hi", text(result)
        assert not front_log.exists(), front_log.read_text()  # nothing but the MCP endpoint was asked there
        assert "discovery" in json.loads(path.read_text())


@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_file_from_before_discovery_names_why_its_discovery_got_no_answer(
    tmp_path: Path, mode: str
) -> None:
    """The same file, the resource's metadata answering over the 1 MiB cap on such answers
    when the refresh is due: the call's reason read "Protected resource metadata request
    failed: HTTP 503", the stand-in for an answer refused, not what the server did."""
    import anyio

    huge = tmp_path / "metadata-too-large"
    with oauth_server(tmp_path, "--lifetime", "2", "--metadata-too-large", str(huge)) as url:
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        without_discovery(config)
        huge.touch()
        await anyio.sleep(EXPIRED)  # expired: the next process refreshes before its first request
        errlog = tmp_path / "gateway.log"
        async with sdk_client(config, mode, errlog=errlog) as client:
            failed = await client.call_tool("remote__echo", {"text": "hi"})
            said = text(failed)
            assert failed.is_error and "Protected resource metadata request failed: the answer of " in said, said
            assert "bytes, over 1024 KiB; refused" in said and "HTTP 503" not in said, said
        assert "Traceback" not in errlog.read_text()


async def test_a_token_file_from_before_discovery_was_stored_refreshes_there_after_a_refusal(tmp_path: Path) -> None:
    """The same file with its access token still good by its expiry but dropped by the server
    (a restart, a revocation): the refresh once after the 401 went to the resource's origin too."""
    front_log = tmp_path / "front.log"
    args = ["--front", "--revocable"]
    env = {"OAUTH_SERVER_LOG": str(tmp_path / "secrets.log"), "OAUTH_FRONT_LOG": str(front_log)}
    with url_process([PYTHON, SERVER, *args], env=env) as (url, _):
        config = write_config(tmp_path, {"remote": {"url": url, "auth": "oauth"}})
        login(tmp_path, config)
        without_discovery(config)
        async with sdk_client(config, "auto") as client:
            assert text(await client.call_tool("remote__revoke", {})) == "revoked"
            result = await client.call_tool("remote__echo", {"text": "hi"})
            assert not result.is_error and text(result) == "hi", text(result)
        assert not front_log.exists(), front_log.read_text()  # nothing but the MCP endpoint was asked there
