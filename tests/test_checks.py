"""The remembered-passes cache for the expensive publishability checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import stdio_client

from catalog.build import build
from catalog.model import ServerTools
from catalog.names import PROFILES
from gateway.engine import checks
from gateway.engine.checks import CheckCache
from gateway.published import wire_problem
from tests.helpers import ERAS, demo, text, write_config

GOOD = {"name": "ok", "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}
BAD = {"name": "bad", "inputSchema": {"type": "object", "properties": {"a": {"type": "strin"}}}}


def run(cache: CheckCache) -> list[str]:
    catalog = build([ServerTools("s", "s", (GOOD, BAD))], PROFILES["openai"], extra_check=wire_problem, memo=cache)
    return [e.name for e in catalog.entries]


def test_passes_are_remembered_across_processes_and_failures_never(tmp_path: Path) -> None:
    first = CheckCache(tmp_path)
    assert run(first) == ["s__ok"]
    assert len(first.passed_keys) == 1
    first.save()
    cache_file = tmp_path / "cache" / "checks-passed.txt"
    assert cache_file.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700

    second = CheckCache(tmp_path)
    assert second.passed_keys == first.passed_keys
    assert run(second) == ["s__ok"]  # the bad tool is checked again and still quarantined


def test_cache_from_another_checker_version_is_ignored(tmp_path: Path) -> None:
    cache = CheckCache(tmp_path)
    run(cache)
    cache.save()
    path = tmp_path / "cache" / "checks-passed.txt"
    lines = path.read_text().splitlines()
    path.write_text("# prefixgate check cache v1 jsonschema=0.0\n" + "\n".join(lines[1:]) + "\n")
    assert CheckCache(tmp_path).passed_keys == set()


def test_a_remembered_pass_skips_the_checks(tmp_path: Path) -> None:
    class Everything:
        def passed(self, encoded: bytes) -> bool:
            return True

        def add(self, encoded: bytes) -> None:
            raise AssertionError("nothing new to remember")

    catalog = build([ServerTools("s", "s", (BAD,))], PROFILES["openai"], memo=Everything())
    assert [e.name for e in catalog.entries] == ["s__bad"]


def test_the_state_directory_is_created_private(tmp_path: Path) -> None:
    state = tmp_path / "deep" / "state"
    cache = CheckCache(state)
    run(cache)
    cache.save()
    for directory in (tmp_path / "deep", state, state / "cache"):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    doctor_like = CheckCache(tmp_path / "other", persist=False)
    run(doctor_like)
    doctor_like.save()
    assert not (tmp_path / "other").exists()


def test_the_remembered_passes_stay_bounded_when_every_build_brings_new_schemas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that changes its schemas on every change: past the bound, only the passes the
    last build used are kept (in memory and on disk), and that build's are all among them."""
    monkeypatch.setattr(checks, "MAX_KEYS", 10)
    cache = CheckCache(tmp_path)
    for generation in range(6):
        tools = tuple(
            {"name": f"t{i}", "inputSchema": {"type": "object", "description": f"generation {generation}"}}
            for i in range(4)
        )
        build([ServerTools("s", "s", tools)], PROFILES["openai"], extra_check=wire_problem, memo=cache)
        cache.save()
        assert len(cache.passed_keys) <= 10 + 4
    on_disk = (tmp_path / "cache" / "checks-passed.txt").read_text().splitlines()[1:]
    assert set(on_disk) == cache.passed_keys
    last = [{"name": f"t{i}", "inputSchema": {"type": "object", "description": "generation 5"}} for i in range(4)]

    class Counting(CheckCache):
        learnt = 0

        def add(self, encoded: bytes) -> None:
            self.learnt += 1

    counting = Counting(tmp_path)  # (loaded from disk: the last build's four are remembered across processes)
    build([ServerTools("s", "s", tuple(last))], PROFILES["openai"], extra_check=wire_problem, memo=counting)
    assert counting.learnt == 0


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_gateway_whose_files_cannot_grow_serves_and_leaves_no_partial_file(tmp_path: Path, mode: str) -> None:
    """Every file the gateway writes under ``state_dir`` fails past 512 bytes (a file size
    limit: EFBIG, as a full disk's ENOSPC). The calls are answered, a spilled output says why
    it was not kept, and nothing half-written is left: the check cache's temporary file was
    (``.checks-passed.txt.<pid>``, one more for each start on a full disk)."""
    from mcp import Client, StdioServerParameters

    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    limited = 'ulimit -f 1 && exec "$0" -m gateway serve --config "$1" --log-level error'
    params = StdioServerParameters(command="/bin/sh", args=["-c", limited, sys.executable, str(config)])
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        assert text(await client.call_tool("d__echo", {"text": "hi"})) == "hi"
        spilled = text(await client.call_tool("d__payload", {"bytes": 100_000}))
        assert spilled.endswith(
            "full output (100000 bytes of text) not retained: cannot write artifact: File too large"
        )
        assert text(await client.call_tool("d__echo", {"text": "still"})) == "still"
    files = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    left = sorted(str(p.relative_to(tmp_path / "state")) for p in files if p.name.startswith("."))
    assert left == [], left  # (a temporary file is a write cut short)
    assert not any(p.is_relative_to(tmp_path / "state" / "artifacts") for p in files)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_huge_check_cache_is_ignored_not_read(tmp_path: Path, mode: str) -> None:
    """A check cache of gigabytes (a sparse file: no disk, all zeros) was read whole at start:
    under a 3 GB address-space limit the gateway exited with a MemoryError traceback (without
    one, it tried to hold it all). More than the cache ever holds is ignored, one log line."""
    from mcp import Client, StdioServerParameters

    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    cache = tmp_path / "state" / "cache" / "checks-passed.txt"
    cache.parent.mkdir(parents=True, mode=0o700)
    with cache.open("wb") as handle:
        handle.truncate(6 << 30)
    cache.chmod(0o600)
    errlog = tmp_path / "stderr.log"
    limited = 'ulimit -v 3000000 && exec "$0" -m gateway serve --config "$1" --log-level warning'
    params = StdioServerParameters(command="/bin/sh", args=["-c", limited, sys.executable, str(config)])
    with errlog.open("w") as log:
        async with Client(stdio_client(params, errlog=log), mode=mode) as client:  # type: ignore[arg-type]
            assert text(await client.call_tool("d__echo", {"text": "hi"})) == "hi"
    said = errlog.read_text()
    assert f"check cache ignored: {str(cache)!r} is 6442450944 bytes, more than it ever holds" in said, said
    assert "Traceback" not in said


def test_a_save_that_cannot_write_names_the_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A state directory that cannot be written (a full disk, a read-only mount) was logged as
    ``[Errno 28] No space left on device`` or ``... Read-only file system: '.checks-passed.txt.123'``:
    not where. Now the line names the cache file."""
    import logging
    import os

    cache = CheckCache(tmp_path)
    run(cache)
    (tmp_path / "cache").mkdir(mode=0o700)
    (tmp_path / "cache" / f".checks-passed.txt.{os.getpid()}").mkdir()  # its temporary file cannot be opened
    with caplog.at_level(logging.INFO, logger="prefixgate.checks"):
        cache.save()
    lines = [r.getMessage() for r in caplog.records]
    where = str(tmp_path / "cache" / "checks-passed.txt")
    assert lines == [f"check cache not saved: cannot write {where!r}: Is a directory"], lines
