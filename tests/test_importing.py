"""The command line's heavy imports run with the cyclic collector off (gateway/commands/cli.py)."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator

import pytest

from gateway.commands.cli import importing


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


def test_the_command_parser_is_built_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the parser imports every command (doctor, login, ... and the mcp SDK with
    them): ``catalog``, ``doctor`` and ``login`` start-up is mostly that import."""
    from gateway.commands import cli

    seen: list[bool] = []
    build = cli.parser

    def recording() -> object:
        seen.append(gc.isenabled())
        return build()

    monkeypatch.setattr(cli, "parser", recording)
    with pytest.raises(SystemExit):
        cli.main(["catalog", "--help"])
    assert seen == [False]
    assert gc.isenabled()
