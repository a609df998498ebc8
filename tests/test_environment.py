"""The gateway started from a minimal environment: no ``$HOME`` for a user the password database
does not list (``env -i``, a systemd unit, a container run under an arbitrary uid)."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import (
    GATEWAY,
    PYTHON,
    assert_unwritable_output_is_one_line,
    demo,
    stopped_while_a_server_starts,
    write_config,
)

NO_HOME = """
import pwd, sys
def unlisted(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = unlisted
from gateway.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""A gateway whose user has no entry in the password database (as under an arbitrary uid)."""


def without_home(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HOME" and not k.startswith("XDG_")}
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    return subprocess.run([PYTHON, "-c", NO_HOME, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


@pytest.mark.parametrize(
    ("table", "command", "expected"),
    [
        ({}, ["catalog"], "gateway.state_dir: no default: $XDG_STATE_HOME is not set, $HOME is not set"),
        ({"state_dir": "~/state"}, ["catalog"], "gateway.state_dir: '~/state': its '~' names no home directory"),
        ({}, ["artifacts", "list"], "gateway.state_dir: no default: $XDG_STATE_HOME is not set"),
        (None, ["catalog"], "no config file: pass --config PATH, set PREFIXGATE_CONFIG, or create ./prefixgate.toml"),
    ],
)
def test_no_home_is_one_line_naming_what_to_set(
    tmp_path: Path, table: dict[str, str] | None, command: list[str], expected: str
) -> None:
    """Every command stopped on a traceback (``RuntimeError: Could not determine home
    directory.``) where it looked for the default config, state directory or a ``~``."""
    work = tmp_path / "work"
    work.mkdir()
    args = list(command)
    if table is not None:
        config = tmp_path / "prefixgate.toml"
        gateway = "".join(f'{k} = "{v}"\n' for k, v in table.items())
        config.write_text(f'[gateway]\n{gateway}[servers.d]\ncommand = "{PYTHON}"\n')
        args += ["--config", str(config)]
    proc = without_home(*args, cwd=work)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"prefixgate: config error: {expected}"), line


def test_a_low_open_file_limit_fails_the_servers_past_it_not_the_gateway(tmp_path: Path) -> None:
    """Under ``ulimit -n 64`` twenty servers took every descriptor, and ``catalog`` stopped on a
    traceback at its next file (``OSError: [Errno 24] Too many open files`` importing a codec);
    the servers past the limit fail, naming it, and the others are served. (The real
    interpreter: a process the fork server forks has its own limits, not its starter's.)"""
    config = write_config(tmp_path, {f"s{i:02}": demo("--tools", 1, "--name", f"s{i:02}") for i in range(20)})

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "catalog", "--config", str(config), "--json", "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=low_limit,
    )
    assert "Traceback" not in proc.stderr and proc.stdout, proc.stderr
    status = [(s["status"], s["error"]) for s in json.loads(proc.stdout)["servers"]]
    assert ("ready", None) in status
    failed = [error for state, error in status if state == "failed"]
    limit = "cannot start: the open-file limit (ulimit -n 64) leaves "
    assert failed and all(error.startswith(limit) for error in failed), status


@pytest.mark.parametrize("command", ["catalog", "doctor"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_a_command_and_the_servers_it_started(
    tmp_path: Path, command: str, signum: signal.Signals
) -> None:
    """SIGTERM (a CI job's timeout) or SIGHUP (a closed terminal) while ``catalog`` or ``doctor``
    waited for a slow server killed the command at once and left the server running: it is in
    a session of its own, so the signal to the terminal's process group does not reach it."""
    code, stderr = stopped_while_a_server_starts(tmp_path, command, signum)
    assert code == 128 + signum, stderr
    assert stderr.splitlines()[-1] == f"prefixgate: stopped by {signum.name}" and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("command", [["catalog", "--json"], ["doctor"]])
def test_output_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path: Path, command: list[str]) -> None:
    """``> /dev/full`` (a full disk) and a pipe whose reader left (``| head``) stopped the command
    on a traceback (``OSError: [Errno 28] No space left on device``, ``BrokenPipeError``)."""
    config = write_config(tmp_path, {"d": demo("--tools", 300)})
    args = [*GATEWAY, *command, "--config", str(config), "--log-level", "error"]
    assert_unwritable_output_is_one_line(args)


@pytest.mark.parametrize("command", [["--help"], ["--version"], ["catalog", "--help"], ["serve", "--help"]])
def test_help_that_cannot_be_written_is_one_line_not_a_silent_success(command: list[str]) -> None:
    """``--help`` and ``--version`` ``> /dev/full`` exited 0 having written nothing, and said
    nothing (argparse drops the write's error)."""
    assert_unwritable_output_is_one_line([*GATEWAY, *command])


def test_serve_http_whose_stdout_cannot_be_written_serves_and_logs_its_url(tmp_path: Path) -> None:
    """``serve --http > /dev/full`` stopped on a traceback as it printed its URL: it serves, and
    the log names the URL."""
    import httpx2

    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    with open("/dev/full", "w") as full:
        proc = subprocess.Popen(
            [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--log-level", "warning"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"serving on (http://\S+)/mcp; that URL could not be written to stdout: No space left", line)
        assert found, line + proc.stderr.read()
        assert httpx2.get(found.group(1) + "/healthz", timeout=30).status_code == 200
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM and "Traceback" not in rest, rest
    finally:
        proc.kill()


def test_a_relative_xdg_state_home_is_ignored(tmp_path: Path) -> None:
    """The XDG Base Directory spec: a relative ``$XDG_STATE_HOME`` is invalid and ignored. Taken
    as set, the default state directory moved with the directory the gateway was started in
    (an agent starts it in each project's)."""
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": "relative"}
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [*GATEWAY, "artifacts", "list"], capture_output=True, text=True, timeout=60, env=env, cwd=work
    )
    assert proc.returncode == 0, proc.stderr
    expected = tmp_path / "home" / ".local" / "state" / "prefixgate"
    assert proc.stderr == f"prefixgate: no config file: the artifacts under {expected}\n"


def test_import_without_a_home_says_what_to_give(tmp_path: Path) -> None:
    """``import --from CLIENT`` (and ``import FILE``, placing the file) stopped on ``RuntimeError:
    Could not determine home directory.``"""
    proc = without_home("import", "--from", "claude-code", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        2,
        "prefixgate import: $HOME is not set and this user has no home directory: give the PATHs of the configs\n",
    )
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "echo"}}}')
    proc = without_home("import", ".mcp.json", cwd=tmp_path)
    assert "Traceback" not in proc.stderr and "no server could be imported from .mcp.json" in proc.stderr, proc.stderr


def test_a_knob_that_is_not_a_number_is_named_and_its_default_used(tmp_path: Path) -> None:
    """``PREFIXGATE_LIVENESS_INTERVAL=15s`` (and every numeric knob) stopped the gateway on a
    ``ValueError`` traceback as its module was imported."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    knobs = {"PREFIXGATE_LIVENESS_INTERVAL": "15s", "PREFIXGATE_WATCHED_URIS_PER_PRINCIPAL": "-3"}
    proc = subprocess.run(
        [*GATEWAY, "catalog", "--config", str(config), "--json", "--log-level", "warning"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **knobs},
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        "prefixgate WARNING PREFIXGATE_LIVENESS_INTERVAL='15s' is not a positive number of seconds: "
        "the default 15 is used",
        "prefixgate WARNING PREFIXGATE_WATCHED_URIS_PER_PRINCIPAL='-3' is not a whole number >= 1: "
        "the default 4096 is used",
    ]


def test_serve_keeps_a_sighup_its_starter_ignored(tmp_path: Path) -> None:
    """Under ``nohup`` (SIGHUP ignored) a closed terminal's SIGHUP stopped the gateway, where a
    server run directly goes on; it is now ignored, and the end of input still stops it."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=nohup,
    )
    try:
        assert proc.stderr is not None and proc.stdin is not None
        seen = []
        while not any("[d] ready" in line for line in seen):
            seen.append(proc.stderr.readline())
            assert seen[-1], "".join(seen)
        proc.send_signal(signal.SIGHUP)
        while not any("SIGHUP ignored, as it was where prefixgate started" in line for line in seen):
            seen.append(proc.stderr.readline())
            assert seen[-1], "".join(seen)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, "".join(seen) + proc.stderr.read()
    finally:
        proc.kill()
