"""The gateway's own end of the stdio MCP stream, read and written on the event loop.

The SDK's ``stdio_server`` hands every line it reads and every write and flush to a
worker thread: three thread round trips per call, about a third of the gateway's cost
per call, and a blocked stdin read that cancellation cannot interrupt. This transport
reads and writes pipes, sockets and terminals directly with the event loop, in linear
time, and regular files through the small transports of ``gateway.upstream.stdiofiles``:
one behaviour whatever stdin and stdout are. At the end of input every request read is
answered before the session ends; the gateway's own requests to the client fail then.

Like the SDK's, it moves the real streams aside while serving: fd 0 reads /dev/null
and fd 1 goes to stderr, so stray prints from libraries can never corrupt the stream.

The client is untrusted too: an unparsable line is answered with a JSON-RPC parse error
(id null), a line over ``max_message_bytes`` is dropped as it arrives and answered with an
error for its id, a reply that cannot be serialised becomes an error for its id, and at
most ``MAX_IN_FLIGHT`` requests are unanswered at once: past that its next requests wait
their turn (``MAX_WAITING`` of them; then the reader stops, so a client that never reads its
responses fills its own pipe, not the gateway's memory). What frees a place is still read
meanwhile: a cancel, and the client's answers to what its calls asked it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
import stat
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, Protocol, cast

import anyio
import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from pydantic import ValidationError

from catalog.text import plural
from gateway import jsontext
from gateway.config import DEFAULT_MAX_MESSAGE_BYTES
from gateway.lines import (
    LineReader,
    LineSplitter,
    Overlong,
    encode,
    encode_plain,
    error_message,
    is_blank,
    jsonrpc_error,
    not_a_message,
    reply_id,
)
from gateway.plaintasks import cancel_all
from gateway.published import PublishedTools
from gateway.upstream.prelude import Handoff
from gateway.upstream.stdiofiles import FileReading, FileWriting, watchable

MAX_IN_FLIGHT = 64
"""Client requests read but not yet answered, per connection, before the next ones wait."""
MAX_WAITING = 64
"""Requests (and the notifications between them) read past ``MAX_IN_FLIGHT``, waiting their turn,
before the reader stops reading."""

LISTEN = "subscriptions/listen"
"""A 2026-07-28 request whose answer ends its stream: open for as long as the client listens,
it is not a request in flight (not counted, not waited for at the end of input, as over HTTP);
each principal holds at most ``LISTEN_STREAMS_PER_PRINCIPAL`` open."""
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"

log = logging.getLogger("prefixgate.stdio")


def _key(request_id: Any) -> tuple[str, Any]:
    """An id as the SDK correlates it (``coerce_request_id``: "7" is 7): a client's cancel
    naming request 7 as "7" cancels it there and on the fast path, so it frees its place here
    too (64 such cancels stopped this end reading its client)."""
    request_id = coerce_request_id(request_id)
    return (type(request_id).__name__, request_id)


class Unanswered:
    """The client's unanswered requests; ``wait_room`` parks the reader while there are too many."""

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self.limit = limit
        self._ids: dict[tuple[str, Any], int] = {}
        self._count = 0
        self._room = anyio.Event()
        self.on_room: Callable[[], None] | None = None
        """Told whenever a place frees (the reader, while it waits with requests waiting for one)."""

    def has_room(self) -> bool:
        return self._count < self.limit

    async def wait_room(self) -> None:
        while self._count >= self.limit:
            self._room = anyio.Event()
            await self._room.wait()

    def add(self, request_id: Any) -> None:
        key = _key(request_id)
        self._ids[key] = self._ids.get(key, 0) + 1
        self._count += 1

    @property
    def count(self) -> int:
        return self._count

    async def drained(self) -> None:
        """Wait until every request read is answered (or cancelled)."""
        while self._count:
            self._room = anyio.Event()
            await self._room.wait()

    def done(self, request_id: Any) -> None:
        """Answered, or cancelled by the client (a cancelled request may get no answer)."""
        key = _key(request_id)
        left = self._ids.get(key, 0)
        if not left:
            return
        if left == 1:
            del self._ids[key]
        else:
            self._ids[key] = left - 1
        self._count -= 1
        self._room.set()
        if self.on_room is not None:
            self.on_room()


