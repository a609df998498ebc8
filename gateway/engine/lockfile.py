"""Where the catalog lock lives, reading it, and writing it atomically.

The lock is ``[gateway] lock`` or, when that is not set, ``prefixgate.lock`` beside the
config (a team commits the two together). Writes go to a temporary file in the same
directory, are fsynced and renamed over the old lock, so a reader (a running gateway
polls it) sees the old lock or the new one, never a torn one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from catalog.lock import FILE_NAME, Lock, LockError, dumps, loads
from gateway.config import Config


def lock_target(config: Config) -> Path:
    """Where ``catalog lock`` writes: the configured path, else beside the config."""
    if config.gateway.lock is not None:
        return config.gateway.lock
    base = config.path.parent if config.path is not None else Path.cwd()
    return base / FILE_NAME


def lock_path(config: Config) -> Path | None:
    """The lock a gateway serves under: the configured one (which must exist), or one found beside the config."""
    if config.gateway.lock is not None:
        return config.gateway.lock
    if config.path is None:
        return None  # a config built in memory: never pick up a stray lock from the working directory
    found = lock_target(config)
    return found if found.exists() else None


def read_lock(path: Path) -> Lock:
    """The parsed lock; LockError names the file and the problem (a missing file too)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(f"{path}: lock file not found (write one with prefixgate catalog lock)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"{path}: cannot read the lock file: {getattr(exc, 'strerror', None) or exc}") from None
    return loads(text, str(path))


def write_lock(path: Path, lock: Lock) -> bool:
    """Write atomically (temp file, fsync, rename, fsync the directory); False when the bytes were already there."""
    data = dumps(lock).encode("utf-8")
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True
