"""The audit log: one JSON line per executed or refused tool call (``[telemetry] audit``).

``<state_dir>/audit/calls.jsonl``, 0600 in a 0700 directory, verified as the activation
journal is, rotated to ``calls.jsonl.1`` past ``audit_max_bytes``. A call never waits for
it: lines are queued in memory and written by one task a few times a second, off the event
loop. The queue is bounded (``MAX_QUEUED`` lines); a line that does not fit, or a write that
fails, is counted (``dropped``, ``failed``: the metrics show both) and logged once per run of
failures, and the call it records is unaffected.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from catalog.text import plural
from gateway.state.journal import append_rotating

log = logging.getLogger("prefixgate.audit")

DIRECTORY = "audit"
FILE = "calls.jsonl"
MAX_QUEUED = 10_000
"""Lines waiting to be written; past this a line is dropped (and counted)."""
FLUSH_INTERVAL = 0.25


class AuditLog:
    def __init__(self, state_dir: Path, max_bytes: int) -> None:
        self.directory = state_dir / DIRECTORY
        self.path = self.directory / FILE
        self.max_bytes = max_bytes
        self.label = f"audit log {str(self.path)!r}"
        self.written = 0
        self.dropped = 0
        """Lines lost because the queue was full."""
        self.failed = 0
        """Lines lost because a write failed."""
        self._queue: list[bytes] = []
        self._wake = anyio.Event()
        self._failing = False
        self._full: int | None = None
        """``dropped`` when the queue last filled (None: it has room)."""

    def record(self, line: dict[str, Any]) -> None:
        """Queue one line (never blocks, never raises)."""
        if len(self._queue) >= MAX_QUEUED:
            if self._full is None:
                self._full = self.dropped
                log.warning(
                    "audit log: %s wait to be written (the file is not keeping up); calls go unaudited until it does",
                    plural(MAX_QUEUED, "line"),
                )
            self.dropped += 1
            return
        self._queue.append((json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
        self._wake.set()

    async def run(self) -> None:
        """Write queued lines until cancelled (then what is queued is written once more)."""
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                lines = self._taken()  # here, on the event loop's thread
                await anyio.to_thread.run_sync(self._write, lines)
                await anyio.sleep(FLUSH_INTERVAL)
        finally:
            self.flush()

    def flush(self) -> None:
        """Write everything queued now, blocking (when the gateway stops)."""
        self._write(self._taken())

    def _taken(self) -> list[bytes]:
        """The lines queued, the queue emptied (a full one's run of losses over: said once)."""
        lines, self._queue = self._queue, []
        if self._full is not None:
            log.info("audit log: queueing again (%s lost while full)", plural(self.dropped - self._full, "line"))
            self._full = None
        return lines

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        try:
            append_rotating(self.directory, FILE, self.label, b"".join(lines), self.max_bytes)
        except OSError as exc:
            self.failed += len(lines)
            if not self._failing:
                log.warning("audit log: %s not written: %s", plural(len(lines), "line"), exc)
            self._failing = True
            return
        if self._failing:
            log.info("audit log: writing again (%s lost before)", plural(self.failed, "line"))
        self._failing = False
        self.written += len(lines)
