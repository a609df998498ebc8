"""The discovery barrier with real, slow, hanging, failing and broken servers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ASCII_LOCALE, GATEWAY, PYTHON, catalog_json, demo, gateway, run_cli, write_config

pytestmark = pytest.mark.anyio


def test_servers_start_concurrently(tmp_path: Path) -> None:
    """Each server becomes ready only after all four have been started (tests/rendezvous.py):
    sequential start-up would leave the first one waiting forever, so all ready proves the
    barrier starts them together."""
    marks = tmp_path / "started"
    servers = {
        f"s{i}": {
            "command": PYTHON,
            "args": ["-m", "tests.rendezvous", str(marks), "4", "--tools", "2", "--seed", str(i)],
            "cwd": str(Path.cwd()),
            "startup_timeout": 120,
        }
        for i in range(4)
    }
    report = catalog_json(write_config(tmp_path, servers, gateway={"discovery_deadline": 120}))
    assert [s["status"] for s in report["servers"]] == ["ready"] * 4
    assert len(list(marks.iterdir())) == 4


def test_hanging_server_is_late_and_the_rest_serve(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "ok": demo("--tools", 1),
            "stuck": {**demo("--hang"), "startup_timeout": 1.5},
        },
    )
    report = catalog_json(config)
    by_id = {s["id"]: s for s in report["servers"]}
    assert by_id["ok"]["status"] == "ready"
    assert by_id["stuck"]["status"] == "late"
    assert by_id["stuck"]["error"] == "not ready within startup_timeout 1.5 s"
    assert {t["server"] for t in report["tools"]} == {"ok"}


def test_discovery_deadline_stops_waiting(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {"ok": demo("--tools", 1), "stuck": demo("--hang")},
        gateway={"discovery_deadline": 6},
    )
    report = catalog_json(config)
    by_id = {s["id"]: s for s in report["servers"]}
    assert by_id["stuck"]["status"] == "late"
    assert by_id["stuck"]["error"] == "not ready within discovery_deadline 6 s"
    assert by_id["ok"]["status"] == "ready" and by_id["ok"]["tools"] == 8


async def test_serve_answers_tools_list_after_a_late_server_times_out(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"ok": demo("--tools", 1), "stuck": {**demo("--hang"), "startup_timeout": 1}}
    )
    async with gateway(config) as gw:
        tools = (await gw.session.list_tools()).tools
        assert {t.name.split("__")[0] for t in tools} == {"ok", "artifact_read"}
        assert await gw.saw("[stuck] late: not ready within startup_timeout 1 s"), gw.stderr()


def test_required_server_failure_stops_serve(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {"ok": demo("--tools", 1), "must": {"command": "no-such-command-pg", "required": True}},
    )
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # stdin stays open (a client that is still connected): the gateway must exit by itself.
        assert proc.wait(timeout=30) == 1
    finally:
        proc.kill()
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert stderr.strip().splitlines()[-1] == (
        "prefixgate: required server 'must' is failed: command 'no-such-command-pg' not found on PATH"
    )


def test_invalid_schema_is_quarantined_alone(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 2, "--bad-schema")})
    report = catalog_json(config)
    quarantined = {w["tool"]: w["detail"] for w in report["warnings"] if w["kind"] == "quarantined"}
    assert set(quarantined) == {"broken", "broken_type", "broken_hint"}
    assert "type 'object'" in quarantined["broken"]
    assert "properties.x.type" in quarantined["broken_type"]
    assert quarantined["broken_hint"].startswith("not a valid MCP tool for protocol")
    assert "annotations.readOnlyHint" in quarantined["broken_hint"]
    names = {t["original"] for t in report["tools"]}
    assert "broken" not in names and {"echo", "payload"} <= names
    assert report["servers"][0]["tools"] == 9 and report["servers"][0]["listed"] == 12


def test_paginated_tool_lists_are_followed_to_the_end(tmp_path: Path) -> None:
    report = catalog_json(write_config(tmp_path, {"p": demo("--tools", 20, "--page-size", 3)}))
    assert len(report["tools"]) == 27


def test_disabled_and_failed_servers_are_reported(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "ok": demo("--tools", 1),
            "off": {**demo(), "enabled": False},
            "bad": {"command": "no-such-command-pg"},
            "inline": {"command": f"{PYTHON} -m gateway demo-server"},
            "dies": {"command": PYTHON, "args": ["-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"]},
            "nowhere": {**demo(), "cwd": str(tmp_path / "gone")},
            "absent": {"command": str(tmp_path / "absent.sh")},
        },
    )
    report = catalog_json(config)
    status = {s["id"]: (s["status"], s["error"]) for s in report["servers"]}
    assert status["off"] == ("disabled", None)
    assert status["bad"] == ("failed", "command 'no-such-command-pg' not found on PATH")
    assert status["dies"] == ("failed", "exited during start-up (exit status 3); stderr: boom")
    # Which path the system could not use: the missing cwd, the missing command (it used to be
    # "cannot start: No such file or directory" either way).
    gone, absent = tmp_path / "gone", tmp_path / "absent.sh"
    assert status["nowhere"] == ("failed", f"cannot start: its cwd '{gone}': No such file or directory")
    assert status["absent"] == ("failed", f"cannot start '{absent}': No such file or directory")
    # Arguments written into the command: the error says where they go.
    assert status["inline"] == (
        "failed",
        f"command '{PYTHON} -m gateway demo-server' does not exist; '{PYTHON}' is a program: put its arguments "
        f'in args = ["-m", "gateway", "demo-server"] and set command = "{PYTHON}"',
    )


def test_non_ascii_args_env_and_cwd_start_a_server_under_an_ascii_locale(tmp_path: Path) -> None:
    """Under ``LC_ALL=C PYTHONUTF8=0`` (Python's encoding then ASCII) a server whose args, env or
    cwd held a non-ASCII character failed: ``UnicodeEncodeError: 'ascii' codec can't encode
    character '\\xe4'``, naming neither the key nor the cause, where a client spawning it itself
    passes the config's UTF-8. A missing cwd is still named as the cwd."""
    home = tmp_path / "répertoire"
    home.mkdir()
    config = write_config(
        tmp_path,
        {
            "s": {**demo("--tools", 1, "--name", "ünï"), "cwd": str(home), "env": {"X": "välue"}},
            "nowhere": {**demo(), "cwd": str(tmp_path / "nulle part")},
        },
    )
    proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "warning", env=ASCII_LOCALE)
    assert proc.stdout.strip(), proc.stderr
    report = json.loads(proc.stdout)
    status = {s["id"]: (s["status"], s["error"]) for s in report["servers"]}
    assert status["s"] == ("ready", None)
    nowhere = f"cannot start: its cwd '{tmp_path / 'nulle part'}': No such file or directory"
    assert status["nowhere"] == ("failed", nowhere)
    assert any("ünï" in d["description"] for d in report["declarations"] if d["name"].startswith("s__"))


