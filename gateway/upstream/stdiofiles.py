"""stdin and stdout as regular files, behind the transports the event loop gives pipes.

An agent starts the gateway with pipes, but a person tries it with ``serve < requests``,
``serve > answers`` or a terminal. The loop can watch a pipe, a socket or a terminal, not a
regular file, and falling back to another transport for files made the gateway behave
differently there (no parse errors answered, requests cut off at EOF). These two
transports let the one transport of ``gateway.upstream.stdio`` serve files too: reading a
regular file never waits for a peer, so a worker thread reads it, chunk by chunk, paused
and resumed as a pipe is; writing one never waits either, so it is written at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from typing import Any

CHUNK = 1 << 16


def watchable(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: a pipe, a socket or a terminal. Another
    character device (``serve < /dev/null``) cannot be watched (epoll refuses it: asyncio's
    loop then never saw its EOF, uvloop aborted): it is read and written as a file."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


class FileReading(asyncio.ReadTransport):
    """A regular file read into ``protocol`` as a read pipe would be, in a worker thread."""

    def __init__(self, fd: int, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._fd = fd
        self._protocol = protocol
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._closing = False
        protocol.connection_made(self)
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        failure: Exception | None = None
        try:
            while not self._closing:
                await self._resumed.wait()
                chunk = await asyncio.to_thread(os.read, self._fd, CHUNK)
                if not chunk:
                    self._protocol.eof_received()
                    break
                self._protocol.data_received(chunk)
        except OSError as exc:
            failure = exc
        finally:
            self._protocol.connection_lost(failure)

    def is_reading(self) -> bool:
        return self._resumed.is_set() and not self._closing

    def pause_reading(self) -> None:
        self._resumed.clear()

    def resume_reading(self) -> None:
        self._resumed.set()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._task.cancel()
            with contextlib.suppress(OSError):
                os.close(self._fd)


class FileWriting(asyncio.WriteTransport):
    """A regular file written at once (it never makes a writer wait)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._closing = False

    def write(self, data: Any) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            with contextlib.suppress(OSError):
                os.close(self._fd)
