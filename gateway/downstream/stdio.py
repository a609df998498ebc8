"""The stdio transport to a downstream server, owned by the gateway.

The SDK's ``stdio_client`` re-joins partial lines with string concatenation (quadratic in
line size: a 40 MB result took ~11 s), needs a real file descriptor for the child's stderr
and hides the child process, whose exit status we must report. This transport keeps the
SDK's message types and framing (one JSON-RPC message per line) but reads stdout in linear
time, drains stderr line by line into the gateway's log, and exposes the process.

Every peer is untrusted: a line over ``max_message_bytes`` is dropped as it arrives (its
request fails at once, by the id found at either end), a stderr line is cut at
``STDERR_LINE_BYTES`` and only a few are kept, a message that cannot be written costs
only its own request, and a server that reads nothing more cannot make answers to its
requests pile up (``MAX_UNWRITTEN``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from gateway import jsontext
from gateway.config import DEFAULT_MAX_MESSAGE_BYTES
from gateway.downstream.errors import NotJsonRpc
from gateway.downstream.rawcalls import UNSENDABLE_REQUEST, RawCalls
from gateway.downstream.spawn import CommandNotFound as CommandNotFound
from gateway.downstream.spawn import Spawned, spawn
from gateway.lines import (
    KEEP,
    LineReader,
    LineSplitter,
    Overlong,
    encode,
    encode_plain,
    error_message,
    is_blank,
    reply_id,
)

log = logging.getLogger("prefixgate.stdio")

_GRACE_SECONDS = 0.2
"""How long a stopping server gets after EOF on stdin (and half as long after SIGTERM)
before SIGKILL: a whole stop stays well under the second a client waits before its own
SIGTERM."""
_STDERR_TAIL_LINES = 40
"""Lines of a child's stderr kept: enough to find the one that says why it failed (``stderrtail``)."""
STDERR_LINE_BYTES = 4096
"""A stderr line is cut here (the rest is discarded up to its newline), for the log and the tail."""
MESSAGE_TOO_LARGE = -32099
"""JSON-RPC error code (implementation-defined range) of a reply the gateway refused for size."""
UNPARSABLE_REPLY = -32098
"""JSON-RPC error code of a reply the gateway could not parse (not JSON, too deep, not JSON-RPC)."""
MAX_UNWRITTEN = 256
"""Messages to a server (answers to its requests, mostly) that may wait for its stdin at once;
past it, its further requests are dropped unanswered, as it takes in nothing: each answer
waiting holds a task (100,000 pings from a server that read none held 1.2 GB)."""


class ChildStdin(anyio.abc.ByteSendStream):
    """The child's stdin: a pipe we made, written on the event loop.

    anyio's process stdin yields to the loop after every write, one more scheduler round
    trip per call; this one writes, and waits only while the pipe is full.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._closed = False

    async def send(self, item: bytes) -> None:
        self.write(item)
        await self.room()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.close()  # what is buffered still goes out, then the pipe closes: EOF for the child
        await anyio.lowlevel.checkpoint()

    # --- a raw call's side (gateway/downstream/rawcalls.py ``Pipe``) ------------------------

    def backlog(self) -> int:
        """Bytes written that the child has not taken yet: 0 unless it is behind (a write goes
        straight into the pipe while there is room)."""
        return self._writer.transport.get_write_buffer_size()

    async def room(self) -> None:
        """Wait, writing nothing, until the pipe takes more (its backlog back under the low-water
        mark): a call that waits here can still give up without having sent a byte."""
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            await self._writer.drain()
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as exc:
            raise (anyio.ClosedResourceError if self._closed else anyio.BrokenResourceError) from exc

    def write(self, item: bytes) -> None:
        """``item`` whole to the pipe, or to its backlog, without waiting: the writer waits
        (``room``) first, so the backlog grows by at most one message a writer."""
        if self._closed:
            raise anyio.ClosedResourceError
        if self._writer.is_closing():
            raise anyio.BrokenResourceError
        try:
            self._writer.write(item)
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as exc:
            raise anyio.BrokenResourceError from exc


async def _stdin_of(fd: int) -> ChildStdin:
    """Our end of a child's stdin, written on the event loop."""
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(lambda: asyncio.streams.FlowControlMixin(loop=loop), pipe)
    except BaseException:
        # Close the file object, never the raw descriptor: when connect_write_pipe fails
        # after making its transport (cancelled while connecting), that transport closes
        # the same object later, and closing a file object twice is harmless where closing
        # its descriptor behind it is EBADF (or, worse, closes a reused descriptor).
        pipe.close()
        raise
    return ChildStdin(asyncio.StreamWriter(transport, protocol, None, loop))


