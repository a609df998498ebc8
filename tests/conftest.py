"""Shared fixtures: real gateway processes, real demo servers, the real mcp SDK client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

PYTHON = sys.executable
GATEWAY = [PYTHON, "-m", "gateway"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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


def catalog_json(config: Path) -> dict[str, Any]:
    proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "warning")
    assert proc.returncode in (0, 1), proc.stderr
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


@asynccontextmanager
async def gateway(
    config: Path, *extra: str, env: Mapping[str, str] | None = None, log_level: str = "info"
) -> AsyncIterator[Gateway]:
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
            async with ClientSession(dispatcher=dispatcher) as session:
                await session.initialize()
                yield Gateway(session, dispatcher, stderr_path)
