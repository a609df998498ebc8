"""The epoch history: one JSON line per epoch a serving gateway published, per profile.

``<state_dir>/history/<profile>.jsonl`` (``default`` for the top-level one), 0600 in a 0700
directory, verified as the activation journal is. Bounded: past ``MAX_BYTES`` the file
becomes ``<profile>.jsonl.1`` (the one before is dropped), so at most twice that is kept.
A failed write is logged by the caller and never fails publishing; records are not
fsynced (a lost last line costs an answer, not a call).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gateway.state.journal import _OPEN_FLAGS, append_private, check_private_file, open_private_dir, why_not_opened

MAX_BYTES = 256 * 1024
DIRECTORY = "history"


class EpochHistory:
    def __init__(self, state_dir: Path, profile: str | None) -> None:
        self.directory = state_dir / DIRECTORY
        self.name = f"{profile or 'default'}.jsonl"
        self.path = self.directory / self.name
        self.label = f"epoch history {str(self.path)!r}"

    def append(self, record: dict[str, Any]) -> None:
        """Add one record; raise OSError when it cannot be written."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n").encode()
        dir_fd = open_private_dir(self.directory, create=True)
        assert dir_fd is not None
        try:
            try:
                size = os.stat(self.name, dir_fd=dir_fd, follow_symlinks=False).st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(line) > MAX_BYTES:
                os.replace(self.name, self.name + ".1", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            append_private(dir_fd, self.name, self.label, line, durable=False)
        finally:
            os.close(dir_fd)

    def read(self) -> list[dict[str, Any]]:
        """Every record kept, oldest first (a torn or foreign line is skipped)."""
        dir_fd = open_private_dir(self.directory, create=False)
        if dir_fd is None:
            return []
        records: list[dict[str, Any]] = []
        try:
            for name in (self.name + ".1", self.name):
                try:
                    fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise OSError(why_not_opened(self.label, exc)) from None
                try:
                    check_private_file(fd, self.label)
                    with os.fdopen(fd, "rb", closefd=False) as handle:
                        data = handle.read(2 * MAX_BYTES)
                finally:
                    os.close(fd)
                for line in data.splitlines():
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict) and isinstance(record.get("fingerprint"), str):
                        records.append(record)
        finally:
            os.close(dir_fd)
        return records
