"""Warm-start records as private files: ``<state_dir>/warm/<key>.rec``, one per launch identity.

Read before the gateway has imported anything heavy (the stdio start answers from it), so
this module is the standard library and the private-file checks only. A record is read
like every file from outside the process: never following a symlink, without blocking (a
FIFO in its place is refused), only a regular file we own that nobody else can write,
size-capped. Written atomically (a temporary file in the same verified 0700 directory,
0600, renamed into place), so concurrent gateways of one config never see a torn record;
the oldest records beyond :data:`MAX_RECORDS` are removed (every config change leaves one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from pathlib import Path

from catalog.warm import MAX_RECORD_BYTES, Record, RecordError
from gateway.state.journal import JournalError, check_private_file, open_private_dir, why_not_opened

DIRECTORY = "warm"
SUFFIX = ".rec"
MAX_RECORDS = 32
"""Records kept per state directory; older ones (by modification time) are removed on write."""
STALE_TEMPORARY = 600
"""Seconds after which a record's temporary file is a write that never finished."""
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

log = logging.getLogger("prefixgate.warm")


FILES = "state_dir"
"""``Record.where`` of a record read from its file."""


class RecordUnusable(Exception):
    """A record file exists but must not be used; ``str()`` says why (one line)."""


def record_name(key: str) -> str:
    return key + SUFFIX


def read_record(state_dir: Path, key: str) -> bytes | None:
    """The record's bytes; None when there is none. Raises RecordUnusable for a file that is
    there but wrong (a symlink, not a regular file, another owner, writable by others, too large)."""
    directory = state_dir / DIRECTORY
    try:
        dir_fd = open_private_dir(directory, create=False)
    except JournalError as exc:
        raise RecordUnusable(str(exc)) from None
    if dir_fd is None:
        return None
    label = f"warm-start record {str(directory / record_name(key))!r}"
    try:
        try:
            fd = os.open(record_name(key), _READ, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RecordUnusable(why_not_opened(label, exc)) from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        try:
            info = check_private_file(fd, label)
        except JournalError as exc:
            raise RecordUnusable(str(exc)) from None
        if info.st_size > MAX_RECORD_BYTES:
            raise RecordUnusable(f"{label} is {info.st_size} bytes, over the {MAX_RECORD_BYTES}-byte limit")
        return handle.read(MAX_RECORD_BYTES + 1)


def write_record(state_dir: Path, key: str, data: bytes) -> None:
    """Put the record in place atomically (0600 in a verified 0700 directory); OSError if it cannot be."""
    try:
        dir_fd = open_private_dir(state_dir / DIRECTORY, create=True)
    except JournalError as exc:
        raise OSError(str(exc)) from None
    assert dir_fd is not None
    try:
        temporary = f".{key}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(temporary, flags, 0o600, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(temporary, record_name(key), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                try:
                    os.unlink(temporary, dir_fd=dir_fd)
                except OSError:
                    pass
                raise
        except OSError as exc:
            # (a full disk, a read-only mount: the error names a file relative to the directory, or none)
            where = str(state_dir / DIRECTORY)
            raise OSError(f"cannot write a record in {where!r}: {exc.strerror or exc}") from None
        _prune(dir_fd, keep=record_name(key))
    finally:
        os.close(dir_fd)


def _prune(dir_fd: int, keep: str) -> None:
    """Remove the oldest records beyond MAX_RECORDS (never ``keep``, the one just written), and
    what a write cut short left (a gateway killed between its temporary file and the rename):
    a temporary file older than ``STALE_TEMPORARY`` seconds, which no write still in progress has."""
    found: list[tuple[int, str]] = []
    stale = time.time_ns() - STALE_TEMPORARY * 1_000_000_000
    for name in os.listdir(dir_fd):
        if name.startswith(".") and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime_ns < stale:
                    os.unlink(name, dir_fd=dir_fd)
            continue
        if name.endswith(SUFFIX) and name != keep:
            try:
                found.append((os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime_ns, name))
            except OSError:
                continue
    found.sort(reverse=True)
    for _, name in found[MAX_RECORDS - 1 :]:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


def load_record(state_dir: Path, key: str) -> Record | None:
    """This key's record from ``state_dir``, checked; a damaged, foreign or unsafe one is
    skipped with one log line (never published), as is one that cannot be read."""
    try:
        data = read_record(state_dir, key)
    except RecordUnusable as exc:
        log.warning("warm-start record ignored: %s", exc)
        return None
    except OSError as exc:
        log.warning("warm-start record ignored: cannot read it: %s", exc.strerror or exc)
        return None
    label = f"warm-start record {str(state_dir / DIRECTORY / record_name(key))!r}"
    return None if data is None else decoded(data, key, FILES, label)


def decoded(data: bytes, key: str, where: str, label: str | None = None) -> Record | None:
    """``data`` as the record of ``key``, every part checked now; None (and one log line, naming
    it by ``label``: its file) if it is not."""
    try:
        record = Record(data)
        record.where = where
        if record.key != key:
            raise RecordError("it belongs to another config (its key differs)")
        record.servers()
        for method, version in record.answered():
            record.answer(method, version)
    except RecordError as exc:
        log.warning("%s ignored: %s", label or f"warm-start record from {where}", exc)
        return None
    return record
