"""The epoch history (issue 29, item 5): every epoch ``serve`` published, why, and what changed,
kept bounded per profile and shown by ``prefixgate catalog history``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from catalog.history import MAX_PATH_CHARS, MAX_TOOLS, epoch_changes, summary
from gateway.state import history as history_module
from gateway.state.history import EpochHistory
from tests.helpers import ERAS, PYTHON, demo, run_cli, sdk_client, text, wait_for, write_config

ROOT = Path(__file__).resolve().parent.parent


def test_changes_name_each_tool_and_the_json_paths_that_differ() -> None:
    before = {"s__a": ("s", {"name": "s__a", "description": "A"}), "s__b": ("s", {"name": "s__b"})}
    after = {
        "s__a": ("s", {"name": "s__a", "description": "A, reworded", "inputSchema": {"type": "object"}}),
        "t__c": ("t", {"name": "t__c"}),
    }
    changes = epoch_changes(before, after)
    assert changes == {
        "counts": {"added": 1, "removed": 1, "changed": 1},
        "added": [{"tool": "t__c", "server": "t"}],
        "removed": [{"tool": "s__b", "server": "s"}],
        "changed": [{"tool": "s__a", "server": "s", "paths": ["description", "inputSchema"]}],
    }
    assert summary(changes) == [
        "added t__c (server t)",
        "removed s__b (server s)",
        "changed s__a (server s): description, inputSchema",
    ]
    # A server's key of any length is cut: a record stays small whatever it lists.
    long = epoch_changes({"s__a": ("s", {"x": 1})}, {"s__a": ("s", {"k" * 10_000: 1, "x": 1})})
    assert long["changed"][0]["paths"] == ["k" * (MAX_PATH_CHARS - 1) + "…"]
    many = epoch_changes({}, {f"t{i:03}": ("s", {}) for i in range(MAX_TOOLS + 5)})
    assert len(many["added"]) == MAX_TOOLS and summary(many)[-1] == "... 5 more added"


def test_the_history_is_private_bounded_and_read_oldest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_module, "MAX_BYTES", 2000)
    history = EpochHistory(tmp_path / "state", "codex")
    for n in range(100):
        history.append({"fingerprint": f"{n:064}", "reason": "x" * 50})
    files = sorted(p.name for p in (tmp_path / "state" / "history").iterdir())
    assert files == ["codex.jsonl", "codex.jsonl.1"]
    assert all((tmp_path / "state" / "history" / f).stat().st_size <= 2000 for f in files)
    assert stat.S_IMODE((tmp_path / "state" / "history").stat().st_mode) == 0o700
    assert stat.S_IMODE(history.path.stat().st_mode) == 0o600
    kept = [int(r["fingerprint"]) for r in history.read()]
    assert kept == list(range(100 - len(kept), 100)) and 10 < len(kept) < 100
    with history.path.open("a") as handle:
        handle.write('{"torn": ')  # a torn last line is skipped
    assert len(history.read()) == len(kept)


def mutating(state: Path) -> dict[str, Any]:
    return {"command": PYTHON, "args": ["-m", "tests.mutating_server", str(state)], "cwd": str(ROOT)}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_serve_records_each_epoch_and_catalog_history_shows_why(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"m": mutating(tmp_path / "m.json")})
    history = EpochHistory(tmp_path / "state", None)

    async with sdk_client(config, mode, log_level="warning") as client:
        await client.list_tools()
        await wait_for(lambda: len(history.read()) == 1)
        for kind, count in (("reword", 2), ("add", 3)):
            assert text(await client.call_tool("m__mutate", {"kind": kind})) == f"mutated:{kind}"
            await wait_for(lambda count=count: len(history.read()) == count)  # type: ignore[misc]
    async with sdk_client(config, mode, log_level="warning") as client:  # a restart, the same bytes
        await client.list_tools()
        await wait_for(lambda: len(history.read()) == 4)

    first, reword, add, restart = history.read()
    assert (first["previous"], first["changes"], first["reason"]) == (None, None, "the discovery barrier")
    assert (reword["previous"], reword["reason"]) == (first["fingerprint"], "server 'm' changed its tools")
    assert reword["changes"]["changed"] == [{"tool": "m__alpha", "server": "m", "paths": ["description"]}]
    assert add["changes"]["added"] == [{"tool": "m__gamma", "server": "m"}]
    assert restart["previous"] == restart["fingerprint"] == add["fingerprint"]
    assert restart["changes"] is None and restart["reason"].startswith("warm start")

    proc = run_cli("catalog", "history", "--config", str(config), "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[1] == reword["fingerprint"][:16]
    assert f"(was {first['fingerprint'][:16]})" in lines[0]
    assert lines[1] == "    changed m__alpha (server m): description"
    assert lines[-1].endswith(f"(same bytes as before): {restart['reason']}")
    as_json = json.loads(run_cli("catalog", "history", "--config", str(config), "--json").stdout)
    assert as_json == [first, reword, add, restart]
    for limit in ("0", "-1"):  # (these printed one record)
        refused = run_cli("catalog", "history", "--config", str(config), "--limit", limit)
        assert (
            refused.returncode == 2
            and f"argument --limit: expected a whole number >= 1, got '{limit}'" in refused.stderr
        )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_history_whose_last_line_cannot_be_read_is_written_on(tmp_path: Path, mode: str) -> None:
    """A history ending in a line longer than the 4 MiB read from its end (damaged: the gateway
    writes short lines) made every start's record fail ("epoch history not written"), for ever,
    though the write would have rotated the file away; the record is now written, its
    ``previous`` unknown."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    damaged = tmp_path / "state" / "history" / "default.jsonl"
    damaged.parent.mkdir(parents=True, mode=0o700)
    damaged.write_bytes(b"x" * (5 << 20))
    damaged.chmod(0o600)
    history = EpochHistory(tmp_path / "state", None)
    async with sdk_client(config, mode, log_level="warning") as client:
        assert text(await client.call_tool("d__echo", {"text": "hi"})) == "hi"
        await wait_for(lambda: len(history.read()) == 1)
    (record,) = history.read()
    assert record["previous"] is None and record["reason"] == "the discovery barrier"
    assert damaged.stat().st_size < 4096  # the damaged file rotated away


