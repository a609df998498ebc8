"""Memoised publishability checks: the metaschema check and the SDK wire-model check.

Checking a tool schema against the JSON Schema 2020-12 metaschema costs milliseconds
(python-jsonschema resolves ``$dynamicRef`` for every subschema), so a catalog of
thousands of tools would take seconds on every start and every rebuild. Both checks
are pure functions of the canonical declaration, so their *passes* are remembered by
SHA-256 of its canonical JSON (``catalog.build.Memo``): in memory for rebuilds, and in
``<state_dir>/cache/``
(a private file, keyed also by the jsonschema, jsonschema-rs and mcp versions) for the next start.
Failures are never cached, so a quarantine reason is always computed fresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from importlib import metadata
from pathlib import Path

from gateway.state.journal import JournalError, check_private_file, open_private_dir

log = logging.getLogger("prefixgate.checks")

_FILE = "checks-passed.txt"
MAX_KEYS = 50_000
"""Remembered passes at most: past it, only those the last build used are kept (a server that
changes its schemas on every change would add passes for ever)."""
MAX_FILE_BYTES = 8 << 20
"""The largest cache read: more than ``MAX_KEYS`` passes take (65 bytes each). A bigger file
is not one a gateway wrote (a sparse file of gigabytes costs no disk) and is ignored unread."""


def _versions() -> str:
    parts = []
    for name in ("jsonschema", "jsonschema-rs", "mcp", "prefixgate"):
        try:
            parts.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name}=?")
    return " ".join(parts)


class CheckCache:
    def __init__(self, state_dir: Path | None = None, *, persist: bool = True) -> None:
        self.directory = state_dir / "cache" if state_dir is not None else None
        self.persist = persist
        self.header = f"# prefixgate check cache v1 {_versions()}"
        self.lock = threading.Lock()
        """Held by a build for its checks and the save after them: builds run in worker
        threads (gateway/engine/epoch.py ``built_epoch``), and every profile's share this cache."""
        self.passed_keys: set[str] = set()
        self._loaded: set[str] = set()
        self._used: set[str] = set()
        """The passes asked about or learnt since the last ``save`` (the last build's)."""
        self._load()

    def passed(self, encoded: bytes) -> bool:
        """Whether this canonical declaration passed every check before (``catalog.build.Memo``)."""
        key = hashlib.sha256(encoded).hexdigest()
        if key in self.passed_keys:
            self._used.add(key)
            return True
        return False

    def add(self, encoded: bytes) -> None:
        key = hashlib.sha256(encoded).hexdigest()
        self.passed_keys.add(key)
        self._used.add(key)

    def _load(self) -> None:
        if self.directory is None:
            return
        path = self.directory / _FILE
        try:
            # O_NONBLOCK and the file check: a FIFO or a foreign file here must not hang
            # or steer the start-up (a remembered pass skips a schema check).
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        with os.fdopen(fd, encoding="ascii", errors="replace") as handle:
            try:
                size = check_private_file(fd, str(path)).st_size
            except OSError as exc:
                log.warning("check cache ignored: %s", exc)
                return
            if size > MAX_FILE_BYTES:
                log.warning("check cache ignored: %r is %d bytes, more than it ever holds", str(path), size)
                return
            lines = handle.read(MAX_FILE_BYTES).splitlines()
        if not lines or lines[0] != self.header:
            return  # another version of a checker: start over
        self._loaded = {line for line in lines[1:] if len(line) == 64}
        self.passed_keys |= self._loaded

    def save(self) -> None:
        """After a build: past ``MAX_KEYS``, keep only the passes it used; then write the
        remembered passes (atomically, 0600) if anything new was learnt or forgotten."""
        used, self._used = self._used, set()
        if len(self.passed_keys) > MAX_KEYS:
            self.passed_keys = used
            self._loaded = set()  # (the file holds the forgotten ones: written again)
        if self.directory is None or not self.persist or self.passed_keys <= self._loaded:
            return
        try:
            dir_fd = open_private_dir(self.directory, create=True)
            assert dir_fd is not None
            temporary = f".{_FILE}.{os.getpid()}"
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(temporary, flags, 0o600, dir_fd=dir_fd)
                with os.fdopen(fd, "w", encoding="ascii") as handle:
                    check_private_file(fd, temporary)
                    handle.write(self.header + "\n" + "".join(f"{k}\n" for k in sorted(self.passed_keys)))
                os.replace(temporary, _FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except OSError:
                with contextlib.suppress(OSError):  # (a full disk: no half-written file left behind)
                    os.unlink(temporary, dir_fd=dir_fd)
                raise
            finally:
                os.close(dir_fd)
            self._loaded = set(self.passed_keys)
        except JournalError as exc:  # (the directory's: its message names it)
            log.info("check cache not saved: %s", exc)
        except OSError as exc:  # (a full disk, a read-only mount: the error names the temporary file, or none)
            log.info("check cache not saved: cannot write %r: %s", str(self.directory / _FILE), exc.strerror or exc)
