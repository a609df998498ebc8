"""The activation journal: one append-only file per session id, fsynced per record.

A grant must survive a gateway restart with the same ``--session`` (clients restart
their MCP servers often), but only if it is provably the same epoch; the record format
and the fail-closed restore rules live in ``catalog.activation``. This module only does
the file work: a private directory, ``O_APPEND`` writes, and ``fsync`` before the search
result that granted the tools goes out.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


class JournalError(OSError):
    pass


def session_key(session_id: str) -> str:
    """The file-system name of a session: its id may be anything and is never shown."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) mode 0700 and refuse anything that is not ours.

    ``Path.mkdir(parents=True)`` would create the parents (the state directory itself)
    with the umask's default mode, readable by everyone.
    """
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise JournalError(f"{path} is not a real directory")
    if info.st_uid != os.geteuid():
        raise JournalError(f"{path} is not owned by this user")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


class Journal:
    def __init__(self, state_dir: Path, session_id: str) -> None:
        self.directory = state_dir / "activation"
        self.path = self.directory / f"{session_key(session_id)}.jsonl"

    def read(self) -> bytes:
        """The whole journal (empty when it does not exist yet)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return b""
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def append(self, record: bytes) -> None:
        """Append one record and fsync it; raise OSError if it is not durably written."""
        private_dir(self.directory)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            view = memoryview(record)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
