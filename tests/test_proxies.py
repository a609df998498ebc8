"""Remote servers behind the proxy the environment names (``gateway/downstream/proxies.py``):
a real forward proxy on loopback, real demo servers over streamable HTTP and SSE, the real
SDK client in both eras, and both eras toward the servers."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpcore2
import pytest
from anyio.abc import ByteStream, SocketStream

from tests.helpers import GATEWAY, sdk_client, text, url_process, write_config

pytestmark = pytest.mark.anyio

# (the client's era, the era the gateway speaks to its servers)
PAIRS = [("legacy", "legacy"), ("auto", "modern")]


class ForwardProxy:
    """A plain HTTP forward proxy: a connection's first request names its target in absolute
    form (``POST http://host:port/mcp HTTP/1.1``); that line is kept, and the bytes are piped
    both ways unchanged (uvicorn reads absolute-form targets too)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def handle(self, client: SocketStream) -> None:
        async with client:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await client.receive()
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.lines.append(line)
            target = urllib.parse.urlsplit(line.split(" ")[1])
            assert target.hostname is not None and target.port is not None, line
            async with await anyio.connect_tcp(target.hostname, target.port) as server:
                await server.send(head)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_pipe, server, client, tg.cancel_scope)
                    await _pipe(client, server, tg.cancel_scope)


async def _pipe(source: ByteStream, sink: ByteStream, scope: anyio.CancelScope) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    scope.cancel()  # one side closed: so is the other


@asynccontextmanager
async def forward_proxy() -> AsyncIterator[tuple[str, ForwardProxy]]:
    proxy = ForwardProxy()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        yield f"http://127.0.0.1:{port}", proxy
        tg.cancel_scope.cancel()


@contextmanager
def two_remote_demos() -> Iterator[dict[str, str]]:
    """A streamable-HTTP and an SSE demo server on free loopback ports: their URLs."""
    with ExitStack() as stack:
        urls = {}
        for name, transport in (("web", "http"), ("old", "sse")):
            command = [*GATEWAY, "demo-server", "--transport", transport, "--tools", "1", "--name", name]
            urls[name], _ = stack.enter_context(url_process(command))
        yield urls


def _proxy_env(proxy: str, no_proxy: str) -> dict[str, str]:
    env = {"HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": no_proxy, "no_proxy": no_proxy}
    return {**env, "HTTPS_PROXY": "", "https_proxy": "", "ALL_PROXY": "", "all_proxy": ""}


async def _through(tmp_path: Path, mode: str, protocol: str, no_proxy: str) -> tuple[dict[str, str], list[str]]:
    """A gateway whose environment names the proxy (and ``no_proxy``), over a streamable-HTTP
    and an SSE demo server: both called; their URLs, and the request lines the proxy saw."""
    with two_remote_demos() as urls:
        servers = {
            "web": {"url": urls["web"], "protocol": protocol},
            "old": {"url": urls["old"], "transport": "sse"},
        }
        config = write_config(tmp_path, servers, gateway={"warm_start": False})
        async with forward_proxy() as (proxy_url, proxy):
            env = _proxy_env(proxy_url, no_proxy)
            async with sdk_client(config, mode, env=env, errlog=tmp_path / "gw.log") as client:
                with anyio.fail_after(60):
                    for server in ("web", "old"):
                        result = await client.call_tool(f"{server}__echo", {"text": f"via {server}"})
                        assert not result.is_error and text(result) == f"via {server}", text(result)
    return urls, proxy.lines


@pytest.mark.parametrize(("mode", "protocol"), PAIRS)
async def test_remote_servers_are_reached_through_the_proxy_the_environment_names(
    tmp_path: Path, mode: str, protocol: str
) -> None:
    """As an SDK client honours ``HTTP_PROXY``, so does the gateway: it used to connect
    directly, which behind a proxy reaches nothing."""
    urls, lines = await _through(tmp_path, mode, protocol, "")
    targets = {line.split(" ")[1] for line in lines}
    assert urls["web"] in targets, lines  # streamable HTTP, its calls too
    assert any(t.startswith(urls["old"].removesuffix("/sse")) for t in targets), lines  # SSE
    assert {t.split("/")[2] for t in targets} <= {urls[s].split("/")[2] for s in urls}, lines


@pytest.mark.parametrize(("mode", "protocol"), PAIRS)
async def test_no_proxy_hosts_are_reached_directly(tmp_path: Path, mode: str, protocol: str) -> None:
    _, lines = await _through(tmp_path, mode, protocol, "127.0.0.1")
    assert lines == []


def test_every_transport_toward_a_remote_server_shares_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each transport used to build its own (the system's CAs read and parsed, 20-90 ms on
    the event loop) at every connection of every remote server."""
    from gateway.downstream import proxies
    from gateway.downstream.endpoint import EndpointCheck
    from gateway.downstream.oauth import CappedAuthAnswers
    from gateway.downstream.reuse import ReusedConnections
    from gateway.downstream.transports import _client_factory

    built: list[object] = []
    default = httpcore2.default_ssl_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(None)
        return default(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    proxies.tls_context.cache_clear()
    try:
        url = "https://example.invalid/mcp"
        CappedAuthAnswers(url)
        ReusedConnections()
        proxies.EnvironmentRoutes()
        _client_factory(EndpointCheck(url), None)()
        _client_factory(EndpointCheck(url), url)()
        assert len(built) == 1
    finally:
        proxies.tls_context.cache_clear()
