"""The first catalog frozen out of the garbage collector's full collections
(gateway/engine/frozen.py): once, a few seconds after a real gateway published it, over
stdio and HTTP, with clients of both eras; and a frozen catalog still goes, without the
collector, when a later epoch replaces it (it holds no reference cycle: one would keep
every replaced catalog for good)."""

from __future__ import annotations

import contextlib
import gc
import weakref
from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.engine.epoch import epoch_of
from gateway.engine.frozen import freeze_the_first_catalog
from gateway.engine.hub import Hub
from tests.helpers import ERAS, PYTHON, demo, http_gateway, sdk_client, text, wait_for, write_config
from tests.test_publishing import up

pytestmark = pytest.mark.anyio

FROZEN = "objects frozen out of its full collections"


async def test_a_frozen_catalog_still_goes_when_a_new_epoch_replaces_it(tmp_path: Path) -> None:
    server = {"command": PYTHON, "args": ["-c", "pass"]}
    hub = Hub(load_config(write_config(tmp_path, {"a": server})), persist=False, use_lock=False)
    up(hub, "a", "one", "two")
    await hub.publisher.first_epoch(epoch_of(hub.config, hub.downstreams, hub.checks))
    first = hub.router.epoch
    assert first is not None
    await first.searchable()
    kept = [weakref.ref(first), weakref.ref(first.catalog), weakref.ref(first.index)]
    del first
    before = gc.get_freeze_count()
    try:
        await freeze_the_first_catalog(0)
        assert gc.get_freeze_count() > before
        up(hub, "a", "three")
        await hub.publisher.rebuild("server 'a' changed its tools")
        assert hub.router.epoch is not None and sorted(hub.router.epoch.catalog.by_name) == ["a__three"]
        assert [ref() for ref in kept] == [None, None, None]  # freed by reference counting alone
    finally:
        gc.unfreeze()  # (this test process's objects back in the collector's reach)


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("front", ["stdio", "http"])
async def test_a_gateway_freezes_its_first_catalog_once(tmp_path: Path, front: str, mode: str) -> None:
    config = write_config(tmp_path, {"d": demo()})
    with contextlib.ExitStack() as stack:
        if front == "http":
            target, errlog = stack.enter_context(http_gateway(config, "--log-level", "debug"))
            client_cm = sdk_client(target, mode)
        else:
            errlog = tmp_path / "gateway.log"
            client_cm = sdk_client(config, mode, errlog=errlog, log_level="debug")
        async with client_cm as client:
            assert "d__echo" in [tool.name for tool in (await client.list_tools()).tools]
            await wait_for(lambda: FROZEN in errlog.read_text(), 30)
            assert text(await client.call_tool("d__echo", {"text": "after"})) == "after"
    assert errlog.read_text().count(FROZEN) == 1
