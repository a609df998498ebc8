"""The SSE (2024-11-05) transport's client: the SDK's ``sse_client`` (mcp 2.3.0), with two faults
costing what they should.

A message POST the server answers with an error status (a proxy's 502 or 503, a 429) raised
out of the SDK client's writer, which then posted nothing more: the call waited for its
whole timeout, and every later request failed as "closed during the call" until the next
liveness check (15 s) found the connection dead. Here that POST answers its own request
with the error, as the SDK's streamable-HTTP transport answers one (the JSON-RPC error in
the body, else "Server returned an error response"), and the connection goes on.

A message answered 404 was not taken (the server no longer knows the session): the connection
ends, and the request goes once more on the next one (``untaken``), as a streamable-HTTP
server's 404 for the session has its call sent again.

The end of the event stream (the server gone, restarted, its proxy's idle timeout) was seen
only by that check too, every call failing meanwhile, with the SDK's traceback in the log.
The stream is the connection: its end is ``ended`` here, which the supervisor waits on
beside its liveness check, so the next connection is opened at once.

Its events are bounded by the server's ``max_message_bytes``, as a streamable-HTTP
server's are, rather than the SDK client's 1 MiB; and its requests are dropped while the answers
to earlier ones wait for it to take their POSTs (``stdio.Shedding``): each answer waiting held a
task (20,000 pings from a server that took no answer held ~240 MB).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskStatus
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR
from pydantic import ValidationError

from gateway.downstream.endpoint import foreign_endpoint
from gateway.downstream.errors import short
from gateway.downstream.stdio import Shedding
from gateway.sdk import context_streams, events_on_origin, post_on_origin

log = logging.getLogger("prefixgate.http")

MAX_ANSWER_BYTES = 64 << 10
"""Bytes of a POST's answer read (an accepted message's is empty; an error's may hold a JSON-RPC error)."""


class Ended:
    """One SSE connection's end: ``event`` is set once its event stream is over, ``reason`` says how."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.reason = "the server ended its event stream"
        self.forgotten = False
        """The server no longer knows the session (a message answered 404): the link is gone (a
        new request waits for the next connection), and the next connection is opened at once,
        as after a streamable-HTTP server's 404 for its session."""

    def set(self, reason: str | None = None) -> None:
        if not self.event.is_set():
            self.reason = reason or self.reason
            self.event.set()


_UNTAKEN: ContextVar[list[object] | None] = ContextVar("prefixgate_sse_untaken", default=None)


@contextmanager
def untaken() -> Iterator[list[object]]:
    """The ids of the requests sent within that an SSE server answered 404: it no longer knows
    the session, so it did not take them, and each may go again on the next connection. Each
    message is posted in its sender's context (``sse_connection``'s writer), where the list is."""
    found: list[object] = []
    token = _UNTAKEN.set(found)
    try:
        yield found
    finally:
        _UNTAKEN.reset(token)


