"""Hard names through a real gateway: collisions, length, characters, non-BMP; calls route back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import catalog_json, demo, gateway, run_cli, schemas_server, write_config

pytestmark = pytest.mark.anyio

LONG = "fetch_" + "very_long_tool_name_" * 5  # 106 characters
OPENAI = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def hard_names(directory: Path, order: tuple[str, ...]) -> Path:
    """Servers listed in ``order`` (TOML order must not matter)."""
    servers = {
        "x": {**demo("--tools", 0, "--name", "x", "--extra-tool", "y__z", "--extra-tool", LONG), "prefix": "x"},
        "x2": {**demo("--tools", 0, "--name", "x2", "--extra-tool", "z"), "prefix": "x__y"},
        "dots": demo("--tools", 0, "--name", "dots", "--extra-tool", "a.b", "--extra-tool", "a b"),
        "emoji": demo("--tools", 0, "--name", "emoji", "--extra-tool", "smile😀", "--extra-tool", "smile_"),
    }
    return write_config(directory, {k: servers[k] for k in order})


async def test_hard_names_are_valid_unique_deterministic_and_route_back(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = catalog_json(hard_names(tmp_path / "one", ("x", "x2", "dots", "emoji")))
    second = catalog_json(hard_names(tmp_path / "two", ("emoji", "dots", "x2", "x")))
    assert first["declarations"] == second["declarations"]

    names = [t["name"] for t in first["tools"]]
    assert len(set(names)) == len(names)
    assert all(OPENAI.fullmatch(n) for n in names), names
    renamed = {(w["server"], w["tool"]) for w in first["warnings"] if w["kind"] == "renamed"}
    assert {("x", "y__z"), ("x2", "z"), ("x", LONG), ("dots", "a.b"), ("dots", "a b")} <= renamed
    assert ("emoji", "smile😀") in renamed

    route = {(t["server"], t["original"]): t["name"] for t in first["tools"]}
    # Both members of the colliding pair are suffixed, so neither depends on who answered first.
    for key in (("x", "y__z"), ("x2", "z")):
        assert re.fullmatch(r"x__y__z_[0-9a-f]{8}", route[key]), route[key]
    assert len(route[("x", LONG)]) == 64

    config = hard_names(tmp_path, ("x", "x2", "dots", "emoji"))
    async with gateway(config) as gw:
        published = [t.name for t in (await gw.session.list_tools()).tools]
        assert [n for n in published if n != "artifact_read"] == names
        for (server, original), name in route.items():
            if original in ("echo", "payload", "structured", "image", "fail", "slow", "crash"):
                continue
            result = await gw.session.call_tool(name, {})
            assert not result.is_error, (name, result)
            assert result.content[0].text == f"{server}:{original}"


def test_a_server_whose_names_all_sanitise_alike_costs_a_bounded_report(tmp_path: Path) -> None:
    """1,000 tools named with two CJK characters each are all ``s____`` once sanitised. Each
    rename's reason named every other member of the group: ``catalog --json`` printed 50 MB
    (1,500 tools: 117 MB, 17 s, 770 MB of memory) and logged as much. Now each names 3 others
    and counts the rest; every tool is still published under its own name."""
    tools = [{"name": chr(0x4E00 + i) * 2, "inputSchema": {"type": "object"}} for i in range(1000)]
    server = schemas_server(tmp_path, tools)
    proc = run_cli("catalog", "--config", str(write_config(tmp_path, {"s": server})), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout) < 1_000_000 and len(proc.stderr) < 500_000, (len(proc.stdout), len(proc.stderr))
    report = json.loads(proc.stdout)
    names = [t["name"] for t in report["tools"]]
    assert len(set(names)) == 1000 and all(re.fullmatch(r"s_____[0-9a-f]{8}", n) for n in names)
    assert all(w["detail"].endswith("and 996 more)") for w in report["warnings"] if w["kind"] == "renamed")