def _load_client(line: bytes | bytearray) -> Any:
    """A client's line as JSON data, or the ``JSONRPCError`` (parse error) that answers it."""
    size = len(line)
    text, suspicious = jsontext.decode(line)
    del line
    try:
        return jsontext.loads(text, suspicious)
    except ValueError as exc:  # not JSON, or nested too deeply
        log.warning("unparsable client message of %d bytes: %s", size, _first_line(exc))
        return jsonrpc_error(None, PARSE_ERROR, f"Parse error: {_first_line(exc)}")


def _validate_client(data: Any) -> SessionMessage | types.JSONRPCError | None:
    """A client's parsed line as a message, or the error that answers it (None: nothing to answer)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))
    except ValidationError as exc:
        log.warning("invalid client message: %s", _first_line(exc))
        if isinstance(data, dict) and ("result" in data or "error" in data or "id" not in data):
            return None  # a malformed response or notification: JSON-RPC answers neither
        return not_a_message(data)


def _parse_client(line: bytes | bytearray) -> SessionMessage | types.JSONRPCError | None:
    """A client's message, or the error that answers it (None: nothing to answer)."""
    data = _load_client(line)
    del line
    if isinstance(data, types.JSONRPCError):
        return data
    return _validate_client(data)


def _needs_place(entry: Claim | SessionMessage) -> bool:
    """Whether ``entry`` takes one of the ``MAX_IN_FLIGHT`` places: a request (a listen stream,
    open for as long as the client listens, is none)."""
    if not isinstance(entry, SessionMessage):
        return True
    message = entry.message
    return isinstance(message, types.JSONRPCRequest) and message.method != LISTEN


def _request_id(entry: Claim | SessionMessage) -> Any:
    """The id of a waiting request (None for a notification waiting behind one)."""
    return reply_id(entry) if isinstance(entry, SessionMessage) else entry.request_id


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


class ClientWriter:
    """This end's own writer, for the requests a ``Lane`` answers: each message one whole
    line written at once (so lines never interleave with the SDK's). An answer counts as
    in flight until the client has taken it off the pipe (``drain``): claimed calls run
    side by side, so a client that never reads would otherwise have every answer pile up
    in the transport's buffer while the reader took more requests."""

    def __init__(self, writer: asyncio.StreamWriter, unanswered: Unanswered) -> None:
        self.writer = writer
        self.unanswered = unanswered
        self.claimed: set[asyncio.Task[None]] = set()
        """The claimed requests' tasks still running: cancelled and awaited when this end closes."""

    async def send(self, message: types.JSONRPCMessage) -> None:
        try:
            data = encode(SessionMessage(message))
        except ValueError as exc:
            log.warning("cannot send %s to the client: %s", type(message).__name__, exc)
            if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                return  # a notification: dropped, logged
            text = f"the result could not be sent: {exc}"
            data = encode(error_message(message.id, INTERNAL_ERROR, text))
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and message.id is not None:
            await self._answer(message.id, data)
        else:
            await self._write(data)

    async def send_result(self, request_id: types.RequestId, result: dict[str, Any]) -> None:
        """A claimed request's answer: the bytes ``send`` makes of its ``JSONRPCResponse``,
        encoded from the plain dict, without building and validating that model."""
        try:
            data = encode_plain({"jsonrpc": "2.0", "id": request_id, "result": result})
        except ValueError as exc:
            log.warning("cannot send JSONRPCResponse to the client: %s", exc)
            data = encode(error_message(request_id, INTERNAL_ERROR, f"the result could not be sent: {exc}"))
        await self._answer(request_id, data)

    async def _answer(self, request_id: types.RequestId, data: bytes) -> None:
        try:
            await self._write(data)
        finally:
            self.unanswered.done(request_id)

    async def _write(self, data: bytes) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(data)
        del data
        with suppress(ConnectionError):
            await self.writer.drain()


