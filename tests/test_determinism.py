"""The published tools/list bytes do not depend on start-up order, key order or seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import catalog_json, demo, gateway, wire, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.real_processes]  # string hashing randomised per process, as in real runs

# (delay for a, b, c; seed offset): each run starts the servers in another order.
RUNS = [((0.6, 0.3, 0.0), 0), ((0.0, 0.3, 0.6), 1), ((0.3, 0.0, 0.6), 2), ((0.6, 0.0, 0.3), 3), ((0.0, 0.6, 0.3), 4)]


def three_servers(directory: Path, delays: tuple[float, float, float], seed: int) -> Path:
    return write_config(
        directory,
        {
            name: demo("--tools", 6, "--seed", seed * 10 + i, "--startup-delay", delay, "--name", name)
            for i, (name, delay) in enumerate(zip(("a", "b", "c"), delays, strict=True))
        },
    )


async def test_tools_list_bytes_identical_across_runs_and_equal_catalog_json(tmp_path: Path) -> None:
    received: list[bytes] = []
    for index, (delays, seed) in enumerate(RUNS):
        directory = tmp_path / f"run{index}"
        directory.mkdir()
        config = three_servers(directory, delays, seed)
        async with gateway(config) as gw:
            first = await gw.raw("tools/list")
            second = await gw.raw("tools/list")
        assert wire(first) == wire(second), "tools/list changed within one epoch"
        assert "nextCursor" not in first
        received.append(wire(first["tools"]))
    assert len(set(received)) == 1, "tools/list bytes differ between runs"

    report = catalog_json(three_servers(tmp_path, RUNS[0][0], seed=99))
    assert wire(report["declarations"]) == received[0]
    names = [tool["name"] for tool in json.loads(received[0])]
    assert names == sorted(names, key=lambda n: n.encode("utf-16-be"))
    assert len(names) == 3 * (6 + 7) + 1 and "artifact_read" in names


def test_fingerprint_ignores_key_and_required_order(tmp_path: Path) -> None:
    fingerprints = set()
    for seed in (1, 2, 3):
        directory = tmp_path / f"s{seed}"
        directory.mkdir()
        config = write_config(directory, {"x": demo("--tools", 8, "--seed", seed)})
        fingerprints.add(catalog_json(config)["fingerprint"])
    assert len(fingerprints) == 1
