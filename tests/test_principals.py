"""State belongs to a principal, not to a connection (issue 11, item 1).

The 2026-07-28 protocol has no sessions: every request of a modern client is a connection
of its own. Activation and artifacts must therefore survive from one request to the next
for the same principal (stdio: the process or ``--session``; HTTP: the bearer token, or
the one local principal on an unauthenticated loopback bind), and stay out of reach of
every other principal. Real gateway processes, the real SDK client in both eras.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ERAS, demo, http_gateway, read_artifact, sdk_client, text, write_config

pytestmark = pytest.mark.anyio

ARTIFACT = re.compile(r"saved as artifact ([A-Za-z0-9_-]+);")
PATTERN = "0123456789abcdefghijklmnopqrstuvwxyz\n"
SIZE = 200_000
EXPECTED = (PATTERN * (SIZE // len(PATTERN) + 1))[:SIZE]  # what the demo's payload tool returns
NOT_ACTIVE = "Call tool_search to activate d__echo first"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, {"d": {**demo("--tools", 2), "deferred": True}}, client={"declarations": "on-demand"})


@contextmanager
def tokens_file(directory: Path, *tokens: str) -> Iterator[Path]:
    path = directory / "tokens"
    path.write_text("# one token per line, each its own principal\n" + "\n".join(tokens) + "\n\n")
    yield path


@contextmanager
def gateway_for(transport: str, config: Path) -> Iterator[str | None]:
    """Over HTTP one gateway serves every client; over stdio each client starts its own."""
    if transport == "stdio":
        yield None
        return
    with http_gateway(config) as (url, _):
        yield url


@asynccontextmanager
async def client_for(
    transport: str, config: Path, mode: str, url: str | None, token: str | None = None
) -> AsyncIterator[Any]:
    """A fresh SDK client: a new connection every time (over HTTP, the same gateway)."""
    if transport == "stdio":
        async with sdk_client(config, mode, "--session", "s1", log_level="warning") as client:
            yield client
    else:
        assert url is not None
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with sdk_client(url, mode, headers=headers) as client:
            yield client


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_activation_and_artifacts_last_from_one_request_to_the_next(
    config: Path, transport: str, mode: str
) -> None:
    with gateway_for(transport, config) as url:
        async with client_for(transport, config, mode, url) as client:
            assert NOT_ACTIVE in text(await client.call_tool("d__echo", {"text": "early"}))
            found = await client.call_tool("tool_search", {"query": "echo", "limit": 1})
            assert "d__echo" in text(found)
            # The next requests (each its own connection on the modern protocol) may run it.
            assert text(await client.call_tool("d__echo", {"text": "direct"})) == "direct"
            via = await client.call_tool("tool_call", {"name": "d__echo", "arguments": {"text": "via"}})
            assert text(via) == "via"
            await client.call_tool("tool_search", {"query": "payload", "limit": 1})
            big = text(await client.call_tool("d__payload", {"bytes": SIZE}))
            artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
            # Read back in later requests, byte for byte.
            assert await read_artifact(client, artifact_id) == EXPECTED
        if transport == "http":
            # A new connection of the same principal (the local one) keeps both.
            async with client_for(transport, config, mode, url) as again:
                assert text(await again.call_tool("d__echo", {"text": "again"})) == "again"
                assert (await read_artifact(again, artifact_id))[:100] == EXPECTED[:100]


@pytest.mark.parametrize("mode", ERAS)
async def test_two_tokens_are_two_principals(tmp_path: Path, config: Path, mode: str) -> None:
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, stderr):
            async with client_for("http", config, mode, url, "token-of-alice") as alice:
                await alice.call_tool("tool_search", {"query": "echo", "limit": 1})
                await alice.call_tool("tool_search", {"query": "payload", "limit": 1})
                assert text(await alice.call_tool("d__echo", {"text": "mine"})) == "mine"
                big = text(await alice.call_tool("d__payload", {"bytes": SIZE}))
                artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
            async with client_for("http", config, mode, url, "token-of-bob") as bob:
                refused = await bob.call_tool("d__echo", {"text": "theirs"})
                assert refused.is_error and NOT_ACTIVE in text(refused)
                theirs = await bob.call_tool("artifact_read", {"id": artifact_id})
                unknown_id = "A" * len(artifact_id)
                unknown = await bob.call_tool("artifact_read", {"id": unknown_id})
                assert theirs.is_error and unknown.is_error
                # Exactly the error of an id that does not exist: nothing tells them apart.
                assert text(theirs).replace(artifact_id, "ID") == text(unknown).replace(unknown_id, "ID")
            async with client_for("http", config, mode, url, "token-of-alice") as alice_again:
                assert text(await alice_again.call_tool("d__echo", {"text": "still"})) == "still"
                assert (await read_artifact(alice_again, artifact_id)) == EXPECTED
        log = stderr.read_text()
        assert "token-of-alice" not in log and "token-of-bob" not in log


async def test_a_principals_activation_survives_a_restart(tmp_path: Path, config: Path) -> None:
    with tokens_file(tmp_path, "restart-token") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            async with client_for("http", config, "auto", url, "restart-token") as client:
                await client.call_tool("tool_search", {"query": "echo", "limit": 1})
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            async with client_for("http", config, "auto", url, "restart-token") as client:
                assert text(await client.call_tool("d__echo", {"text": "remembered"})) == "remembered"
    journals = list((tmp_path / "state" / "activation").iterdir())
    assert len(journals) == 1 and "restart-token" not in journals[0].name


@pytest.mark.parametrize("mode", ERAS)
async def test_a_restart_ends_every_session_and_keeps_the_tokens_state(tmp_path: Path, config: Path, mode: str) -> None:
    """docs/registering.md (HTTP): a gateway restarted under a running agent loses its
    sessions, so an id from before is answered 404 (the handshake-era agent opens a new
    session, as Codex does), while the token's activation and artifacts are there for the
    agent's next request in either era."""
    import httpx2

    from tests.helpers import ACCEPT, INIT

    with tokens_file(tmp_path, "team-token") as tokens:
        headers = {**ACCEPT, "authorization": "Bearer team-token"}
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            async with httpx2.AsyncClient(timeout=30) as http:
                session = (await http.post(url, json=INIT, headers=headers)).headers["mcp-session-id"]
            async with client_for("http", config, mode, url, "team-token") as client:
                await client.call_tool("tool_search", {"query": "payload", "limit": 1})
                big = text(await client.call_tool("d__payload", {"bytes": SIZE}))
                artifact_id = ARTIFACT.search(big).group(1)  # type: ignore[union-attr]
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            async with httpx2.AsyncClient(timeout=30) as http:
                listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                gone = await http.post(url, json=listing, headers={**headers, "mcp-session-id": session})
                assert gone.status_code == 404, (gone.status_code, gone.text[:300])
            async with client_for("http", config, mode, url, "team-token") as client:
                assert (await read_artifact(client, artifact_id)) == EXPECTED
                small = await client.call_tool("d__payload", {"bytes": 10})
                assert not small.is_error and text(small) == EXPECTED[:10]


