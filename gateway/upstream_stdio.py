"""The gateway's own end of the stdio MCP stream, read and written on the event loop.

The SDK's ``stdio_server`` hands every line it reads and every write and flush to a
worker thread: three thread round trips per call, about a third of the gateway's cost
per call, and a blocked stdin read that cancellation cannot interrupt. When stdin and
stdout are pipes or sockets (how every MCP client starts a server) this transport reads
and writes them directly with the event loop, in linear time; otherwise (a terminal, a
file) it falls back to the SDK's transport.

Like the SDK's, it moves the real streams aside while serving: fd 0 reads /dev/null
and fd 1 goes to stderr, so stray prints from libraries can never corrupt the stream.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from gateway.stdio import LineSplitter, _parse, is_blank

_CHUNK = 1 << 16


def _streamable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of the stdio MCP connection."""
    if not (_streamable(0) and _streamable(1)):
        from mcp.server.stdio import stdio_server

        async with stdio_server() as streams:
            yield streams
        return

    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_CHUNK, loop=loop)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(wire_in, "rb", buffering=0)
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), os.fdopen(wire_out, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)

    read_send, read_recv = create_context_streams[SessionMessage | Exception](0)
    write_send, write_recv = create_context_streams[SessionMessage](0)

    async def read_lines() -> None:
        splitter = LineSplitter()
        async with read_send:
            while chunk := await reader.read(_CHUNK):
                for line in splitter.feed(chunk):
                    if not is_blank(line):
                        await read_send.send(_parse(line))

    async def write_lines() -> None:
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(data.encode("utf-8") + b"\n")
                with suppress(ConnectionError):
                    await writer.drain()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_lines)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), suppress(ConnectionError):
            await writer.drain()  # what was accepted goes out before the wire is handed back
        with suppress(OSError):
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)
        writer.close()
        read_transport.close()