class ClientStdout(asyncio.streams.FlowControlMixin):
    """The protocol of the client's stdout, which says when the client closed its end: nothing
    reaches the client from then on, so the session ends as at the end of input."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.lost = anyio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.lost.set()


class ClientSocket(ClientStdout):
    """stdin and stdout one socket (socat's ``EXEC``, inetd, systemd's ``StandardInput=socket``):
    one transport both ways. The client's end of input is a half-close that leaves the output
    open: a pipe's write transport, watching that socket, took it (and on asyncio's loop any
    request) for the client closing stdout, and the calls read were never answered. A client
    that closes the socket entirely (a hang-up, not a half-close) is the client closing stdout
    (``hung_up``). Reading waits for ``attach`` (the reader is made once the writer is)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.loop = loop
        self.stdin: ClientStdin | None = None
        self.transport: asyncio.Transport | None = None
        self._early = bytearray()
        self._ended = False
        self._hangup: Any = None
        """The ``select.epoll`` that reports the client's hang-up once its input has ended."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.pause_reading()

    def attach(self, stdin: ClientStdin) -> None:
        assert self.transport is not None
        self.stdin = stdin
        self.transport.resume_reading()
        stdin.connection_made(self.transport)
        if self._early:  # (read before the pause took: uvloop starts reading after connection_made)
            early, self._early = bytes(self._early), bytearray()
            stdin.data_received(early)
        if self._ended:
            self.eof_received()

    def data_received(self, data: bytes) -> None:
        if self.stdin is None:
            self._early += data
        else:
            self.stdin.data_received(data)

    def eof_received(self) -> bool:
        if self.stdin is None:
            self._ended = True
        else:
            self.stdin.eof_received()
            self.stdin.connection_lost(None)  # the end of input; the output stays open
            self._watch_hangup()
        return True

    def _watch_hangup(self) -> None:
        """Once input has ended, the socket is no longer read: an epoll of its own reports the
        client closing the socket entirely (EPOLLHUP, which a half-close does not raise on a
        Unix socket), so that close ends the session at once, as a pipe's closed stdout does,
        not at the next write or after ``drain_timeout``. (Over TCP a close is a FIN like a
        half-close: that one is noticed at the next write.) Linux only, as epoll is."""
        if self._hangup is not None or self.transport is None or not hasattr(select, "epoll"):
            return
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return
        watch = select.epoll()
        try:
            watch.register(sock.fileno(), 0)  # EPOLLHUP and EPOLLERR are reported whatever the mask
            self.loop.add_reader(watch.fileno(), self.hung_up)
        except (OSError, ValueError):
            watch.close()
            return
        self._hangup = watch

    def _unwatch(self) -> None:
        if self._hangup is not None:
            self.loop.remove_reader(self._hangup.fileno())
            self._hangup.close()
            self._hangup = None

    def hung_up(self) -> None:
        """The client closed the socket: nothing reaches it any more (``connection_lost``)."""
        self._unwatch()
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch()
        if self.stdin is not None:
            self.stdin.connection_lost(exc)
        super().connection_lost(exc)


def one_socket(fd_in: int, fd_out: int) -> bool:
    """Whether stdin and stdout are the same stream socket (``ClientSocket``)."""
    try:
        a, b = os.fstat(fd_in), os.fstat(fd_out)
    except OSError:
        return False
    if not stat.S_ISSOCK(a.st_mode) or (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        return False
    try:
        probe = socket.socket(fileno=os.dup(fd_in))
    except OSError:
        return False
    with probe:
        return probe.type == socket.SOCK_STREAM


class Claim(Protocol):
    """A request a ``Lane`` took: counted in flight, then run in a task of its own, kept in
    ``ClientWriter.claimed`` while it runs, which this end cancels (and waits for) when it closes."""

    request_id: types.RequestId

    def start(self, wire: ClientWriter) -> None: ...


class Lane(Protocol):
    """Answers some requests straight from the reader (gateway/upstream/fast.py)."""

    def claim(self, data: Any) -> Claim | None:
        """The request in ``data`` (a parsed line) if this lane answers it, else None (the SDK does)."""
        ...

    def cancel(self, request_id: Any) -> None:
        """The client cancelled ``request_id`` (``notifications/cancelled``; the SDK sees it too)."""
        ...


class ClientStdin(LineReader[Any]):
    """The client's stdin. A ``tools/call`` the lane claims is started from the event loop's
    callback, as soon as its line is read; every other line (its JSON data, an ``Overlong``,
    or the parse error that answers it) is queued for the reader task, in order, and a
    claimable call behind them, or past ``MAX_IN_FLIGHT``, waits its turn there too."""

    def __init__(self, max_message_bytes: int, lane: Lane | None, wire: ClientWriter, first: bytes = b"") -> None:
        super().__init__(LineSplitter(max_message_bytes))
        self.lane = lane
        self.wire = wire
        self.waiting: deque[Claim | SessionMessage] = deque()
        """Read past ``MAX_IN_FLIGHT``: requests waiting for a place, and the notifications
        after the first of them (kept in order); the reader task lets them in."""
        self.first = first
        """Read before the pipe: what the prelude read and did not answer (``Handoff.unread``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.first:
            # Queued without pausing: uvloop starts reading once this returns, whatever it asked
            # (a pause here was lost, and with it the bound); the pipe's first chunk pauses it.
            first, self.first = self.first, b""
            self.lines_received(self.splitter.feed(first))
            self._wake()

    @property
    def behind(self) -> bool:
        """``LineReader.behind``, or requests wait for a place (spelled out: asked for every line)."""
        return bool(self.queue) or self.busy or bool(self.waiting)

    def lines_received(self, lines: list[bytes | bytearray | Overlong]) -> None:
        lines.reverse()
        queue, lane, unanswered = self.queue, self.lane, self.wire.unanswered
        while lines:
            if isinstance(lines[-1], Overlong):
                queue.append(lines.pop())
                continue
            if is_blank(lines[-1]):
                lines.pop()
                continue
            data = _load_client(cast("bytes | bytearray", lines.pop()))  # the only reference
            claim = lane.claim(data) if lane is not None and not self.behind and unanswered.has_room() else None
            if claim is not None:
                unanswered.add(claim.request_id)
                claim.start(self.wire)
                continue
            queue.append(data)
            del data


@asynccontextmanager
async def stdio_streams(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    lane: Lane | None = None,
    handoff: Handoff | None = None,
    drain_timeout: float = 25.0,
    signals: Any = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of the stdio MCP connection.

    ``lane``: requests it claims (``tools/call``, gateway/upstream/fast.py) are answered
    by it on this end's own writer instead of going through the SDK's streams.
    ``handoff``: what the prelude (gateway/upstream/prelude.py) read, wrote and replays.
    ``drain_timeout``: at the end of input, how long the requests read may take to be
    answered (``[gateway] drain_timeout``, as a drain on SIGTERM).
    ``signals.settle`` is set to what a stop signal waits for once every server has stopped:
    the answers to the requests in flight (``answered``); ``signals.stop_servers()`` is what the
    end of input does once ``drain_timeout`` has passed."""
    handoff = handoff or Handoff(b"", b"", frozenset())
    wire_in, wire_out = os.dup(0), os.dup(1)
    # The loop makes a pipe or a terminal non-blocking, which its other holders (the shell
    # of a terminal) share: each is handed back as it was.
    was_blocking = os.get_blocking(wire_in), os.get_blocking(wire_out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    write_protocol = ClientSocket(loop) if one_socket(wire_in, wire_out) else ClientStdout(loop)
    # The transports own copies: ``wire_in`` and ``wire_out`` stay open to be handed back.
    write_transport: asyncio.WriteTransport
    if isinstance(write_protocol, ClientSocket):
        duplex_protocol = write_protocol
        write_transport, _ = await loop.connect_accepted_socket(
            lambda: duplex_protocol, socket.socket(fileno=os.dup(wire_in))
        )
    elif watchable(wire_out):
        write_transport, _ = await loop.connect_write_pipe(
            lambda: write_protocol, os.fdopen(os.dup(wire_out), "wb", buffering=0)
        )
    else:
        write_transport = FileWriting(os.dup(wire_out))  # a regular file (``stdiofiles``)
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    if handoff.unwritten:
        writer.write(handoff.unwritten)  # the prelude's answers go out before anything of ours
    unanswered = Unanswered()
    if signals is not None:
        signals.settle = lambda: answered(unanswered, writer, SETTLE)
    wire = ClientWriter(writer, unanswered)
    stdin = ClientStdin(max_message_bytes, lane, wire, handoff.unread)
    read_transport: asyncio.ReadTransport
    if isinstance(write_protocol, ClientSocket):
        write_protocol.attach(stdin)
        assert write_protocol.transport is not None
        read_transport = write_protocol.transport
    elif watchable(wire_in):
        read_transport, _ = await loop.connect_read_pipe(
            lambda: stdin, os.fdopen(os.dup(wire_in), "rb", buffering=0)
        )
    else:
        read_transport = FileReading(os.dup(wire_in), stdin)
    replayed = handoff.private_ids
    acknowledged = set(handoff.acknowledged)
    """Listen streams the prelude acknowledged: the session's own acknowledgment of each is dropped."""
    outgoing: set[Any] = set()
    """Our requests to the client (a server's elicitation, sampling, roots) not yet answered."""

    # Plain memory streams: the SDK's runner reads a context off its stream only when the
    # stream carries one, and this reader task has none worth carrying.
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def answer(error: types.JSONRPCError) -> None:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await write_send.send(SessionMessage(error))

    waiting = stdin.waiting

    async def handle(item: Any) -> None:
        """One queued line, in arrival order: answered here, claimed, or handed to the SDK."""
        if isinstance(item, Overlong):
            request_id = jsontext.find_id(item.head, item.tail)
            log.warning(
                "dropped a client message of %d bytes (over max_message_bytes %d)", item.size, max_message_bytes
            )
            text = f"request of {item.size} bytes exceeds max_message_bytes {max_message_bytes}"
            await answer(jsonrpc_error(request_id, INVALID_REQUEST, text))
            return
        if isinstance(item, types.JSONRPCError):
            await answer(item)
            return
        if lane is not None and (claim := lane.claim(item)) is not None:
            if waiting or not unanswered.has_room():
                waiting.append(claim)
            else:
                unanswered.add(claim.request_id)
                claim.start(wire)
            return
        parsed = _validate_client(item)
        del item
        if parsed is None:
            return
        if isinstance(parsed, types.JSONRPCError):
            await answer(parsed)
            return
        msg = parsed.message
        if isinstance(msg, types.JSONRPCResponse | types.JSONRPCError):
            outgoing.discard(_key(msg.id))  # (never waits: a call in flight may be waiting for it)
        elif isinstance(msg, types.JSONRPCNotification) and msg.method == "notifications/cancelled":
            # Only an id a request can have (an array is unhashable), as the SDK reads it.
            cancelled = cancelled_request_id_from_params(msg.params)
            if cancelled is not None:
                unanswered.done(cancelled)
                if lane is not None:
                    lane.cancel(cancelled)
                _withdraw(cancelled)
        elif waiting or (_needs_place(parsed) and not unanswered.has_room()):
            waiting.append(parsed)
            return
        elif _needs_place(parsed):
            unanswered.add(_request_id(parsed))
        await read_send.send(parsed)

    def _withdraw(request_id: Any) -> None:
        """A cancelled request still waiting for its place never gets one (nor an answer)."""
        key = _key(request_id)
        for entry in [e for e in waiting if (named := _request_id(e)) is not None and _key(named) == key]:
            waiting.remove(entry)

    async def let_in() -> None:
        """Requests waiting their turn, in order, as places free up (the notifications between them too)."""
        while waiting and (unanswered.has_room() or not _needs_place(waiting[0])):
            entry = waiting.popleft()
            if isinstance(entry, SessionMessage):
                if _needs_place(entry):
                    unanswered.add(_request_id(entry))
                await read_send.send(entry)
            else:
                unanswered.add(entry.request_id)
                entry.start(wire)

    async def unanswerable(request_id: Any) -> None:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            text = "prefixgate: the client closed its input and cannot answer"
            await read_send.send(error_message(request_id, CONNECTION_CLOSED, text))

    reading = anyio.CancelScope()
    """Cancelled when the client closes its end of stdout: no answer can reach it any more."""

    async def read_lines() -> None:
        async with read_send:
            with reading:
                await read_to_the_end()

    async def take_turns() -> None:
        """Let in what waits for a place, then handle the lines read (up to ``MAX_WAITING`` waiting)."""
        await let_in()
        while stdin.queue and len(waiting) < MAX_WAITING:
            await handle(stdin.take())
            stdin.done()

    async def read_to_the_end() -> None:
        while True:
            await take_turns()
            if stdin.closed:
                break
            if not waiting:
                await stdin.wait()
                continue
            # Requests wait for a place: read on (a cancel, an answer to what a call asked
            # frees one) unless that many wait, and let them in as places free up.
            if unanswered.has_room():
                continue  # (freed by a line just handled: a cancel)
            if len(waiting) >= MAX_WAITING:
                await unanswered.wait_room()
            else:
                unanswered.on_room = stdin.wake  # (only now: an answer wakes no reader otherwise)
                try:
                    await stdin.wait()  # a line read, or a place freed
                finally:
                    unanswered.on_room = None
        # End of input: every request read is answered before the session ends (whatever
        # stdout is), within drain_timeout: a call that reports progress for an hour held
        # the gateway and its servers up after its client had gone. What we asked the client
        # can no longer be answered.
        for key in list(outgoing):
            await unanswerable(key[1])
        outgoing.clear()
        with anyio.move_on_after(drain_timeout) as drain:
            while waiting or stdin.queue:  # (requests read, waiting for a place: theirs comes as calls end)
                await unanswered.wait_room()
                await take_turns()
            await unanswered.drained()
        if drain.cancelled_caught:
            while stdin.queue:  # (past MAX_WAITING: they wait too now, the input is all read)
                await handle(stdin.take())
                stdin.done()
            log.warning(
                "end of input: %s still unanswered after drain_timeout (%g s); stopping",
                plural(unanswered.count + sum(map(_needs_place, waiting)), "request"),
                drain_timeout,
            )
            for entry in waiting:  # never run: answered so, each read request is answered
                if _needs_place(entry):
                    text = "prefixgate: the input ended while this request waited for its turn; it was not run"
                    await answer(jsonrpc_error(_request_id(entry), CONNECTION_CLOSED, text))
            waiting.clear()
            if signals is not None:
                # As at a stop signal: the servers stop first, so each call cut is answered
                # with its server's exit, not with the end of this session ("Connection closed").
                await signals.stop_servers()
                await answered(unanswered, writer, SETTLE)

    async def output_closed() -> None:
        await write_protocol.lost.wait()
        log.info("the client closed its end of stdout: stopping, as at the end of input")
        reading.cancel()

    async def write_lines() -> None:
        async with write_recv:
            async for message in write_recv:
                try:
                    data = encode_reply(message)
                except ValueError as exc:
                    log.warning("cannot send %s to the client: %s", type(message.message).__name__, exc)
                    request_id = reply_id(message)
                    if request_id is None:
                        continue  # a notification: dropped, logged
                    if isinstance(message.message, types.JSONRPCRequest):  # ours: fail it, not the wire
                        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                            await read_send.send(error_message(request_id, INTERNAL_ERROR, f"request not sent: {exc}"))
                        continue
                    data = encode(error_message(request_id, INTERNAL_ERROR, f"the result could not be sent: {exc}"))
                if acknowledged and _acknowledged_again(message.message, acknowledged):
                    continue  # the client has the prelude's acknowledgment of this stream
                if isinstance(message.message, types.JSONRPCRequest):
                    if stdin.closed:
                        await unanswerable(message.message.id)
                        continue
                    outgoing.add(_key(message.message.id))
                if isinstance(message.message, types.JSONRPCResponse | types.JSONRPCError):
                    unanswered.done(message.message.id)
                    if message.message.id in replayed:
                        if isinstance(message.message, types.JSONRPCError):
                            log.warning("the prelude's opening request was refused: %s", message.message.error.message)
                        continue  # the client has the prelude's answer to this request already
                if writer.is_closing():
                    continue  # the client closed its end (``output_closed``): nothing reaches it
                writer.write(data)
                del data
                with suppress(ConnectionError):
                    await writer.drain()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_lines)
            tg.start_soon(output_closed)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        await cancel_all(wire.claimed)  # unanswered claimed requests get "Connection closed", as the SDK's do
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), suppress(ConnectionError):
            await writer.drain()  # what was accepted goes out before the wire is handed back
        with suppress(OSError):
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)
        writer.close()
        read_transport.close()
        for fd, blocking in ((wire_in, was_blocking[0]), (wire_out, was_blocking[1])):
            with suppress(OSError):
                os.set_blocking(fd, blocking)
            os.close(fd)


