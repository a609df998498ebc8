"""Shared pieces of the benchmarks: contenders (processes + clients), statistics, configs.

Every contender is a real process spoken to over stdio by the same client: the mcp SDK's
``stdio_client`` + ``ClientSession`` (what a Python agent uses), or, where a measurement
must not include the SDK client's own costs, :class:`RawClient` (newline-delimited
JSON-RPC over pipes, read in linear time).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parent.parent
FASTMCP_PROXY = Path(__file__).resolve().parent / "fastmcp_proxy.py"


# --- statistics ----------------------------------------------------------------------


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median and spread of samples: min, max, p10/p90 (nearest rank), count."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return {"n": 0}

    def rank(q: float) -> float:
        return ordered[min(n - 1, max(0, round(q * (n - 1))))]

    return {
        "n": n,
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p10": rank(0.10),
        "p90": rank(0.90),
    }


def ratio_summary(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, float | list[float]]:
    """Per-round ratios (same round, so the same machine state), then their median and range."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True) if b > 0]
    return summary(ratios) | {"rounds": ratios}


def rotated(items: Sequence[Any], round_no: int) -> list[Any]:
    """The contenders in a different order each round, so none always goes first."""
    k = round_no % len(items) if items else 0
    return list(items[k:]) + list(items[:k])


# --- processes ------------------------------------------------------------------------


def children() -> set[int]:
    """Process ids of this process's direct children."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return pids


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def reset_peak(pid: int) -> bool:
    """Reset the peak-RSS mark (VmHWM) of a process: ``echo 5 > /proc/<pid>/clear_refs``."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def demo_args(*args: str | int | float) -> list[str]:
    return ["-m", "gateway", "demo-server", *map(str, args)]


def gateway_config(directory: Path, servers: Mapping[str, Sequence[str]], **tables: Mapping[str, Any]) -> Path:
    """A prefixgate config whose servers run ``PYTHON <args>``; state in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["[gateway]", f"state_dir = {json.dumps(str(directory / 'state'))}"]
    for key, value in ({"discovery_deadline": 300} | dict(tables.pop("gateway", {}))).items():
        lines.append(f"{key} = {_toml(value)}")
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    for server_id, args in servers.items():
        lines.append(f"[servers.{server_id}]")
        lines.append(f"command = {json.dumps(PYTHON)}")
        lines.append(f"args = {_toml(list(args))}")
        lines.append("startup_timeout = 120")
    path = directory / "prefixgate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(type(value))


def fastmcp_config(directory: Path, name: str, servers: Mapping[str, Sequence[str]]) -> Path:
    """An MCP config JSON for the FastMCP proxy; servers run ``PYTHON <args>`` (our demo)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "mcpServers": {
            sid: {"command": PYTHON, "args": list(args), "cwd": str(ROOT)} for sid, args in servers.items()
        }
    }
    path = directory / f"{name}.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


@dataclass
class Contender:
    """One way of reaching the demo server: how to start it and what the echo tool is called."""

    name: str
    argv: list[str]
    echo: str = "echo"
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)
    mode: str = "legacy"
    """The client: ``legacy`` a ``ClientSession`` after ``initialize`` (2025-11-25); ``auto`` the
    SDK's ``Client`` in its default mode, stateless 2026-07-28 wherever the server offers it."""


def direct(name: str = "direct", *args: str | int | float) -> Contender:
    return Contender(name, [PYTHON, *demo_args(*args)], "echo", "mcp SDK client -> demo server (stdio)")


def via_prefixgate(name: str, config: Path, echo: str = "d__echo") -> Contender:
    return Contender(
        name,
        [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--log-level", "warning"],
        echo,
        "mcp SDK client -> prefixgate serve -> demo server",
    )


def via_fastmcp(name: str, python: str, config: Path, *, reuse: bool = False, echo: str = "echo") -> Contender:
    argv = [python, str(FASTMCP_PROXY), str(config)] + (["--reuse"] if reuse else [])
    note = "mcp SDK client -> FastMCP create_proxy" + (" (connected Client: session reuse)" if reuse else "")
    return Contender(name, argv, echo, note + " -> demo server(s)")


def http_client(headers: Mapping[str, str] | None = None) -> Any:
    """An HTTP client for the SDK's streamable-HTTP transport with the SDK's own defaults
    (redirects followed; 30 s, and 300 s to read a stream that stays open), but for idle
    connections kept 4 s, not 5: the servers' keep-alive timeout is 5 s (uvicorn's), and a
    call sent on a connection as that closes it failed, and the whole HTTP section with it."""
    import httpx2

    return httpx2.AsyncClient(
        headers=dict(headers or {}),
        follow_redirects=True,
        timeout=httpx2.Timeout(30.0, read=300.0),
        limits=httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=4.0),
    )


