"""The warm-start record's key and its file, in process: what the key depends on (and what it
must not), and that a record file is used only when it is a private, intact file of this
config's key (everything else: one log line, nothing used). End to end: tests/test_warm_start.py."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from catalog.warm import Contribution, encode_record
from gateway.config import Config, parse_config
from gateway.engine.warm import current_key
from gateway.state import warmrecords
from gateway.state.warmrecords import load_record, read_record, write_record

BASE: dict[str, Any] = {
    "servers": {
        "gh": {"command": "gh-server", "args": ["--stdio"], "env": {"TOKEN": "secret-one"}},
        "web": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer t1"}},
    }
}


def config(tmp_path: Path, change: dict[str, Any] | None = None, lock: bytes | None = None) -> Config:
    data = _merged(BASE, change or {})
    data.setdefault("gateway", {})["state_dir"] = str(tmp_path / "state")
    path = tmp_path / "prefixgate.toml"
    if lock is not None:
        (tmp_path / "prefixgate.lock").write_bytes(lock)
    return parse_config(data, path=path, env={})


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merged(out.get(key, {}), value) if isinstance(value, dict) and key != "env" else value
    return out


KEYED = {
    "args": {"servers": {"gh": {"args": ["--stdio", "--verbose"]}}},
    "command": {"servers": {"gh": {"command": "gh-server-2"}}},
    "env value": {"servers": {"gh": {"env": {"TOKEN": "secret-two"}}}},
    "env name": {"servers": {"gh": {"env": {"TOKEN": "secret-one", "MORE": "x"}}}},
    "header value": {"servers": {"web": {"headers": {"Authorization": "Bearer t2"}}}},
    "url": {"servers": {"web": {"url": "https://mcp.example/v2"}}},
    "prefix": {"servers": {"gh": {"prefix": "github"}}},
    "include": {"servers": {"gh": {"include": ["issue_*"]}}},
    "deferred": {"servers": {"gh": {"deferred": True}}},
    "protocol": {"servers": {"gh": {"protocol": "legacy"}}},
    "disabled": {"servers": {"web": {"enabled": False}}},
    "profile": {"client": {"profile": "anthropic"}},
    "entry": {"client": {"profile": "claude-code", "entry": "pg"}},
    "max_functions": {"client": {"max_functions": 40}},
    "declarations": {"client": {"declarations": "on-demand"}},
    "separator": {"gateway": {"separator": "_"}},
    "output_schemas": {"spill": {"output_schemas": "publish"}},
    "spill off": {"spill": {"enabled": False}},
}
UNKEYED = {
    "startup_timeout": {"servers": {"gh": {"startup_timeout": 5}}},
    "call_timeout": {"servers": {"gh": {"call_timeout": 5}}},
    "required": {"servers": {"gh": {"required": True}}},
    "policy": {"policy": {"deny": ["gh__*"], "read_only": True}},
    "discovery_deadline": {"gateway": {"discovery_deadline": 5}},
    "round trips": {"gateway": {"round_trip_timeout": 5, "max_round_trips": 2}},
    "artifact sizes": {"spill": {"max_visible_bytes": 4096, "max_age_days": 1}},
}


@pytest.mark.parametrize("change", list(KEYED.values()), ids=list(KEYED))
def test_what_decides_the_catalog_is_in_the_key(tmp_path: Path, change: dict[str, Any]) -> None:
    assert current_key(config(tmp_path, change)) != current_key(config(tmp_path))


@pytest.mark.parametrize("change", list(UNKEYED.values()), ids=list(UNKEYED))
def test_what_changes_no_published_byte_keeps_the_start_warm(tmp_path: Path, change: dict[str, Any]) -> None:
    assert current_key(config(tmp_path, change)) == current_key(config(tmp_path))


def test_the_lock_is_keyed_by_its_bytes_and_an_unreadable_one_means_no_warm_start(tmp_path: Path) -> None:
    plain = current_key(config(tmp_path))
    one = current_key(config(tmp_path, lock=b"# a lock\n"))
    two = current_key(config(tmp_path, lock=b"# another lock\n"))
    assert len({plain, one, two}) == 3
    (tmp_path / "prefixgate.lock").unlink()
    os.mkfifo(tmp_path / "prefixgate.lock")  # read without blocking, refused: no key at all
    assert current_key(config(tmp_path)) is None
    assert current_key(config(tmp_path, {"gateway": {"warm_start": False}})) is None


def test_no_secret_value_is_in_the_record(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    key = current_key(cfg)
    assert key is not None
    data = encode_record(key, "0" * 64, {"gh": Contribution(tools=({"name": "t"},))}, [])
    write_record(cfg.gateway.state_dir, key, data)
    stored = read_record(cfg.gateway.state_dir, key)
    assert stored == data and b"secret-one" not in stored and b"Bearer" not in stored


def _written(tmp_path: Path, key: str = "a" * 64) -> Path:
    state = tmp_path / "state"
    write_record(state, key, encode_record(key, "0" * 64, {"s": Contribution(tools=({"name": "t"},))}, []))
    return state / "warm" / f"{key}.rec"


def test_a_record_is_a_private_file_in_a_private_directory(tmp_path: Path) -> None:
    path = _written(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_record(tmp_path / "state", "a" * 64) is not None
    assert load_record(tmp_path / "state", "b" * 64) is None  # none for this key: nothing said


def _loose(path: Path) -> None:
    path.chmod(0o666)


def _foreign_owner(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another owner needs root (the CI machine runs as root)")
    os.chown(path, 65534, 65534)


def _symlink(path: Path) -> None:
    target = path.with_name("elsewhere")
    path.rename(target)
    path.symlink_to(target)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def _damaged(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-4])


def _not_a_record(path: Path) -> None:
    path.write_bytes(b"GIF89a...")


def _nested(path: Path) -> None:
    """As anyone with write access to a shared store can leave it: JSON nested past the parser."""
    path.write_bytes(b"prefixgate warm-start record 1\n" + b"[" * 1300 + b"\n")


def _another_key(path: Path) -> None:
    other = _written(path.parent.parent.parent, "c" * 64)
    path.write_bytes(other.read_bytes())


def _newer(path: Path) -> None:
    """A record of a later version (its magic line says which): a rollback reads it."""
    path.write_bytes(b"prefixgate warm-start record 2\n" + path.read_bytes().split(b"\n", 1)[1])


def _oversize(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0" * 4096)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_loose, "writable by group or others"),
        (_foreign_owner, "is owned by uid 65534"),
        (_symlink, "is a symlink"),
        (_fifo, "is not a regular file"),
        (_damaged, "is damaged"),
        (_truncated, "outside the record"),
        (_not_a_record, "not a prefixgate warm-start record"),
        (_nested, "header is not JSON (maximum recursion depth exceeded"),
        (_another_key, "belongs to another config"),
        (_newer, "another version of one"),
        (_oversize, "over the"),
    ],
    ids=["mode", "owner", "symlink", "fifo", "blob", "truncated", "magic", "nested", "foreign", "newer", "size"],
)
def test_a_record_file_that_is_not_right_is_ignored_with_one_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, damage: Any, reason: str
) -> None:
    path = _written(tmp_path)
    monkeypatch.setattr(warmrecords, "MAX_RECORD_BYTES", path.stat().st_size + 1024)
    damage(path)
    with caplog.at_level(logging.WARNING, logger="prefixgate.warm"):
        assert load_record(tmp_path / "state", "a" * 64) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "warm-start record" in lines[0] and reason in lines[0], lines
    assert repr(str(path)) in lines[0], lines  # the file, for whoever reads the log to find


def test_old_records_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmrecords, "MAX_RECORDS", 3)
    for n in range(6):
        path = _written(tmp_path, f"{n:x}" * 64)
        os.utime(path, (1000 + n, 1000 + n))  # written one after another: the oldest go first
    left = sorted(p.name[:1] for p in (tmp_path / "state" / "warm").glob("*.rec"))
    assert left == ["3", "4", "5"]


def test_a_write_cut_short_leaves_nothing_for_long(tmp_path: Path) -> None:
    """A gateway stopped between a record's temporary file and its rename (a signal's exit
    comes while the write runs in a worker thread) left the temporary file for good: the
    next write removes one older than ``STALE_TEMPORARY``; a fresh one, another writer's
    under way, stays."""
    path = _written(tmp_path)
    stale, fresh = path.parent / ".{}.0a0a0a.tmp".format("b" * 64), path.parent / ".{}.1b1b1b.tmp".format("c" * 64)
    for leftover in (stale, fresh):
        leftover.write_bytes(b"half a record")
    old = time.time() - warmrecords.STALE_TEMPORARY - 60
    os.utime(stale, (old, old))
    _written(tmp_path, "d" * 64)
    assert not stale.exists() and fresh.exists()
    assert load_record(tmp_path / "state", "a" * 64) is not None


def test_a_record_that_cannot_be_written_names_its_directory(tmp_path: Path) -> None:
    """A full disk or a read-only mount under the state directory: the error said
    ``[Errno 28] No space left on device`` (the log's ``warm-start record not written: ...``),
    not where. Now it names the record's directory."""
    state, key = tmp_path / "state", "a" * 64
    (state / "warm" / f"{key}.rec" / "in-the-way").mkdir(parents=True)  # the rename cannot replace it
    (state / "warm").chmod(0o700)
    with pytest.raises(OSError) as raised:
        write_record(state, key, encode_record(key, "0" * 64, {"s": Contribution(tools=({"name": "t"},))}, []))
    assert str(raised.value).startswith(f"cannot write a record in {str(state / 'warm')!r}: "), raised.value
    assert [p.name for p in (state / "warm").iterdir()] == [f"{key}.rec"]  # no temporary file left
