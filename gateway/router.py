"""The call path: resolve the name in the current epoch, then forward downstream.

Every failure the model can cause or meet (an unknown name, a dead server, a timeout, a
malformed downstream result) becomes an ``isError`` result naming what went wrong, so
one bad call never takes the gateway or the session down.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
from mcp_types.methods import validate_server_result
from pydantic import ValidationError

from gateway.downstream import Downstream, ProgressFn, error_result
from gateway.epoch import Epoch
from gateway.wire import DEFAULT_VERSION

log = logging.getLogger("prefixgate.router")


class Router:
    def __init__(self, downstreams: Mapping[str, Downstream]) -> None:
        self.downstreams = dict(downstreams)
        self.epoch: Epoch | None = None
        self.ready = anyio.Event()
        """Set once the discovery barrier has passed and the first epoch is built."""

    def publish(self, epoch: Epoch) -> None:
        self.epoch = epoch
        self.ready.set()

    async def current(self) -> Epoch:
        await self.ready.wait()
        assert self.epoch is not None
        return self.epoch

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        meta: Mapping[str, Any] | None = None,
        on_progress: ProgressFn | None = None,
        version: str = DEFAULT_VERSION,
    ) -> dict[str, Any]:
        epoch = await self.current()
        entry = epoch.catalog.get(name)
        if entry is None:
            return error_result(f"Unknown tool {name!r}: it is not in this gateway's catalog.")
        downstream = self.downstreams[entry.server]
        result = await downstream.call_tool(entry.original, arguments, meta=meta, on_progress=on_progress)
        return _checked(result, version, entry.server, entry.original)


def _checked(result: dict[str, Any], version: str, server: str, tool: str) -> dict[str, Any]:
    """Refuse a malformed downstream result here, where we can still name the server."""
    try:
        validate_server_result("tools/call", version, result)
    except (ValidationError, KeyError, ValueError) as exc:
        detail = exc.errors()[0].get("msg", "invalid") if isinstance(exc, ValidationError) else str(exc)
        log.warning("server %s returned an invalid result for %s: %s", server, tool, detail)
        return error_result(f"Server {server!r} returned an invalid result for tool {tool!r}: {detail}")
    return result