@contextmanager
def loopback_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on a free loopback port: yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def url_process(
    command: list[str], *, env: Mapping[str, str] | None = None, stderr: Any = subprocess.DEVNULL
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``command``, which prints the URL it serves as its first stdout line; yield the
    URL and the process, and stop it afterwards."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **(env or {})}
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith(("http://", "https://")), (command, url)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()



# --- the SDK client -----------------------------------------------------------------------


@dataclass
class Conn:
    session: Any
    dispatcher: Any
    pid: int | None
    started: float
    """perf_counter() just before the process was spawned."""

    async def raw(self, method: str, params: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        opts: dict[str, Any] = {}
        if timeout is not None:
            opts["timeout"] = timeout
        return await self.dispatcher.send_raw_request(method, params, opts)


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    keep = ("HOME", "PATH", "LANG", "LC_ALL", "TMPDIR", "XDG_STATE_HOME", "PYTHONPATH")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env | dict(extra)


@asynccontextmanager
async def connect(contender: Contender, errlog: Path, *, initialize: bool = True) -> AsyncIterator[Conn]:
    """Spawn the contender and open an initialised mcp SDK client session to it."""
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    params = StdioServerParameters(
        command=contender.argv[0],
        args=contender.argv[1:],
        env=_env(contender.env),
        cwd=str(ROOT),
        encoding_error_handler="replace",
    )
    errlog.parent.mkdir(parents=True, exist_ok=True)
    with errlog.open("a", encoding="utf-8") as err:
        before = children()
        started = time.perf_counter()
        if contender.mode == "auto":
            from mcp import Client

            async with Client(stdio_client(params, errlog=err), mode="auto") as client:
                new = children() - before
                yield Conn(client, None, min(new) if len(new) == 1 else None, started)
            return
        async with stdio_client(params, errlog=err) as (read, write):
            new = children() - before
            pid = min(new) if len(new) == 1 else None
            dispatcher: Any = JSONRPCDispatcher(read, write)
            async with ClientSession(dispatcher=dispatcher) as session:
                if initialize:
                    await session.initialize()
                yield Conn(session, dispatcher, pid, started)


@asynccontextmanager
async def connect_all(contenders: Sequence[Contender], errlog: Path) -> AsyncIterator[dict[str, Conn]]:
    """Start and connect every contender at once (start-up is not what is measured here)."""
    import anyio

    conns: dict[str, Conn] = {}
    stop = anyio.Event()
    failed: list[BaseException] = []

    async with anyio.create_task_group() as tg:

        async def hold(c: Contender, ready: anyio.Event) -> None:
            try:
                async with connect(c, errlog) as conn:
                    conns[c.name] = conn
                    ready.set()
                    await stop.wait()
            except Exception as exc:
                failed.append(exc)
                ready.set()

        events = []
        for c in contenders:
            ready = anyio.Event()
            events.append(ready)
            tg.start_soon(hold, c, ready)
        for ready in events:
            await ready.wait()
        try:
            if failed:
                raise failed[0]
            yield conns
        finally:
            stop.set()


# --- the raw client -----------------------------------------------------------------------


_ID = re.compile(rb'"id":\s*(\d+)\s*[,}]')


class RawClient:
    """Newline-delimited JSON-RPC over the pipes of a child, read in linear time (blocking).

    For measurements that must exclude the SDK client's costs (its quadratic line
    reassembly and typed validation): what the server side costs on the wire.
    """

    def __init__(self, argv: Sequence[str], errlog: Path, env: Mapping[str, str] | None = None) -> None:
        errlog.parent.mkdir(parents=True, exist_ok=True)
        self._err = errlog.open("ab")
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            cwd=ROOT,
            env=_env(env or {}),
            bufsize=1 << 20,
        )
        self._next = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, method: str, params: Mapping[str, Any] | None = None, *, notify: bool = False) -> int | None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        ident = None
        if not notify:
            self._next += 1
            ident = message["id"] = self._next
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        return ident

    def receive(self, ident: int) -> bytes:
        """The raw response line for request ``ident`` (notifications are skipped)."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError("server closed its stdout")
            found = _ID.search(line[:80]) or _ID.search(line[-80:])
            if found and int(found.group(1)) == ident and b'"method"' not in line[:80]:
                return line

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> bytes:
        ident = self.send(method, params)
        assert ident is not None
        return self.receive(ident)

    def initialize(self) -> None:
        self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
        )
        self.send("notifications/initialized", notify=True)

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        finally:
            self._err.close()


def fastmcp_python(explicit: str | None) -> tuple[str | None, str]:
    """The interpreter that runs the FastMCP contender, and why (or why there is none)."""
    candidates = [explicit] if explicit else [PYTHON]
    for python in candidates:
        if not python or not Path(python).exists():
            continue
        probe = subprocess.run(
            [python, "-c", "import fastmcp; print(fastmcp.__version__)"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return python, f"fastmcp {probe.stdout.split()[0]} ({python})"
    return None, "fastmcp is not installed (pip install -e '.[bench]'); FastMCP contenders skipped"
