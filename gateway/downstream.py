"""One connection to a downstream MCP server: start-up, raw tool listing, raw calls.

Tool lists and call results are taken as raw JSON (below the SDK's typed layer) because
the typed layer rejects a whole page when one tool's schema is invalid; the catalog
quarantines that one tool instead. Calls are forwarded with ``send_raw_request`` so
``content``, ``structuredContent``, ``isError`` and ``_meta`` reach the client untouched.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from gateway import __version__
from gateway.config import ServerConfig
from gateway.stdio import ChildProcess, CommandNotFound, stdio_transport

Status = Literal["starting", "ready", "failed", "late", "disabled", "exited"]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]

log = logging.getLogger("prefixgate.downstream")

_MAX_PAGES = 10_000


class DownstreamUnavailable(Exception):
    """The server cannot take calls now; ``str()`` is the model-visible reason."""


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups: the one worth reporting."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


class Downstream:
    """Owns one server's transport and session inside its own task (``run``)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.status: Status = "starting" if config.enabled else "disabled"
        self.error: str | None = None
        self.startup_ms: int | None = None
        self.tools: tuple[Any, ...] = ()
        self.server_info: dict[str, Any] | None = None
        self.settled = anyio.Event()
        """Set once the server is ready, failed or late: what the barrier waits for."""
        self.closed = anyio.Event()
        """Set when ``run`` has returned: the process and transport are gone."""
        if not config.enabled:
            self.settled.set()
            self.closed.set()
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        self._child: ChildProcess | None = None
        self._headers: dict[str, str] = {}
        self._scope: anyio.CancelScope | None = None
        self._log = logging.getLogger(f"prefixgate.server.{config.id}")

    # --- life cycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, initialise, list tools, then hold the connection until it ends."""
        if not self.config.enabled:
            return
        try:
            await self._run()
        finally:
            self._dispatcher = None
            self.settled.set()
            self.closed.set()

    async def _run(self) -> None:
        started = anyio.current_time()
        ready = False
        with anyio.CancelScope() as scope:
            self._scope = scope
            scope.deadline = started + self.config.startup_timeout
            try:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._open())
                    dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
                    session = ClientSession(
                        dispatcher=dispatcher,
                        client_info=types.Implementation(name="prefixgate", version=__version__),
                    )
                    await stack.enter_async_context(session)
                    init = await session.initialize()
                    self._headers = {"mcp-protocol-version": init.protocol_version}
                    self._dispatcher = dispatcher
                    self.server_info = init.server_info.model_dump(by_alias=True, mode="json", exclude_none=True)
                    self.tools = await self.list_tools()
                    scope.deadline = math.inf
                    ready = True
                    self.startup_ms = round((anyio.current_time() - started) * 1000)
                    self._set("ready", None)
                    await self._wait_closed()
                    self._dispatcher = None
                    self._set("exited", self._exit_reason())
            except CommandNotFound as exc:
                self._set("failed", str(exc))
            except MCPError as exc:
                self._set("failed", await self._startup_error(exc))
            except OSError as exc:
                self._set("failed", f"cannot start: {exc.strerror or exc}")
            except Exception as exc:  # a broken server must never take the gateway down
                leaf = _leaf(exc)
                if isinstance(leaf, MCPError):
                    self._set("failed", await self._startup_error(leaf))
                elif isinstance(leaf, CommandNotFound):
                    self._set("failed", str(leaf))
                else:
                    self._set("failed", _short(leaf) + self._stderr_hint())
        if scope.cancelled_caught and not ready and self.status == "starting":
            if anyio.current_time() >= started + self.config.startup_timeout - 0.001:
                self._set("late", f"not ready within startup_timeout {self.config.startup_timeout:g} s")
            else:
                self._set("late", "stopped before it was ready")

    async def _startup_error(self, exc: MCPError) -> str:
        if exc.code == CONNECTION_CLOSED and self._child is not None:
            await self._child.wait_exit(2.0)
            return f"exited during start-up ({self._child.exit_description()})" + self._stderr_hint()
        return exc.message + self._stderr_hint()

    def abandon(self, reason: str) -> None:
        """Stop a server that missed the discovery deadline."""
        if self.status == "starting":
            self._set("late", reason)
        if self._scope is not None:
            self._scope.cancel()

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _set(self, status: Status, error: str | None) -> None:
        self.status = status
        self.error = error
        if status == "ready":
            self._log.info("[%s] ready: %d tools in %d ms", self.config.id, len(self.tools), self.startup_ms or 0)
        elif error:
            self._log.warning("[%s] %s: %s", self.config.id, status, error)
        if status != "starting":
            self.settled.set()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        if cfg.transport == "stdio":
            assert cfg.command is not None
            async with stdio_transport(
                cfg.command, cfg.args, env=cfg.env, cwd=cfg.cwd, on_stderr=self._stderr_line
            ) as (read, write, child):
                self._child = child
                yield read, write
        elif cfg.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            assert cfg.url is not None
            async with create_mcp_http_client(headers=dict(cfg.headers)) as http:
                async with streamable_http_client(cfg.url, http_client=http) as (read, write):
                    yield read, write
        else:
            from mcp.client.sse import sse_client

            assert cfg.url is not None
            async with sse_client(cfg.url, headers=dict(cfg.headers)) as (read, write):
                yield read, write

    def _stderr_line(self, line: str) -> None:
        self._log.info("[%s] %s", self.config.id, line)

    async def _wait_closed(self) -> None:
        if self._child is not None:
            await self._child.stdout_closed.wait()
            await self._child.wait_exit(2.0)
        else:
            await anyio.sleep_forever()

    def _exit_reason(self) -> str:
        if self._child is not None:
            return f"server exited ({self._child.exit_description()})" + self._stderr_hint()
        return "connection closed"

    def _stderr_hint(self) -> str:
        if self._child is not None and self._child.stderr_tail:
            return f"; stderr: {self._child.stderr_tail[-1][:200]}"
        return ""

    # --- requests ---------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout: float | None = None,
        on_progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """Send one raw request; the result is the peer's JSON, unvalidated."""
        dispatcher = self._dispatcher
        if dispatcher is None:
            raise DownstreamUnavailable(f"server {self.config.id!r} is not connected ({self.status})")
        opts: dict[str, Any] = {"headers": dict(self._headers)}
        if timeout is not None:
            opts["timeout"] = timeout
        if on_progress is not None:
            opts["on_progress"] = on_progress
        return await dispatcher.send_raw_request(method, params, opts)  # type: ignore[arg-type]

    async def list_tools(self) -> tuple[Any, ...]:
        """Every tool of every page, following ``nextCursor`` to the end."""
        tools: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            page = await self.request("tools/list", {"cursor": cursor} if cursor is not None else None)
            batch = page.get("tools")
            if not isinstance(batch, list):
                raise ValueError("tools/list result has no 'tools' list")
            tools.extend(batch)
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return tuple(tools)
            if cursor in seen:
                raise ValueError(f"tools/list repeated cursor {cursor!r}")
            seen.add(cursor)
        raise ValueError(f"tools/list returned more than {_MAX_PAGES} pages")

    async def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        *,
        meta: Mapping[str, Any] | None = None,
        on_progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """Forward ``tools/call``; errors become ``isError`` results naming the server.

        A JSON-RPC error from the server itself is re-raised as MCPError so the client
        sees exactly what the server said.
        """
        params: dict[str, Any] = {"name": tool}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        if meta:
            params["_meta"] = {k: v for k, v in meta.items() if k != "progressToken"}
        timeout = self.config.call_timeout
        try:
            return await self.request("tools/call", params, timeout=timeout, on_progress=on_progress)
        except DownstreamUnavailable as exc:
            return error_result(str(exc))
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return error_result(f"{self.config.id}: tool {tool!r} timed out after {timeout:g} s")
            if exc.code == CONNECTION_CLOSED:
                return error_result(await self._closed_reason(tool))
            raise

    async def _closed_reason(self, tool: str) -> str:
        if self._child is not None:
            await self._child.wait_exit(2.0)
            return (
                f"server {self.config.id!r} exited during the call to {tool!r} "
                f"({self._child.exit_description()})"
            )
        return f"connection to server {self.config.id!r} closed during the call to {tool!r}"


def error_result(message: str) -> dict[str, Any]:
    """An ``isError`` tool result: the model sees why, the gateway keeps serving."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