@asynccontextmanager
async def sse_connection(
    client: httpx2.AsyncClient, url: str, ended: Ended, max_event_size: int
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of one SSE connection (``sse_client``'s, read as it
    reads them), each event bounded by ``max_event_size`` (``max_message_bytes``, as a stdio
    line and a streamable-HTTP event are: the SDK's 1 MiB failed a result a direct client reads)."""
    parts = urllib.parse.urlsplit(url)
    where = parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()
    async with events_on_origin(client, url, headers={}, max_event_size=max_event_size) as source:
        source.response.raise_for_status()
        write, write_reader, writes = context_streams()
        # A server's requests while its answers pile up untaken are dropped (``Shedding``).
        read_writer, read, _ = context_streams(admit=Shedding(writes, where, "to take its POSTs").admit)

        async def reader(task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
            started = False
            try:
                async for sse in source:
                    if sse.event == "endpoint" and not started:
                        if (refused := foreign_endpoint(url, sse.data)) is not None:
                            raise refused
                        task_status.started(urllib.parse.urljoin(url, sse.data))
                        started = True
                    elif sse.event == "message" and sse.data:  # (an empty one keeps the stream alive)
                        try:
                            message = types.jsonrpc_message_adapter.validate_json(sse.data, by_name=False)
                        except ValidationError as exc:
                            log.error("%s sent a message that does not parse: %s", where, short(exc))
                            await read_writer.send(exc)
                            continue
                        await read_writer.send(SessionMessage(message))
                    elif sse.event != "message":
                        log.warning("%s sent an unknown SSE event: %s", where, sse.event[:80])
                if not started:
                    raise NoEndpoint("its event stream ended before it named an endpoint")
                ended.set()
            except Exception as exc:  # the stream failed: the connection is over, said in one line
                if not started:
                    raise
                ended.set(f"its event stream failed: {short(exc)}")
            finally:
                await read_writer.aclose()

        async def post(endpoint: str, session_message: SessionMessage) -> None:
            message = session_message.message
            body = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            forgotten = False
            try:
                async with post_on_origin(client, endpoint, json=body) as response:
                    answer = await _bounded_body(response)
                    if response.is_success:
                        return
                    error = _error_of(response, answer)
                log.warning("%s answered a message with HTTP %d", where, response.status_code)
                forgotten = response.status_code == 404
            except Exception as exc:  # noqa: BLE001 - not sent (the server gone, a URL httpx refuses): said to its caller
                log.warning("%s: a message could not be posted: %s", where, short(exc))
                error = types.ErrorData(code=CONNECTION_CLOSED, message=f"message not delivered: {short(exc)}")
            if forgotten:
                # Said before its caller hears: a request that was not taken goes again on the
                # next connection (``untaken``), and the link is gone from now (``forgotten``).
                if isinstance(message, types.JSONRPCRequest) and (found := _UNTAKEN.get()) is not None:
                    found.append(message.id)
                ended.forgotten = True
            if isinstance(message, types.JSONRPCRequest):  # its caller hears why, now
                reply = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                await read_writer.send(SessionMessage(reply))
            if forgotten:
                # The server no longer knows this connection's session (restarted behind a stream
                # still open, a balancer's other backend): every later message would meet the
                # same, so the connection ends now (its caller answered first), not at the next
                # liveness check.
                ended.set("the server no longer knows its session (HTTP 404 to a message)")

        async def writer(endpoint: str) -> None:
            async with write_reader:
                async for session_message in write_reader:
                    context = write_reader.last_context
                    async with anyio.create_task_group() as tg:  # one at a time, in order, in the sender's context
                        if context is not None:
                            context.run(tg.start_soon, post, endpoint, session_message)
                        else:
                            tg.start_soon(post, endpoint, session_message)

        async with read_writer, read, write, write_reader, anyio.create_task_group() as tg:
            endpoint = await tg.start(reader)
            tg.start_soon(writer, endpoint)
            try:
                yield read, write
            finally:
                tg.cancel_scope.cancel()


class NoEndpoint(Exception):
    """The event stream ended before its ``endpoint`` event: there is nowhere to post."""


async def _bounded_body(response: httpx2.Response) -> bytes | None:
    """The answer's body, read so its connection is kept; None past ``MAX_ANSWER_BYTES`` (the rest unread)."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            return None
    return body


def _error_of(response: httpx2.Response, body: bytes | None) -> types.ErrorData:
    """The JSON-RPC error an error answer holds, else the SDK's stand-in for its status."""
    if body and response.headers.get("content-type", "").lower().startswith("application/json"):
        try:
            parsed = types.jsonrpc_message_adapter.validate_json(body, by_name=False)
        except ValidationError:
            parsed = None
        if isinstance(parsed, types.JSONRPCError):
            return parsed.error
    return types.ErrorData(code=INTERNAL_ERROR, message="Server returned an error response")