async def _read_pipe(fd: int, protocol: Callable[[], asyncio.Protocol]) -> asyncio.ReadTransport:
    """Our end of a child's stdout or stderr, read in the event loop's callback."""
    pipe = os.fdopen(fd, "rb", buffering=0)
    try:
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(protocol, pipe)
    except BaseException:
        pipe.close()  # the file object, as in _stdin_of
        raise
    return transport


@dataclass
class ChildProcess:
    """The running child: its process handle and the last lines it wrote to stderr."""

    process: Spawned
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=_STDERR_TAIL_LINES))
    """The last few stderr lines, each cut at ``STDERR_LINE_BYTES``: bounded in bytes."""
    stdout_closed: anyio.Event = field(default_factory=anyio.Event)
    """Set when the child's stdout ends: the connection is gone, whatever the process does."""
    stdin: ChildStdin | None = None
    calls: RawCalls | None = None
    """``tools/call`` as raw lines on these pipes (gateway/downstream/rawcalls.py)."""

    async def wait_exit(self, timeout: float) -> int | None:
        """Poll for the exit status (reading it reaps the process)."""
        with anyio.move_on_after(timeout):
            while self.process.returncode is None:
                await anyio.sleep(0.01)
        return self.process.returncode

    async def exited(self) -> None:
        """Until the process has exited (and is reaped): its pidfd turns readable then
        (Linux), elsewhere a half-second poll. No wake-ups while it runs, however long."""
        if self.process.returncode is not None:
            return
        try:
            # Opened before any await: nothing else can reap it (and free its pid) meanwhile.
            pidfd = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):
            while self.process.returncode is None:
                await anyio.sleep(0.5)
            return
        try:
            await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        self.process.returncode  # noqa: B018 - reading it reaps the process

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def ending(self) -> str:
        """How its connection ended: it "exited", or it "closed its stdout" and runs on (the
        stop that follows ends it), so no line or answer says "exited (still running)"."""
        return "exited" if self.process.returncode is not None else "closed its stdout"

    def exit_description(self) -> str:
        code = self.process.returncode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by signal {-code}"
        return f"exit status {code}"


def _parse(line: bytes | bytearray) -> SessionMessage | Exception:
    """One JSON-RPC message; invalid UTF-8 and lone surrogates are replaced.

    ``json.loads`` then model validation, not pydantic's ``validate_json``: for a 16 MiB
    result the latter adds about 5x the message size in peak memory. Each stage drops
    the previous one (the caller passes its only reference), so at most two copies of a
    large message are alive at once.
    """
    data = _load(line)
    del line
    return data if isinstance(data, ValueError) else _validate(data)


def _load(line: bytes | bytearray, yielding: bool = False) -> Any:
    """A line's JSON data (lone surrogates replaced), or the ``ValueError`` saying why not
    (``yielding``: ``jsontext.loads``'s, for a long line in a worker thread)."""
    try:
        text, suspicious = jsontext.decode(line)
        del line
        return jsontext.loads(text, suspicious, yielding=yielding)
    except ValueError as exc:  # JSONDecodeError, TooDeep
        return exc


def _validate(data: Any) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))
    except ValueError as exc:  # pydantic's ValidationError
        return exc


