"""spill.store: private directories, exclusive 0600 files, id-only reads, retention."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spill import store as store_mod
from spill.store import (
    ArtifactNotFound,
    ArtifactStore,
    StoreError,
    find_artifact,
    gc,
    list_artifacts,
    valid_id,
)
from tests.helpers import demo, run_cli, write_config

SESSION = "a" * 64
OTHER = "b" * 64


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "state" / "artifacts"


@pytest.fixture
def store(root: Path) -> ArtifactStore:
    return ArtifactStore(root, SESSION)


def fixed_ids(monkeypatch: pytest.MonkeyPatch, *ids: str) -> None:
    it = iter(ids)
    monkeypatch.setattr(store_mod, "_new_id", lambda: next(it))


# --------------------------------------------------------------------------- create and read


def test_put_read_roundtrip_and_modes(store: ArtifactStore, root: Path) -> None:
    data = "héllo wörld\n".encode() * 1000
    aid = store.put(data)
    assert valid_id(aid) and len(aid) >= 22
    assert store.size(aid) == len(data)
    assert store.read(aid, 0, len(data) + 10) == data
    assert store.read(aid, 5, 7) == data[5:12]
    assert store.read(aid, len(data), 10) == b""
    assert mode(root) == 0o700
    assert mode(root / SESSION) == 0o700
    assert mode(root.parent) == 0o700  # missing parent created private too
    assert mode(root / SESSION / aid) == 0o600


def test_put_chunks_and_memoryview(store: ArtifactStore) -> None:
    aid = store.put_chunks([b"ab", memoryview(b"cd"), b"", b"e"])
    assert store.read(aid, 0, 100) == b"abcde"
    assert store.read(store.put(memoryview(b"xyz")), 0, 3) == b"xyz"


def test_ids_are_random_and_urlsafe(store: ArtifactStore) -> None:
    ids = {store.put(b"x") for _ in range(20)}
    assert len(ids) == 20
    assert all(valid_id(i) and len(i) == 32 for i in ids)  # 24 random bytes = 192 bits


def test_short_writes_are_completed(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, b: real_write(fd, bytes(b)[:7]))
    data = bytes(range(256)) * 40
    aid = store.put(data)
    monkeypatch.undo()
    assert store.read(aid, 0, len(data)) == data


def test_file_and_directory_are_fsynced(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)), real_fsync(fd)))
    store.put(b"data")
    assert False in synced and True in synced  # the file, then its directory


def test_construction_does_no_io_and_validates_session(root: Path) -> None:
    ArtifactStore(root, SESSION)
    assert not root.exists()
    for bad in ("", "../x", "a/b", "x" * 129, "a b"):
        with pytest.raises(ValueError):
            ArtifactStore(root, bad)


# --------------------------------------------------------------------------- directory checks


def test_symlinked_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    link = tmp_path / "artifacts"
    link.symlink_to(real)
    with pytest.raises(StoreError, match="symlink"):
        ArtifactStore(link, SESSION).put(b"secret")
    assert list(real.iterdir()) == []


def test_symlinked_session_dir_is_refused(store: ArtifactStore, root: Path, tmp_path: Path) -> None:
    store.ensure()
    os.rmdir(root / SESSION)
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (root / SESSION).symlink_to(target)
    with pytest.raises(StoreError, match="symlink"):
        store.put(b"secret")
    assert list(target.iterdir()) == []


def test_group_writable_own_dir_is_fixed(store: ArtifactStore, root: Path) -> None:
    root.mkdir(parents=True)
    os.chmod(root, 0o777)
    (root / SESSION).mkdir()
    os.chmod(root / SESSION, 0o770)
    store.put(b"x")
    assert mode(root) == 0o700 and mode(root / SESSION) == 0o700


def test_root_that_is_a_file_is_refused(root: Path) -> None:
    root.parent.mkdir(parents=True)
    root.write_bytes(b"")
    with pytest.raises(StoreError, match="not a directory"):
        ArtifactStore(root, SESSION).put(b"x")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_dir_owned_by_someone_else_is_refused(store: ArtifactStore, root: Path) -> None:
    root.mkdir(parents=True, mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.raises(StoreError, match="owned by uid 65534"):
        store.put(b"x")


# --------------------------------------------------------------------------- never overwrite, failures


def test_existing_file_is_never_overwritten(store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken, fresh = "T" * 32, "F" * 32
    store.ensure()
    (root / SESSION / taken).write_bytes(b"original")
    fixed_ids(monkeypatch, taken, fresh)
    assert store.put(b"new") == fresh
    assert (root / SESSION / taken).read_bytes() == b"original"
    assert (root / SESSION / fresh).read_bytes() == b"new"


def test_existing_symlink_name_is_not_followed(store: ArtifactStore, root: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    store.ensure()
    (root / SESSION / ("L" * 32)).symlink_to(victim)
    fixed_ids(monkeypatch, "L" * 32, "M" * 32)
    assert store.put(b"new") == "M" * 32
    assert victim.read_bytes() == b"keep me"


def test_endless_collisions_give_store_error(store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.ensure()
    (root / SESSION / ("C" * 32)).write_bytes(b"x")
    monkeypatch.setattr(store_mod, "_new_id", lambda: "C" * 32)
    with pytest.raises(StoreError, match="collisions"):
        store.put(b"y")


def test_full_disk_leaves_no_partial_file(store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.ensure()
    real_write = os.write
    calls = {"n": 0}

    def write(fd: int, b: bytes) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(b)[:10])

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(StoreError, match="No space left on device") as info:
        store.put(b"z" * 100)
    assert "\n" not in str(info.value)
    assert list((root / SESSION).iterdir()) == []


def test_a_full_disk_is_logged_naming_the_directory_and_shown_without_it(
    store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state directory that fills up (or is mounted read-only) under a long-running gateway:
    the log said ``cannot write artifact: No space left on device``, not where. The log's
    message now names the session's directory; what a model is shown still names no path."""
    def write(fd: int, b: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(StoreError) as info:
        store.put(b"z" * 100)
    where = str(root / SESSION)
    assert str(info.value) == f"cannot write artifact in {where!r}: No space left on device"
    assert info.value.shown == "cannot write artifact: No space left on device"


_KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
import spill.store as store_mod
from spill import ArtifactStore
store_mod._WRITE_CHUNK = 4096
real_write, calls = os.write, []
def write(fd, data):
    calls.append(fd)
    if len(calls) > 3:
        os.kill(os.getpid(), signal.SIGKILL)  # three pages of the output written
    return real_write(fd, data)
os.write = write
ArtifactStore(Path(sys.argv[1]), sys.argv[2]).put(b"x" * 1_000_000)
"""


def test_a_write_killed_midway_is_no_artifact_and_retention_removes_it(tmp_path: Path, root: Path) -> None:
    # kill -9 while a spill is written: what it left was a file named as an artifact, 12288 of
    # its 1000000 bytes, listed and read whole by the owner's CLI, and never removed as partial.
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(root), SESSION], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    (left,) = (root / SESSION).iterdir()
    assert left.stat().st_size == 3 * 4096 and not valid_id(left.name)
    config = write_config(tmp_path, {"d": demo()})  # its state_dir holds root
    listed = run_cli("artifacts", "list", "--config", str(config))
    assert (listed.returncode, listed.stdout) == (0, "0 artifacts, 0 bytes\n"), listed
    assert list_artifacts(root) == []
    written = left.stat().st_mtime
    gc(root, max_age_seconds=86400, max_total_bytes=1 << 30, now=written + 60)
    assert left.exists()  # as young as a write that may still be going on: left alone
    gc(root, max_age_seconds=86400, max_total_bytes=1 << 30, now=written + 3600)  # past STALE_PARTIAL
    assert not (root / SESSION).exists()  # the partial went, then its emptied directory
    store = ArtifactStore(root, SESSION)
    assert store.read(store.put(b"next"), 0, 10) == b"next"


def test_read_only_directory_gives_store_error(
    store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root ignores directory modes, so simulate EROFS where a real read-only mount fails: the create.
    store.ensure()
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    with pytest.raises(StoreError, match="Read-only file system") as info:
        store.put(b"x")
    assert "'" not in str(info.value).split(":")[-1]  # no (random) file name in the reason
    monkeypatch.undo()
    assert list((root / SESSION).iterdir()) == []


# --------------------------------------------------------------------------- id-only reads


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "", ".", "..", "a" * 32 + "/../x", "A" * 32, "é" * 32])
def test_malformed_or_unknown_ids_are_not_found(store: ArtifactStore, bad: str) -> None:
    store.put(b"x")
    with pytest.raises(ArtifactNotFound, match="in this session"):
        store.read(bad, 0, 10)
    with pytest.raises(ArtifactNotFound):
        store.size(bad)


def test_other_sessions_artifact_is_not_found_and_not_revealed(root: Path) -> None:
    other = ArtifactStore(root, OTHER)
    aid = other.put(b"theirs")
    mine = ArtifactStore(root, SESSION)
    mine.put(b"mine")
    with pytest.raises(ArtifactNotFound) as info:
        mine.read(aid, 0, 10)
    assert OTHER not in str(info.value) and str(root) not in str(info.value)
    assert str(info.value) == f"no artifact with id {aid!r} in this session"


def test_read_before_anything_exists_is_not_found(store: ArtifactStore) -> None:
    with pytest.raises(ArtifactNotFound):
        store.read("Q" * 32, 0, 1)


def test_symlinked_artifact_is_not_read(store: ArtifactStore, root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    store.ensure()
    (root / SESSION / ("S" * 32)).symlink_to(secret)
    with pytest.raises(ArtifactNotFound):
        store.read("S" * 32, 0, 10)


# --------------------------------------------------------------------------- listing and retention


def put_at(store: ArtifactStore, data: bytes, mtime: float) -> str:
    aid = store.put(data)
    os.utime(store.root / store.session_key / aid, (mtime, mtime))
    return aid


def test_list_and_find_across_sessions(root: Path) -> None:
    assert list_artifacts(root) == []
    a = put_at(ArtifactStore(root, SESSION), b"12345", 1000)
    b = put_at(ArtifactStore(root, OTHER), b"1", 500)
    infos = list_artifacts(root)
    assert [(i.session, i.id, i.size, i.mtime) for i in infos] == [(OTHER, b, 1, 500), (SESSION, a, 5, 1000)]
    found = find_artifact(root, b)
    assert found.session_key == OTHER and found.read(b, 0, 9) == b"1"
    with pytest.raises(ArtifactNotFound):
        find_artifact(root, "../" + a)
    with pytest.raises(ArtifactNotFound):
        find_artifact(root, "Z" * 32)


def test_gc_by_age_protects_fresh_current_session(root: Path) -> None:
    now = 1_000_000.0
    mine, other = ArtifactStore(root, SESSION), ArtifactStore(root, OTHER)
    old_mine = put_at(mine, b"x", now - 100)
    fresh_mine = put_at(mine, b"x", now - 10)
    old_other = put_at(other, b"x", now - 100)
    removed = gc(root, max_age_seconds=50, max_total_bytes=10**9, now=now, protect_session=SESSION)
    assert {r.id for r in removed} == {old_mine, old_other}
    assert [i.id for i in list_artifacts(root)] == [fresh_mine]
    assert not (root / OTHER).exists()  # emptied other session dir is removed
    with pytest.raises(ArtifactNotFound):
        mine.read(old_mine, 0, 1)  # an expired id is simply not found


def test_gc_by_total_size_oldest_first(root: Path) -> None:
    now = 1_000_000.0
    mine, other = ArtifactStore(root, SESSION), ArtifactStore(root, OTHER)
    a = put_at(other, b"a" * 100, now - 500)
    b = put_at(mine, b"b" * 100, now - 400)
    c = put_at(other, b"c" * 100, now - 300)
    d = put_at(mine, b"d" * 100, now - 5)  # protected: current session, < 60 s
    removed = mine.gc(max_age_seconds=10**6, max_total_bytes=150, now=now)
    assert [r.id for r in removed] == [a, b, c]
    assert [i.id for i in list_artifacts(root)] == [d]  # over budget, but protected


def test_gc_never_follows_symlinks_or_touches_foreign_names(root: Path, tmp_path: Path) -> None:
    now = 1_000_000.0
    mine = ArtifactStore(root, SESSION)
    put_at(mine, b"x", now - 1000)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ("V" * 32)).write_bytes(b"victim")
    (root / "linked").symlink_to(outside)  # a symlinked "session"
    (root / SESSION / ("W" * 32)).symlink_to(outside / ("V" * 32))
    (root / SESSION / "notes.txt").write_bytes(b"not an artifact")
    (root / SESSION / ("D" * 32)).mkdir()
    assert [(i.session, i.size) for i in list_artifacts(root)] == [(SESSION, 1)]  # only the real file
    gc(root, max_age_seconds=0, max_total_bytes=0, now=now)
    assert (outside / ("V" * 32)).read_bytes() == b"victim"
    assert (root / "linked").is_symlink()
    assert (root / SESSION / "notes.txt").exists()
    assert list_artifacts(root) == []


def test_gc_without_store_is_a_no_op(root: Path) -> None:
    assert gc(root, max_age_seconds=0, max_total_bytes=0) == []


def test_put_after_gc_removed_session_dir(root: Path) -> None:
    mine = ArtifactStore(root, OTHER)
    aid = put_at(mine, b"x", 0)
    gc(root, max_age_seconds=1, max_total_bytes=10, now=10_000)
    assert not (root / OTHER).exists()
    new = mine.put(b"again")
    assert new != aid and mine.read(new, 0, 9) == b"again"


def test_put_survives_session_dir_removed_by_a_concurrent_gc(
    store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.ensure()
    real_create = store_mod._create_file
    raced: list[bool] = []

    def create_after_race(dir_fd: int, where: str) -> tuple[str, int]:
        if not raced:
            raced.append(True)
            os.rmdir(root / SESSION)  # another process's gc removes our (empty) directory
        return real_create(dir_fd, where)

    monkeypatch.setattr(store_mod, "_create_file", create_after_race)
    aid = store.put(b"kept")
    assert raced and store.read(aid, 0, 10) == b"kept"


def test_an_artifact_id_never_begins_with_a_dash() -> None:
    """``prefixgate artifacts read ID`` would take ``-x...`` for an option (one id in 64 did):
    ids are drawn again until they do not begin with one."""
    from spill import new_id, valid_id

    made = [new_id() for _ in range(5000)]
    assert all(valid_id(i) and not i.startswith("-") for i in made)
    assert len(set(made)) == len(made)
