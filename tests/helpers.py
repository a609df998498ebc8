"""Shared test helpers: real gateway processes, real demo servers, the real mcp SDK client,
and the small JSON checks several test files use. One copy of each, imported from here
(conftest.py holds only pytest fixtures and hooks)."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

# One copy each, in bench/ (the store benchmark needs them too): a process that prints its
# URL first (a gateway over HTTP), and a real Redis server.
from bench.common import url_process as url_process
from bench.redisserver import RedisServer as RedisServer
from bench.redisserver import free_port as free_port
from bench.redisserver import redis_server as redis_server
from tests.forkserver import PYTHON_ENV

PYTHON = os.environ.get(PYTHON_ENV) or sys.executable
"""The interpreter the tests start (gateways, servers in the configs they write, commands):
the fork server's launcher once conftest.py started it (tests/forkserver.py; in the processes
the tests start, through ``$PREFIXGATE_TEST_PYTHON``), else this one."""
GATEWAY = [PYTHON, "-m", "gateway"]


ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
"""The environment of a process whose Python encodes names and arguments as ASCII: the C locale
(without it Python would coerce to C.UTF-8) with UTF-8 mode turned off."""


def use_interpreter(path: str) -> None:
    """Start every later process with ``path`` (before the test modules import these names),
    also those the tests' own processes start."""
    global PYTHON, GATEWAY
    PYTHON = os.environ[PYTHON_ENV] = path
    GATEWAY = [PYTHON, "-m", "gateway"]


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
"""A handshake-era initialize request, for raw HTTP tests."""
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
"""The headers a streamable HTTP POST needs."""


async def opened_session(http: Any, url: str) -> dict[str, str]:
    """A handshake-era session opened with raw POSTs (``initialize``, then ``initialized``) on
    the ``httpx`` client ``http``: the headers every later POST of the session carries."""
    opened = await http.post(url, json=INIT, headers=ACCEPT)
    headers = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def demo(*args: str | int | float) -> dict[str, Any]:
    """A stdio server table running the bundled demo server."""
    return {"command": PYTHON, "args": ["-m", "gateway", "demo-server", *map(str, args)]}


def schemas_server(tmp_path: Path, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A server table for tests/schemas_server.py listing ``tools`` as given (a real stdio
    server whose tool list a test writes: odd names, schemas no fixture has)."""
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps(tools), encoding="utf-8")
    root = str(Path(__file__).resolve().parent.parent)
    return {"command": PYTHON, "args": ["-m", "tests.schemas_server", str(listing)], "cwd": root}


def write_config(
    directory: Path,
    servers: Mapping[str, Mapping[str, Any]],
    **tables: Mapping[str, Any],
) -> Path:
    """Write a prefixgate TOML config; ``state_dir`` defaults to a private temp dir."""
    gateway = {"state_dir": str(directory / "state"), **tables.pop("gateway", {})}
    lines: list[str] = []
    for name, table in {"gateway": gateway, **tables}.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    for server_id, table in servers.items():
        lines.append(f"[servers.{json.dumps(server_id)}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    path = directory / "prefixgate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GATEWAY, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


_SDK_PROBE = """
import gc, json, sys
seen = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp":
            seen.append(gc.isenabled())
        return None

sys.meta_path.insert(0, Watch())
from gateway.commands.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write("\\nsdk-probe " + json.dumps(seen) + "\\n")
"""


def sdk_imports(*args: str, timeout: float = 120) -> list[bool]:
    """Run ``prefixgate ARGS`` in a real process, watching for the mcp SDK's import: one entry
    per import of it, whether the cyclic collector was on at that moment (none: never imported)."""
    proc = subprocess.run(
        [PYTHON, "-c", _SDK_PROBE, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert last.startswith("sdk-probe "), proc.stderr[-2000:]
    found: list[bool] = json.loads(last.removeprefix("sdk-probe "))
    return found


def catalog_json(config: Path) -> dict[str, Any]:
    proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "warning")
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout.strip(), f"catalog --json printed nothing (exit {proc.returncode}): {proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


class Gateway:
    """A running ``prefixgate serve`` and an initialised SDK client session to it."""

    def __init__(self, session: ClientSession, dispatcher: JSONRPCDispatcher[Any], stderr: Path) -> None:
        self.session = session
        self.dispatcher = dispatcher
        self.stderr_path = stderr

    async def raw(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A request below the SDK's typed layer: exactly the JSON the gateway sent."""
        return await self.dispatcher.send_raw_request(method, params, {})

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    async def saw(self, *texts: str, timeout: float = 10) -> bool:
        """Whether every text appears on the gateway's stderr within ``timeout`` seconds
        (log lines are written by a thread, a moment after what they report)."""
        import anyio

        with anyio.move_on_after(timeout):
            while not all(t in self.stderr() for t in texts):
                await anyio.sleep(0.02)
            return True
        return False


@asynccontextmanager
async def gateway(
    config: Path,
    *extra: str,
    env: Mapping[str, str] | None = None,
    log_level: str = "info",
    client: Mapping[str, Any] | None = None,
) -> AsyncIterator[Gateway]:
    """``prefixgate serve`` over stdio; ``client`` passes callbacks to the SDK ClientSession."""
    stderr_path = config.parent / f"gateway-stderr-{os.urandom(4).hex()}.log"
    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "gateway", "serve", "--config", str(config), "--log-level", log_level, *extra],
        env={k: v for k, v in {**os.environ, **(env or {})}.items()},
        encoding_error_handler="replace",
    )
    with stderr_path.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
            async with ClientSession(dispatcher=dispatcher, **dict(client or {})) as session:
                await session.initialize()
                yield Gateway(session, dispatcher, stderr_path)


