"""``serve --http`` over HTTPS (``--tls-cert``, ``--tls-key``).

Off loopback a bearer token is required, and without TLS it crossed the network in the
clear with every call. The gateway now serves HTTPS itself with a certificate it is given,
and says so when it serves plain HTTP off loopback. Real gateway, a real certificate chain
(trustme: a throwaway CA), the real SDK client in both eras trusting that CA.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trustme

from tests.helpers import ACCEPT, ERAS, GATEWAY, INIT, demo, run_cli, text, url_process, write_config

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def files(ca: trustme.CA, tmp_path: Path) -> tuple[Path, Path]:
    """The server's chain and key, for 127.0.0.1 and localhost."""
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(key))
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    key.chmod(0o600)
    return cert, key


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@contextmanager
def https_gateway(tmp_path: Path, cert: Path, key: Path) -> Iterator[str]:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    with (tmp_path / "gateway.log").open("w") as errlog:
        with url_process([*command, "--tls-cert", str(cert), "--tls-key", str(key)], stderr=errlog) as (url, _):
            yield url


@asynccontextmanager
async def client(url: str, mode: str, verify: Any) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(verify=verify, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as connected:
            yield connected


@pytest.mark.parametrize("mode", ERAS)
async def test_the_sdk_client_calls_through_https(
    tmp_path: Path, files: tuple[Path, Path], ca: trustme.CA, mode: str
) -> None:
    with https_gateway(tmp_path, *files) as url:
        assert url.startswith("https://127.0.0.1:")
        async with client(url, mode, trusting(ca)) as connected:
            assert text(await connected.call_tool("d__echo", {"text": "sealed"})) == "sealed"


async def test_plain_http_and_an_untrusted_certificate_get_nothing(
    tmp_path: Path, files: tuple[Path, Path], ca: trustme.CA
) -> None:
    with https_gateway(tmp_path, *files) as url:
        async with httpx2.AsyncClient(timeout=10) as http:
            with pytest.raises(httpx2.HTTPError):  # plain HTTP to the TLS port: no answer
                await http.post(url.replace("https://", "http://"), json=INIT, headers=ACCEPT)
        async with httpx2.AsyncClient(timeout=10) as http:  # the system's CAs: not this one
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await http.post(url, json=INIT, headers=ACCEPT)
        async with httpx2.AsyncClient(timeout=10, verify=trusting(ca)) as http:
            answered = await http.post(url, json=INIT, headers=ACCEPT)
            assert answered.status_code == 200 and '"serverInfo"' in answered.text


def test_unusable_tls_options_exit_2_before_anything_starts(tmp_path: Path, files: tuple[Path, Path]) -> None:
    cert, key = files
    other = trustme.CA().issue_cert("127.0.0.1")
    other_key = tmp_path / "other-key.pem"
    other.private_key_pem.write_to_path(str(other_key))
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    serve = ["serve", "--config", str(config)]
    cases = {
        ("--tls-cert", str(cert), "--tls-key", str(key)): "they need --http",
        ("--token-file", str(cert)): "--token-file holds the tokens of HTTP clients: it needs --http",
        ("--http", "127.0.0.1:0", "--session", "s"): "--session names a stdio client's state",
        # An empty value (a script's unset variable) is no value: not "not given" (served without
        # the tokens meant), nor a traceback.
        ("--http", ""): "--http: an empty value",
        ("--http", "127.0.0.1:0", "--token-file", ""): "--token-file: an empty value",
        ("--session", " "): "--session: an empty value",
        ("--http", "127.0.0.1:0", "--tls-cert", str(cert)): "--tls-cert needs --tls-key too",
        ("--http", "127.0.0.1:0", "--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(key)): "No such file",
        ("--http", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(other_key)): "KEY_VALUES_MISMATCH",
    }
    for options, reason in cases.items():
        done = run_cli(*serve, *options, timeout=60)
        assert done.returncode == 2, (options, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.startswith("prefixgate: ")]
        assert len(lines) == 1 and reason in lines[0], (options, done.stderr)
        assert "ready:" not in done.stderr  # no server was started


def test_plain_http_off_loopback_is_named_in_the_log(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    tokens = tmp_path / "tokens"
    tokens.write_text("a-token\n")
    log = tmp_path / "gateway.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", "0.0.0.0:0", "--token-file", str(tokens)]
    with log.open("w") as errlog, url_process(command, stderr=errlog):
        pass
    assert "serving plain HTTP on 0.0.0.0: bearer tokens and tool calls cross the network in the clear" in (
        log.read_text()
    )
