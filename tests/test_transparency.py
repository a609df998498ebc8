"""Issue 24: nothing works worse through prefixgate than it does directly.

A matrix with real processes: server styles x client eras (``legacy``, ``auto``) x the
gateway's upstream transport (``serve`` over stdio, over streamable HTTP) x the servers'
transport (stdio, streamable HTTP). In each cell the same operations run through the
gateway and directly (the same client era talking to the same server over the same
transport): ``tools/list``, a plain call, a call that elicits (form, and URL mode where the
server has it), one that samples, one that lists roots, progress, cancellation and a log
message. Outcomes are compared normalised ("ok:<text>", "error", the tool names, progress
seen in order, the log line heard in each of several calls, whether the session still works
after a cancellation and, for ``classic``, whether the server saw it), never timings.

Server styles, all behind one gateway per cell:

- ``classic``: tests/classic_server.py, dual-era, asks for input over the back-channel only;
- ``demo``: the bundled demo server, dual-era, asks with ``input_required`` on 2026-07-28;
- ``everything``: the reference server-everything (npm), handshake only;
- ``time``: mcp-server-time (PyPI; dual-era on this SDK), stdio only;
- ``modern``: tests/modern_server.py, 2026-07-28 only (refuses the handshake).

A cell either equals direct or is listed in ``KNOWN`` with its reason; a listed cell must
really be what its entry says (so the table cannot go stale): ``UNAVAILABLE`` (the server
cannot do it: it fails, or is absent, directly and through the gateway alike) or ``BETTER``
(it fails directly and works through the gateway). Nothing is listed as working worse.

With a 2026-07-28 (``auto``) client, "directly" is the era the SDK client settles with that
server (2026-07-28 with a dual-era server, the handshake with server-everything); through the
gateway it is always 2026-07-28, and the gateway picks the server's era itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from bench.common import url_process
from tests.conformance.runner import node_binary
from tests.helpers import (
    ERAS,
    PYTHON,
    PatientUser,
    demo,
    free_port,
    http_gateway,
    sdk_client,
    text,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

HERE = Path(__file__).resolve().parent
CLASSIC = str(HERE / "classic_server.py")
MODERN = str(HERE / "modern_server.py")
TRANSPORTS = ("stdio", "http")
OPERATIONS = (
    "list",
    "call",
    "quoted",
    "elicit",
    "elicit_url",
    "sample",
    "sample_tools",
    "roots",
    "progress",
    "log",
    "cancel",
)
LOG_ROUNDS = 10
"""Calls per log cell (a log lost now and then must not pass by luck)."""
OP_TIMEOUT = 20.0
"""Seconds one operation may take before it counts as hung ("timeout")."""

# --- what each server style is asked to do -------------------------------------------------

Call = tuple[str, dict[str, Any]]
"""A tool and its arguments."""

STYLES: dict[str, dict[str, Call]] = {
    "classic": {
        "call": ("echo", {"text": "hi"}),
        # a number given as a string, as models do: pydantic (the SDK's MCPServer) reads it
        "quoted": ("progress", {"steps": "2"}),
        "elicit": ("elicit", {}),
        "elicit_url": ("elicit_url", {}),
        "sample": ("sample", {}),
        "sample_tools": ("sample_tools", {}),
        "roots": ("roots", {}),
        "progress": ("progress", {"steps": 3}),
        "log": ("log", {}),
        "cancel": ("sleep", {"seconds": 60}),
    },
    "demo": {
        "call": ("echo", {"text": "hi"}),
        "quoted": ("slow", {"seconds": "0.01", "steps": "1"}),
        "elicit": ("ask", {}),
        "sample": ("sample", {}),
        "roots": ("roots", {}),
        "progress": ("slow", {"seconds": 0.3, "steps": 3}),
        "log": ("log", {"level": "info", "text": "demo log line"}),
        "cancel": ("slow", {"seconds": 60, "steps": 60}),
    },
    "everything": {
        "call": ("echo", {"message": "hi"}),
        "quoted": ("get-sum", {"a": "1", "b": "2"}),
        "elicit": ("trigger-elicitation-request", {}),
        "elicit_url": ("trigger-url-elicitation", {"url": "https://example.com/login", "elicitationId": "login-1"}),
        "sample": ("trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 20}),
        "roots": ("get-roots-list", {}),
        "progress": ("trigger-long-running-operation", {"duration": 0.3, "steps": 3}),
        # starts simulated logging (its first line at once); called again to stop it
        "log": ("toggle-simulated-logging", {}),
        "cancel": ("trigger-long-running-operation", {"duration": 60, "steps": 60}),
    },
    "time": {
        "call": (
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
    },
    "modern": {
        "call": ("echo", {"text": "hi"}),
        "elicit": ("ask", {}),
        "sample": ("sample", {}),
        "sample_tools": ("sample_tools", {}),
        "roots": ("roots", {}),
        "progress": ("slow", {}),
        "log": ("log", {}),
    },
}

# --- the known limits --------------------------------------------------------------------

UNAVAILABLE = "unavailable"
"""The server cannot do it at all: it fails (or is absent) directly and through the gateway."""
BETTER = "better"
"""It fails directly and works through the gateway (the gateway speaks the era the server needs)."""


@dataclass(frozen=True)
class Known:
    kind: str
    """UNAVAILABLE or BETTER: what the cell must be (checked, so an entry cannot go stale)."""
    reason: str


BACK_CHANNEL = (
    "the server asks for input only over the back-channel during the call, which 2026-07-28 does "
    "not have: directly the call fails (no back-channel for server-initiated requests); the "
    "gateway reaches the server with the handshake and relays its request to the client as "
    "input_required"
)
KNOWN: dict[tuple[str, str, str], Known] = {
    # classic on 2026-07-28: the back-channel the server relies on exists only behind the gateway
    **{
        ("classic", op, "auto"): Known(BETTER, BACK_CHANNEL)
        for op in ("elicit", "elicit_url", "sample", "sample_tools", "roots")
    },
    # what a server does not have at all
    ("demo", "elicit_url", "*"): Known(UNAVAILABLE, "the demo server has no URL-mode elicitation"),
    **{
        (style, "sample_tools", "*"): Known(UNAVAILABLE, f"the {style} server does not sample with tools")
        for style in ("demo", "everything")
    },
    **{
        ("time", op, "*"): Known(UNAVAILABLE, "mcp-server-time has two plain tools and nothing else")
        for op in ("elicit", "elicit_url", "sample", "sample_tools", "roots", "progress", "log", "cancel")
    },
    ("everything", "quoted", "*"): Known(
        BETTER,
        "server-everything validates with zod, which refuses the string '1' for a number; the gateway "
        "reads a quoted scalar as the schema's type before it forwards the call (as pydantic's lax mode does)",
    ),
    ("modern", "quoted", "*"): Known(UNAVAILABLE, "the modern fixture has no tool with a number argument"),
    ("modern", "elicit_url", "*"): Known(UNAVAILABLE, "the modern fixture has no URL-mode elicitation"),
    ("modern", "cancel", "*"): Known(UNAVAILABLE, "the modern fixture has no long-running tool to cancel"),
    # the modern-only fixture, unusable directly by the SDK client in either era
    ("modern", "*", "legacy"): Known(
        BETTER,
        "the server refuses the initialize handshake, so a handshake-era client cannot connect to it; "
        "the gateway reaches it with server/discover (2026-07-28) and serves it in the client's era",
    ),
    ("modern", "*", "auto"): Known(
        BETTER,
        "the fixture lists two invalid tools on purpose (bad_schema, bad_header): the SDK client "
        "rejects the whole tools/list, and with it every call (it checks a call against the "
        "listing); the gateway quarantines the two and serves the rest",
    ),
}
"""(style, operation or "*", era or "*") -> what the cell is instead of equal to direct, and why."""


def known(style: str, op: str, era: str) -> Known | None:
    """The most specific entry for a cell: its operation before "*", then its era before "*"."""
    for key in ((style, op, era), (style, op, "*"), (style, "*", era), (style, "*", "*")):
        if key in KNOWN:
            return KNOWN[key]
    return None


# --- the client's side -------------------------------------------------------------------


async def elicitation(context: Any, params: Any) -> types.ElicitResult:
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="accept")
    return types.ElicitResult(action="accept", content={"name": "Ann"})


async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
    if params.tools:  # the model asks for the first tool (SEP-1577: the client declared sampling.tools)
        use = types.ToolUseContent(name=params.tools[0].name, id="u1", input={"city": "Paris"})
        return types.CreateMessageResultWithTools(role="assistant", content=[use], model="m1", stop_reason="toolUse")
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="hi"), model="m1")


async def list_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root.model_validate({"uri": "file:///work/project", "name": "project"})])


@dataclass
class Probe:
    """A connected client, what it has heard, and how a tool is named on it."""

    client: Any
    logs: list[types.LoggingMessageNotificationParams]
    prefix: Callable[[str], str]
    """The style's tool name as this client calls it (``style__tool`` through the gateway)."""


