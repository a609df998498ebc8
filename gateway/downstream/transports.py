"""How one server is reached: a stdio child, streamable HTTP or SSE, behind one interface.

As httpx keeps its transports beside the client, a connection (``link.py``) opens
whichever transport its config names and gets the SDK's pair of message streams back; it
never branches on the kind. What only one kind has is an attribute that is None for the
others: a stdio server's process (``child``: its stderr, its exit, the raw calls on its
pipes), a streamable-HTTP server's record of whose call each of its requests belongs to
(``related``) and an SSE connection's end (``ended``).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio

from gateway.config import ServerConfig
from gateway.downstream.bounded import BoundedAnswers
from gateway.downstream.httpcalls import HttpCalls, SessionWatch
from gateway.downstream.proxies import EnvironmentRoutes
from gateway.downstream.rawcalls import RawCalls
from gateway.downstream.rawhttp import Pool
from gateway.downstream.related import Related
from gateway.downstream.selfloop import with_instance
from gateway.downstream.spawn import Spawned
from gateway.downstream.sseclient import Ended
from gateway.downstream.stdio import ChildProcess, Shedding, stdio_transport

Auth = Callable[[], Awaitable[Any]]
"""A connection's OAuth provider, built anew for each connection (None without ``auth``)."""
Streams = tuple[Any, Any]
"""The SDK's (read, write) message streams of one connection."""


class Transport:
    """One way to reach a server; ``open`` gives one connection's message streams."""

    child: ChildProcess | None = None
    """The server's process while a stdio connection is open."""
    related: Related | None = None
    """Whose call a streamable-HTTP server's request is for (``related.py``)."""

    http_calls: HttpCalls | None = None
    """``tools/call`` as one POST of its own while a streamable-HTTP connection is open."""
    ended: Ended | None = None
    """An SSE connection's end (its event stream over), which the supervisor reconnects on."""

    @property
    def raw_calls(self) -> RawCalls | HttpCalls | None:
        """``tools/call`` below the SDK's session, where the transport has a way: raw lines on a
        stdio child's pipes (``rawcalls.py``), one POST read in place (``httpcalls.py``)."""
        return self.child.calls if self.child is not None else self.http_calls

    def open(self) -> AbstractAsyncContextManager[Streams]:
        raise NotImplementedError

    def discard(self) -> None:
        """The gateway stops: a process started before the first connection is not kept."""


class StdioTransport(Transport):
    """A child process over its stdin and stdout, respawned for every connection."""

    def __init__(self, config: ServerConfig, on_stderr: Callable[[str], None], early: Spawned | None) -> None:
        self.config = config
        self.on_stderr = on_stderr
        self._early = early
        """Started before the gateway was up (``gateway.upstream.prelude``): the first
        connection adopts it instead of spawning one."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Streams]:
        cfg = self.config
        assert cfg.command is not None
        early, self._early = self._early, None
        self.child = None
        async with stdio_transport(
            cfg.command,
            cfg.args,
            env=cfg.env,
            cwd=cfg.cwd,
            on_stderr=self.on_stderr,
            max_message_bytes=cfg.max_message_bytes,
            spawned=early,
            server=cfg.id,
        ) as (read, write, child):
            self.child = child
            yield read, write

    def discard(self) -> None:
        if self._early is not None:
            self._early.discard()


class _Remote(Transport):
    """A server at a URL, with the OAuth provider of each connection (None without ``auth``)."""

    def __init__(self, config: ServerConfig, auth: Auth) -> None:
        self.config = config
        self.url: str = config.url or ""  # a remote server's config always has one (config.py)
        self.auth = auth


class StreamableHttpTransport(_Remote):
    """The SDK's streamable-HTTP client on the gateway's HTTP stack: pooled connections
    whose event streams are read to their end (``reuse.py``), each response stream
    scanned for the server requests it carries (``related.py``), and ``tools/call`` posted
    beside the SDK's session (``httpcalls.py``)."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Streams]:
        import httpx2

        from gateway.downstream.related import RelatedStreams
        from gateway.downstream.reuse import ReusedConnections

        auth = await self.auth()
        # The SDK transports' own defaults: a response stream may stay open for minutes.
        timeout = httpx2.Timeout(30.0, read=300.0)
        if auth is not None:
            from gateway.downstream.oauth import CappedAuthAnswers

            inner: httpx2.AsyncBaseTransport = CappedAuthAnswers(self.url)
        else:
            inner = EnvironmentRoutes()
        limit = self.config.max_message_bytes
        self.related = Related()
        watch = SessionWatch(BoundedAnswers(inner, limit))
        pool = ReusedConnections(RelatedStreams(self.related, watch))
        headers = with_instance(dict(self.config.headers))
        self.http_calls = None
        raw = Pool(self.url, headers) if auth is None and plain_http(self.url) else None
        try:
            async with httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, transport=pool) as http:
                streams = _streamable_http(self.url, http, raw, self.related, limit, self.config.id)
                async with streams as (read, write, calls):
                    self.http_calls = watch.calls = calls
                    yield read, write
        finally:
            if raw is not None:
                raw.close()


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")
TERMINATE_TIMEOUT = 5.0
"""Seconds the DELETE that ends a lost session may take: a server that stopped answering (a
network black hole) held the reconnect for the HTTP client's read timeout, 300 s."""