@pytest.mark.anyio
async def test_configs_sharing_a_state_dir_each_read_their_own_history(tmp_path: Path) -> None:
    """Two configs, one ``state_dir`` (as every config that sets none shares the default one):
    each one's ``catalog history`` is its own gateway's, and its first epoch after the other's
    names its own last bytes as the ones before (a restart that changed nothing is
    "same bytes as before", not a change)."""
    work = write_config(tmp_path, {"w": demo("--tools", 2, "--name", "w")})
    personal = tmp_path / "personal.toml"
    personal.write_text(work.read_text().replace('[servers."w"]', '[servers."p"]').replace('"w"]', '"p"]'))
    history = EpochHistory(tmp_path / "state", None)
    for n, config in enumerate((work, personal, work), start=1):
        async with sdk_client(config, "auto", log_level="warning") as client:
            await client.list_tools()
            await wait_for(lambda n=n: len(history.read()) == n)  # type: ignore[misc]
    first, other, again = history.read()
    assert first["fingerprint"] != other["fingerprint"] and other["previous"] is None
    proc = run_cli("catalog", "history", "--config", str(work), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [first, again]
    assert again["previous"] == again["fingerprint"] == first["fingerprint"]
    theirs = json.loads(run_cli("catalog", "history", "--config", str(personal), "--json").stdout)
    assert theirs == [other]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_config_whose_name_the_locale_cannot_decode_is_served_and_its_history_kept(
    tmp_path: Path, mode: str
) -> None:
    """A config named with a byte the locale does not decode (a Latin-1 name here; any non-ASCII
    name under ``LC_ALL=C PYTHONUTF8=0``) stopped ``serve`` on a traceback at its first epoch: its
    history record, naming the config, could not be written as UTF-8."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)}).rename(tmp_path / os.fsdecode(b"caf\xe9 \xff.toml"))
    history = EpochHistory(tmp_path / "state", None)
    async with sdk_client(config, mode, log_level="warning") as client:
        assert text(await client.call_tool("d__echo", {"text": "hi"})) == "hi"
        await wait_for(lambda: len(history.read()) == 1)
    (record,) = history.read()
    assert record["config"] == str(tmp_path.resolve() / "caf\\xe9 \\xff.toml")
    proc = run_cli("catalog", "history", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [record]


@pytest.mark.parametrize("where", ["before", "after"])
def test_history_reads_the_profile_given_before_or_after_the_action(tmp_path: Path, where: str) -> None:
    """``catalog --profile NAME history`` printed the default profile's history: the action's
    own ``--profile`` default overwrote the value given before it (as ``catalog approve``'s)."""
    config = write_config(tmp_path, {"s": demo()}, profiles={"p": {}})
    option = ["--profile", "nope"]
    args = [*option, "history"] if where == "before" else ["history", *option]
    proc = run_cli("catalog", *args, "--config", str(config))
    assert proc.returncode == 2 and "no profile 'nope' in the config" in proc.stderr, proc.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_new_epoch_logs_only_the_catalog_warnings_it_did_not_have(tmp_path: Path, mode: str) -> None:
    """Each new epoch logged every warning of its catalog again: a server with 1,000 renamed
    tools logged 1,000 lines at each of its changes. A warning the last epoch had is not
    logged again."""
    config = write_config(tmp_path, {"m": {**mutating(tmp_path / "m.json"), "exclude": ["beta"]}})
    history = EpochHistory(tmp_path / "state", None)
    errlog = tmp_path / "gateway.log"
    async with sdk_client(config, mode, log_level="info", errlog=errlog) as client:  # (an exclusion: information)
        await client.list_tools()
        await wait_for(lambda: len(history.read()) == 1)
        for kind, count in (("reword", 2), ("add", 3)):
            assert text(await client.call_tool("m__mutate", {"kind": kind})) == f"mutated:{kind}"
            await wait_for(lambda count=count: len(history.read()) == count)  # type: ignore[misc]
    lines = errlog.read_text().splitlines()
    assert len([line for line in lines if "beta" in line and "exclude" in line]) == 1, lines
