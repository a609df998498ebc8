"""An HTTP downstream's connections carry the next call (issue 25): the SDK's client closes
each handshake-era call's event stream before its end, which cost a new TCP connection per call.
A real demo server over streamable HTTP, the SDK's client over the gateway's transport."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import pytest

from gateway.downstream.reuse import ReusedConnections
from tests.helpers import PYTHON, demo, text, url_process

pytestmark = pytest.mark.anyio


CALLS = 20


class Counting(httpx2.AsyncHTTPTransport):
    """The default transport, counting the TCP connections its pool opens."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = 0
        create = self._pool.create_connection

        def counted(origin: Any) -> Any:
            self.opened += 1
            return create(origin)

        self._pool.create_connection = counted  # type: ignore[method-assign]


async def calls_over(transport: httpx2.AsyncBaseTransport, url: str, mode: str) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(transport=transport) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            for n in range(CALLS):
                assert text(await client.call_tool("echo", {"text": f"call {n}"})) == f"call {n}"
                # A moment between calls (an agent's are not microseconds apart): the stream's end
                # is read back into the pool before the next call asks for a connection.
                await anyio.sleep(0.05)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_servers_connections_are_reused(mode: str) -> None:
    server = demo("--tools", 1, "--transport", "http")
    with url_process([PYTHON, *server["args"]]) as (url, _proc):
        plain, reused = Counting(), Counting()
        await calls_over(plain, url, mode)
        await calls_over(ReusedConnections(reused), url, mode)
    if mode == "legacy":  # a 2026-07-28 answer is plain JSON, read to its end: reused either way
        assert plain.opened >= CALLS, plain.opened  # what the SDK's client does alone: one per call
    # A few, whatever the number of calls: initialize, the standalone stream, the calls' one.
    assert reused.opened <= 5, reused.opened
