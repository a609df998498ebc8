"""``tools/call`` to a streamable-HTTP server as one POST, its answer read in place.

Through the SDK's ``ClientSession`` and streamable-HTTP client a call costs a request model,
two context-stream hops each way, a task group and a task for its POST, and a model for
every message on its response: about 1.6 ms of CPU a call here (``python -m
bench.httpclient``), most of what the gateway spent per call toward an HTTP server. Here a
call is posted on a keep-alive connection of the gateway's own toward an ``http://`` server
with no auth and no proxy (``rawhttp.py``: httpx's own layers cost about as much again), else
through the connection's ``httpx2.AsyncClient`` (its auth flow, TLS, proxies, and the
transports of ``reuse.py`` and ``related.py``), with the headers the SDK's transport would
put on it (its session id, the negotiated version) and an id the ``ClientSession`` never
uses (``"pg-<n>"``; the SDK counts integers). Its answer is read in
place: a clean reply is returned as is, progress for its token goes to its callback, and
every other message on its event stream (a server's request for input, its logs) goes to
the ``ClientSession`` exactly as the SDK's transport hands it over.

Everything else is what the SDK does, with the SDK's own parts where they are public
enough to share: its JSON parser (one message the SDK refuses, say with a lone surrogate,
is refused here with the same error), its event-stream reader and size cap, its answers to
a 202, a redirect that leaves the origin and an error status, ``Last-Event-ID`` resumption
of a stream cut before the answer, the courtesy ``notifications/cancelled`` (posted in the
handshake era and swallowed at 2026-07-28 by the SDK's transport, where closing the stream
is the cancel), and a failed HTTP exchange ending the connection.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping
from typing import Any

import anyio
import httpx2
import mcp_types as types
from httpx2 import ServerSentEvent
from mcp.client.streamable_http import (
    DEFAULT_RECONNECTION_DELAY_MS,
    LAST_EVENT_ID,
    MAX_RECONNECTION_ATTEMPTS,
    StreamableHTTPTransport,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)
from pydantic import ValidationError

from catalog.pieces import encode_in_pieces
from gateway import jsontext
from gateway.config import env_number
from gateway.downstream.bounded import bound_answer
from gateway.downstream.calltime import Clock, Expiry
from gateway.downstream.errors import GAVE_UP_RESUMING
from gateway.downstream.rawcalls import (
    ID_PREFIX,
    UNSENDABLE_REQUEST,
    deliver_progress,
    progress_args,
    request_message,
)
from gateway.downstream.rawhttp import Pool, Unsendable
from gateway.downstream.related import HEADER, LOG, Related
from gateway.jsontext import may_be_long
from gateway.sdk import events_on_origin, post_on_origin, sse_parser, transport_headers, unfollowed_redirect

log = logging.getLogger("prefixgate.http")

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]

_ABANDON_WRITE_TIMEOUT = 5.0
"""As the SDK's dispatcher: a courtesy cancel gives up after this."""
_REPLY_KEYS = frozenset(("jsonrpc", "id", "result"))
REFUSAL_WAIT = env_number("PREFIXGATE_REFUSAL_WAIT", 2.0)
"""Seconds a connection whose session the server ended (a 404) waits, at most, for the status
of the calls it had posted: each refused too (404: not run) goes again on the next session
(the environment variable exists for tests)."""
_HANDLER_STEPS = 3
"""Turns of the loop the session's task for a notification takes to hand it to the gateway
(its start, the logging callback's checkpoint, the message handler), with one to spare: about
the turns the SDK's own path takes from a reply's bytes to its caller."""