def test_token_file_with_a_spaced_token_is_refused(tmp_path: Path, config: Path) -> None:
    from tests.helpers import run_cli

    bad = tmp_path / "tokens"
    bad.write_text("good-token\nbad token with spaces\n")
    proc = run_cli("serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file", str(bad), timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"prefixgate: --token-file: {bad} line 2: a token cannot contain spaces; "
        "after it only profiles=NAME,... may follow"
    )


def test_a_token_file_named_by_mistake_is_not_read_without_end(tmp_path: Path, config: Path) -> None:
    """``--token-file /dev/zero`` (or a log file named by mistake) was read whole before
    anything was said: it is refused once past 16 MiB."""
    from tests.helpers import run_cli

    proc = run_cli("serve", "--config", str(config), "--http", "127.0.0.1:0", "--token-file", "/dev/zero", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "prefixgate: --token-file: cannot read /dev/zero: larger than 16 MiB"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le"])
async def test_a_token_file_with_a_byte_order_mark_and_crlf_line_ends_serves_its_first_token(
    tmp_path: Path, config: Path, encoding: str
) -> None:
    """What Windows writes (Notepad, a PowerShell 5 redirect: UTF-16): the byte order mark is no
    part of the first token (kept, it made that token one no client sends, refused 401 with
    nothing said; UTF-16 was not read at all)."""
    import httpx2

    from tests.helpers import ACCEPT, INIT

    tokens = tmp_path / "tokens"
    tokens.write_bytes("\ufefffirst-token\r\nsecond-token\r\n".encode(encoding))
    with http_gateway(config, "--token-file", str(tokens)) as (url, _):
        async with httpx2.AsyncClient(timeout=30) as http:
            for token in ("first-token", "second-token"):
                answer = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": f"Bearer {token}"})
                assert answer.status_code == 200, (token, answer.status_code, answer.text[:300])


@pytest.mark.parametrize("mode", ERAS)
async def test_a_thousand_tokens_cost_one_comparison_a_request(
    tmp_path: Path, config: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request compared its token with every token of the file, on the event loop
    (~175 us a request with 1,000 tokens, growing with the file): now it is looked up by its
    SHA-256 and compared with the one token found. Served alike: the last of 1,000 tokens is
    its own principal, a token not in the file is refused."""
    import hmac

    import httpx2

    from gateway.upstream.http import BearerToken, Front, principal_of_token
    from tests.helpers import ACCEPT, INIT

    values = [f"token-{i:04d}" for i in range(1000)]
    front = Front({}, [BearerToken(v) for v in values])
    compared: list[bytes] = []
    compare = hmac.compare_digest

    def counted(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counted)
    for given, principal in [
        (b"Bearer token-0999", principal_of_token("token-0999")),
        (b"bearer token-0000", principal_of_token("token-0000")),
        (b"Bearer token-1000", None),
        (b"Basic token-0001", None),
        (b"Bearer ", None),
        (b"", None),
    ]:
        compared.clear()
        assert front._principal(given) == principal, given  # noqa: SLF001
        assert len(compared) == 1, (given, len(compared))
    monkeypatch.undo()

    with tokens_file(tmp_path, *values) as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, _):
            async with client_for("http", config, mode, url, "token-0999") as last:
                await last.call_tool("tool_search", {"query": "echo", "limit": 1})
                assert text(await last.call_tool("d__echo", {"text": "mine"})) == "mine"
            async with client_for("http", config, mode, url, "token-0998") as other:
                assert NOT_ACTIVE in text(await other.call_tool("d__echo", {"text": "theirs"}))
            async with httpx2.AsyncClient(timeout=30) as http:
                refused = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": "Bearer token-1000"})
                assert refused.status_code == 401
