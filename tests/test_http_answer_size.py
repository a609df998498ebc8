"""A streamable-HTTP server's answers are bounded by ``max_message_bytes``, as a stdio
server's lines are (gateway/downstream/bounded.py), not by the SDK client's 1 MiB.

Before, a tool result over 1 MiB from an HTTP server failed ("Server-sent event exceeded the
1048576 byte limit") where the same server answers it directly and where a stdio server's
is spilled; and a JSON answer was read whole however large. Real demo servers over HTTP on
loopback, the SDK client in both eras, the server in both eras (an event stream per
answer in the handshake era, a JSON body at 2026-07-28), with the gateway's own call path
and with the SDK session's (``PREFIXGATE_FAST_PATH=0``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest

from gateway.downstream.bounded import MessageTooLarge, bound_answer
from tests.helpers import ERAS, GATEWAY, PYTHON, http_gateway, sdk_client, text, url_process, write_config

pytestmark = pytest.mark.anyio

PROTOCOLS = ["legacy", "modern"]
"""How the gateway talks to the server: the handshake (answers on event streams) or 2026-07-28 (JSON)."""


@contextmanager
def gateway_before_http_server(tmp_path: Path, protocol: str, fast: bool, **gateway: int) -> Iterator[str]:
    command = [*GATEWAY, "demo-server", "--transport", "http", "--tools", "1", "--name", "d"]
    with url_process(command) as (url, _):
        config = write_config(tmp_path, {"d": {"url": url, "protocol": protocol}}, gateway=gateway)
        with http_gateway(config, env={"PREFIXGATE_FAST_PATH": "1" if fast else "0"}) as (served, _):
            yield served


@pytest.mark.parametrize("fast", [True, False], ids=["own-path", "sdk-session"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", ERAS)
async def test_a_result_over_a_mebibyte_is_spilled_not_refused(
    tmp_path: Path, mode: str, protocol: str, fast: bool
) -> None:
    with gateway_before_http_server(tmp_path, protocol, fast) as url:
        async with sdk_client(url, mode) as client:
            result = await client.call_tool("d__payload", {"bytes": 1_200_000})
            assert not result.is_error, text(result)[:300]
            assert "1200000 bytes of text) saved as artifact" in text(result)


@pytest.mark.parametrize("fast", [True, False], ids=["own-path", "sdk-session"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_answer_over_max_message_bytes_fails_only_its_call(tmp_path: Path, protocol: str, fast: bool) -> None:
    with gateway_before_http_server(tmp_path, protocol, fast, max_message_bytes=1 << 16) as url:
        async with sdk_client(url, "auto") as client:
            result = await client.call_tool("d__payload", {"bytes": 200_000})
            assert result.is_error
            assert "65536" in text(result), text(result)  # the limit it exceeded, named
            assert text(await client.call_tool("d__echo", {"text": "next"})) == "next"


@pytest.mark.parametrize("fast", [True, False], ids=["own-path", "sdk-session"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_compressed_answer_is_bounded_once_decoded(tmp_path: Path, mode: str, fast: bool) -> None:
    """A gzip-compressed JSON answer (tests/rogue_http.py) was bounded by its bytes on the
    wire and decoded whole after: 4 KiB of gzip is 4 MiB of answer here (300 KB made 300 MB,
    in the gateway's memory at once, past the 32 MiB default). Now it is counted as it is
    decoded: refused past the limit, naming it; a small one is read as before."""
    rogue = str(Path(__file__).with_name("rogue_http.py"))
    with url_process([PYTHON, rogue]) as (url, _):
        config = write_config(tmp_path, {"r": {"url": url}}, gateway={"max_message_bytes": 1 << 20})
        env = {"PREFIXGATE_FAST_PATH": "1" if fast else "0"}
        async with sdk_client(config, mode, env=env) as client:
            with anyio.fail_after(60):
                assert text(await client.call_tool("r__gzip_json", {})) == "decoded"
                bomb = await client.call_tool("r__gzip_bomb", {})
                assert bomb.is_error and "exceeds max_message_bytes 1048576" in text(bomb), text(bomb)[:300]
                assert text(await client.call_tool("r__echo", {})) == "plain json"


class _Chunks(httpx2.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def test_a_body_without_a_length_is_read_to_the_limit_and_no_further() -> None:
    """A chunked body (no ``content-length``) is refused as it passes the limit; one within it,
    and an event stream of any length, are read as they are."""

    def answer(content_type: str, *chunks: bytes) -> httpx2.Response:
        return bound_answer(httpx2.Response(200, headers={"content-type": content_type}, stream=_Chunks(*chunks)), 10)

    assert await answer("application/json", b"12345", b"67890").aread() == b"1234567890"
    with pytest.raises(MessageTooLarge, match="over 10 bytes exceeds max_message_bytes 10"):
        await answer("application/json", b"12345", b"678901").aread()
    assert await answer("text/event-stream", b"x" * 30).aread() == b"x" * 30


@pytest.mark.parametrize("mode", ERAS)
async def test_a_gateways_answer_over_a_mebibyte_reaches_an_http_client(tmp_path: Path, mode: str) -> None:
    """The other way: the gateway's own answers to its HTTP clients. A server that pages its
    8,000 resources (200 KB a page) or reads a 1.5 MB resource serves the SDK's client
    directly; through the gateway, whose lists are one page, a handshake-era client was
    answered on an event stream, and refused any event over 1 MiB ("Server-sent event
    exceeded the 1048576 byte limit"). An answer with nothing before it is one JSON body."""
    server = {"command": PYTHON, "args": ["-m", "tests.paged_server", "--items", "8000", "--page", "1000"]}
    config = write_config(tmp_path, {"p": {**server, "cwd": str(Path.cwd())}})
    with http_gateway(config) as (url, _):
        async with sdk_client(url, mode) as client:
            with anyio.fail_after(60):
                resources = (await client.list_resources()).resources
                templates = (await client.list_resource_templates()).resource_templates
                prompts = (await client.list_prompts()).prompts
                read = await client.read_resource("paged://big/1500000")
    assert [str(r.uri) for r in resources] == sorted(f"paged://r/{i}" for i in range(8000))
    assert len(templates) == len(prompts) == 8000
    assert read.contents[0].text == "y" * 1_500_000  # type: ignore[union-attr]