def test_a_command_is_looked_up_on_the_path_its_env_sets(tmp_path: Path) -> None:
    """A server whose ``env`` sets ``PATH`` (a Node install of its own, say) is run from there, as
    the SDKs' stdio clients and Node's ``spawn`` run it: the gateway looked on its own PATH
    and said "not found"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "only-here-pg"
    script.write_text(f'#!/bin/sh\nexec "{PYTHON}" -m gateway demo-server --tools 1\n')
    script.chmod(0o755)
    config = write_config(
        tmp_path,
        {
            "there": {"command": "only-here-pg", "env": {"PATH": f"{bin_dir}:/usr/bin:/bin"}},
            "elsewhere": {"command": "only-here-pg", "env": {"PATH": "/usr/bin:/bin"}},
        },
    )
    status = {s["id"]: (s["status"], s["error"]) for s in catalog_json(config)["servers"]}
    assert status["there"] == ("ready", None)
    assert status["elsewhere"] == ("failed", "command 'only-here-pg' not found on the PATH its env sets")


def test_with_path_unset_a_command_is_looked_up_on_the_default_path(tmp_path: Path) -> None:
    """Started with no PATH (``env -i``, a minimal service environment), ``command = "sh"`` was
    not found, where the exec and a shell search the system's default path."""
    config = write_config(
        tmp_path, {"s": {"command": "sh", "args": ["-c", f'exec "{PYTHON}" -m gateway demo-server --tools 1']}}
    )
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    proc = subprocess.run(
        [*GATEWAY, "catalog", "--config", str(config), "--json", "--log-level", "warning"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.stdout, proc.stderr
    assert [(s["status"], s["error"]) for s in json.loads(proc.stdout)["servers"]] == [("ready", None)]


def test_a_relative_command_is_found_where_prefixgate_runs_not_in_its_cwd(tmp_path: Path) -> None:
    """docs/configuration.md: a server's relative ``command`` and ``cwd`` are both relative to
    the directory prefixgate runs in; the exec used to look for the command in ``cwd``."""
    (tmp_path / "sub").mkdir()
    for where, body in (("run.sh", f'exec "{PYTHON}" -m gateway demo-server --tools 1'), ("sub/run.sh", "exit 3")):
        script = tmp_path / where
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    config = write_config(tmp_path, {"s": {"command": "./run.sh", "cwd": "sub"}})
    proc = subprocess.run(
        [*GATEWAY, "catalog", "--config", str(config), "--json", "--log-level", "error"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"status": "ready"' in proc.stdout, proc.stdout[-500:]


def test_a_command_found_on_path_with_its_arguments_inside_points_to_args() -> None:
    """Issue 31: ``command = "mcp-server-time --local-timezone UTC"``: its first word is on PATH."""
    from gateway.downstream.spawn import CommandNotFound, resolve_command

    with pytest.raises(CommandNotFound) as caught:
        resolve_command("sh -c 'exit 0'")
    assert str(caught.value) == (
        "command \"sh -c 'exit 0'\" not found on PATH; 'sh' is a program: put its arguments in "
        'args = ["-c", "exit 0"] and set command = "sh"'
    )
    with pytest.raises(CommandNotFound) as caught:
        resolve_command("no-such-command-pg --flag")
    assert str(caught.value) == "command 'no-such-command-pg --flag' not found on PATH"
