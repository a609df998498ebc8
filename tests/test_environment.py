"""The gateway started from a minimal environment: no ``$HOME`` for a user the password database
does not list (``env -i``, a systemd unit, a container run under an arbitrary uid)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON

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
