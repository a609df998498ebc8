"""Lint and types are part of the suite: ``ruff check`` and ``mypy`` with the project's
configuration (pyproject.toml) must pass on a fresh clone.

They run here, not as extra CI steps, so the README's one test command stays exactly
what CI runs (``.ci/run``) and what a contributor runs before pushing. Both tools come
with the ``test`` extra; a missing one fails, naming the extra, rather than skipping.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tool", [["ruff", "check"], ["mypy"]], ids=["ruff", "mypy"])
def test_tool_passes_with_the_project_configuration(tool: list[str]) -> None:
    assert importlib.util.find_spec(tool[0]) is not None, f"{tool[0]} is not installed: pip install -e '.[test]'"
    proc = subprocess.run(
        [sys.executable, "-m", *tool], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, f"{' '.join(tool)} failed:\n{proc.stdout}{proc.stderr}"