def _too_large(line: Overlong, limit: int, server: str) -> SessionMessage | None:
    """The error that fails the request an overlong reply answered, or None (nothing to fail)."""
    request_id = jsontext.find_id(line.head, line.tail)
    if request_id is None or jsontext.names_method(line.head):
        log.warning(
            "[%s] dropped a message of %d bytes (over max_message_bytes %d); no request to fail",
            server,
            line.size,
            limit,
        )
        return None
    log.warning(
        "[%s] dropped a reply of %d bytes to request %r (over max_message_bytes %d)",
        server,
        line.size,
        request_id,
        limit,
    )
    return error_message(
        request_id, MESSAGE_TOO_LARGE, f"result of {line.size} bytes exceeds max_message_bytes {limit}"
    )


def _ends(line: bytes | bytearray) -> tuple[bytes, bytes]:
    """The first and last few KiB of a line: where its id is, should it not parse."""
    return bytes(line[:KEEP]), bytes(line[-KEEP:])


def _unparsable(exc: Exception, head: bytes, tail: bytes, server: str) -> SessionMessage | None:
    """The error that fails the request an unparsable reply answered, or None (none found)."""
    request_id = jsontext.find_id(head, tail)
    if request_id is None or jsontext.names_method(head):
        return None
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    log.warning("[%s] unparsable reply to request %r: %s", server, request_id, text)
    return error_message(request_id, UNPARSABLE_REPLY, f"unparsable reply: {text}")


@dataclass(slots=True)
class Deferred:
    """A raw call's reply that arrived behind messages still queued for the session: the
    forwarder delivers it after them, as the session would have seen them."""

    deliver: Callable[[Any], bool]
    data: Any

    def run(self) -> None:
        self.deliver(self.data)


@dataclass(slots=True)
class Aside:
    """A long line, queued as it is: the forwarder parses it off the loop when its turn
    comes (``ChildStdout.parsed``), and the lines after it wait behind it, as behind any
    message still queued."""

    line: bytes | bytearray

    def take(self) -> bytes | bytearray:
        """The line, handed over as its only reference (``_load`` frees it once decoded)."""
        line, self.line = self.line, b""
        return line


def _load_aside(aside: Aside) -> Any:
    """``_load`` of an ``Aside``'s line, in a worker thread, yielding; the line goes straight
    in, so at most two copies of a long message are alive at once, as on the loop."""
    return _load(aside.take(), yielding=True)


class ChildStdout(LineReader[SessionMessage | Exception | Deferred | Aside]):
    """The child's stdout: a raw call's reply (or progress) goes to its caller from the
    loop's callback, before any model parsing; every other message is queued for the
    session's forwarder, and a reply behind such messages waits its turn there."""

    def __init__(self, max_message_bytes: int, server: str) -> None:
        super().__init__(LineSplitter(max_message_bytes))
        self.server = server
        """Its server's id, for the log lines about what it wrote."""
        self.calls: RawCalls | None = None
        """Set once the transport is up. A child may write before (a banner on stdout, or
        anything a server spawned before the gateway was up wrote meanwhile): no raw call
        waits then, so all of it goes to the session, as the SDK's reader passes it on."""
        self.max_message_bytes = max_message_bytes

    def lines_received(self, lines: list[bytes | bytearray | Overlong]) -> None:
        lines.reverse()
        calls = self.calls
        queue = self.queue
        while lines:
            behind = self.behind  # a reply read behind queued messages is delivered after them
            message: SessionMessage | Exception | None
            if isinstance(lines[-1], Overlong):
                message = _too_large(cast(Overlong, lines.pop()), self.max_message_bytes, self.server)
            elif is_blank(lines[-1]):
                lines.pop()
                continue
            elif len(lines[-1]) >= jsontext.PARSE_ASIDE_BYTES:
                queue.append(Aside(cast("bytes | bytearray", lines.pop())))
                continue
            else:
                ends = _ends(lines[-1])
                # _load gets the only reference: a large line is freed as soon as it is
                # decoded, and the message as soon as it is handed on.
                loaded = _load(cast("bytes | bytearray", lines.pop()))
                if (
                    calls is not None
                    and calls.pending
                    and not isinstance(loaded, ValueError)
                    and calls.take(loaded, deliver=not behind)
                ):
                    if behind:
                        queue.append(Deferred(calls.take, loaded))
                    continue  # a raw call's reply or progress, delivered before any model
                message = loaded if isinstance(loaded, ValueError) else _validate(loaded)
                del loaded
                if isinstance(message, Exception):
                    message = _unparsable(message, *ends, self.server) or NotJsonRpc(ends[0])
            if message is None:
                continue
            if calls is not None and calls.pending and calls.take_message(message, deliver=not behind):
                if behind:
                    queue.append(Deferred(calls.take_message, message))
                continue
            queue.append(message)
            del message

    async def parsed(self, aside: Aside) -> SessionMessage | Exception | None:
        """An ``Aside`` line, its turn come: parsed and validated in worker threads, then
        handled as ``lines_received`` handles a short one (None: a raw call took it)."""
        ends = _ends(aside.line)
        loaded = await anyio.to_thread.run_sync(_load_aside, aside)
        calls = self.calls
        if calls is not None and calls.pending and not isinstance(loaded, ValueError) and calls.take(loaded):
            return None
        message = loaded if isinstance(loaded, ValueError) else await anyio.to_thread.run_sync(_validate, loaded)
        del loaded
        if isinstance(message, Exception):
            message = _unparsable(message, *ends, self.server) or NotJsonRpc(ends[0])
        if message is not None and calls is not None and calls.pending and calls.take_message(message):
            return None
        return message