def client_options(logs: list[types.LoggingMessageNotificationParams]) -> dict[str, Any]:
    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    # log_level: the 2026-07-28 opt-in on every request (no effect on a handshake connection)
    return {
        "elicitation_callback": elicitation,
        "sampling_callback": sampling,
        "sampling_capabilities": types.SamplingCapability(tools=types.SamplingToolsCapability()),
        "list_roots_callback": list_roots,
        "logging_callback": on_log,
        "log_level": "debug",
    }


async def prepare(client: Any) -> None:
    """A handshake connection hears logs at the level it sets (2026-07-28: per request), where
    the server has ``logging/setLevel`` (a server without it still sends its logs)."""
    if client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        with contextlib.suppress(MCPError):
            await client.set_logging_level("debug")


# --- outcomes -----------------------------------------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def normal(value: str) -> str:
    """Volatile parts out: session ids, today's date."""
    return DATE.sub("<date>", UUID.sub("<uuid>", value))


async def outcome(call: Awaitable[Any]) -> str:
    """A call's normalised outcome: ``ok:<text>``, ``error`` or ``timeout``."""
    try:
        with anyio.fail_after(OP_TIMEOUT):
            result = await call
    except TimeoutError:
        return "timeout"
    except Exception:  # noqa: BLE001 - a JSON-RPC error or a broken connection: the call failed
        return "error"
    if getattr(result, "is_error", False):
        return "error"
    return "ok:" + normal(text(result))


