"""The command line's heavy imports run with the cyclic collector off (gateway/commands/cli.py)."""

from __future__ import annotations

import gc
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.commands.cli import importing
from tests.helpers import sdk_imports


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """This test process's own objects are not left frozen, nor its collector off."""
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


def test_the_collector_is_off_inside_and_on_after_with_what_was_built_frozen() -> None:
    gc.unfreeze()
    assert gc.isenabled()
    with importing():
        assert not gc.isenabled()
        built: list[list[int]] = [[] for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built)


def test_a_failed_import_leaves_the_collector_on() -> None:
    with pytest.raises(ModuleNotFoundError), importing():
        importlib.import_module("gateway.no_such_module")
    assert gc.isenabled()


@pytest.mark.parametrize("command", ["doctor", "catalog"])
@pytest.mark.real_processes  # watches the process import the SDK
def test_the_sdk_is_imported_with_the_collector_off(command: str, tmp_path: Path) -> None:
    """The mcp SDK (its pydantic models build thousands of validators) is what the commands
    that speak MCP import: inside ``importing``, only once the command is known."""
    config = tmp_path / "prefixgate.toml"
    demo = json.dumps(["-m", "gateway", "demo-server", "--tools", "1"])
    config.write_text(
        f"[gateway]\nstate_dir = {json.dumps(str(tmp_path / 'state'))}\n"
        f"[servers.d]\ncommand = {json.dumps(sys.executable)}\nargs = {demo}\n",
        encoding="utf-8",
    )
    assert sdk_imports(command, "--config", str(config), "--log-level", "error") == [False]
