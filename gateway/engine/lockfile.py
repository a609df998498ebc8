"""Where the catalog lock lives, reading it, and writing it atomically.

The lock is ``[gateway] lock`` or, when that is not set, ``prefixgate.lock`` beside the
config (a team commits the two together). Writes go to a temporary file in the same
directory, are fsynced and renamed over the old lock, so a reader (a running gateway
polls it) sees the old lock or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path

import anyio

from catalog.lock import Lock, LockError, dumps, loads
from catalog.text import plural
from gateway.launch import lock_path as lock_path
from gateway.launch import lock_target as lock_target

log = logging.getLogger("prefixgate")

LOCK_POLL = 1.0
"""Seconds between checks of the lock file for a change (``catalog approve`` while serving)."""


def read_lock(path: Path) -> Lock:
    """The parsed lock; LockError names the file and the problem (a missing file too)."""
    return read_lock_and_bytes(path)[0]


MAX_LOCK_BYTES = 64 << 20
"""The largest lock read (a 5,000-tool lock is a few MiB): a bigger file is refused unread."""


def read_lock_and_bytes(path: Path) -> tuple[Lock, bytes]:
    """The parsed lock and the file's bytes (what a warm-start record is keyed by).

    Read like the journal: a regular file only (a FIFO or ``/dev/zero`` behind the name is
    refused, opened non-blocking so it cannot hang), at most ``MAX_LOCK_BYTES``, and any
    failure to parse it, however deep or odd the TOML, is a ``LockError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise LockError(f"{path}: lock file not found (write one with prefixgate catalog lock)") from None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock file: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise LockError(f"{path}: the lock is not a regular file")
            data = f.read(MAX_LOCK_BYTES + 1)
        if len(data) > MAX_LOCK_BYTES:
            raise LockError(f"{path}: the lock file is larger than {MAX_LOCK_BYTES >> 20} MiB")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"{path}: cannot read the lock file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return loads(text, str(path)), data
    except LockError:
        raise
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:
        raise LockError(f"{path}: not a lock file prefixgate can read ({type(exc).__name__})") from None


def stage_lock(path: Path, lock: Lock) -> str | None:
    """The lock's bytes written and synced to a temporary file beside ``path`` (its name), for
    ``commit_lock``; None when those bytes are already there. ``OSError`` (a full disk) leaves
    nothing behind: a set of locks is staged whole before any is renamed into place. A lock that
    is a symbolic link is written through it (``commit_lock`` replaces the file it names)."""
    path = Path(os.path.realpath(path))
    data = dumps(lock).encode("utf-8")
    try:
        if path.read_bytes() == data:
            return None
    except OSError:
        pass
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return temp


def commit_lock(temp: str, path: Path) -> None:
    """Rename a staged lock into place, then sync the directory (the rename survives a crash)."""
    path = Path(os.path.realpath(path))
    os.replace(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def lock_bytes(path: Path) -> bytes | None:
    """The lock file's bytes now (through a symbolic link), or None when there is none (or
    none that can be read: then not the one read before either)."""
    try:
        return Path(os.path.realpath(path)).read_bytes()
    except OSError:
        return None


@contextlib.contextmanager
def writing_locks(paths: Iterable[Path]) -> Iterator[None]:
    """An exclusive lock on each lock file's directory while the block runs: two commands
    writing locks at once (two ``catalog approve`` runs) check what is in place and rename
    theirs over it one after the other, so neither replaces a lock the other wrote unseen."""
    fds: list[int] = []
    try:
        for directory in sorted({os.path.dirname(os.path.realpath(p)) for p in paths}):
            fds.append(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            with contextlib.suppress(OSError):  # (a file system without locks: as before, unlocked)
                fcntl.flock(fds[-1], fcntl.LOCK_EX)  # released as the descriptor is closed
        yield
    finally:
        for fd in fds:
            os.close(fd)


class ServedLock:
    """The catalog lock a gateway serves under: read at start-up, then polled while serving."""

    def __init__(self, path: Path | None, find: Callable[[], Path | None] | None = None) -> None:
        self.path = path
        """The lock file, or None: serve the live catalog."""
        self.find = find
        """Without a lock: the lock a start would serve under now (``lock_path``), or None."""
        self.current: Lock | None = None
        """The lock served under (read by ``load``), or None: serve the live catalog."""
        self.data: bytes | None = None
        """The lock file's bytes as read: part of the warm-start record's key."""
        self._stamp: tuple[int, int, int] | None = None

    def load(self) -> None:
        """Read the lock file (LockError names it and the problem); none configured or found: no lock."""
        if self.path is None or self.current is not None:
            return
        self._stamp = _stamp(self.path)
        self.current, self.data = read_lock_and_bytes(self.path)
        log.info("catalog lock: %s (%s)", self.path, plural(len(self.current.tools), "tool"))

    async def watch(self, ready: anyio.Event, changed: Callable[[str], Awaitable[None]]) -> None:
        """Serve an approved change without a restart: once ``ready``, a new lock file is ``changed``.

        A lock that cannot be read keeps the previous one (an unreadable lock never
        unlocks the catalog); ``catalog approve`` replaces the file atomically. Without a lock,
        one that ``find`` finds (the first ``catalog lock``, a pulled commit) is served from then
        on, as a start would serve under it: a gateway that keeps running is held to it too.
        """
        assert self.path is not None or self.find is not None
        while True:
            await anyio.sleep(LOCK_POLL)
            path = self.path or (self.find() if self.find is not None else None)
            if path is None:
                continue
            stamp = _stamp(path)
            if stamp == self._stamp or not ready.is_set():
                continue
            self._stamp = stamp
            kept = "keeping the previous one" if self.current is not None else "serving the live catalog as before"
            try:  # a 5,000-tool lock is megabytes of TOML: parsed off the event loop
                self.current, self.data = await anyio.to_thread.run_sync(read_lock_and_bytes, path)
            except LockError as exc:
                log.error("catalog lock not reloaded, %s: %s", kept, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - a file never stops a serving gateway
                log.error("catalog lock not reloaded, %s: %s", kept, type(exc).__name__)
                continue
            how = "changed" if self.path is not None else "written"
            self.path = path
            await changed(f"lock file {path.name} {how}")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