async def settle(predicate: Callable[[], bool], seconds: float = 2.0) -> None:
    """Wait a moment for something that may still be on its way (and not longer)."""
    with anyio.move_on_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)


async def run_op(probe: Probe, style: str, op: str, tag: str) -> str:
    spec = STYLES[style].get(op)
    client, name = probe.client, probe.prefix
    if op == "list":
        try:
            with anyio.fail_after(OP_TIMEOUT):
                listed = await client.list_tools()
        except Exception:  # noqa: BLE001
            return "error"
        shown = [mine for tool in listed.tools if (mine := unprefix(probe, tool.name)) is not None]
        return "tools:" + ",".join(sorted(shown))
    if spec is None:
        return "absent"
    tool, args = spec
    if op == "progress":
        seen: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            seen.append(value)

        done = await outcome(client.call_tool(name(tool), args, progress_callback=on_progress))
        await settle(lambda: bool(seen))
        return f"{done};{progressed(seen)}"
    if op == "log":
        # Several rounds: a log that only sometimes gets through shows as "varies".
        rounds = [await log_round(probe, style, name(tool), args) for _ in range(LOG_ROUNDS)]
        if len(set(rounds)) == 1:
            return rounds[0]
        return "varies: " + " / ".join(f"{rounds.count(r)}x {r}" for r in sorted(set(rounds)))
    if op == "cancel":
        return await cancel(probe, style, tool, {**args, **({"tag": tag} if style == "classic" else {})}, tag)
    return await outcome(client.call_tool(name(tool), args))


def progressed(seen: list[float]) -> str:
    """Progress is a level, not a log: what counts is that it arrives, in order. (The gateway
    forwards them in order, gateway/downstream/link.py ``ProgressInOrder``, but against a
    client too slow for 64 of them it may skip steps; the server's own last
    report may come after the result, which a client then drops.)"""
    if not seen:
        return "no progress"
    if any(later <= earlier for earlier, later in zip(seen, seen[1:], strict=False)):
        return f"progress out of order {seen}"
    return "progress seen"


async def log_round(probe: Probe, style: str, tool: str, args: dict[str, Any]) -> str:
    """Call a tool that logs; the outcome and the first line heard (within a second)."""
    probe.logs.clear()
    # Through the gateway one client hears every server: only this style's lines count (the
    # gateway names a line's server in its logger, "<server id>" or "<server id>/<logger>").
    server = probe.prefix("").removesuffix("__")

    def mine() -> list[types.LoggingMessageNotificationParams]:
        return [m for m in probe.logs if not server or (m.logger or "").split("/")[0] == server]

    done = await outcome(probe.client.call_tool(tool, args))
    await settle(lambda: bool(mine()), 1.0)
    heard = [f"{m.level}:{normal(str(m.data))}" for m in mine()]
    if style == "everything":
        await outcome(probe.client.call_tool(tool, args))  # stop the simulated logging
        heard = ["<random level and line>"] if heard else []
    return f"{done};log={heard[:1]}"


