"""Traces (issue 29): a client's trace goes on through the gateway into the server's request.

A real OTLP/HTTP receiver on loopback takes the gateway's spans (protobuf, decoded with
``opentelemetry-proto``); a real server shows the ``_meta`` it was sent. The client's
``traceparent`` (SEP-414, in ``params._meta``) parents the gateway's server span, the gate's
span is its child, the downstream request's client span the gate's, and the server is sent
that client span's context. Both eras, stdio and HTTP, the real SDK client.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.common import loopback_server
from gateway import spanexport, tracing
from tests.helpers import ERAS, PYTHON, demo, http_gateway, raw_gateway, sdk_client, write_config

ROOT = Path(__file__).resolve().parent.parent
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver: every span it was sent (``handler`` serves it)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        self.url = ""
        self.refusing = False
        self.refused: set[str] = set()
        """The traces of the spans refused while ``refusing``."""
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers["content-length"]))
                if receiver.refusing:  # (a collector down behind its proxy)
                    refused = ExportTraceServiceRequest()
                    refused.ParseFromString(body)
                    for resource in refused.resource_spans:
                        for scope in resource.scope_spans:
                            receiver.refused |= {span.trace_id.hex() for span in scope.spans}
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.paths.append(self.path)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans += list(scope.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.handler = Handler

    def of_trace(self, trace_id: str) -> dict[str, Any]:
        """The spans of one trace, by name."""
        return {s.name: s for s in self.spans if s.trace_id.hex() == trace_id}


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    with loopback_server(found.handler) as found.url:
        yield found


def traced_env(url: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "gw-under-test"}


def config_for(tmp_path: Path) -> Path:
    meta = {"command": PYTHON, "args": ["-m", "tests.meta_server"], "cwd": str(ROOT)}
    return write_config(tmp_path, {"m": meta, "d": demo("--tools", 1)})


def check_the_chain(spans: dict[str, Any], seen: dict[str, Any]) -> None:
    server = spans["tools/call m__meta"]
    gate = spans["gate m__meta"]
    send = spans["MCP send tools/call meta"]
    assert server.parent_span_id.hex() == CLIENT_SPAN  # the client's trace continues here
    assert gate.parent_span_id == server.span_id and send.parent_span_id == gate.span_id
    attributes = {a.key: a.value.string_value for a in gate.attributes}
    assert attributes["prefixgate.decision"] == "allowed" and attributes["prefixgate.outcome"] == "ok"
    assert attributes["gen_ai.tool.name"] == "m__meta" and attributes["prefixgate.server"] == "m"
    # ... and into the server: its request carries the gateway's client span as its parent.
    assert seen["traceparent"] == f"00-{TRACE_ID}-{send.span_id.hex()}-01"


def wait_for(found: Receiver, names: set[str], timeout: float = 15) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = found.of_trace(TRACE_ID)
        if names <= set(spans):
            return spans
        time.sleep(0.05)
    raise AssertionError(f"spans received: {sorted(found.of_trace(TRACE_ID))}, paths {found.paths}")


CHAIN = {"tools/call m__meta", "gate m__meta", "MCP send tools/call meta"}
TRACEPARENT = {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_stdio_clients_trace_continues_through_the_gateway_into_the_server(tmp_path: Path, mode: str) -> None:
    with receiver() as found:
        async with sdk_client(config_for(tmp_path), mode, env=traced_env(found.url)) as client:
            result = await client.call_tool("m__meta", {}, meta=TRACEPARENT)
            assert not result.is_error
            seen = json.loads(result.content[0].text)
            # A malformed traceparent is a client's mistake, not the call's: the call is
            # answered, and a trace of the gateway's own reaches the server instead.
            bad = await client.call_tool("m__meta", {}, meta={"traceparent": "00-garbage-\u00e9-zz"})
            assert not bad.is_error, bad
            fresh = json.loads(bad.content[0].text)["traceparent"]
        check_the_chain(wait_for(found, CHAIN), seen)
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", fresh) and TRACE_ID not in fresh, fresh
    assert set(found.paths) == {"/v1/traces"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_http_clients_trace_continues_through_the_gateway_into_the_server(tmp_path: Path, mode: str) -> None:
    with receiver() as found, http_gateway(config_for(tmp_path), env=traced_env(found.url)) as (url, _log):
        async with sdk_client(url, mode) as client:
            result = await client.call_tool("m__meta", {}, meta=TRACEPARENT)
            seen = json.loads(result.content[0].text)
            await client.list_tools()
        spans = wait_for(found, CHAIN)
        check_the_chain(spans, seen)


@pytest.mark.anyio
async def test_without_an_endpoint_no_span_is_made_and_the_traceparent_passes_untouched(tmp_path: Path) -> None:
    env = {k: "" for k in os.environ if k.startswith("OTEL_")}
    async with sdk_client(config_for(tmp_path), "auto", env=env) as client:
        result = await client.call_tool("m__meta", {}, meta=TRACEPARENT)
    assert json.loads(result.content[0].text)["traceparent"] == TRACEPARENT["traceparent"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_name_outside_the_catalog_never_reaches_a_span(tmp_path: Path, mode: str) -> None:
    """A tool or prompt name the client made up would name the SDK's server span and its
    ``gen_ai`` attribute: it is recorded as ``(unknown)``, as metrics and the audit log record it;
    catalog names keep theirs. Nor is it in a span's status, which the SDK copies from the error
    (it was: "Unknown prompt 'made_up...'")."""
    meta = {"command": PYTHON, "args": ["-m", "tests.meta_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"m": meta, "d": demo("--tools", 1, "--rich")})
    made_up = f"made_up_{os.urandom(4).hex()}"
    with receiver() as found, http_gateway(config, env=traced_env(found.url)) as (url, _log):
        async with sdk_client(url, mode) as client:
            refused = await client.call_tool(made_up, {}, meta=TRACEPARENT)
            assert refused.is_error
            with pytest.raises(MCPError):
                await client.get_prompt(made_up + "_prompt", meta=TRACEPARENT)
            (greet,) = [p.name for p in (await client.list_prompts()).prompts if p.name.endswith("greet")]
            await client.get_prompt(greet, {"who": "x"}, meta=TRACEPARENT)
            await client.call_tool("m__meta", {}, meta=TRACEPARENT)
        spans = wait_for(found, {*CHAIN, "tools/call (unknown)", "prompts/get (unknown)", f"prompts/get {greet}"})
    recorded = [(s.name, {a.key: a.value.string_value for a in s.attributes}, s.status.message) for s in found.spans]
    assert not [each for each in recorded if made_up in repr(each)], recorded
    unknown = {a.key: a.value.string_value for a in spans["tools/call (unknown)"].attributes}
    assert unknown["gen_ai.tool.name"] == "(unknown)" and unknown["mcp.method.name"] == "tools/call"
    prompt = {a.key: a.value.string_value for a in spans["prompts/get (unknown)"].attributes}
    assert prompt["gen_ai.prompt.name"] == "(unknown)"
    known = {a.key: a.value.string_value for a in spans[f"prompts/get {greet}"].attributes}
    assert known["gen_ai.prompt.name"] == greet


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_a_method_or_a_name_a_client_made_up_never_names_a_span(tmp_path: Path, modern: bool) -> None:
    """The SDK names a span after the method a client sent and after any ``params.name``: a
    made-up method (answered -32601) put the client's text in the span's name and its
    ``mcp.method.name``, a ``name`` added to ``resources/read`` or ``completion/complete`` in
    the name of its span, and of the downstream request's span it was passed on in. Such a
    method is ``(unknown)``; only ``tools/call`` and ``prompts/get`` spans name their target."""
    made_up = f"made_up_{os.urandom(4).hex()}"
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--rich")})
    meta = {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}} if modern else {}
    requests = [
        (f"{made_up}/method", {"name": made_up}),
        ("resources/read", {"uri": "demo://d/readme", "name": made_up}),
        (
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "d__greet"},
                "argument": {"name": "who", "value": "a"},
                "name": made_up,
            },
        ),
    ]
    with receiver() as found, raw_gateway(config, None, traced_env(found.url)) as gw:
        if not modern:
            gw.handshake()
        for n, (method, params) in enumerate(requests, 1):
            gw.request(n, method, {**params, **meta})
            gw.answer(n)
        deadline = time.monotonic() + 30  # (a hang guard: spans are exported every 50 ms)
        served = {}
        while len(served) < len(requests) and time.monotonic() < deadline:
            time.sleep(0.05)
            served = {
                a.value.string_value: s
                for s in list(found.spans)
                if s.kind == Span.SPAN_KIND_SERVER
                for a in s.attributes
                if a.key == "jsonrpc.request.id" and a.value.string_value in ("1", "2", "3")
            }
    recorded = [(s.name, [(a.key, a.value) for a in s.attributes], s.status) for s in found.spans]
    assert not [each for each in recorded if made_up in repr(each)], recorded
    assert [served[str(n)].name for n in (1, 2, 3)] == ["(unknown)", "resources/read", "completion/complete"]
    method = {a.key: a.value.string_value for a in served["1"].attributes}["mcp.method.name"]
    assert method == "(unknown)"
    assert set(spanexport.NAMED_BY) == set(tracing.NAMED_BY)  # (one list, written twice: no import cycle)


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_a_long_request_id_is_bounded_in_its_span(tmp_path: Path, modern: bool) -> None:
    """The SDK records a request's id as ``jsonrpc.request.id`` on its server span: a client's
    100,000-character string id went whole into each span and the trace backend. Span
    attribute values are kept to ``MAX_ATTRIBUTE_LENGTH`` characters (the id's start kept)."""
    long_id = "id-" + "x" * 100_000
    config = write_config(tmp_path, {"d": demo("--tools", 1)})
    meta = {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}} if modern else {}
    with receiver() as found, raw_gateway(config, None, traced_env(found.url)) as gw:
        if not modern:
            gw.handshake()
        gw.request(long_id, "tools/list", meta)
        assert gw.answer(long_id)["result"]["tools"]
        deadline = time.monotonic() + 30  # (a hang guard: spans are exported every 50 ms)
        ids: list[str] = []
        while not ids and time.monotonic() < deadline:
            time.sleep(0.05)
            ids = [
                a.value.string_value
                for s in list(found.spans)
                for a in s.attributes
                if a.key == "jsonrpc.request.id" and a.value.string_value.startswith("id-")
            ]
    assert ids and all(i == long_id[: tracing.MAX_ATTRIBUTE_LENGTH] for i in ids), [len(i) for i in ids]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_uri_a_server_refuses_is_not_in_a_span_the_errors_code_is(tmp_path: Path, mode: str) -> None:
    """A server's error may quote what it refused ("Resource not found: demo://..."); the SDK
    describes an error status by that message, on the downstream request's client span and on
    the client request's server span the error is relayed from. The status says the code
    instead; the client still gets the server's message."""
    config = write_config(tmp_path, {"d": demo("--tools", 1, "--rich")})
    refused = f"demo://d/private_{os.urandom(4).hex()}"
    with receiver() as found, http_gateway(config, env=traced_env(found.url)) as (url, _log):
        async with sdk_client(url, mode) as client:
            with pytest.raises(MCPError) as error:
                await client.read_resource(refused, meta=TRACEPARENT)
            assert refused in error.value.error.message
        spans = wait_for(found, {"resources/read", "MCP send resources/read"})
    recorded = [(s.name, [(a.key, a.value) for a in s.attributes], s.status, list(s.events)) for s in found.spans]
    assert not [each for each in recorded if refused in repr(each)], recorded
    # The server's code on its request's span (the handshake's -32002, which the gateway speaks
    # to it), the client's on the client's (-32602 for a 2026-07-28 client, which retired -32002).
    for name, code in (("resources/read", error.value.error.code), ("MCP send resources/read", -32002)):
        assert spans[name].status.code == spans[name].status.STATUS_CODE_ERROR
        assert spans[name].status.message == str(code), (name, spans[name].status)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_servers_error_answer_leaves_no_message_or_traceback_on_the_gate_span(
    tmp_path: Path, mode: str
) -> None:
    """A call ended by a server's JSON-RPC error (``-32042`` here, relayed to a handshake-era
    client, made an isError for a 2026-07-28 one) raised through the gate's span, which recorded
    it as an event: the server's message and a Python traceback, in the team's trace backend.
    The gate span names the error by its code, as the SDK's spans do."""
    classic = {"command": PYTHON, "args": ["-m", "tests.classic_server"], "cwd": str(ROOT)}
    config = write_config(tmp_path, {"c": classic})
    with receiver() as found, http_gateway(config, env=traced_env(found.url)) as (url, _log):
        async with sdk_client(url, mode) as client:
            with contextlib.suppress(MCPError):  # (legacy: the error itself; 2026-07-28: an isError)
                await client.call_tool("c__url_pending", {"ids": ["sign-in-1"]}, meta=TRACEPARENT)
        spans = wait_for(found, {"gate c__url_pending", "tools/call c__url_pending"})
    gate = spans["gate c__url_pending"]
    recorded = [(s.name, list(s.attributes), s.status, list(s.events)) for s in found.spans]
    assert not [each for each in recorded if "URL elicitation required" in repr(each)], recorded
    assert not list(gate.events), gate.events
    attributes = {a.key: a.value.string_value for a in gate.attributes}
    assert (attributes["prefixgate.outcome"], attributes["error.type"]) == ("error", "-32042"), attributes
    assert gate.status.code == gate.status.STATUS_CODE_ERROR and not gate.status.message


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_endpoint_that_refuses_spans_is_logged_once_until_it_takes_them(tmp_path: Path, mode: str) -> None:
    """A collector down (503 from its proxy): the exporter logged each try of each batch and
    each batch given up, four lines every few seconds for as long as it was down. Now the first
    failure and one line of the gateway's, then nothing until spans are exported again; the
    calls are answered throughout."""
    errlog = tmp_path / "stderr.log"
    with receiver() as found:
        found.refusing = True
        env = {**traced_env(found.url), "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}  # (a batch given up within a second)
        async with sdk_client(config_for(tmp_path), mode, env=env, errlog=errlog) as client:
            for _ in range(3):  # each call's spans a batch of their own: the one before was tried
                trace_id = os.urandom(16).hex()
                traced = {"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}
                assert not (await client.call_tool("m__meta", {}, meta=traced)).is_error
                with anyio.fail_after(30):
                    while trace_id not in found.refused:
                        await anyio.sleep(0.05)

            def said() -> list[str]:
                lines = errlog.read_text().splitlines()
                return [line for line in lines if "export" in line and "tracing: spans go to" not in line]

            with anyio.fail_after(30):  # (the two batches before the last are given up: logged by now, or soon)
                while len(said()) < 2:
                    await anyio.sleep(0.05)
            failing = said()
            assert len(failing) == 2 and "tracing: spans not exported" in failing[1], failing
            found.refusing = False
            assert not (await client.call_tool("m__meta", {}, meta=TRACEPARENT)).is_error
            with anyio.fail_after(30):
                while "spans are exported again" not in errlog.read_text():
                    await anyio.sleep(0.05)
    assert wait_for(found, CHAIN)


@pytest.mark.anyio
async def test_the_warm_start_records_own_requests_make_no_server_span(tmp_path: Path) -> None:
    """After each published epoch the gateway captures its own answers for the warm-start record
    by running an opening and the lists, once per protocol version, through its real server:
    those requests are its own, not a client's, and a trace backend showed ~25 of them after
    every catalog change. Only the client's requests have server spans."""
    with receiver() as found:
        with http_gateway(config_for(tmp_path), env=traced_env(found.url)) as (url, log):
            with anyio.fail_after(60):
                while "warm-start record written" not in log.read_text():
                    await anyio.sleep(0.05)
            async with sdk_client(url, "auto") as client:
                await client.call_tool("m__meta", {}, meta=TRACEPARENT)
        # (the gateway has stopped: everything it batched is exported)
        served = [s.name for s in found.spans if s.kind == Span.SPAN_KIND_SERVER]
    assert "warm-start record written: fingerprint" in log.read_text()
    assert "tools/call m__meta" in served, served
    assert not {"prompts/list", "resources/list", "resources/templates/list"} & set(served), served
    assert len([n for n in served if n in ("initialize", "server/discover")]) <= 1, served
