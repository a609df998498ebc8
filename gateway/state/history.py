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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.config import path_text
from gateway.state.journal import append_rotating, open_private_dir, read_private, tail_record

MAX_BYTES = 256 * 1024
DIRECTORY = "history"


class EpochHistory:
    """The history of one profile of the gateway of one config file (``config``): configs that
    share a ``state_dir`` (the default one) share the file, each record naming its config, and
    each reads its own (a record from before they were named is everyone's; without a config,
    every record is read)."""

    def __init__(self, state_dir: Path, profile: str | None, config: Path | None = None) -> None:
        self.directory = state_dir / DIRECTORY
        self.name = f"{profile or 'default'}.jsonl"
        self.path = self.directory / self.name
        self.label = f"epoch history {str(self.path)!r}"
        self.config = path_text(config.resolve()) if config is not None else None

    def append(self, record: dict[str, Any]) -> None:
        """Add one record (this config's); raise OSError when it cannot be written."""
        record = {**record, "config": self.config}
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n").encode()
        append_rotating(self.directory, self.name, self.label, line, MAX_BYTES)

    def read(self) -> list[dict[str, Any]]:
        """This config's records kept, oldest first (a torn or foreign line is skipped)."""
        found = [r for name in (self.name + ".1", self.name) for r in _records(self._read(name, _whole))]
        return [r for r in found if self._mine(r)]

    def last(self) -> dict[str, Any] | None:
        """This config's newest record, read from the end of the file alone when it is there (a
        process's first epoch asks for the one before it: start-up reads no more than that);
        after another config's, the whole history is read."""
        for name in (self.name, self.name + ".1"):
            found = _records(self._read(name, tail_record))
            if found:
                if self._mine(found[-1]):
                    return found[-1]
                break
        mine = self.read()
        return mine[-1] if mine else None

    def _mine(self, record: dict[str, Any]) -> bool:
        named = record.get("config")
        return self.config is None or named is None or named == self.config

    def _read(self, name: str, read: Callable[[int, int], bytes]) -> bytes:
        dir_fd = open_private_dir(self.directory, create=False)
        if dir_fd is None:
            return b""
        try:
            return read_private(dir_fd, name, self.label, read)
        finally:
            os.close(dir_fd)


def _whole(fd: int, size: int) -> bytes:
    return os.pread(fd, min(size, 2 * MAX_BYTES), 0)


def _records(data: bytes) -> list[dict[str, Any]]:
    records = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and isinstance(record.get("fingerprint"), str):
            records.append(record)
    return records