def unprefix(probe: Probe, published: str) -> str | None:
    """The server's own tool name for a published one, or None (another server's, the gateway's)."""
    marker = probe.prefix("")
    if not marker:
        return published
    return published[len(marker) :] if published.startswith(marker) else None


async def cancel(probe: Probe, style: str, tool: str, args: dict[str, Any], tag: str) -> str:
    """Start a long call, cancel it once it runs (its first progress), then check the session
    still works and (classic) that the server saw the cancellation."""
    client, name = probe.client, probe.prefix
    started = anyio.Event()
    finished: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        started.set()

    async def call() -> None:
        finished.append(await outcome(client.call_tool(name(tool), args, progress_callback=on_progress)))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call)
        with anyio.move_on_after(OP_TIMEOUT):
            await started.wait()
        tasks.cancel_scope.cancel()
    parts = ["started" if started.is_set() else "not-started"]
    if finished:
        parts.append(f"finished={finished[0]}")
    echo_tool, echo_args = STYLES[style]["call"]
    parts.append("after=" + await outcome(client.call_tool(name(echo_tool), echo_args)))
    if style == "classic":
        saw = "cancelled:False"
        with anyio.move_on_after(5):
            while saw != "cancelled:True":
                saw = (await outcome(client.call_tool(name("cancelled"), {"tag": tag}))).removeprefix("ok:")
                await anyio.sleep(0.05)
        parts.append(f"server-{saw}")
    return ";".join(parts)


async def run_style(probe: Probe, style: str, tag: str) -> dict[str, str]:
    return {op: await run_op(probe, style, op, f"{tag}-{op}") for op in OPERATIONS}


# --- the servers ----------------------------------------------------------------------------