class StderrLines(asyncio.Protocol):
    """A child's stderr, line by line in the loop's callback: each line cut at
    ``STDERR_LINE_BYTES``, the last few kept, each handed to ``on_line``."""

    def __init__(self, child: ChildProcess, on_line: Callable[[str], None] | None) -> None:
        self.child = child
        self.on_line = on_line
        self.splitter = LineSplitter(STDERR_LINE_BYTES)

    def data_received(self, data: bytes) -> None:
        for line in self.splitter.feed(data):
            raw = line.head[:STDERR_LINE_BYTES] if isinstance(line, Overlong) else line
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            if isinstance(line, Overlong):
                text += f" … ({line.size} bytes)"
            self.child.stderr_tail.append(text)
            if self.on_line is not None:
                self.on_line(text)


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_stderr: Callable[[str], None] | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    spawned: Spawned | None = None,
    server: str = "",
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage], ChildProcess]
]:
    """Bridge a server's pipes to message streams: ``spawned`` (started before the gateway
    was up, ``gateway.downstream.spawn``), else a child spawned now in its own process group."""
    process = (spawned or spawn(command, args, env, cwd)).take()
    child = ChildProcess(process)
    out = ChildStdout(max_message_bytes, server or command)
    transports: list[asyncio.BaseTransport] = []
    fds = (process.stdin, process.stdout, process.stderr)
    handed = 0  # each wrapper owns (and on failure closes) the descriptor handed to it
    try:
        handed = 1
        child.stdin = await _stdin_of(process.stdin)
        handed = 2
        stdout = await _read_pipe(process.stdout, lambda: out)
        transports.append(stdout)
        handed = 3
        transports.append(await _read_pipe(process.stderr, lambda: StderrLines(child, on_stderr)))
    except BaseException:
        for fd in fds[handed:]:
            os.close(fd)
        with anyio.CancelScope(shield=True):
            await _stop(child)
        for transport in transports:
            transport.close()
        raise
    stdin = child.stdin
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](16)

    async def forward_stdout(out: ChildStdout) -> None:
        """Hand the session what the reader queued for it, in order."""
        shedding = Shedding(write_send, command, "to read its input")
        try:
            async with read_send:
                with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    while True:
                        while out.queue:
                            message = out.take()
                            if isinstance(message, Deferred):
                                message.run()
                            else:
                                ready = await out.parsed(message) if isinstance(message, Aside) else message
                                if ready is not None and not shedding.admit(ready):
                                    ready = None
                                if ready is not None:
                                    await read_send.send(ready)
                                    calls.forwarded += 1
                                del ready
                            del message
                            out.done()
                        if out.closed:
                            return
                        await out.wait()
        finally:
            child.stdout_closed.set()
            calls.close()

    async def stdin_writer() -> None:
        async with write_recv:
            try:
                async for message in write_recv:
                    try:
                        data = encode(message)
                    except ValueError as exc:
                        # Only this request fails: its caller gets the reason, not "exited".
                        log.warning("cannot send a message to %s: %s", command, exc)
                        request_id = reply_id(message)
                        if isinstance(message.message, types.JSONRPCRequest) and request_id is not None:
                            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                                await read_send.send(
                                    error_message(request_id, UNSENDABLE_REQUEST, f"request not sent: {exc}")
                                )
                        continue
                    await stdin.send(data)
                    del data
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await read_send.aclose()

    async def end_with_the_process() -> None:
        """The server is its process: once that has exited, a process it started that still
        holds its stdout (a child that outlived it) must not keep the connection up, every
        call waiting for ``call_timeout`` and no restart. The process's last answers get
        the grace to be read; then its stdout is closed here, which ends the connection
        as its own exit would have (the stop below ends the rest of its group)."""
        await child.exited()
        with anyio.move_on_after(_GRACE_SECONDS):
            await child.stdout_closed.wait()
            return
        log.debug("%s exited; a process it started still holds its stdout: not read any more", command)
        stdout.close()

    async with anyio.create_task_group() as tg:
        calls = RawCalls(stdin, read_send, encode_plain, tg.start_soon, command)
        child.calls = calls
        out.calls = calls
        tg.start_soon(forward_stdout, out)
        tg.start_soon(stdin_writer)
        tg.start_soon(end_with_the_process)
        try:
            yield read_recv, write_send, child
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(child)
                write_send.close()
                read_recv.close()
                for transport in transports:
                    transport.close()
            tg.cancel_scope.cancel()