def plain_http(url: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether calls to ``url`` may go on connections of the gateway's own (``rawhttp.py``): plain
    ``http://``, no proxy in the environment and no ``user:password@`` in the URL (httpx honours
    both: a proxy, and the credentials as Basic auth; those requests stay httpx's)."""
    proxied = any(environ.get(name) or environ.get(name.upper()) for name in PROXY_VARIABLES)
    return url.startswith("http://") and not proxied and "@" not in urllib.parse.urlsplit(url).netloc


@asynccontextmanager
async def _streamable_http(
    url: str, http: Any, raw: Pool | None, related: Related | None, limit: int, server_id: str
) -> AsyncIterator[tuple[Any, Any, HttpCalls]]:
    """The SDK's ``streamable_http_client``, its parts held here: the raw calls of
    ``httpcalls.py`` read the session id and version its transport learns, hand the session
    what arrives on their streams, and end the connection as a failed POST of its own would.
    ``limit``: the largest event its event streams may carry (``max_message_bytes``, as a
    stdio line; the SDK's default is 1 MiB, less than many a tool's result)."""
    from mcp.client.streamable_http import StreamableHTTPTransport

    from gateway.sdk import context_streams

    sdk = StreamableHTTPTransport(url, max_sse_event_size=limit)
    write, write_reader, writes = context_streams()
    # A server's requests while its answers pile up untaken are dropped (``Shedding``).
    read_writer, read, to_session = context_streams(admit=Shedding(writes, f"[{server_id}]", "to take its POSTs").admit)
    async with read_writer, read, write, write_reader, anyio.create_task_group() as tg:

        def start_get_stream() -> None:
            tg.start_soon(sdk.handle_get_stream, http, read_writer)

        def fail(exc: BaseException) -> None:
            async def raise_it() -> None:
                raise exc

            tg.start_soon(raise_it)

        tg.start_soon(sdk.post_writer, http, write_reader, read_writer, write, start_get_stream, tg)

        def session_waiting() -> bool:
            """The session's reader waits for the next message: it has taken (and dispatched) the last."""
            return to_session.statistics().tasks_waiting_receive > 0

        calls = HttpCalls(http, sdk, read_writer, write, fail, session_waiting, raw=raw, related=related)
        try:
            yield read, write, calls
        finally:
            await calls.close()
            if sdk.session_id:
                with anyio.move_on_after(TERMINATE_TIMEOUT):  # (a courtesy: the next session does not wait on it)
                    await sdk.terminate_session(http)
            tg.cancel_scope.cancel()


class SseTransport(_Remote):
    """The SSE (2024-11-05) transport (``sseclient.py``: the SDK's client, but a failed POST costs
    its own request and the stream's end is ``ended``), OAuth-side answers capped, its
    ``endpoint`` event checked on the way in (``endpoint.py``)."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Streams]:
        import httpx2

        from gateway.downstream.endpoint import EndpointCheck
        from gateway.downstream.sseclient import sse_connection

        auth = await self.auth()
        check = EndpointCheck(self.url)
        factory = _client_factory(check, self.url if auth is not None else None)
        headers = with_instance(dict(self.config.headers))
        self.ended = ended = Ended()
        try:
            # The SDK's SSE client's timeouts: 5 s for a request, 300 s between two events.
            async with factory(headers=headers, timeout=httpx2.Timeout(5.0, read=300.0), auth=auth) as client:
                async with sse_connection(client, self.url, ended, self.config.max_message_bytes) as (read, write):
                    yield read, write
        except Exception:
            if check.refused is not None:  # (the SDK's client says only that its reader ended)
                raise check.refused from None
            raise


def _client_factory(check: Any, capped: str | None) -> Any:
    """The SSE transport's HTTP client, built as the SDK builds it, with the endpoint ``check``;
    with ``capped`` (the endpoint of an OAuth connection), its OAuth-side answers capped."""
    import httpx2

    from gateway.downstream.oauth import CappedAuthAnswers

    def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
        transport = CappedAuthAnswers(capped) if capped is not None else EnvironmentRoutes()
        hooks = {"response": [check]}
        return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, transport=transport, event_hooks=hooks)

    return factory


def transport_for(
    config: ServerConfig, *, on_stderr: Callable[[str], None], auth: Auth, early: Spawned | None = None
) -> Transport:
    """The transport ``config.transport`` names."""
    if config.transport == "stdio":
        return StdioTransport(config, on_stderr, early)
    if config.transport == "http":
        return StreamableHttpTransport(config, auth)
    return SseTransport(config, auth)