def everything_script(npm_packages: Path) -> str:
    return str(npm_packages / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")


def stdio_tables(npm_packages: Path) -> dict[str, dict[str, Any]]:
    return {
        "classic": {"command": PYTHON, "args": [CLASSIC]},
        "demo": demo("--tools", 0, "--rich", "--interactive", "--name", "demo"),
        "everything": {"command": str(node_binary()), "args": [everything_script(npm_packages), "stdio"]},
        "time": {"command": PYTHON, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "modern": {"command": PYTHON, "args": [MODERN]},
    }


@contextmanager
def http_servers(npm_packages: Path, logs: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """Every style that serves HTTP, started at once; yields their server tables (``url``)."""
    port = free_port()
    commands = {
        "classic": [PYTHON, CLASSIC, "--http"],
        "demo": [*demo("--tools", 0, "--rich", "--interactive", "--name", "demo", "--transport", "http")["args"]],
        "modern": [PYTHON, MODERN, "--http"],
    }
    commands["demo"].insert(0, PYTHON)
    with ExitStack() as stack:
        procs: dict[str, subprocess.Popen[Any]] = {}
        for style, command in commands.items():
            err = stack.enter_context((logs / f"{style}.log").open("w"))
            procs[style] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        err = stack.enter_context((logs / "everything.log").open("w"))
        procs["everything"] = subprocess.Popen(
            [str(node_binary()), everything_script(npm_packages), "streamableHttp"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "PORT": str(port)},
        )
        for proc in procs.values():
            stack.callback(stop, proc)
        tables: dict[str, dict[str, Any]] = {}
        for style, proc in procs.items():
            if style == "everything":
                wait_for_port(port)
                tables[style] = {"url": f"http://127.0.0.1:{port}/mcp"}
            else:
                assert proc.stdout is not None
                url = proc.stdout.readline().strip()
                assert url.startswith("http://"), (style, url, (logs / f"{style}.log").read_text())
                tables[style] = {"url": url}
        yield tables


def mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            time.sleep(0.05)


# --- clients: directly, through the gateway --------------------------------------------------


@asynccontextmanager
async def connect(table: Mapping[str, Any], era: str, errlog: Path) -> AsyncIterator[tuple[Any, list[Any]]]:
    """The SDK ``Client`` in ``era`` to a server table (``url``, or ``command`` and ``args``
    over stdio, its stderr to ``errlog``), with the callbacks; yields it and the logs it hears."""
    logs: list[types.LoggingMessageNotificationParams] = []
    async with AsyncExitStack() as stack:
        err = stack.enter_context(errlog.open("a"))
        if "url" in table:
            transport: Any = table["url"]
        else:
            params = StdioServerParameters(command=table["command"], args=table["args"], env=dict(os.environ))
            transport = stdio_client(params, errlog=err)
        client = await stack.enter_async_context(Client(transport, mode=era, **client_options(logs)))
        await prepare(client)
        yield client, logs


async def direct_outcomes(tables: Mapping[str, Mapping[str, Any]], era: str, tmp_path: Path) -> dict[str, Any]:
    """Each server on its own, straight from the client."""
    outcomes: dict[str, dict[str, str]] = {}
    for style, table in tables.items():
        try:
            async with connect(table, era, tmp_path / f"direct-{style}.log") as (client, logs):
                outcomes[style] = await run_style(Probe(client, logs, lambda tool: tool), style, f"direct-{era}")
        except Exception:  # noqa: BLE001 - refused at connect: every operation it has fails directly
            if style in outcomes:
                raise
            outcomes[style] = {op: "error" if op in STYLES[style] or op == "list" else "absent" for op in OPERATIONS}
    return outcomes


def published(style: str) -> Callable[[str], str]:
    """How the gateway publishes the style's tools: ``<server id>__<tool>``."""
    return lambda tool: f"{style}__{tool}"


async def gateway_outcomes(
    gateway: Mapping[str, Any], tables: Mapping[str, Any], era: str, errlog: Path, tag: str
) -> dict[str, Any]:
    """Every server through one gateway (``gateway``: its table, stdio or url), one client."""
    outcomes: dict[str, dict[str, str]] = {}
    async with connect(gateway, era, errlog) as (client, logs):
        for style in tables:
            probe = Probe(client, logs, published(style))
            outcomes[style] = await run_style(probe, style, tag)
    return outcomes


# --- the matrix ---------------------------------------------------------------------------


def ok(value: str) -> bool:
    return value.startswith(("ok:", "tools:"))


def compare(
    direct: Mapping[str, Mapping[str, str]],
    gateway: Mapping[str, Mapping[str, str]],
    era: str,
    downstream: str,
    upstream: str,
) -> list[str]:
    """Every cell that is neither equal to direct nor what its KNOWN entry says."""
    problems = []
    for style, ops in gateway.items():
        for op in OPERATIONS:
            mine, theirs = ops[op], direct[style][op]
            where = f"{style}/{op} [{era}, server over {downstream}, gateway over {upstream}]"
            entry = known(style, op, era)
            if entry is None:
                if mine != theirs:
                    problems.append(f"{where}: through the gateway {mine!r}, directly {theirs!r}")
            elif entry.kind == UNAVAILABLE:
                if ok(mine) or ok(theirs):
                    problems.append(f"{where}: listed unavailable, yet gateway {mine!r}, direct {theirs!r}")
            elif entry.kind == BETTER:
                if ok(theirs) or not ok(mine):
                    problems.append(f"{where}: listed better, yet gateway {mine!r}, direct {theirs!r}")
            else:
                raise AssertionError(entry)
    return problems


def table_of(outcomes: Mapping[str, Mapping[str, Mapping[str, str]]]) -> str:
    lines = []
    for who, styles in outcomes.items():
        for style, ops in styles.items():
            for op, value in ops.items():
                shown = value.replace("\n", "\\n")
                lines.append(f"{who:>8} {style:>10} {op:>10}  {shown if len(shown) < 150 else shown[:147] + '...'}")
    return "\n".join(lines)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("downstream", TRANSPORTS)
async def test_nothing_works_worse_through_the_gateway(
    tmp_path: Path, npm_packages: Path, downstream: str, era: str
) -> None:
    """Servers over ``downstream``, a client in ``era``: every style directly, and all of them
    through one gateway over stdio and one over HTTP, the three side by side."""
    with ExitStack() as stack:
        if downstream == "stdio":
            tables = stdio_tables(npm_packages)
        else:
            tables = stack.enter_context(http_servers(npm_packages, tmp_path))
        # one config (and state directory) per gateway: neither warm-starts from the other
        configs = {upstream: write_config(mkdir(tmp_path / f"gateway-{upstream}"), tables) for upstream in TRANSPORTS}
        url, _stderr = stack.enter_context(http_gateway(configs["http"], "--log-level", "info"))
        results: dict[str, Any] = {}

        async def directly() -> None:
            results["direct"] = await direct_outcomes(tables, era, tmp_path)

        async def over(upstream: str) -> None:
            serve = {
                "command": PYTHON,
                "args": ["-m", "gateway", "serve", "--config", str(configs["stdio"]), "--log-level", "info"],
            }
            target = serve if upstream == "stdio" else {"url": url}
            errlog = tmp_path / f"gateway-{upstream}.log"
            results[upstream] = await gateway_outcomes(target, tables, era, errlog, f"{upstream}-{era}")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(directly)
            tasks.start_soon(over, "stdio")
            tasks.start_soon(over, "http")
    print(table_of(results))
    # The default (protocol = "auto"): the handshake to a server that accepts it, 2026-07-28 otherwise.
    said = (tmp_path / "gateway-stdio.log").read_text(encoding="utf-8", errors="replace")
    assert "[classic] protocol 2025-11-25" in said and "[modern] protocol 2026-07-28" in said, said
    problems = compare(results["direct"], results["stdio"], era, downstream, "stdio")
    problems += compare(results["direct"], results["http"], era, downstream, "http")
    assert not problems, "\n".join(problems) + "\n\n" + table_of(results)


def test_every_known_entry_names_real_cells() -> None:
    """A mistyped key would match no cell and excuse nothing, silently."""
    for style, op, era in KNOWN:
        assert style in STYLES and op in (*OPERATIONS, "*") and era in (*ERAS, "*"), (style, op, era)
        assert KNOWN[style, op, era].kind in (UNAVAILABLE, BETTER)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_question_the_server_gives_up_is_withdrawn_from_the_user(tmp_path: Path, transport: str) -> None:
    """A classic server asks the user and gives up waiting (its request cancelled): directly,
    the client's elicitation is cancelled; through the gateway too, with the same result.
    (A 2026-07-28 client cannot be asked by such a server directly at all.)"""
    patient_user = PatientUser(30)
    withdrawn = patient_user.withdrawn
    with ExitStack() as stack:
        if transport == "stdio":
            server: dict[str, Any] = {"command": PYTHON, "args": [CLASSIC]}
            direct: Any = StdioServerParameters(command=PYTHON, args=[CLASSIC])
        else:
            errlog = stack.enter_context((tmp_path / "classic.log").open("w"))
            url, _proc = stack.enter_context(url_process([PYTHON, CLASSIC, "--http"], stderr=errlog))
            server, direct = {"url": url}, url
        async with Client(direct, mode="legacy", elicitation_callback=patient_user) as client:
            assert text(await client.call_tool("give_up", {"seconds": 0.5})) == "gave up"
            await wait_for(lambda: withdrawn == ["withdrawn"], 10)
        config = write_config(tmp_path, {"classic": server})
        async with sdk_client(config, "legacy", elicitation_callback=patient_user) as client:
            assert text(await client.call_tool("classic__give_up", {"seconds": 0.5})) == "gave up"
            await wait_for(lambda: withdrawn == ["withdrawn"] * 2, 10)


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_questions_the_server_gives_up_do_not_pile_up_in_the_call(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """A classic server asks whether the user is still there, gives up (cancels its request)
    and asks again, more times than one call may have questions open (``roundtrip.MAX_ASKS``),
    while the user is slow; then it asks a last question. Directly, each question given up is
    withdrawn and the last one answered. A 2026-07-28 client (asked with ``input_required``)
    had every question given up kept in its call, each asked in its next round, until the
    ninth was refused and the call failed ("more than 8 open requests in one call")."""
    times = 9
    done_file = tmp_path / "gave-up"

    async def slow_user(context: Any, params: Any) -> types.ElicitResult:
        if params.message == "Still there?":  # answered once the server has given up on every one
            with anyio.move_on_after(OP_TIMEOUT / 2):  # (or never will: the call failed)
                while not done_file.exists():
                    await anyio.sleep(0.02)
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"name": "Ann"})

    arguments = {"times": times, "seconds": 0.1, "done_file": str(done_file)}
    expected = f"gave up {times}, then accept"
    params = StdioServerParameters(command=PYTHON, args=[CLASSIC])
    async with Client(params, mode="legacy", elicitation_callback=slow_user) as client:
        with anyio.fail_after(OP_TIMEOUT):
            assert text(await client.call_tool("keep_asking", arguments)) == expected
    done_file.unlink()
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC]}})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode, elicitation_callback=slow_user) as client:
            with anyio.fail_after(OP_TIMEOUT):
                assert text(await client.call_tool("classic__keep_asking", arguments)) == expected


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_question_is_withdrawn_from_the_user_when_the_client_cancels_the_call(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """The user is asked (a classic server's elicitation during a call) and the client cancels
    the call: directly, the question is withdrawn (the client's elicitation is cancelled) before
    the call's stream ends. Through ``serve --http`` a handshake-era client's question stayed
    open: the gateway's withdrawal came after the call's stream had closed and was dropped."""
    patient_user = PatientUser()
    withdrawn = patient_user.withdrawn

    async def ask_then_cancel(client: Any, tool: str) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client.call_tool, tool, {})
            with anyio.fail_after(OP_TIMEOUT):
                await patient_user.asked.wait()
            tasks.cancel_scope.cancel()

    # Directly in the handshake era: a 2026-07-28 client cannot be asked by this server directly.
    params = StdioServerParameters(command=PYTHON, args=[CLASSIC])
    async with Client(params, mode="legacy", elicitation_callback=patient_user) as client:
        await ask_then_cancel(client, "elicit")
        await wait_for(lambda: withdrawn == ["withdrawn"], 10)
    patient_user.asked = anyio.Event()
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC]}})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode, elicitation_callback=patient_user) as client:
            await ask_then_cancel(client, "classic__elicit")
            await wait_for(lambda: withdrawn == ["withdrawn"] * 2, 10)
            assert text(await client.call_tool("classic__echo", {"text": "after"})) == "classic:after"


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_cancelled_after_the_user_answered_is_cancelled_at_the_server(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """A classic server asks the user, is answered and works on; the client cancels the call:
    directly, the server's work is cancelled at once. A 2026-07-28 client's call (its retry
    carried the answer) went on at the server until ``round_trip_timeout`` (long here), as if
    the client might come back with the same state."""
    working = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        working.set()

    async def cancelled_while_working(client: Any, tool: str, tag: str) -> None:
        async with anyio.create_task_group() as tasks:
            arguments = {"seconds": 600, "tag": tag}
            tasks.start_soon(partial(client.call_tool, tool, arguments, progress_callback=on_progress))
            with anyio.fail_after(OP_TIMEOUT):
                await working.wait()
            tasks.cancel_scope.cancel()

    async def seen_cancelled(client: Any, tool: str, tag: str) -> None:
        async def cancelled() -> bool:
            return text(await client.call_tool(tool, {"tag": tag})) == "cancelled:True"

        with anyio.fail_after(OP_TIMEOUT):
            while not await cancelled():
                await anyio.sleep(0.05)

    params = StdioServerParameters(command=PYTHON, args=[CLASSIC])
    async with Client(params, mode="legacy", elicitation_callback=elicitation) as client:
        await cancelled_while_working(client, "ask_then_sleep", "direct")
        await seen_cancelled(client, "cancelled", "direct")
    working = anyio.Event()
    server = {"command": PYTHON, "args": [CLASSIC]}
    config = write_config(tmp_path, {"classic": server}, gateway={"round_trip_timeout": 600})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode, elicitation_callback=elicitation) as client:
            await cancelled_while_working(client, "classic__ask_then_sleep", "gateway")
            await seen_cancelled(client, "classic__cancelled", "gateway")