class Shedding:
    """A server's requests while ``MAX_UNWRITTEN`` messages to it already wait (``writes``: the
    stream beneath what the session sends it): each is dropped instead of given a task that
    waits to answer it, logged once per backlog. Over stdio they wait for the server to read its
    input; over streamable HTTP and SSE, for it to take the POST before them."""

    def __init__(self, writes: MemoryObjectSendStream[Any], server: str, waiting: str) -> None:
        self.writes, self.server, self.waiting = writes, server, waiting
        self.dropped = 0
        """Requests dropped since the backlog began."""

    def admit(self, message: object) -> bool:
        """False: drop ``message`` (a request of the server's, while its backlog lasts)."""
        if isinstance(message, SessionMessage) and isinstance(message.message, types.JSONRPCRequest):
            if self.writes.statistics().tasks_waiting_send >= MAX_UNWRITTEN:
                if not self.dropped:
                    log.warning(
                        "%s: dropping its requests: %d messages to it wait for it %s (further ones are not logged)",
                        self.server,
                        MAX_UNWRITTEN,
                        self.waiting,
                    )
                self.dropped += 1
                return False
        if self.dropped and self.writes.statistics().tasks_waiting_send < MAX_UNWRITTEN:
            self.dropped = 0  # it takes them again: a new backlog is logged anew
        return True


async def _stop(child: ChildProcess) -> None:
    """Close stdin, give the server a short grace, then end its whole process group
    (SIGTERM, then SIGKILL), so nothing it started outlives the gateway.

    Every server is stopped from its own task, so all of them stop concurrently.
    """
    process = child.process
    if child.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await child.stdin.aclose()
    await child.wait_exit(_GRACE_SECONDS)
    # Even when the leader has exited, what it started may still be running in its group.
    with suppress(ProcessLookupError, PermissionError, OSError):
        await terminate_posix_process_tree(cast(Any, process), _GRACE_SECONDS / 2)  # needs pid and returncode
    await child.wait_exit(_GRACE_SECONDS)
    process.release()
