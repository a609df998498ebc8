"""Logging to stderr only (in stdio mode stdout is the MCP stream), never blocking serving.

A client that does not drain the gateway's stderr would block a plain ``StreamHandler``
and with it the event loop. Records go through a bounded queue to a writer thread; when
the queue is full they are dropped, and the count is written once the writer catches up.
"""

from __future__ import annotations

import atexit
import logging
import queue
import re
import sys
import threading
import time
from collections.abc import MutableMapping
from contextvars import ContextVar
from logging.handlers import QueueHandler
from typing import Any, TextIO, TypeAlias

from catalog.text import escape

LEVELS = ("debug", "info", "warning", "error")
QUEUE_RECORDS = 10_000
"""Log records waiting for stderr before new ones are dropped."""
EXIT_FLUSH_SECONDS = 2.0
"""How long exit waits for queued records to reach a stderr that may never be read."""
ServerLog: TypeAlias = "logging.Logger | logging.LoggerAdapter[logging.Logger]"
"""A server's logger: ``prefixgate.server.ID``, or for one principal's process ``PrincipalLog``."""


class _DroppingQueueHandler(QueueHandler):
    """Enqueues without ever waiting; counts what did not fit."""

    def __init__(self, records: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(records)
        self.dropped = 0
        self._lock = threading.Lock()

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def take_dropped(self) -> int:
        with self._lock:
            dropped, self.dropped = self.dropped, 0
        return dropped


class _Writer:
    """The daemon thread that formats records and writes them to stderr."""

    def __init__(
        self, source: _DroppingQueueHandler, records: queue.Queue[logging.LogRecord | None], stream: TextIO
    ) -> None:
        self.source = source
        self.records = records
        self.target = logging.StreamHandler(stream)
        self.target.setFormatter(_OneLine("prefixgate %(levelname)s %(message)s"))
        self.thread = threading.Thread(target=self._run, name="prefixgate-log", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (record := self.records.get()) is not None:
            try:
                self.target.handle(record)
                if self.records.empty() and (dropped := self.source.take_dropped()):
                    self.target.handle(_dropped_note(dropped))
            finally:
                self.records.task_done()

    def flush(self, timeout: float) -> None:
        """At exit: let queued records out, but never hang on a stderr nobody reads."""
        deadline = time.monotonic() + timeout
        with self.records.all_tasks_done:
            while self.records.unfinished_tasks and (left := deadline - time.monotonic()) > 0:
                self.records.all_tasks_done.wait(left)


class _OneLine(logging.Formatter):
    """Each record is one printable line: a message may quote a server's stderr, a tool
    name or an error text, and a newline or ESC in it must not forge a log line or drive
    the terminal (tracebacks, formatted separately, keep their lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(spelled(record.message))
        return super().formatMessage(record)


_UNDECODED = re.compile("[\udc80-\udcff]+")


def spelled(text: str) -> str:
    """``text`` with each run of bytes the locale could not decode (a path under an ASCII locale,
    ``LC_ALL=C PYTHONUTF8=0``: Python holds it with lone surrogates, ``surrogateescape``) as the
    UTF-8 text those bytes spell (a byte that is not UTF-8: ``\\xNN``). The log wrote their
    escapes: ``state store: file /srv/\\udcc3\\udca9tat`` for ``/srv/état``."""
    if _UNDECODED.search(text) is None:
        return text
    return _UNDECODED.sub(
        lambda run: run[0].encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), text
    )


_CLOSED_AFTER_ACCEPTING = "Error handling POST request"
"""What the SDK logs, with a traceback, when a handshake-era session's stream is closed as a
message POSTed to it is passed on (gateway/sdk.py ``handled_post``; mcp 2.3.0)."""
_CLOSED_STREAM = ("ClosedResourceError", "BrokenResourceError")
"""anyio's closed stream errors, by name: this module is imported before anyio is."""
_CLOSED_NOTE = "a message POSTed to a handshake-era session as it closed was dropped"


PEER: ContextVar[str | None] = ContextVar("prefixgate_peer", default=None)
"""The server whose messages the running task reads: set as a downstream session starts
(its read loop inherits it), so what the SDK logs about that server's messages names it."""
_UNVALIDATED = "Failed to validate notification: %s"
"""What the SDK's client session logs, with a traceback, when a server's notification does
not validate (``mcp/client/session.py`` ``_on_notify``; mcp 2.3.0)."""


def _unvalidated_note(record: logging.LogRecord) -> None:
    """A server's notification that did not validate, in one line: the server, the method
    and the first problem pydantic found (where and what, never the value sent)."""
    problem = record.exc_info[1] if record.exc_info else None
    errors = getattr(problem, "errors", None)
    found = errors() if callable(errors) else None
    first = found[0] if found else None
    what = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else type(problem).__name__
    server = PEER.get()
    record.msg = "%signored a %s that did not validate: %s"
    record.args = (f"[{server}] " if server else "", *(record.args or ("notification",)), what)
    record.exc_info, record.exc_text = None, None


def _sdk_tracebacks_in_one_line(record: logging.LogRecord) -> bool:
    """Three of the SDK's logs with tracebacks, each made one line (or dropped below info).

    Its OAuth client's failures can hold what an authorization server sent (a refresh answer
    that did not parse, a token it refused): the gateway reports each such failure itself, in
    one line that quotes none of it. A POST to a session as it closes, and a server's
    notification that does not validate, are a peer's doing, not the gateway's."""
    if record.name.startswith("mcp.client.auth") and record.exc_info:
        record.msg = f"{record.getMessage()}: {record.exc_info[0].__name__ if record.exc_info[0] else 'error'}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
    elif (
        record.name == "mcp.server.streamable_http"
        and record.msg == _CLOSED_AFTER_ACCEPTING
        and record.exc_info
        and record.exc_info[0] is not None
        and record.exc_info[0].__name__ in _CLOSED_STREAM
    ):  # (gateway/sdk.py ``handled_post``)
        record.msg, record.args, record.exc_info, record.exc_text = _CLOSED_NOTE, None, None, None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger("prefixgate").isEnabledFor(logging.INFO)  # (the SDK's logs pass at WARNING)
    elif record.name == "client" and record.msg == _UNVALIDATED and record.exc_info:
        _unvalidated_note(record)
    return True


def _dropped_note(dropped: int) -> logging.LogRecord:
    message = "%d log records dropped: stderr was not read fast enough"
    return logging.LogRecord("prefixgate", logging.WARNING, __file__, 0, message, (dropped,), None)


_writer: _Writer | None = None


def setup(level: str) -> None:
    global _writer
    records: queue.Queue[logging.LogRecord | None] = queue.Queue(QUEUE_RECORDS)
    handler = _DroppingQueueHandler(records)
    handler.addFilter(_sdk_tracebacks_in_one_line)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("prefixgate").setLevel(level.upper())
    first = _writer is None
    _writer = _Writer(handler, records, _unicode_stderr())
    if first:
        atexit.register(flush)


def _unicode_stderr() -> TextIO:
    """stderr, UTF-8 where it is not a terminal, whatever the locale's encoding: a client or a
    service manager keeps the lines as UTF-8 text, and under an ASCII locale (``LC_ALL=C
    PYTHONUTF8=0``) a server's own stderr line, which reaches the client as its UTF-8 when the
    client starts the server itself, was written ``d\\xe9marrage``. A terminal that cannot show
    a character still gets its escape (as the commands' stdout)."""
    stream = sys.stderr
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    if encoding != "utf8" and hasattr(stream, "reconfigure") and not stream.isatty():
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")
    return stream


def flush(timeout: float = EXIT_FLUSH_SECONDS) -> None:
    """Wait (at most ``timeout``) for queued records to be written: at exit, and before ``os._exit``."""
    if _writer is not None:
        _writer.flush(timeout)


class PrincipalLog(logging.LoggerAdapter[logging.Logger]):
    """An instance's own lines (its failures and retries, its stderr) name its principal:
    ``[git, principal token-...] ...``, where the shared process's read ``[git] ...``."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        if isinstance(msg, str) and msg.startswith("[%s]"):
            name = str((self.extra or {}).get("principal", "")).replace("%", "%%")
            msg = f"[%s, principal {name}]{msg[4:]}"
        return msg, kwargs

    def __init__(self, logger: ServerLog, principal: str) -> None:
        inner = logger.logger if isinstance(logger, logging.LoggerAdapter) else logger
        super().__init__(inner, {"principal": principal})