class _Sleeper:
    """A call of the classic server's ``sleep`` for 60 s; ``started`` once its progress came."""

    def __init__(self) -> None:
        self.started = anyio.Event()

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.started.set()

    async def call(self, client: Any) -> None:
        await client.call_tool("classic__sleep", {"seconds": 60}, progress_callback=self.on_progress)


@pytest.mark.parametrize("upstream", ["stdio", "http"])
async def test_a_question_a_pipe_does_not_place_outlives_another_call_cancelled(tmp_path: Path, upstream: str) -> None:
    """One client, two calls to a stdio server: the newer asks the user while the older runs,
    and the pipe does not say which call the question is for (it goes with the older). The
    older call is cancelled: the question is not withdrawn with it (it may be the newer's, as
    here), and the answer reaches the call that asked."""
    asked, answer = anyio.Event(), anyio.Event()
    withdrawn: list[str] = []

    async def user(context: Any, params: Any) -> types.ElicitResult:
        asked.set()
        try:
            await answer.wait()
        except anyio.get_cancelled_exc_class():
            withdrawn.append("withdrawn")
            raise
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    sleeper = _Sleeper()

    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC]}})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, "legacy", elicitation_callback=user) as client:
            newer: list[str] = []

            async def ask() -> None:
                newer.append(text(await client.call_tool("classic__elicit", {})))

            async with anyio.create_task_group() as outer:
                async with anyio.create_task_group() as older:
                    older.start_soon(sleeper.call, client)
                    with anyio.fail_after(OP_TIMEOUT):
                        await sleeper.started.wait()
                        outer.start_soon(ask)
                        await asked.wait()
                    older.cancel_scope.cancel()
                answer.set()
            assert newer == ["accept:{'name': 'Ada'}"] and not withdrawn


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_question_put_to_a_newer_call_that_is_cancelled_reaches_its_own(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """One client, two calls to a stdio server: the older asks the user while the newer runs,
    and the pipe does not say which call the question is for (it goes with the newer). The
    newer call is cancelled: the question is asked again by the call still in flight (the older,
    whose it is), and its answer reaches it. A 2026-07-28 client's older call failed ("the call
    this request belongs to is over") once the newer's round trip ended (``round_trip_timeout``,
    short here, is when a cancelled call's round trip is known to be abandoned)."""
    asked, answer = anyio.Event(), anyio.Event()

    async def user(context: Any, params: Any) -> types.ElicitResult:
        asked.set()
        await answer.wait()
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    sleeper = _Sleeper()

    server = {"command": PYTHON, "args": [CLASSIC]}
    config = write_config(tmp_path, {"classic": server}, gateway={"round_trip_timeout": 1})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode, elicitation_callback=user) as client:
            older: list[str] = []

            async def ask() -> None:
                older.append(text(await client.call_tool("classic__elicit", {"after_a_sleep": True})))

            async with anyio.create_task_group() as outer:
                outer.start_soon(ask)
                async with anyio.create_task_group() as newer:
                    newer.start_soon(sleeper.call, client)
                    with anyio.fail_after(OP_TIMEOUT):
                        await sleeper.started.wait()
                        await asked.wait()
                    newer.cancel_scope.cancel()
                answer.set()
            assert older == ["accept:{'name': 'Ada'}"]


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_server_that_prints_a_banner_on_stdout_works_as_directly(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """A stdio server that prints a line that is not JSON-RPC before it serves (a banner, a
    common mistake) works directly: the SDK's client logs the line and reads on. Through the
    gateway it used to fail at start-up (the line came before the gateway's reader was
    ready for it); now it works, and the gateway's log names the line it ignored."""
    from tests.classic_server import BANNER

    params = StdioServerParameters(command=PYTHON, args=[CLASSIC, "--banner"])
    async with Client(params, mode=mode) as client:
        assert text(await client.call_tool("echo", {"text": "hi"})) == "classic:hi"
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC, "--banner"]}})
    logs = []
    for start in ("first-ever", "warm"):  # a warm start spawns the server before its reader is set up
        with ExitStack() as stack:
            target: Any = config
            logs.append(tmp_path / f"gateway-{start}.log")
            if upstream == "http":
                target, logs[-1] = stack.enter_context(http_gateway(config))
            async with sdk_client(target, mode, errlog=logs[-1]) as client:
                assert text(await client.call_tool("classic__echo", {"text": "hi"})) == "classic:hi", start
    lines = [line for log in logs for line in log.read_text().splitlines() if "not JSON-RPC" in line]
    assert len(lines) == 2 and all(
        f"[classic] ignored a line that is not JSON-RPC: {BANNER!r}" in line for line in lines
    )


