"""Metrics and the audit log (issue 29): every outcome of a call counted, and audited, exactly.

Real gateways (stdio and HTTP), real demo servers, the real SDK client in both eras;
``/metrics`` is parsed with ``prometheus_client``'s own parser. One round of calls covers
each outcome: ok, an ``isError`` result, a spilled result, a ``tool_search`` that activates
a tool, and a refusal of each kind the gate gives (unknown, policy, activation, arguments).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import (
    CALLBACKS,
    ERAS,
    PYTHON,
    PatientUser,
    demo,
    http_gateway,
    raw_gateway,
    run_cli,
    schemas_server,
    sdk_client,
    text,
    wait_for,
    write_config,
)

ROOT = Path(__file__).resolve().parent.parent
SECRET_ARGUMENT = "an-argument-nobody-may-log"
TOKEN = "token-nobody-may-log"
VERSION = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def config_for(tmp_path: Path, **telemetry: Any) -> Path:
    return write_config(
        tmp_path,
        {"d": demo("--tools", 1), "x": {**demo("--tools", 1), "deferred": True}},
        policy={"deny": ["d__crash"]},
        spill={"max_visible_bytes": 4096},
        telemetry=telemetry,
    )


CALLS: list[tuple[str, dict[str, Any], str, str]] = [
    # (tool, arguments, outcome, reason)
    ("d__echo", {"text": SECRET_ARGUMENT}, "ok", ""),
    ("d__fail", {}, "error", ""),
    ("d__payload", {"bytes": 20_000}, "ok", ""),
    ("d__crash", {}, "refused", "policy"),
    ("d__echo", {"text": 7}, "refused", "arguments"),
    ("x__echo", {"text": SECRET_ARGUMENT}, "refused", "activation"),
    ("tool_search", {"query": "x__echo", "limit": 1}, "ok", ""),
    ("x__echo", {"text": SECRET_ARGUMENT}, "ok", ""),
    ("nope__" + SECRET_ARGUMENT, {}, "refused", "unknown"),
]
"""One round: each outcome the gate and the servers give, in order (x__echo refused, then activated)."""


async def call_every_outcome(client: Any) -> None:
    for tool, arguments, outcome, _ in CALLS:
        result = await client.call_tool(tool, arguments)
        assert result.is_error is (outcome != "ok"), (tool, result)


def scraped(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def call_counts(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[tuple[str, ...], float]:
    return {
        (labels["tool"], labels["outcome"], labels["reason"], labels["version"], labels["server"]): value
        for (name, pairs), value in samples.items()
        if name == "prefixgate_tool_calls_total" and (labels := dict(pairs))
    }


def expected_counts(mode: str) -> dict[tuple[str, ...], float]:
    counts: dict[tuple[str, ...], float] = {}
    for tool, _, outcome, reason in CALLS:
        name = tool if not tool.startswith("nope__") else "(unknown)"
        server = "" if name in ("tool_search", "(unknown)") else name.split("__")[0]
        key = (name, outcome, reason, VERSION[mode], server)
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_http_metrics_count_every_outcome_exactly(tmp_path: Path, mode: str) -> None:
    config = config_for(tmp_path)
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    with http_gateway(config, "--token-file", str(tokens)) as (url, _log):
        metrics_url = url.removesuffix("/mcp") + "/metrics"
        async with httpx2.AsyncClient() as http:
            assert (await http.get(metrics_url)).status_code == 401  # behind the token, like /mcp
            async with sdk_client(url, mode, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                await call_every_outcome(client)
            answer = await http.get(metrics_url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert SECRET_ARGUMENT not in answer.text and TOKEN not in answer.text
    samples = scraped(answer.text)
    assert call_counts(samples) == expected_counts(mode)
    assert samples[("prefixgate_spills_total", (("server", "d"),))] == 1
    assert samples[("prefixgate_spilled_bytes_total", (("server", "d"),))] > 20_000  # the payload, as JSON
    store = (("operation", "write_record"), ("outcome", "ok"), ("store", "file"))
    assert samples[("prefixgate_store_operations_total", store)] == 1  # the one activation
    assert samples[("prefixgate_artifacts", ())] == 1 and samples[("prefixgate_artifact_bytes", ())] >= 20_000
    assert samples[("prefixgate_tool_searches_total", (("profile", "default"),))] == 1
    assert samples[("prefixgate_tool_activations_total", (("profile", "default"),))] == 1
    assert samples[("prefixgate_tool_call_duration_seconds_count", (("server", "d"),))] == 5
    assert samples[("prefixgate_server_status", (("server", "x"), ("status", "ready")))] == 1
    assert samples[("prefixgate_server_status", (("server", "x"), ("status", "failed")))] == 0
    assert samples[("prefixgate_epochs_total", (("profile", "default"), ("reason", "barrier")))] == 1
    info = [labels for (name, labels), _ in samples.items() if name == "prefixgate_catalog_info"]
    assert len(info) == 1 and dict(info[0])["profile"] == "default" and len(dict(info[0])["fingerprint"]) == 64
    assert samples[("prefixgate_catalog_tools", (("kind", "deferred"), ("profile", "default")))] == 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_stdio_gateway_serves_metrics_and_audits_every_call(tmp_path: Path, mode: str) -> None:
    port = free_port()
    config = config_for(tmp_path, metrics=f"127.0.0.1:{port}", audit=True)
    async with sdk_client(config, mode, "--session", "agent-7") as client:
        await call_every_outcome(client)
        async with httpx2.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert call_counts(scraped(answer.text)) == expected_counts(mode)

    audit = tmp_path / "state" / "audit" / "calls.jsonl"
    assert oct(audit.stat().st_mode & 0o777) == "0o600" and oct(audit.parent.stat().st_mode & 0o777) == "0o700"
    text = audit.read_text()
    assert SECRET_ARGUMENT not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(r["tool"], r["outcome"], r["decision"]) for r in lines] == [
        (
            tool if not tool.startswith("nope__") else "(unknown)",
            outcome,
            reason or "allowed",
        )
        for tool, _, outcome, reason in CALLS
    ]
    assert {r["session"] for r in lines} == {lines[0]["session"]} and len(lines[0]["session"]) == 16
    assert {r["principal"] for r in lines} == {None} and {r["profile"] for r in lines} == {None}
    assert {r["era"] for r in lines} == {VERSION[mode]}
    policy = next(r for r in lines if r["decision"] == "policy")
    assert policy["server"] == "d"
    assert policy["reason"] == "Tool d__crash is denied by policy (deny pattern 'd__crash')."
    assert {r["reason"] for r in lines if r["decision"] in ("arguments", "unknown")} == {None}  # peer text
    spilled = next(r for r in lines if r["tool"] == "d__payload")
    assert spilled["result_bytes"] < 4096 + 1024 and len(spilled["artifacts"]) == 1
    artifacts = list((tmp_path / "state" / "artifacts").rglob(spilled["artifacts"][0] + "*"))
    assert artifacts, "the audited id names the artifact kept"
    assert all(r["ms"] >= 0 and "arguments" not in r for r in lines)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_audit_log_names_the_http_principal_and_arguments_only_when_asked(
    tmp_path: Path, mode: str
) -> None:
    config = config_for(tmp_path, audit=True, audit_arguments=True)
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    with http_gateway(config, "--token-file", str(tokens)) as (url, _log):
        async with sdk_client(url, mode, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            assert not (await client.call_tool("d__echo", {"text": SECRET_ARGUMENT})).is_error
    text = (tmp_path / "state" / "audit" / "calls.jsonl").read_text()
    (line,) = [json.loads(x) for x in text.splitlines()]
    assert line["principal"].startswith("token-") and TOKEN not in text
    assert json.loads(line["arguments"]) == {"text": SECRET_ARGUMENT}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_audited_arguments_mask_every_value_a_credentials_key_holds(tmp_path: Path, mode: str) -> None:
    """A model passes credentials the server's config does not hold (a token argument, headers
    it is asked to send): kept arguments showed them. A key naming one is masked at any level;
    a key that only looks alike (``max_tokens``) is not."""
    anything = {"name": "send", "description": "Send a request.", "inputSchema": {"type": "object"}}
    config = write_config(
        tmp_path, {"s": schemas_server(tmp_path, [anything])}, telemetry={"audit": True, "audit_arguments": True}
    )
    arguments = {
        "url": "https://example.com",
        "api_key": SECRET_ARGUMENT,
        "headers": [{"Authorization": f"Bearer {TOKEN}", "Accept": "text/plain"}],
        "auth": {"client_secret": SECRET_ARGUMENT + "-2", "user": "me"},
        "max_tokens": 5,
    }
    async with sdk_client(config, mode) as client:
        assert json.loads(text(await client.call_tool("s__send", arguments)))["api_key"] == SECRET_ARGUMENT
    await wait_for(lambda: (tmp_path / "state" / "audit" / "calls.jsonl").exists())
    written = (tmp_path / "state" / "audit" / "calls.jsonl").read_text()
    assert SECRET_ARGUMENT not in written and TOKEN not in written, written
    (line,) = [json.loads(x) for x in written.splitlines()]
    assert json.loads(line["arguments"]) == {
        "url": "https://example.com",
        "api_key": "***",
        "headers": [{"Authorization": "***", "Accept": "text/plain"}],
        "auth": "***",
        "max_tokens": 5,
    }


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_burst_of_audited_calls_rotates_the_log_at_its_limit_losing_no_line(tmp_path: Path, mode: str) -> None:
    """150 calls at once reach the writer as one batch or a few, about 65 KB with their
    arguments: a batch went whole into the file, past ``audit_max_bytes`` (40,000) by the
    batch. The file now takes the lines that fit, rotates, and the rest follow: neither file
    outgrows the limit, every call has its one line, whole, in order of the queue."""
    limit = 40_000
    config = config_for(tmp_path, audit=True, audit_arguments=True, audit_max_bytes=limit)
    with http_gateway(config) as (url, _log):
        async with sdk_client(url, mode) as client, anyio.create_task_group() as tasks:
            for n in range(150):
                tasks.start_soon(client.call_tool, "d__echo", {"text": f"call-{n:03d} " + "x" * 150})
    directory = tmp_path / "state" / "audit"
    files = [directory / "calls.jsonl.1", directory / "calls.jsonl"]
    sizes = [len(f.read_bytes()) for f in files]
    assert all(size <= limit for size in sizes) and sum(sizes) > limit, sizes
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    called = sorted(json.loads(line["arguments"])["text"][:8] for line in lines)
    assert called == [f"call-{n:03d}" for n in range(150)]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_whose_server_asks_for_input_is_counted_once_per_client_request(tmp_path: Path, mode: str) -> None:
    """A 2026-07-28 server's ``input_required`` during a handshake-era client's call is the
    gateway's to answer (it asks the client over its back-channel and retries the server):
    each round was counted and audited as a call of its own, ``input_required`` that the client
    was never sent, then the answer, 2 or 3 for the client's one. A 2026-07-28 client is sent
    each ``input_required`` and retries itself: each of its requests counts, as before."""
    modern = {"command": PYTHON, "args": [str(ROOT / "tests" / "modern_server.py")]}
    config = write_config(tmp_path, {"r": modern}, telemetry={"audit": True})
    with http_gateway(config) as (url, _log):
        async with sdk_client(url, mode, **CALLBACKS) as client:
            assert text(await client.call_tool("r__ask", {})) == "accept:{'name': 'Ann'}"
            assert text(await client.call_tool("r__later", {})) == "done later"
        if mode == "legacy":  # (cannot be asked: the call fails, once; given up while asked: cancelled, once)
            async with sdk_client(url, mode) as unasked:
                assert (await unasked.call_tool("r__ask", {})).is_error
            user = PatientUser()
            async with sdk_client(url, mode, elicitation_callback=user) as patient, anyio.create_task_group() as tasks:
                tasks.start_soon(patient.call_tool, "r__ask", {})
                with anyio.fail_after(30):
                    await user.asked.wait()
                tasks.cancel_scope.cancel()
            await wait_for(lambda: user.withdrawn)
        async with httpx2.AsyncClient() as http:
            with anyio.fail_after(30):  # (the cancelled call is recorded as its cancellation ends)
                while True:
                    samples = scraped((await http.get(url.removesuffix("/mcp") + "/metrics")).text)
                    if mode == "auto" or any(key[1] == "cancelled" for key in call_counts(samples)):
                        break
                    await anyio.sleep(0.05)
    version = VERSION[mode]
    if mode == "legacy":
        expected = {("r__ask", "ok"): 1, ("r__later", "ok"): 1, ("r__ask", "error"): 1, ("r__ask", "cancelled"): 1}
    else:
        expected = {("r__ask", "input_required"): 1, ("r__ask", "ok"): 1}
        expected |= {("r__later", "input_required"): 2, ("r__later", "ok"): 1}
    assert call_counts(samples) == {(tool, outcome, "", version, "r"): n for (tool, outcome), n in expected.items()}
    calls = sum(expected.values())
    assert samples[("prefixgate_tool_call_duration_seconds_count", (("server", "r"),))] == calls
    lines = [json.loads(x) for x in (tmp_path / "state" / "audit" / "calls.jsonl").read_text().splitlines()]
    assert len(lines) == calls and {(r["tool"], r["outcome"]) for r in lines} == set(expected)


@pytest.mark.anyio
async def test_a_metrics_listener_refuses_a_foreign_host_or_origin(tmp_path: Path) -> None:
    """The stdio gateway's listener has ``serve --http``'s Host/Origin rule: a DNS-rebinding
    page reads no server or tool name (tests/test_hardening_life.py checks ``serve --http``)."""
    port = free_port()
    config = config_for(tmp_path, metrics=f"127.0.0.1:{port}")
    async with sdk_client(config, "legacy") as client:
        await client.call_tool("d__echo", {"text": "x"})
        async with httpx2.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/metrics"
            for evil, refusal in (
                ({"host": f"evil.example:{port}"}, 421),
                ({"origin": "http://evil.example"}, 403),
                ({"origin": f"HTTP://EVIL.example:{port}"}, 403),
            ):
                refused = await http.get(url, headers=evil)
                assert refused.status_code == refusal and "d__echo" not in refused.text, (evil, refused.text)
            local = await http.get(url, headers={"host": f"localhost:{port}", "origin": f"http://127.0.0.1:{port}"})
            # (a host name in any case, and an origin's scheme and host)
            capitals = await http.get(url, headers={"host": f"LOCALHOST:{port}", "origin": f"HTTP://LocalHost:{port}"})
    assert local.status_code == 200 and "d__echo" in local.text, local.text
    assert capitals.status_code == 200, capitals.text


def test_a_metrics_listener_off_loopback_is_refused_before_anything_starts(tmp_path: Path) -> None:
    config = config_for(tmp_path, metrics="0.0.0.0:9464")
    proc = run_cli("serve", "--config", str(config))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "prefixgate: config error: telemetry.metrics: '0.0.0.0' is not a loopback address: "
        "metrics name servers and tools, and ask for no token"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_the_catalog_lock_refuses_is_counted_and_audited_as_lock(tmp_path: Path, mode: str) -> None:
    """A tool new since the lock (the server now lists one more): held back, its call refused
    by the lock, which the metrics and the audit log name."""
    port = free_port()
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--name", "d")})
    assert run_cli("catalog", "lock", "--config", str(config)).returncode == 0
    config = write_config(
        tmp_path, {"d": demo("--tools", 2, "--name", "d")}, telemetry={"audit": True, "metrics": f"127.0.0.1:{port}"}
    )
    async with sdk_client(config, mode) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        locked = run_cli("catalog", "diff", "--lock", "--json", "--config", str(config))
        (new,) = [p["name"] for p in json.loads(locked.stdout)["pending"]]
        assert new not in listed
        refused = await client.call_tool(new, {})
        assert refused.is_error and "new since the lock" in refused.content[0].text
        async with httpx2.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    counts = call_counts(scraped(answer.text))
    assert counts == {(new, "refused", "lock", VERSION[mode], "d"): 1}
    (line,) = [json.loads(x) for x in (tmp_path / "state" / "audit" / "calls.jsonl").read_text().splitlines()]
    assert (line["tool"], line["decision"], line["outcome"]) == (new, "lock", "refused")
    assert line["reason"].startswith(f"Tool {new!r} is new since the lock")


@pytest.mark.anyio
async def test_an_epoch_a_changed_lock_file_publishes_is_counted_as_lock(tmp_path: Path) -> None:
    """The held-back tool approved (``catalog approve`` while the gateway serves): the epoch
    that publishes it is the lock's, not "other"."""
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--name", "d")})
    assert run_cli("catalog", "lock", "--config", str(config)).returncode == 0
    config = write_config(tmp_path, {"d": demo("--tools", 2, "--name", "d")})
    with http_gateway(config) as (url, log):
        metrics_url = url.removesuffix("/mcp") + "/metrics"
        approved = run_cli("catalog", "approve", "--all", "--yes", "--config", str(config))
        assert approved.returncode == 0, approved.stderr
        key = ("prefixgate_epochs_total", (("profile", "default"), ("reason", "lock")))
        async with httpx2.AsyncClient() as http:

            async def epochs() -> dict[Any, float]:
                return scraped((await http.get(metrics_url)).text)

            await wait_for(lambda: "lock file" in log.read_text() and "new epoch" in log.read_text())
            counted = await epochs()
    assert counted.get(key, 0) >= 1, {k: v for k, v in counted.items() if k[0] == "prefixgate_epochs_total"}
    assert ("prefixgate_epochs_total", (("profile", "default"), ("reason", "other"))) not in counted


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_refused_tool_call_is_audited_without_the_argument_names_the_client_made_up(
    tmp_path: Path, mode: str
) -> None:
    """``tool_call`` with a key it does not take is refused naming the key, for the model; the
    audit line keeps the gate's words without it (a client's made-up names went to the audit)."""
    config = write_config(
        tmp_path, {"d": demo("--tools", 60)}, client={"declarations": "on-demand"}, telemetry={"audit": True}
    )
    async with sdk_client(config, mode) as client:
        result = await client.call_tool("tool_call", {"name": "d__echo", "arguments": {}, SECRET_ARGUMENT: 1})
    assert result.is_error and SECRET_ARGUMENT in result.content[0].text  # the model sees which key
    (line,) = [json.loads(x) for x in (tmp_path / "state" / "audit" / "calls.jsonl").read_text().splitlines()]
    assert (line["tool"], line["decision"], line["outcome"]) == ("tool_call", "invalid", "refused")
    assert line["reason"] == "tool_call: unknown argument(s)."


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_answered_with_a_servers_json_rpc_error_is_counted_and_audited_as_an_error(
    tmp_path: Path, mode: str
) -> None:
    """A server's error of the range the gateway relays as is (``-32042``, URL elicitations to
    complete first) ends the call without a result: it is an error, not a cancelled call."""
    port = free_port()
    classic = {"command": PYTHON, "args": ["-m", "tests.classic_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"c": classic}, telemetry={"audit": True, "metrics": f"127.0.0.1:{port}"})
    async with sdk_client(config, mode) as client:
        if mode == "legacy":
            with pytest.raises(MCPError) as refused:
                await client.call_tool("c__url_pending", {"ids": ["sign-in-1"]})
            assert refused.value.error.code == -32042
        else:  # (the error becomes its URL elicitations, which this client cannot take: an isError)
            assert (await client.call_tool("c__url_pending", {"ids": ["sign-in-1"]})).is_error
        async with httpx2.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert call_counts(scraped(answer.text)) == {("c__url_pending", "error", "", VERSION[mode], "c"): 1}
    (line,) = [json.loads(x) for x in (tmp_path / "state" / "audit" / "calls.jsonl").read_text().splitlines()]
    assert (line["tool"], line["decision"], line["outcome"]) == ("c__url_pending", "allowed", "error")


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_arguments_nested_past_what_json_writes_are_audited_bounded_and_the_call_answered(
    tmp_path: Path, modern: bool
) -> None:
    """The stdio fast path parses arguments of 3,000 levels; the server is not sent them (its
    encoder refuses them: an isError says so). With ``audit_arguments`` their audit line raised
    RecursionError as the call ended: the client got a JSON-RPC error quoting the interpreter
    (code 0), the log a traceback and the audit no line. The line shows 64 levels of them."""
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, telemetry={"audit": True, "audit_arguments": True})
    deep = "[" * 3000 + '"x"' + "]" * 3000  # (written out: json.dumps here would recurse as deep)
    meta = {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}} if modern else {}
    params = json.dumps({"name": "d__echo", "arguments": {"text": "deep", "d": None}, **meta})
    request = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + params.replace("null", deep) + "}"
    stderr = tmp_path / "stderr.log"
    with stderr.open("wb") as errors, raw_gateway(config, errors, {"PREFIXGATE_FAST_PATH": "1"}) as gw:
        if not modern:
            gw.handshake()
        gw.send(request.encode())
        answer = gw.answer(1)
        assert answer["result"]["isError"] is True, answer
        assert "request not sent" in answer["result"]["content"][0]["text"], answer
        gw.request(2, "tools/call", {"name": "d__echo", "arguments": {"text": "next"}, **meta})
        assert gw.answer(2)["result"]["content"][0]["text"] == "next"
        audit = tmp_path / "state" / "audit" / "calls.jsonl"
        deadline = time.monotonic() + 30  # (a hang guard: the lines are written a few times a second)
        while len(audit.read_text().splitlines() if audit.exists() else ()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "Traceback" not in stderr.read_text()
    first, second = [json.loads(x) for x in audit.read_text().splitlines()]
    shown = json.loads(first["arguments"])
    assert shown["text"] == "deep" and json.dumps(shown["d"]) == "[" * 63 + '"..."' + "]" * 63
    assert (first["outcome"], second["outcome"]) == ("error", "ok")


@pytest.mark.anyio
async def test_a_servers_restarts_count_on_across_reloads(tmp_path: Path) -> None:
    """``prefixgate_server_restarts_total`` is a counter: only the gateway's own restart resets
    it. A reload that replaced a server's process (its table changed) began its count at 0
    again, which ``rate()`` reads as a reset; a server removed and added again by reloads
    counts on from its last count as well (no series while it is gone)."""

    def config(**servers: dict[str, Any]) -> Path:
        return write_config(tmp_path, servers)

    def restarts(body: str) -> float | None:
        return scraped(body).get(("prefixgate_server_restarts_total", (("server", "a"),)))

    a, b = demo("--tools", 1, "--name", "a"), demo("--tools", 1, "--name", "b")
    with http_gateway(config(a=a, b=b)) as (url, log):
        metrics_url = url.removesuffix("/mcp") + "/metrics"

        async def reloaded(summary: str) -> str:
            await wait_for(lambda: f"config reloaded (the file changed): {summary}" in log.read_text())
            return (await http.get(metrics_url)).text

        async with httpx2.AsyncClient() as http, sdk_client(url, "auto") as client:
            assert (await client.call_tool("a__crash", {"status": 9})).is_error
            assert text(await client.call_tool("a__echo", {"text": "back"})) == "back"  # (after its restart)
            assert restarts((await http.get(metrics_url)).text) == 1
            config(a=demo("--tools", 2, "--name", "a"), b=b)
            assert restarts(await reloaded("restarted 'a'")) == 1
            config(b=b)
            removed = await reloaded("removed 'a'")
            assert restarts(removed) is None
            # (the epoch without a's tools, named by its cause: it was "other")
            assert scraped(removed)[("prefixgate_epochs_total", (("profile", "default"), ("reason", "reload")))] == 1
            config(a=a, b=b)
            assert restarts(await reloaded("added 'a'")) == 1


@pytest.mark.anyio
async def test_a_scrape_reads_the_running_gateway_on_its_event_loop() -> None:
    """A scrape is rendered in a thread (``serve --http``'s ``/metrics`` in a worker, the metrics
    listener in its own), beside the event loop, which changes what the scrape reads at any step:
    a per-principal server's instances start and stop, a reload replaces the servers' list. Read
    from the thread, the instances' ``OrderedDict`` could change mid-iteration: the scrape failed
    (``OrderedDict mutated during iteration``) or counted a half-changed state. Here the loop
    starts an instance whenever the thread is between two steps of that iteration."""
    from collections import OrderedDict
    from types import SimpleNamespace

    from gateway.engine.instances import Instances
    from gateway.engine.metrics import Metrics

    loop = threading.get_ident()

    class Changing(OrderedDict[object, Any]):
        def values(self) -> Any:
            for value in super().values():
                if threading.get_ident() != loop:  # the loop runs on meanwhile: an instance starts
                    anyio.from_thread.run_sync(self.__setitem__, object(), value)
                yield value

    server = SimpleNamespace(id="s", status="ready", restarts=0, config=SimpleNamespace(instances="per-principal"))
    instances = Instances(events=None)  # type: ignore[arg-type]  # (no instance is started here)
    instance = SimpleNamespace(downstream=server)
    instances._servers["s"] = Changing({"alice": instance, "bob": instance})
    hub = SimpleNamespace(
        downstreams=[server],
        instances=instances,
        router=SimpleNamespace(epoch=None),
        config=SimpleNamespace(profile=None),
        round_trips=[],
        clients=SimpleNamespace(connected=[]),
        store=SimpleNamespace(),
    )
    metrics = Metrics()
    metrics.watch(lambda: [hub], None, None)

    def listener() -> bytes:  # the metrics listener's own thread (not one of anyio's workers)
        found: list[bytes] = []
        thread = threading.Thread(target=lambda: found.append(metrics.text()))
        thread.start()
        thread.join()
        return found[0] if found else b""

    with anyio.fail_after(60):
        for scrape in (metrics.text, listener):
            body = (await anyio.to_thread.run_sync(scrape)).decode()
            assert scraped(body)[("prefixgate_server_instances", (("server", "s"),))] == 2


def test_tool_call_series_stay_bounded_when_tool_names_churn() -> None:
    """A server that renames its tools at every change: each name called once, a series each,
    for as long as the process lives. Past the bound, new names count as ``(other)``, and
    nothing is lost from the total."""
    from gateway.engine.metrics import OTHER_TOOLS, Metrics
    from gateway.engine.telemetry import CallNote

    metrics = Metrics(max_call_series=10)
    for n in range(50):
        metrics.call(None, CallNote(tool=f"s__tool_{n}", server="s"), "ok", 0.001)
    metrics.call(None, CallNote(tool="s__tool_3", server="s"), "ok", 0.001)  # counted before: its own series
    samples = {
        s.labels["tool"]: s.value
        for family in text_string_to_metric_families(metrics.text().decode())
        if family.name == "prefixgate_tool_calls"
        for s in family.samples
        if s.name == "prefixgate_tool_calls_total"
    }
    assert len(samples) == 11
    assert samples[OTHER_TOOLS] == 40
    assert samples["s__tool_3"] == 2
    assert sum(samples.values()) == 51


_FULL_DISK = """
import json, os, resource, signal, sys
from pathlib import Path
from gateway.state.journal import append_rotating

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
directory = Path(sys.argv[1])
line = lambda n: json.dumps({"call": n, "pad": "x" * 200}).encode() + b"\\n"
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
failed = []
for n in range(8):
    try:
        append_rotating(directory, "calls.jsonl", "audit log", line(n) + line(n + 100), 1 << 20)
    except OSError:
        failed.append(n)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
append_rotating(directory, "calls.jsonl", "audit log", line(999), 1 << 20)
print(json.dumps(failed))
"""


def test_an_audit_append_cut_short_by_a_full_disk_leaves_no_torn_line(tmp_path: Path) -> None:
    """A write cut short (the disk full) left half a line, and the next append continued it:
    a line that is not JSON, and lines counted lost that were written. A batch is now written
    whole or not at all."""
    import subprocess

    from tests.helpers import PYTHON

    proc = subprocess.run(
        [PYTHON, "-c", _FULL_DISK, str(tmp_path / "audit")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    failed = json.loads(proc.stdout)
    assert failed and failed[0] > 0, failed  # some batches went in whole before the limit
    data = (tmp_path / "audit" / "calls.jsonl").read_bytes()
    assert data.endswith(b"\n")
    calls = [json.loads(line)["call"] for line in data.splitlines()]
    kept = [n for n in range(8) if n not in failed]
    assert calls == [c for n in kept for c in (n, n + 100)] + [999]



_SHARED_AUDIT = """
import json, sys
from pathlib import Path
from gateway.state.journal import append_rotating

failed = []
for n in range(3000):
    line = json.dumps({"writer": sys.argv[2], "call": n, "pad": "x" * 40}).encode() + b"\\n"
    try:
        append_rotating(Path(sys.argv[1]), "calls.jsonl", "audit log", line, 2000)
    except OSError as exc:
        failed.append(str(exc))
print(json.dumps(failed))
"""


def test_two_gateways_rotating_one_audit_log_lose_no_line_to_each_other(tmp_path: Path) -> None:
    """Two gateways sharing a ``state_dir`` (two agents on one machine) append to one audit log.
    Each checked the size, then renamed the file to ``.1``: when both saw it full, the second's
    rename found no file (its lines were lost, 'No such file or directory'), or renamed the
    other's fresh file over ``.1`` (the lines ``.1`` held were lost). A rotation and its append
    are now one step under a lock on the directory."""
    import subprocess

    from tests.helpers import PYTHON

    directory = tmp_path / "audit"
    writers = [
        subprocess.Popen([PYTHON, "-c", _SHARED_AUDIT, str(directory), name], stdout=subprocess.PIPE, text=True)
        for name in ("a", "b", "c")
    ]
    outputs = [w.communicate(timeout=120)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0]
    assert [json.loads(out) for out in outputs] == [[], [], []]
    for name in ("calls.jsonl", "calls.jsonl.1"):  # each whole lines, within twice the limit
        data = (directory / name).read_bytes()
        assert data.endswith(b"\n") and len(data) <= 2000
        assert all(json.loads(line)["pad"] for line in data.splitlines())


def test_a_full_audit_queue_is_logged_once_per_run_of_losses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A writer that does not keep up (a slow or hung disk) fills the queue: its lost lines were
    counted but never logged (docs/telemetry.md: logged once per run of failures), so a stdio
    gateway without a metrics listener lost calls from its audit without a word."""
    from gateway.state.audit import MAX_QUEUED, AuditLog

    audit = AuditLog(tmp_path / "state", 1 << 30)
    with caplog.at_level(logging.INFO, logger="prefixgate.audit"):
        for n in range(MAX_QUEUED + 3):
            audit.record({"call": n})
        audit.flush()  # (the writer catches up)
        audit.record({"call": "after"})
        audit.flush()
    said = [r.getMessage() for r in caplog.records if r.name == "prefixgate.audit"]
    assert said == [
        "audit log: 10000 lines wait to be written (the file is not keeping up); calls go unaudited until it does",
        "audit log: queueing again (3 lines lost while full)",
    ], said
    assert audit.dropped == 3
    lines = (tmp_path / "state" / "audit" / "calls.jsonl").read_text().splitlines()
    assert len(lines) == MAX_QUEUED + 1 and json.loads(lines[-1]) == {"call": "after"}
