"""The fork server (tests/forkserver.py) starts processes that behave as the real interpreter's:
the same argv, path, directory, environment, standard streams, exit status and death by a
signal, and none outlives the launcher its starter knows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import forkserver, helpers

REPORT = """
import json, os, sys
print(json.dumps({
    "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "env": os.environ.get("PROBE"),
    "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, type(sys.stdout.buffer).__name__,
               sys.stdout.encoding, sys.stdout.errors],
    "stderr": [sys.stderr.line_buffering, sys.stderr.errors], "stdin": sys.stdin.read(),
    "main": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__")),
}))
print("forked" if "mcp" in sys.modules else "started")
sys.exit(int(sys.argv[-1]))
"""
"""Prints what the process was given, then whether it was forked from the zygote (which
imported the SDK) or started (which never imports it)."""


@pytest.fixture
def launcher() -> str:
    if forkserver.START_ERROR is not None:
        pytest.fail(f"the fork server did not start: {forkserver.START_ERROR}")
    if helpers.PYTHON == sys.executable:
        pytest.skip("PREFIXGATE_TEST_FORKSERVER=0: no fork server to compare with")
    return helpers.PYTHON


@pytest.fixture(params=["buffered", "unbuffered"])
def env(request: pytest.FixtureRequest) -> dict[str, str]:
    """A server's environment as a gateway gives it, with and without ``PYTHONUNBUFFERED``."""
    base = {"PATH": os.environ["PATH"], "PROBE": "x y"}
    return base if request.param == "buffered" else {**base, "PYTHONUNBUFFERED": "1"}


def both(
    tmp_path: Path, launcher: str, env: dict[str, str], *args: str
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same command through the real interpreter and through the launcher; the report's
    last line (started or forked) is checked and dropped."""
    real, forked = (
        subprocess.run([python, *args], input="in\n", capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        for python in (sys.executable, launcher)
    )
    for done, how in ((real, "started"), (forked, "forked")):
        if done.stdout:
            *lines, last = done.stdout.splitlines(keepends=True)
            assert last == how + "\n", (how, done.stdout)
            done.stdout = "".join(lines)
    return real, forked


def test_a_code_string_sees_what_the_interpreter_gives_it(tmp_path: Path, launcher: str, env: dict[str, str]) -> None:
    real, forked = both(tmp_path, launcher, env, "-c", REPORT, "a b", "7")
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == 7 and '"env": "x y"' in real.stdout


def test_a_script_and_a_module_see_what_the_interpreter_gives_them(
    tmp_path: Path, launcher: str, env: dict[str, str]
) -> None:
    (tmp_path / "probe.py").write_text(REPORT, encoding="utf-8")
    for args in (("probe.py", "0"), ("-m", "probe", "3")):
        real, forked = both(tmp_path, launcher, env, *args)
        assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout), args


def test_an_uncaught_exception_ends_it_with_status_1_and_the_traceback(
    tmp_path: Path, launcher: str, env: dict[str, str]
) -> None:
    real, forked = both(tmp_path, launcher, env, "-c", "raise ValueError('broken')")
    assert forked.returncode == real.returncode == 1
    assert forked.stderr.splitlines()[-1] == real.stderr.splitlines()[-1] == "ValueError: broken"
    assert "forkserver.py" in forked.stderr and "forkserver.py" not in real.stderr, "it was forked"


@pytest.mark.parametrize("inherited", ["default", "ignored"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_launcher_reaches_the_process_and_its_death_is_mirrored(
    tmp_path: Path, launcher: str, signum: int, inherited: str
) -> None:
    """Sent to the launcher, a signal does to the process what it does to one the interpreter
    started: SIGHUP runs its handler (exit 5), the others kill it; one its starter ignored
    (a shell's background job ignores SIGINT) it ignores, and SIGKILL then ends it."""
    # Short sleeps, not one long one: a signal that lands after the interpreter's last check
    # for signals and before the sleep's system call starts is acted on only when that sleep
    # ends. Any process has that window; a forked child's is wider (its first writes to pages
    # it shares with the zygote fault), wide enough for 1 run in ~250 to wait out a 60 s sleep
    # with three such loops running at once.
    code = (
        "import signal, sys, time; signal.signal(signal.SIGHUP, lambda *a: sys.exit(5)); "
        "print('up', flush=True)\nfor _ in range(600): time.sleep(0.1)"
    )
    disposition = signal.SIG_IGN if inherited == "ignored" else signal.SIG_DFL

    def starting() -> None:
        signal.signal(signum, disposition)

    ends = []
    for python in (sys.executable, launcher):
        proc = subprocess.Popen(
            [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=starting
        )
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        proc.send_signal(signum)
        try:
            ends.append(proc.wait(timeout=2 if inherited == "ignored" and signum != signal.SIGHUP else 30))
        except subprocess.TimeoutExpired:
            proc.kill()
            ends.append(proc.wait(timeout=30))
    expected = 5 if signum == signal.SIGHUP else -signal.SIGKILL if inherited == "ignored" else -signum
    assert ends[1] == ends[0] == expected


@pytest.mark.parametrize("how", ["itself", "after an exec of another"])
def test_killing_the_launchers_group_kills_the_process(tmp_path: Path, launcher: str, how: str) -> None:
    """As a gateway stops a server (``killpg``, SIGKILL): the forked process dies with it, also
    when it became another process started the same way (``exec``, as tests/gated_server.py)."""
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid())); "
    code += f"os.replace({str(pidfile)!r} + '.tmp', {str(pidfile)!r}); time.sleep(60)"
    if how != "itself":
        code = f"import os; os.execv({launcher!r}, [{launcher!r}, '-c', {code!r}])"
    proc = subprocess.Popen([launcher, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 30
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the process never started"
        time.sleep(0.02)
    child = int(pidfile.read_text())
    assert child != proc.pid, "not forked: the launcher ran the real interpreter"
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    while Path(f"/proc/{child}").exists():
        assert time.monotonic() < deadline, f"process {child} outlived its launcher"
        time.sleep(0.02)


def test_an_environment_the_zygote_cannot_match_runs_the_real_interpreter(tmp_path: Path, launcher: str) -> None:
    code = "import sys; print('mcp' in sys.modules)"
    plain = subprocess.run([launcher, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    seeded = subprocess.run(
        [launcher, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "1"},
    )
    assert (plain.stdout, seeded.stdout) == ("True\n", "False\n")


@pytest.mark.real_processes
def test_a_test_marked_real_processes_runs_the_real_interpreter(launcher: str) -> None:
    done = subprocess.run(
        [launcher, "-c", "import sys; print('mcp' in sys.modules)"], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "False\n"
