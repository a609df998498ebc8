"""JSON-RPC over newline-delimited pipes, for both ends of the gateway: lines split in
linear time with a bound, read in the event loop's own callback, and messages encoded as
one line each. The client's stdin (gateway/upstream/stdio.py) and each server's stdout
(gateway/downstream/stdio.py) are both read this way.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import mcp_types as types
import pydantic_core
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import INVALID_REQUEST

from catalog.pieces import encode_in_pieces

Item = TypeVar("Item")

KEEP = 4096
"""Bytes kept at each end of an overlong line: enough to find its id."""


@dataclass
class Overlong:
    """A line longer than the splitter's limit: only its size and its two ends were kept."""

    size: int
    head: bytes
    tail: bytes


class LineSplitter:
    """Re-joins chunks into lines in linear time; a long line is handed over, never copied.

    A 16 MiB result arrives as hundreds of chunks: joining them by concatenation would
    be quadratic, and copying the joined line once more would double the peak memory.
    A line growing past ``limit`` is not buffered further: its bytes are counted and
    dropped as they arrive, keeping ``keep`` bytes at each end (where its id can be found),
    and it comes out as an ``Overlong``.
    """

    def __init__(self, limit: int | None = None, keep: int = KEEP) -> None:
        self.pending = bytearray()
        self.limit = limit
        self.keep = keep
        self._over: Overlong | None = None

    def feed(self, chunk: bytes) -> list[bytes | bytearray | Overlong]:
        lines: list[bytes | bytearray | Overlong] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            if self._over is not None:
                self._overflow(chunk[start:stop])
            elif self.limit is not None and len(self.pending) + stop - start > self.limit:
                self.pending += chunk[start:stop]
                self._over = Overlong(
                    len(self.pending), bytes(self.pending[: self.keep]), bytes(self.pending[-self.keep :])
                )
                self.pending = bytearray()
            elif end >= 0 and not self.pending:
                lines.append(chunk[start:end])
                start = end + 1
                continue
            else:
                self.pending += chunk[start:stop]
            if end < 0:
                return lines
            if self._over is not None:
                lines.append(self._over)
                self._over = None
            else:
                lines.append(self.pending)
                self.pending = bytearray()
            start = end + 1

    def end(self) -> bytes | bytearray | Overlong | None:
        """At the end of input, the last line if no newline ended it: a line still, as Python's
        file iteration (and so the SDK's stdio server) reads one."""
        last: bytes | bytearray | Overlong | None = self._over or self.pending or None
        self._over, self.pending = None, bytearray()
        return last

    def _overflow(self, piece: bytes) -> None:
        over = self._over
        assert over is not None
        over.size += len(piece)
        over.tail = (over.tail + piece)[-self.keep :] if len(piece) < self.keep else piece[-self.keep :]


def is_blank(line: bytes | bytearray) -> bool:
    return not line or line.isspace()


def encode(message: SessionMessage) -> bytes:
    """One message as a JSON line. Raises ``ValueError`` when it cannot be serialised."""
    try:
        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        return data.encode("utf-8") + b"\n"
    except (ValueError, RecursionError) as exc:  # PydanticSerializationError, UnicodeEncodeError
        raise ValueError(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__) from None


def encode_plain(message: dict[str, Any], in_pieces: bool = False) -> bytes:
    """A JSON-RPC message given as a plain dict, as one JSON line: the bytes ``encode``
    makes of the same message's model (pydantic-core's serializer, NaN and Infinity as
    null; tests/test_stdio_lines.py), without building and validating the model first.
    ``in_pieces``: the same bytes, a piece at a time (``catalog.pieces``), for a long
    message encoded in a worker thread."""
    try:
        if in_pieces:
            return encode_in_pieces(message, _to_json) + b"\n"
        return pydantic_core.to_json(message, inf_nan_mode="null") + b"\n"
    except (ValueError, RecursionError) as exc:  # PydanticSerializationError
        raise ValueError(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__) from None


def _to_json(value: Any) -> bytes:
    return pydantic_core.to_json(value, inf_nan_mode="null")


def reply_id(message: SessionMessage) -> types.RequestId | None:
    """The id a failed message must still be answered (or failed) for, if it has one."""
    msg = message.message
    if isinstance(msg, types.JSONRPCRequest | types.JSONRPCResponse | types.JSONRPCError):
        return msg.id
    return None


def jsonrpc_error(request_id: types.RequestId | None, code: int, text: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=text))


def not_a_message(data: Any) -> types.JSONRPCError:
    """The answer to JSON that is no JSON-RPC message, on either end: one line, with the
    request's id when it has one a client can match."""
    request_id = data.get("id") if isinstance(data, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return jsonrpc_error(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")


def error_message(request_id: types.RequestId | None, code: int, text: str) -> SessionMessage:
    return SessionMessage(jsonrpc_error(request_id, code, text))


class LineReader(asyncio.Protocol, Generic[Item]):
    """A pipe read in the event loop's own callback: no task wakes per chunk.

    ``lines_received`` sees each chunk's lines as they arrive and answers what it can on
    the spot; everything else waits in ``queue`` for one consuming task, in order. While
    ``QUEUE_LIMIT`` items wait, reading pauses, so a peer that outpaces its consumer fills
    its own pipe, not the gateway's memory.
    """

    QUEUE_LIMIT = 16

    def __init__(self, splitter: LineSplitter) -> None:
        self.splitter = splitter
        self.queue: deque[Item] = deque()
        self.busy = False
        self.closed = False
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    def lines_received(self, lines: list[bytes | bytearray | Overlong]) -> None:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.ReadTransport, transport)

    def data_received(self, data: bytes) -> None:
        lines = self.splitter.feed(data)
        del data
        self._received(lines)

    def eof_received(self) -> bool:
        """The end of input: a last line without its newline goes the way of the others."""
        last = self.splitter.end()
        if last is not None:
            self._received([last])
        return False

    def _received(self, lines: list[bytes | bytearray | Overlong]) -> None:
        self.lines_received(lines)
        if not self.queue:
            return  # all answered on the spot: the consumer sleeps on
        if len(self.queue) >= self.QUEUE_LIMIT and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    @property
    def behind(self) -> bool:
        """Whether a line read now must wait its turn: something is queued, or in the
        consumer's hands (taken, not yet ``done``), so it must not be overtaken."""
        return bool(self.queue) or self.busy

    def take(self) -> Item:
        """The oldest queued item, for the consumer to handle, then say ``done``."""
        self.busy = True
        return self.queue.popleft()

    def done(self) -> None:
        """The item taken is handled; reading resumes once the queue has room again."""
        self.busy = False
        if self._paused and len(self.queue) < self.QUEUE_LIMIT // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    async def wait(self) -> None:
        """Until something is queued or the pipe closed."""
        if self.queue or self.closed:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def wake(self) -> None:
        """Wake the consumer in ``wait``: something else it waits for happened."""
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