@pytest.mark.parametrize("upstream", ["stdio", "http"])
@pytest.mark.parametrize("mode", ERAS)
async def test_sampling_with_tools_is_refused_to_a_client_that_did_not_declare_it(
    tmp_path: Path, mode: str, upstream: str
) -> None:
    """The gateway declares ``sampling.tools`` to every server (so a server samples with tools
    for a client that declared it, as directly: the ``sample_tools`` cells above). A client
    that declared sampling without tools is never sent such a request: the server's request
    fails naming the capability, and so does its call, as the server's own check fails them
    directly."""
    asked: list[Any] = []

    async def plain_sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        asked.append(params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="hi"), model="m")

    if mode == "legacy":  # (directly at 2026-07-28 the classic server has no back-channel at all)
        params = StdioServerParameters(command=PYTHON, args=[CLASSIC])
        async with Client(params, mode=mode, sampling_callback=plain_sampling) as client:
            with pytest.raises(MCPError, match="does not support sampling tools"):
                await client.call_tool("sample_tools", {})
    config = write_config(tmp_path, {"classic": {"command": PYTHON, "args": [CLASSIC]}})
    with ExitStack() as stack:
        target: Any = config if upstream == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode, sampling_callback=plain_sampling) as client:
            with pytest.raises(MCPError, match="does not support sampling.tools"):
                await client.call_tool("classic__sample_tools", {})
            assert text(await client.call_tool("classic__sample", {})) == "m:hi"  # without tools: relayed
    assert [p.tools for p in asked] == [None]