def _acknowledged_again(message: Any, acknowledged: set[str | int]) -> bool:
    """Whether ``message`` is the session's acknowledgment of a listen stream the prelude
    acknowledged (forgotten then: a stream is acknowledged once)."""
    if not isinstance(message, types.JSONRPCNotification) or message.method != ACKNOWLEDGED:
        return False
    subscription = ((message.params or {}).get("_meta") or {}).get(SUBSCRIPTION_ID_META_KEY)
    if not isinstance(subscription, str | int) or subscription not in acknowledged:
        return False
    acknowledged.discard(subscription)
    return True


SETTLE = 2.0
"""Seconds the calls a stop signal cut may take to be answered, once their servers stopped
(as over HTTP: gateway/upstream/http.py)."""


async def answered(unanswered: Unanswered, writer: asyncio.StreamWriter, timeout: float) -> None:
    """After a stop signal, once every server has stopped: the calls in flight have ended (each
    an ``isError`` naming its server's exit), so wait up to ``timeout`` seconds for those
    answers to be written and taken by the pipe. The exit that follows would otherwise cut
    them, or not, as the race with their few loop turns went."""
    with anyio.move_on_after(timeout):
        await unanswered.drained()
        while writer.transport.get_write_buffer_size():
            await anyio.sleep(0.02)


_TOOLS_SHELL = b'"result":{"tools":[]'
_TOOLS_OPEN = b'"result":{"tools":'


def encode_reply(message: SessionMessage) -> bytes:
    """One message as a JSON line; a ``tools/list`` result splices in its tools' bytes,
    encoded once per epoch and protocol version, instead of encoding megabytes again.
    Byte-identical to ``encode`` (tests/test_stdio_lines.py)."""
    msg = message.message
    if isinstance(msg, types.JSONRPCResponse):
        tools = msg.result.get("tools")
        if isinstance(tools, PublishedTools):
            shell = encode(SessionMessage(msg.model_copy(update={"result": {**msg.result, "tools": []}})))
            # The envelope before the result is "jsonrpc" and "id" only, and a quote inside
            # a JSON string is escaped: the first match is the result's own "tools" key.
            at = shell.find(_TOOLS_SHELL)
            if at >= 0:
                return b"".join((shell[:at], _TOOLS_OPEN, tools.encoded(), shell[at + len(_TOOLS_SHELL) :]))
    return encode(message)
