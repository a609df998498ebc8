"""The stdio transport to a downstream server, owned by the gateway.

The SDK's ``stdio_client`` re-joins partial lines with string concatenation (quadratic in
line size: a 40 MB result took ~11 s), needs a real file descriptor for the child's stderr
and hides the child process, whose exit status we must report. This transport keeps the
SDK's message types and framing (one JSON-RPC message per line) but reads stdout in linear
time, drains stderr line by line into the gateway's log, and exposes the process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

log = logging.getLogger("prefixgate.stdio")

_GRACE_SECONDS = 0.2
"""How long a stopping server gets after EOF on stdin (and half as long after SIGTERM)
before SIGKILL: a whole stop stays well under the second a client waits before its own
SIGTERM."""
_STDERR_TAIL_LINES = 20


class CommandNotFound(OSError):
    pass


def resolve_command(command: str) -> str:
    """Find ``command`` on PATH, then beside the running interpreter.

    The second place lets a config say ``command = "prefixgate"`` (the bundled demo
    server) and work from an un-activated virtual environment.
    """
    if os.sep in command:
        return command
    search = os.pathsep.join(p for p in (os.environ.get("PATH", ""), os.path.dirname(sys.executable)) if p)
    found = shutil.which(command, path=search)
    if found is None:
        raise CommandNotFound(f"command {command!r} not found on PATH")
    return found


@dataclass
class ChildProcess:
    """The running child: its process handle and the last lines it wrote to stderr."""

    process: anyio.abc.Process
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=_STDERR_TAIL_LINES))
    stdout_closed: anyio.Event = field(default_factory=anyio.Event)
    """Set when the child's stdout ends: the connection is gone, whatever the process does."""

    async def wait_exit(self, timeout: float) -> int | None:
        """Poll for the exit status (``process.wait()`` also waits for pipe EOF)."""
        with anyio.move_on_after(timeout):
            while self.process.returncode is None:
                await anyio.sleep(0.01)
        return self.process.returncode

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def exit_description(self) -> str:
        code = self.process.returncode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by signal {-code}"
        return f"exit status {code}"


class LineSplitter:
    """Re-joins chunks into lines in linear time; a long line is handed over, never copied.

    A 16 MiB result arrives as hundreds of chunks: joining them by concatenation would
    be quadratic, and copying the joined line once more would double the peak memory.
    """

    def __init__(self) -> None:
        self.pending = bytearray()

    def feed(self, chunk: bytes) -> list[bytes | bytearray]:
        lines: list[bytes | bytearray] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self.pending:
                self.pending += chunk[start:end]
                lines.append(self.pending)
                self.pending = bytearray()
            else:
                lines.append(chunk[start:end])
            start = end + 1
        if start < len(chunk):
            self.pending += chunk[start:]
        return lines


def is_blank(line: bytes | bytearray) -> bool:
    return not line or line.isspace()


def _parse(line: bytes | bytearray) -> SessionMessage | Exception:
    """One JSON-RPC message; invalid UTF-8 is replaced.

    ``json.loads`` then model validation, not pydantic's ``validate_json``: for a 16 MiB
    result the latter adds about 5x the message size in peak memory. Each stage drops
    the previous one (the caller passes its only reference), so at most two copies of a
    large message are alive at once.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        text = line.decode("utf-8", errors="replace")
    del line
    try:
        data = json.loads(text)
        del text
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))
    except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError
        return exc


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_stderr: Callable[[str], None] | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage], ChildProcess]]:
    """Spawn the server in its own process group and bridge its pipes to message streams."""
    executable = resolve_command(command)
    process = await anyio.open_process(
        [executable, *args],
        env=get_default_environment() | dict(env or {}),
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    child = ChildProcess(process)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](16)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        splitter = LineSplitter()
        try:
            async with read_send:
                with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    async for chunk in process.stdout:
                        lines = splitter.feed(chunk)
                        while lines:
                            if is_blank(lines[0]):
                                lines.pop(0)
                                continue
                            # _parse gets the only reference: a large line is freed as soon
                            # as it is decoded, and the message as soon as it is handed on.
                            message = _parse(lines.pop(0))
                            await read_send.send(message)
                            del message
        finally:
            child.stdout_closed.set()

    async def stderr_reader() -> None:
        assert process.stderr is not None
        splitter = LineSplitter()
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                for line in splitter.feed(chunk):
                    text = line.decode("utf-8", errors="replace").rstrip("\r")
                    child.stderr_tail.append(text)
                    if on_stderr is not None:
                        on_stderr(text)

    async def stdin_writer() -> None:
        assert process.stdin is not None
        async with write_recv:
            try:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode("utf-8") + b"\n")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await read_send.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stderr_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_recv, write_send, child
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(child)
                write_send.close()
                read_recv.close()
            tg.cancel_scope.cancel()


async def _stop(child: ChildProcess) -> None:
    """Close stdin, give the server a short grace, then end its whole process group
    (SIGTERM, then SIGKILL), so nothing it started outlives the gateway.

    Every server is stopped from its own task, so all of them stop concurrently.
    """
    process = child.process
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    await child.wait_exit(_GRACE_SECONDS)
    # Even when the leader has exited, what it started may still be running in its group.
    with suppress(ProcessLookupError, PermissionError, OSError):
        await terminate_posix_process_tree(process, _GRACE_SECONDS / 2)
    await child.wait_exit(_GRACE_SECONDS)
