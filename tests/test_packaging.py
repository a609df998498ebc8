"""The distribution people install: a wheel built from the repository, in a fresh venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import __version__
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
SUBCOMMANDS = ("serve", "catalog", "artifacts", "import", "doctor", "demo-server")


def test_wheel_installs_in_a_fresh_venv_and_runs_the_example(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("prefixgate-*.whl")
    venv = tmp_path / "venv"
    # No pip of its own (ensurepip was a quarter of this test's time): this environment's pip
    # installs into it (``--python``).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    # The wheel alone; its dependencies come from this environment, listed after the venv's
    # own site-packages (the test extra's install resolves them already; a .pth line adds a
    # path, it does not run that path's .pth files, so this checkout's editable install stays out).
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", wheel],
        check=True,
        capture_output=True,
        timeout=600,
    )
    dependencies = next(p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir())
    (site / "dependencies.pth").write_text(f"{dependencies}\n")
    prefixgate = str(venv / "bin" / "prefixgate")
    # Nothing of this checkout on the path: what runs is the wheel's.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}

    version = subprocess.run([prefixgate, "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"prefixgate {__version__}"

    catalog = subprocess.run(
        [prefixgate, "catalog", "--config", str(ROOT / "config.example.toml"), "--log-level", "warning"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert catalog.returncode == 0, catalog.stderr
    assert "github   ready" in catalog.stdout and "tickets  ready" in catalog.stdout
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import gateway, catalog, spill; print(gateway.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert where.stdout.startswith(str(site)), where  # the wheel's copy, not this checkout
    assert {"catalog", "spill", "gateway"} <= {p.name for p in site.iterdir()}
    assert not (site / "tests").exists() and not (site / "bench").exists()


def test_help_is_complete_and_consistent() -> None:
    top = run_cli("--help")
    assert top.returncode == 0
    for command in SUBCOMMANDS:
        assert command in top.stdout
        sub = run_cli(command, "--help")
        assert sub.returncode == 0, (command, sub.stderr)
        assert sub.stdout.startswith("usage: prefixgate"), (command, sub.stdout[:80])
    for args in (("catalog", "diff", "--help"), ("artifacts", "list", "--help"), ("artifacts", "read", "--help")):
        assert run_cli(*args).returncode == 0, args


@pytest.mark.parametrize("args", [("bogus",), ("catalog", "--nope"), ()])
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    assert run_cli(*args).returncode == 2