class HttpCalls:
    """The raw calls of one streamable-HTTP connection (see the module docstring)."""

    takes_headers = True
    """Its requests carry HTTP headers (``Link.request`` stamps the 2026-07-28 ones)."""

    def __init__(
        self,
        client: httpx2.AsyncClient,
        sdk: StreamableHTTPTransport,
        to_session: Any,
        to_server: Any,
        fail: Callable[[BaseException], None],
        session_waiting: Callable[[], bool],
        *,
        raw: Pool | None = None,
        related: Related | None = None,
    ) -> None:
        self.client = client
        self.sdk = sdk
        """The SDK's transport of the same connection: its session id and negotiated version."""
        self.to_session = to_session
        self._to_server = to_server
        self.fail = fail
        """Ends the connection with an exception, as a failed POST ends the SDK's transport."""
        self._session_waiting = session_waiting
        self.raw = raw
        """Keep-alive connections of its own (``rawhttp.py``), where httpx is not needed."""
        self.related = related
        """Where the server's requests on a call's stream are noted (``related.py``)."""
        parts = urllib.parse.urlsplit(sdk.url)
        self.where = parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()
        """The server's URL as logged: without the credentials or query a URL may carry."""
        self._next = 0
        self._closed = False
        self._ended = False
        """``answered`` has ended the connection (once)."""
        self._calls: dict[str, _Call] = {}
        """The calls in flight by request id: what ``close`` ends, and which one a 404 for the
        session answered."""

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout: float | None,
        on_progress: ProgressFn | None,
        headers: Mapping[str, str],
        clock: Clock | None = None,
    ) -> dict[str, Any]:
        """The server's raw result, or ``MCPError`` as the SDK's ``send_raw_request`` raises it
        (``clock``: as ``RawCalls.request``)."""
        if self._closed:
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        self._next += 1
        if self._next == 1:
            log.debug(
                "%s to %s posted beside the SDK's session (PREFIXGATE_FAST_PATH=0: through it)", method, self.where
            )
        request_id = f"{ID_PREFIX}{self._next}"
        clock = clock or Clock(timeout, None)
        message = request_message(request_id, method, params, progress=on_progress is not None)
        try:  # the body httpx2 makes of the SDK's ``json=``; refused here, before anything is sent
            if may_be_long(params):  # (a client's long call: encoded beside the event loop)
                log.debug("a long %s to %s encoded beside the event loop", method, self.where)
                body = await anyio.to_thread.run_sync(encode_in_pieces, message, _body)
            else:
                body = _body(message)
        except ValueError as exc:
            log.warning("cannot send a request to %s: %s", self.where, exc)
            raise MCPError(code=UNSENDABLE_REQUEST, message=f"request not sent: {exc}") from None
        del message
        wire = transport_headers(self.sdk)
        wire.update(headers)
        # The SDK's clock starts at the write to its transport; here the POST is the write.
        clock.start(anyio.current_time())
        call = self._calls[request_id] = _Call(self, request_id, on_progress, clock)
        try:
            with call.closing:
                with call.timer:
                    try:
                        return await call.run(body, wire)
                    finally:
                        call.expiry.close()
            if call.timer.cancelled_caught:
                await self._cancel(request_id, clock.reason(), shield=False)
                raise clock.expired(method)
            if call.refused:  # its own 404 ended the connection before its answer was read
                raise SessionRefused(code=INVALID_REQUEST, message="Session terminated")
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")  # close() ended it
        except anyio.get_cancelled_exc_class():  # the caller's: the courtesy cancel follows the POST
            await self._cancel(request_id, "caller cancelled", shield=True)
            raise
        finally:
            del self._calls[request_id]

    async def session_caught_up(self) -> None:
        """Let the ``ClientSession`` act on what the server sent before a call's reply, before
        the reply moves on, as through the SDK, where the reply follows it through the same
        stream and loop: what the call's own stream handed it (its log for the call, say), and
        what a session's standalone stream brought meanwhile (a log for the session, which a
        2026-07-28 client hears only while its call is in flight). The session's reader back at
        its stream has dispatched the last message; the turns after it let the task it started
        and the standalone stream's reader run (``Link`` then settles the inbox)."""
        with anyio.move_on_after(_ABANDON_WRITE_TIMEOUT):
            while not self._session_waiting():
                await anyio.lowlevel.checkpoint()
        for _ in range(_HANDLER_STEPS):
            await anyio.lowlevel.checkpoint()

    def answered(self, status: int, in_session: bool, request_id: object = None) -> None:
        """The status of each POST of the connection (``SessionWatch``'s, and the raw calls'): a
        404 to a request in a session says the server no longer knows it, and the spec's rule
        is a new session. The connection ends as on a failed POST, and the supervisor opens the
        next one now (before: at the next liveness check, every call "Session not found" meanwhile).
        The call that was answered so (``request_id``) was not run: it is ``refused``, and goes
        again on the next session (``SessionRefused``)."""
        if status != 404 or not in_session:
            return
        if isinstance(request_id, str) and (call := self._calls.get(request_id)) is not None:
            call.refused = True
        if self._ended or self._closed:
            return
        self._ended = True
        log.info("%s ended the session (HTTP 404): starting a new one", self.where)
        self.fail(SessionGone("the server ended the session (HTTP 404)"))

    @property
    def session_ended(self) -> bool:
        """The server ended the session (``answered``): this connection is over."""
        return self._ended

    async def close(self) -> None:
        """The connection closes: every call in flight fails with the SDK's ``Connection closed``.

        When the server ended the session (a 404), the calls still waiting for their POST's
        status first get up to ``REFUSAL_WAIT`` for it: one refused too was not run, and goes
        again on the next session (``SessionRefused``) as the one refused first does; cut here
        it failed, "closed during the call", as a race had it (several calls in flight)."""
        self._closed = True
        if self._ended:
            with anyio.CancelScope(shield=True), anyio.move_on_after(REFUSAL_WAIT):
                while any(not (call.headed or call.refused) for call in self._calls.values()):
                    await anyio.sleep(0.01)
        for call in self._calls.values():
            call.closing.cancel()

    async def _cancel(self, request_id: str, reason: str, *, shield: bool) -> None:
        """The courtesy ``notifications/cancelled``, through the SDK's transport (which posts it,
        or at 2026-07-28 swallows it: there the closed stream is the cancel)."""
        note = types.JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params={"requestId": request_id, "reason": reason}
        )
        with anyio.move_on_after(_ABANDON_WRITE_TIMEOUT, shield=shield) as scope:
            try:
                await self._to_server.send(SessionMessage(note))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("courtesy cancel for %s not sent: the connection is closed", request_id)
        if scope.cancelled_caught:
            log.warning("courtesy cancel for %s gave up: transport write blocked", request_id)