@contextmanager
def http_gateway(
    config: Path, *extra: str, env: Mapping[str, str] | None = None, listen: str = "127.0.0.1:0"
) -> Iterator[tuple[str, Path]]:
    """``prefixgate serve --http LISTEN`` (default ``127.0.0.1:0``): yields its URL and its stderr log."""
    stderr_path = config.parent / f"http-gateway-{os.urandom(4).hex()}.log"
    command = [*GATEWAY, "serve", "--config", str(config), "--http", listen, *extra]
    with stderr_path.open("w") as errlog, url_process(command, env=env, stderr=errlog) as (url, _proc):
        assert url, stderr_path.read_text()
        yield url, stderr_path


@asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[Gateway]:
    """The SDK's streamable HTTP client, initialised, as a Gateway handle (no stderr)."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
            async with ClientSession(dispatcher=dispatcher) as session:
                await session.initialize()
                yield Gateway(session, dispatcher, Path(os.devnull))


ERAS = ("legacy", "auto")
"""The real SDK client's two ways in: the 2025-11-25 handshake and the 2026-07-28 stateless protocol."""


@asynccontextmanager
async def sdk_client(
    target: Path | str,
    mode: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
    log_level: str = "info",
    headers: Mapping[str, str] | None = None,
    errlog: Path | None = None,
    **options: Any,
) -> AsyncIterator[Any]:
    """The SDK's high-level ``Client`` in ``mode`` ("legacy" or "auto").

    ``target`` is a config path (``prefixgate serve`` over stdio, its stderr written to
    ``errlog`` or discarded) or an HTTP URL of a running ``serve --http``; ``options`` go to
    ``Client`` (callbacks etc.).
    """
    from mcp import Client

    if isinstance(target, Path):
        params = StdioServerParameters(
            command=PYTHON,
            args=["-m", "gateway", "serve", "--config", str(target), "--log-level", log_level, *extra],
            env={**os.environ, **(env or {})},
            encoding_error_handler="replace",
        )
        if errlog is None:
            async with Client(params, mode=mode, **options) as client:  # type: ignore[arg-type]
                yield client
            return
        with errlog.open("a", encoding="utf-8") as log:
            async with Client(stdio_client(params, errlog=log), mode=mode, **options) as client:  # type: ignore[arg-type]
                yield client
        return
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=dict(headers or {})) as http:
        async with Client(streamable_http_client(target, http_client=http), mode=mode, **options) as client:  # type: ignore[arg-type]
            yield client


class Notifications:
    """What a client was sent besides answers (the SDK client's message handler)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, message: Any) -> None:
        self.seen.append(message)

    def tool_changes(self) -> int:
        return sum(isinstance(m, types.ToolListChangedNotification) for m in self.seen)


# --- small JSON and result checks -------------------------------------------------------


def text(result: Any) -> str:
    """The text of a tool result (or a content list): its text blocks joined."""
    content = result.content if hasattr(result, "content") else result
    return "".join(block.text for block in content if getattr(block, "type", None) == "text")


ARTIFACT_PAGE = re.compile(r"; next offset (\d+)$")


async def read_artifact(client: Any, artifact_id: str) -> str:
    """The whole artifact, page by page through artifact_read."""
    parts, offset = [], 0
    while True:
        page = text(await client.call_tool("artifact_read", {"id": artifact_id, "offset": offset}))
        header, _, body = page.partition("\n")
        assert header.startswith(f"[artifact {artifact_id}] bytes "), header
        parts.append(body)
        found = ARTIFACT_PAGE.search(header)
        if found is None:
            assert header.endswith("; end reached"), header
            return "".join(parts)
        offset = int(found.group(1))


async def wait_for(predicate: Callable[[], Any], seconds: float = 30) -> None:
    """Poll until ``predicate()`` (plain or awaitable) holds: the positive marker that what a
    test waits for has been seen; fails after ``seconds``."""
    with anyio.fail_after(seconds):
        while True:
            outcome = predicate()
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome:
                return
            await anyio.sleep(0.05)


def wire(value: object) -> bytes:
    """Compact JSON bytes in the value's own key order: order differences show."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with object keys in random insertion order at every depth."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def keys_sorted_everywhere(value: Any) -> bool:
    """Whether every object in ``value``, at every depth, has its keys in sorted order."""
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(keys_sorted_everywhere(v) for v in value.values())
    if isinstance(value, list):
        return all(keys_sorted_everywhere(v) for v in value)
    return True


