"""The publisher's order around the discovery barrier, in process: its epoch is out (clients
list and call) a while before the barrier counts as passed (its history is still being
written). What happens in that window must not be lost. The engine is the real one (a
``Hub`` from a real config); only the servers' listings are set by hand, and the epoch
history is one that holds its write until the test lets it go."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.config import load_config
from gateway.engine.epoch import epoch_of
from gateway.engine.hub import Hub
from tests.helpers import PYTHON, write_config

pytestmark = pytest.mark.anyio


class HeldHistory:
    """An epoch history whose first write waits for ``release`` (as a slow disk would)."""

    def __init__(self) -> None:
        self.writing = threading.Event()
        self.release = threading.Event()
        self.records: list[dict[str, Any]] = []

    def last(self) -> dict[str, Any] | None:
        return self.records[-1] if self.records else None

    def append(self, record: dict[str, Any]) -> None:
        self.writing.set()
        assert self.release.wait(30), "the test never let the write go"
        self.records.append(record)


def up(hub: Hub, server_id: str, *tools: str) -> None:
    """``server_id`` listed ``tools`` and is ready (what its supervisor records)."""
    downstream = hub.by_id[server_id]
    downstream.tools = tuple({"name": name, "inputSchema": {"type": "object"}} for name in tools)
    downstream.source = "live"
    downstream.status = "ready"


async def test_a_server_up_while_the_barriers_epoch_is_published_is_rebuilt_in(tmp_path: Path) -> None:
    """A server past the discovery deadline that comes up after the barrier's epoch was built,
    but before that epoch is fully out, gets its tools published once it is (it used to be
    ignored there: neither "before the barrier" nor "after" it)."""
    server = {"command": PYTHON, "args": ["-c", "pass"]}
    config = load_config(write_config(tmp_path, {"a": server, "b": server}))
    hub = Hub(config, persist=False, use_lock=False)
    history = hub.publisher.history = HeldHistory()  # type: ignore[assignment]
    up(hub, "a", "one")
    hub.by_id["b"].status = "failed"  # not up by the deadline
    epoch = epoch_of(config, hub.downstreams, hub.checks)
    assert sorted(epoch.catalog.by_name) == ["a__one"]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.publisher.first_epoch, epoch)
            await anyio.to_thread.run_sync(history.writing.wait)
            assert hub.router.epoch is epoch and not hub.publisher.discovered.is_set()
            up(hub, "b", "two")
            await hub.publisher.server_up(hub.by_id["b"])
            history.release.set()
    assert hub.router.epoch is not None
    assert sorted(hub.router.epoch.catalog.by_name) == ["a__one", "b__two"]
    assert [r["reason"] for r in history.records] == ["the discovery barrier", "server 'b' is ready"]