class SessionGone(Exception):
    """A streamable-HTTP server answered 404 for the connection's session: it must start anew."""


class SessionRefused(MCPError):
    """A call the server answered 404 for its session: it was not run, so it may be sent again
    on the next session (``Downstream.request`` does, once). Its error is the server's (or the
    SDK's "Session terminated"), whether its answer or the connection's end reached it first."""


class SessionWatch(httpx2.AsyncBaseTransport):
    """An HTTP transport that shows each answer to the connection's calls (``HttpCalls.answered``:
    a 404 for the session starts a new one), whichever path sent the request."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.calls: HttpCalls | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if self.calls is not None and request.method == "POST":  # (a DELETE ending the session: over either way)
            in_session = "mcp-session-id" in request.headers
            refused = _id_of(request) if response.status_code == 404 and in_session else None
            self.calls.answered(response.status_code, in_session, refused)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _id_of(request: httpx2.Request) -> object:
    """The JSON-RPC id of a POSTed message (read only for a 404: which call it refused)."""
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    return message.get("id") if isinstance(message, dict) else None


class _Call:
    """One call's POST and the reading of its answer, as the SDK's transport reads it."""

    __slots__ = (
        "calls",
        "clock",
        "closing",
        "expiry",
        "forwarded",
        "headed",
        "last_id",
        "on_progress",
        "refused",
        "related_name",
        "request_id",
        "retry_ms",
        "timer",
    )

    def __init__(self, calls: HttpCalls, request_id: str, on_progress: ProgressFn | None, clock: Clock) -> None:
        self.calls = calls
        self.request_id = request_id
        self.on_progress = on_progress
        self.clock = clock
        self.timer = anyio.CancelScope()
        """Ends the call at its clock's deadline, which progress moves on (``expiry``)."""
        self.closing = anyio.CancelScope()
        """Ends the call when the connection closes (``HttpCalls.close``)."""
        self.expiry = Expiry(self.timer)
        clock.moved = self.expiry.moved
        self.expiry.moved(clock)
        self.forwarded = False
        """A message of its stream went to the ``ClientSession``: it takes it before the reply moves on."""
        self.last_id: str | None = None
        """The last event id seen: where a resumed stream starts."""
        self.retry_ms: int | None = None
        """The server's ``retry``: how long to wait before resuming."""
        self.related_name: str | None = None
        """Its private call header, when its stream is read here rather than by ``RelatedStreams``."""
        self.refused = False
        """The server answered it 404 for the session: it was not run (``SessionRefused``)."""
        self.headed = False
        """Its POST's answer has begun: the server took it, or refused it (``refused``)."""

    async def run(self, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        calls = self.calls
        try:
            outcome = await self._posted(body, headers)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
        except Exception as exc:  # the HTTP exchange failed: the SDK's transport ends the connection on it
            calls.fail(exc)
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
        if self.forwarded or calls.sdk.session_id is not None:  # (only a session has a standalone stream)
            await calls.session_caught_up()
        if isinstance(outcome, types.ErrorData):
            error = SessionRefused if self.refused else MCPError
            raise error(code=outcome.code, message=outcome.message, data=outcome.data)
        return outcome

    async def _posted(self, body: bytes, headers: dict[str, str]) -> dict[str, Any] | types.ErrorData:
        """The call posted on a connection of its own (``rawhttp.py``) where there is a pool, else
        (or for a header only httpx writes, or a redirect to follow) through httpx, as the SDK posts."""
        calls = self.calls
        # Not once the server set a cookie (a sticky load balancer's, at initialize): httpx sends it.
        if calls.raw is not None and not calls.client.cookies:
            try:
                response = await calls.raw.post(body, {k: v for k, v in headers.items() if k != HEADER})
            except Unsendable:
                pass
            else:
                try:
                    # (through httpx, ``SessionWatch`` tells it)
                    calls.answered(response.status_code, "mcp-session-id" in headers, self.request_id)
                    if "set-cookie" in response.headers:  # kept, as httpx keeps them, for what follows
                        calls.client.cookies.extract_cookies(response)
                    if not response.is_redirect:  # (not acted on: the request is posted again below)
                        self.related_name = headers.get(HEADER)
                        return await self._answer(response)
                finally:
                    await response.aclose()
        async with post_on_origin(calls.client, calls.sdk.url, content=body, headers=headers) as response:
            return await self._answer(response)

    async def _answer(self, response: httpx2.Response) -> dict[str, Any] | types.ErrorData:
        """What ``StreamableHTTPTransport._handle_post_request`` makes of a request's response
        (its body bounded as the SDK's are here, on the gateway's own connections too)."""
        self.headed = True
        bound_answer(response, self.calls.sdk.max_sse_event_size)
        status = response.status_code
        if status == 202:
            return types.ErrorData(code=INVALID_REQUEST, message="server answered a request with 202 Accepted")
        if (redirect := unfollowed_redirect(response)) is not None:
            log.warning(redirect)
            return types.ErrorData(code=INVALID_REQUEST, message=redirect)
        content_type = response.headers.get("content-type", "").lower()
        if status >= 400:
            if content_type.startswith("application/json"):
                try:
                    parsed = types.jsonrpc_message_adapter.validate_json(await response.aread(), by_name=False)
                    if isinstance(parsed, types.JSONRPCError):
                        return parsed.error
                except (httpx2.StreamError, ValidationError):
                    pass
            if status == 404:
                if self.calls.sdk.session_id is None:
                    return types.ErrorData(code=METHOD_NOT_FOUND, message="Not Found")
                return types.ErrorData(code=INVALID_REQUEST, message="Session terminated")
            return types.ErrorData(code=INTERNAL_ERROR, message="Server returned an error response")
        if content_type.startswith("application/json"):
            try:
                outcome = await self._message(await response.aread(), "JSON response", any_id=False)
            except httpx2.StreamError as exc:
                return types.ErrorData(code=PARSE_ERROR, message=f"Failed to parse JSON response: {exc}")
            if outcome is None:  # not its reply: through the SDK the call would wait for one (to its timeout)
                await anyio.sleep_forever()
            assert outcome is not None
            return outcome
        if content_type.startswith("text/event-stream"):
            return await self._events(response)
        log.error("Unexpected content type: %s", content_type)
        return types.ErrorData(code=INVALID_REQUEST, message=f"Unexpected content type: {content_type}")

    async def _events(self, response: httpx2.Response) -> dict[str, Any] | types.ErrorData:
        """The call's event stream to its answer; cut before it, resumed with ``Last-Event-ID``
        (``_handle_sse_response`` and ``_handle_reconnection``)."""
        sdk = self.calls.sdk
        try:
            async with contextlib.aclosing(events_of(response, sdk.max_sse_event_size)) as events:
                outcome = await self._read(events)
        except httpx2.SSEError as exc:
            return types.ErrorData(code=CONNECTION_CLOSED, message=f"SSE stream failed: {exc}")
        except Exception:
            log.debug("SSE stream ended", exc_info=True)
            outcome = None
        if outcome is not None:
            return outcome
        if self.last_id is None:
            return types.ErrorData(code=CONNECTION_CLOSED, message="SSE stream ended without a response")
        attempt = 0
        while attempt < MAX_RECONNECTION_ATTEMPTS:
            last_id, retry_ms = self.last_id, self.retry_ms
            await anyio.sleep((retry_ms if retry_ms is not None else DEFAULT_RECONNECTION_DELAY_MS) / 1000)
            event_stream = False
            try:
                async with events_on_origin(
                    self.calls.client,
                    sdk.url,
                    headers={**transport_headers(sdk), LAST_EVENT_ID: last_id},
                    max_event_size=sdk.max_sse_event_size,
                ) as source:
                    source.response.raise_for_status()
                    event_stream = _is_event_stream(source.response)
                    log.info("Reconnected to SSE stream")
                    if (outcome := await self._read(source)) is not None:
                        return outcome
                attempt = 0  # it ended again without the answer: resumed again
            except httpx2.SSEError as exc:
                if event_stream:
                    return types.ErrorData(code=CONNECTION_CLOSED, message=f"SSE stream failed: {exc}")
                attempt, self.last_id, self.retry_ms = attempt + 1, last_id, retry_ms
            except Exception as exc:
                log.debug("Reconnection failed: %s", exc)
                attempt, self.last_id, self.retry_ms = attempt + 1, last_id, retry_ms
        return types.ErrorData(code=CONNECTION_CLOSED, message=GAVE_UP_RESUMING)

    async def _read(self, source: AsyncIterable[ServerSentEvent]) -> dict[str, Any] | types.ErrorData | None:
        """Events to the call's answer (None: the stream ended first)."""
        async for sse in source:
            if sse.id:
                self.last_id = sse.id
            if sse.retry is not None:
                self.retry_ms = sse.retry
            if sse.event != "message":
                log.warning("Unknown SSE event: %s", sse.event)
            elif sse.data:  # (an empty one primes: its id is where a resumption starts)
                if (outcome := await self._message(sse.data, "SSE message", any_id=True)) is not None:
                    return outcome
        return None

    async def _message(self, data: bytes | str, what: str, *, any_id: bool) -> dict[str, Any] | types.ErrorData | None:
        """One message of the call's response: its outcome if it answers the call, else None (its
        progress went to the callback, anything else to the ``ClientSession``). ``any_id``: on an
        event stream every reply answers the call (the SDK's transport gives it the call's id)."""
        try:  # the SDK's parser's verdicts; a long message beside the event loop (every client waits on it)
            parsed = await jsontext.parsed_aside(data, what, sdk_parser=True)
        except ValueError:
            parsed = None  # what it refuses fails below, as through the SDK
        if type(parsed) is dict:
            if parsed.get("id") == self.request_id and parsed.keys() == _REPLY_KEYS:
                if parsed["jsonrpc"] == "2.0" and type(parsed["result"]) is dict:
                    return parsed["result"]
            elif parsed.get("method") == "notifications/progress" and "id" not in parsed:
                params = parsed.get("params")
                if type(params) is dict and params.get("progressToken") == self.request_id:
                    await self._progress(params)
                    return None
        try:
            message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
        except ValidationError as exc:
            log.error("Error parsing %s: %s", what, exc)
            return types.ErrorData(code=PARSE_ERROR, message=f"Failed to parse {what}: {exc}")
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            if any_id or message.id == self.request_id:
                return message.result if isinstance(message, types.JSONRPCResponse) else message.error
        self.forwarded = True
        if self.related_name is not None:
            assert self.calls.related is not None
            if isinstance(message, types.JSONRPCRequest):
                self.calls.related.note(self.related_name, message.id)
            elif isinstance(message, types.JSONRPCNotification) and message.method == LOG:
                self.calls.related.note_log(self.related_name, message.params)
        await self.calls.to_session.send(SessionMessage(message))
        return None

    async def _progress(self, params: dict[str, Any]) -> None:
        """In the reader's own task: the stream is read on once the callback has it. It restarts
        the call's clock (``calltime.py``)."""
        if (args := progress_args(params)) is None:
            return
        self.clock.progressed(anyio.current_time())
        if self.on_progress is not None:
            await deliver_progress(self.on_progress, args)


def _body(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


async def events_of(response: httpx2.Response, max_event_size: int | None) -> AsyncGenerator[ServerSentEvent, None]:
    """``httpx2.EventSource(response, max_event_size)``'s events, read as it reads them (the
    response's charset or httpx's default, undecodable bytes replaced, the same parser) but
    off the body's own chunks: through the response's text, byte and raw iterators, and the
    tasks that close each of them once the call has its answer, a response of one event
    cost about 85 µs more. A compressed body, or one ``EventSource`` refuses, is left to it."""
    stream = response.stream
    plain = "content-encoding" not in response.headers and _is_event_stream(response)  # (else EventSource's error)
    if not plain or not isinstance(stream, httpx2.AsyncByteStream):
        async for sse in httpx2.EventSource(response, max_event_size=max_event_size):
            yield sse
        return
    parser = sse_parser(max_event_size)
    decoder = codecs.getincrementaldecoder(response.encoding or "utf-8")(errors="replace")
    chunks = stream.__aiter__()
    try:
        async for chunk in chunks:
            for sse in parser.decode(decoder.decode(chunk)):
                yield sse
    finally:
        if isinstance(chunks, AsyncGenerator):  # as the response's raw iterator closes it
            await chunks.aclose()
    for sse in parser.decode(decoder.decode(b"", True)):
        yield sse
    for sse in parser.flush():
        yield sse


def _is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower() == "text/event-stream"
