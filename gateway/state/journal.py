"""The activation journal: one append-only file per session id, fsynced per record.

A grant must survive a gateway restart with the same ``--session`` (clients restart
their MCP servers often), but only if it is provably the same epoch; the record format
and the fail-closed restore rules live in ``catalog.activation``. This module only does
the file work, and trusts nothing it finds: the directory is verified like the artifact
store's (a real directory, ours, 0700: the same opener), the file must be a regular file
that we own and nobody else can write (opened ``O_NONBLOCK`` so a FIFO cannot hang us),
only its tail is read (restore needs the last record, and the file may be huge), and
each record is fsynced before the search result that granted the tools goes out.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from spill import StoreError
from spill import open_private_dir as _open_verified_dir

TAIL_LIMIT = 4 << 20
"""How far back from the end the last record is looked for (bytes)."""
COMPACT_AT = 1 << 20
"""Bytes past which a journal is replaced by its newest record instead of growing: restore
reads that one only, and an owner's journal (a principal's, over HTTP) would otherwise grow
with every grant for as long as the owner exists."""
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class JournalError(OSError):
    pass


def session_key(session_id: str) -> str:
    """The file-system name of a session: its id may be anything and is never shown."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def activation_key(owner: str, profile: str | None) -> str:
    """Where an owner's activation is kept in a profile (None: the default profile, the owner's
    own key): a grant in one profile never runs a tool in another. Artifacts stay the owner's."""
    return owner if profile is None else session_key(f"{owner}\0profile:{profile}")


def open_private_dir(path: Path, *, create: bool) -> int | None:
    """Verified descriptor of a private directory (created 0700 with its missing parents
    when ``create``); None when it is missing and not created. Raises JournalError for a
    symlink, a non-directory or a directory owned by someone else."""
    try:
        return _open_verified_dir(path, f"directory {str(path)!r}", create=create)
    except StoreError as exc:
        raise JournalError(str(exc)) from None


def check_private_file(fd: int, label: str) -> os.stat_result:
    """Refuse anything but a regular file we own that nobody else can write."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise JournalError(f"{label} is not a regular file")
    if info.st_uid != os.geteuid():
        raise JournalError(f"{label} is owned by uid {info.st_uid}, not by us (uid {os.geteuid()})")
    if info.st_mode & 0o022:
        raise JournalError(f"{label} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})")
    return info


def why_not_opened(label: str, exc: OSError) -> str:
    """Why a private file was not opened (``O_NOFOLLOW | O_NONBLOCK``), in words."""
    if exc.errno == errno.ELOOP:
        return f"{label} is a symlink"
    if exc.errno == errno.ENXIO:
        return f"{label} is not a regular file"
    return f"cannot open {label}: {exc.strerror or exc}"


def tail_record(fd: int, size: int, limit: int = TAIL_LIMIT) -> bytes:
    """The file's last line (with its newline, if any), read from the end only."""
    if size <= 0:
        return b""
    start = max(0, size - limit)
    chunk = os.pread(fd, size - start, start)
    cut = chunk.rfind(b"\n", 0, len(chunk) - 1)
    if cut >= 0:
        return chunk[cut + 1 :]
    if start == 0:
        return chunk
    raise JournalError(f"the last record is longer than {limit} bytes")


class Journal:
    def __init__(self, state_dir: Path, session_id: str = "", *, key: str | None = None) -> None:
        """The journal of ``session_id``, or of an owner ``key`` already hashed (``session_key``)."""
        self.directory = state_dir / "activation"
        self.path = self.directory / f"{session_key(session_id) if key is None else key}.jsonl"
        self.label = f"activation journal {str(self.path)!r}"

    def read(self) -> bytes:
        """The journal's last record (empty when it does not exist yet).

        Raises OSError (JournalError with the reason) when the directory or the file
        fails verification; the caller then grants nothing.
        """
        dir_fd = open_private_dir(self.directory, create=False)
        if dir_fd is None:
            return b""
        try:
            return read_private(dir_fd, self.path.name, self.label, tail_record)
        finally:
            os.close(dir_fd)

    def append(self, record: bytes) -> None:
        """Append one record and fsync it; raise OSError if it is not durably written. Past
        ``COMPACT_AT`` the record takes the journal's place instead (atomically, fsynced)."""
        dir_fd = open_private_dir(self.directory, create=True)
        assert dir_fd is not None
        try:
            append_private(dir_fd, self.path.name, self.label, record, durable=True, replace_past=COMPACT_AT)
        finally:
            os.close(dir_fd)