# --- a client that answers a server's requests for input ----------------------------------


async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    """The demo's ``sample`` asks "Say hi"; the model answers "hi"."""
    asked = params.messages[0].content
    assert isinstance(asked, types.TextContent) and asked.text == "Say hi", asked
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="hi"), model="m1")


async def elicitation(context: Any, params: Any) -> types.ElicitResult:
    assert params.message == "What is your name?"
    return types.ElicitResult(action="accept", content={"name": "Ann"})


async def roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])


class PatientUser:
    """An elicitation callback whose user is slow to decline (``seconds``): ``asked`` is set when
    the question comes, and ``withdrawn`` counts the questions withdrawn before the answer."""

    def __init__(self, seconds: float = 60) -> None:
        self.seconds = seconds
        self.asked = anyio.Event()
        self.withdrawn: list[str] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.set()
        try:
            await anyio.sleep(self.seconds)
        except anyio.get_cancelled_exc_class():
            self.withdrawn.append("withdrawn")
            raise
        return types.ElicitResult(action="decline")


CALLBACKS: dict[str, Any] = {
    "sampling_callback": sampling,
    "elicitation_callback": elicitation,
    "list_roots_callback": roots,
}
"""SDK client options: answers to sampling, elicitation and roots (what the demo asks)."""


async def answers_every_input_request(client: Any, prefix: str = "r") -> None:
    """The demo's ``--interactive`` tools, prompt and resource, each answered by ``CALLBACKS``
    (directly, or relayed across protocol eras by the gateway)."""
    assert text(await client.call_tool(f"{prefix}__ask", {})) == "accept:{'name': 'Ann'}"
    assert text(await client.call_tool(f"{prefix}__sample", {})) == "m1:hi"
    assert text(await client.call_tool(f"{prefix}__roots", {})) == "file:///work/project"
    prompt = await client.get_prompt(f"{prefix}__interview")
    assert prompt.messages[0].content.text == f"Hello Ann from {prefix}"
    read = await client.read_resource(f"demo://{prefix}/roots")
    assert read.contents[0].text == "file:///work/project"


# --- a raw client on the gateway's stdio ------------------------------------------------


class RawGateway:
    """``prefixgate serve`` with the test holding its pipes: lines in, lines out."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.buffer = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def request(self, request_id: Any, method: str, params: Any = None) -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode())

    def read(self, timeout: float = 60) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.read_line(timeout))
        return message

    def read_line(self, timeout: float = 60) -> bytes:
        """The next line the gateway wrote, as its bytes (without the newline)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no answer from the gateway"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"gateway closed stdout (exit {self.proc.poll()})"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def answer(self, request_id: Any) -> dict[str, Any]:
        """The response to ``request_id`` (notifications in between are skipped)."""
        while True:
            message = self.read()
            if "method" not in message and message.get("id") == request_id:
                return message

    def handshake(self, capabilities: Mapping[str, Any] | None = None) -> None:
        self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": dict(capabilities or {}),
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        assert "result" in self.answer(0)
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')


@contextmanager
def raw_gateway(
    config: Path, stderr: Any = None, env: Mapping[str, str] | None = None, *extra: str
) -> Iterator[RawGateway]:
    """``prefixgate serve`` over stdio with the test holding its pipes (``env`` added to ours)."""
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--config", str(config), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        yield RawGateway(proc)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def alive(pid: int) -> bool:
    """Whether ``pid`` is still running (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def stopped_while_a_server_starts(tmp_path: Path, command: str, signum: int) -> tuple[int, str]:
    """``prefixgate COMMAND`` on a config whose one server takes 120 s to start, sent
    ``signum`` once the server runs (SIGINT at its default, as at a terminal: a suite run as a
    background job has it ignored, inherited, and the command rightly keeps ignoring it): its
    exit status and stderr, once the server it started has gone too."""
    import signal

    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "delay").write_text("120")
    root = str(Path(__file__).resolve().parent.parent)
    slow = {"command": PYTHON, "args": ["-m", "tests.gated_server", str(gates), PYTHON, *demo()["args"]], "cwd": root}
    config = write_config(tmp_path, {"slow": slow})
    proc = subprocess.Popen(
        [*GATEWAY, command, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for _ in range(600):  # (the server started: its pid is written before its delay)
            if (gates / "pid").exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        server = int((gates / "pid").read_text())
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    for _ in range(100):
        if not alive(server):
            break
        time.sleep(0.1)
    assert not alive(server), f"server {server} still runs after {command} stopped"
    return proc.returncode, stderr


def assert_unwritable_output_is_one_line(args: list[str]) -> None:
    """``args`` (a command) with its output ``> /dev/full`` (a full disk) ends with one line and
    status 1, and with a pipe whose reader left (``| head``) with status 1 and nothing said."""
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (1, "prefixgate: cannot write the output: No space left on device\n")
    gone = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert gone.stdout is not None
    gone.stdout.close()  # (before anything is written: the reader left)
    _, stderr = gone.communicate(timeout=60)
    assert (gone.returncode, stderr) == (1, "")