def read_private(dir_fd: int, name: str, label: str, read: Callable[[int, int], bytes]) -> bytes:
    """``read(fd, size)`` of the private file ``name`` of a verified directory, once it is
    verified as ``check_private_file`` does (empty when it does not exist); raise OSError
    (JournalError naming ``label`` when the file is refused)."""
    try:
        fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise JournalError(why_not_opened(label, exc)) from None
    try:
        return read(fd, check_private_file(fd, label).st_size)
    except JournalError as exc:  # (what ``read`` refuses in the file: named with the file)
        raise JournalError(f"{label}: {exc}") from None
    finally:
        os.close(fd)


STALE_TEMPORARY = 600
"""Seconds after which a temporary file of ``replace_private`` is a write that never finished."""


def remove_temporaries(dir_fd: int, name: str, older_than: float | None = None) -> None:
    """Remove what ``replace_private`` of ``name`` left when its process was killed between
    creating its temporary file and renaming it (a copy of what it wrote: a token file's
    tokens): those last modified before ``older_than`` (a time), or all of them when None."""
    prefix = f".{name}."
    for entry in os.listdir(dir_fd):
        if entry.startswith(prefix) and entry.endswith(".tmp"):
            with contextlib.suppress(OSError):
                info = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                if older_than is None or info.st_mtime < older_than:
                    os.unlink(entry, dir_fd=dir_fd)


def replace_private(dir_fd: int, name: str, label: str, data: bytes) -> None:
    """Put ``data`` in place of the private file ``name`` of a verified directory at once: a
    new 0600 file, fsynced, renamed over it, and the directory fsynced. Raise OSError
    (JournalError naming ``label`` when the new file is refused); the old file is then intact.
    A killed write's temporary file older than ``STALE_TEMPORARY`` seconds is removed first."""
    remove_temporaries(dir_fd, name, time.time() - STALE_TEMPORARY)
    temporary = f".{name}.{os.urandom(6).hex()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise JournalError(why_not_opened(label, exc)) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def append_private(
    dir_fd: int, name: str, label: str, data: bytes, *, durable: bool, replace_past: int | None = None
) -> None:
    """Append ``data`` to the private file ``name`` of a verified directory (created 0600,
    verified as ``check_private_file`` does), fsynced when ``durable``; raise OSError
    (JournalError naming ``label`` when the file is refused). ``replace_past``: a file that
    would grow past this many bytes is replaced by ``data`` instead (``replace_private``)."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _OPEN_FLAGS, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise JournalError(why_not_opened(label, exc)) from None
    try:
        size = check_private_file(fd, label).st_size
        if replace_past is not None and size and size + len(data) > replace_past:
            replace_private(dir_fd, name, label, data)
            return
        _append_whole(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def _append_whole(fd: int, data: bytes) -> None:
    """Write ``data`` at the end of ``fd`` (opened ``O_APPEND``) whole or not at all: a write
    cut short (a full disk) is truncated away, so the next append does not continue a torn
    line. Unless another writer appended after it meanwhile: its lines are not cut."""
    view, written = memoryview(data), 0
    try:
        while written < len(data):
            written += os.write(fd, view[written:])
    except OSError:
        if written:
            end = os.lseek(fd, 0, os.SEEK_CUR)
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_size == end:
                    os.ftruncate(fd, end - written)
        raise


def append_rotating(directory: Path, name: str, label: str, data: bytes, max_bytes: int) -> None:
    """Append ``data`` to the private file ``name`` in ``directory`` (created 0700), which
    becomes ``name.1`` (replacing the one before) when ``data`` would take it past
    ``max_bytes``: at most about twice that is kept. Not fsynced; raise OSError.

    ``data`` of many lines (a batch of audit lines) is cut between lines: those that fit go
    in first, then the file rotates and the rest follow, so no file outgrows ``max_bytes``
    (one line longer than that has a file of its own): written whole, a batch would take a
    fresh file past the limit by the batch, up to the audit queue's 10,000 lines.

    The size check, the rotation and the append are one step under a lock on the directory:
    gateways sharing a ``state_dir`` append to one file, and two that both saw it full renamed
    it twice (the second found no file, or put the other's fresh file in place of ``name.1``)."""
    dir_fd = open_private_dir(directory, create=True)
    assert dir_fd is not None
    try:
        with contextlib.suppress(OSError):  # (a file system without locks: as before, unlocked)
            fcntl.flock(dir_fd, fcntl.LOCK_EX)  # released as ``dir_fd`` is closed
        try:
            size = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            size = 0
        while True:
            room = max(max_bytes - size, 0)
            fits = len(data) if len(data) <= room else data.rfind(b"\n", 0, room) + 1
            if not size and not fits:  # (one line longer than the limit)
                fits = data.find(b"\n") + 1 or len(data)
            if fits:
                append_private(dir_fd, name, label, data[:fits], durable=False)
                size, data = size + fits, data[fits:]
            if not data:
                break
            os.replace(name, name + ".1", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            size = 0
    finally:
        os.close(dir_fd)
