"""The names the catalog lost, remembered for their "no longer available" answer, stay bounded
(gateway/engine/router.py ``MAX_REMOVED``): a server that renames its tools on every change
must not make the gateway remember names for ever. The end-to-end answer is tested in
tests/test_claims.py; here ``Router.publish`` alone, with epochs reduced to their names."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.engine import router
from gateway.engine.router import Router

pytestmark = pytest.mark.anyio


def epoch(*names: str) -> Any:
    return SimpleNamespace(catalog=SimpleNamespace(by_name=dict.fromkeys(names)))


async def test_removed_names_are_remembered_oldest_first_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router, "MAX_REMOVED", 5)
    r = Router({})
    await r.publish(epoch("keep", "a0"))
    for generation in range(1, 8):  # each epoch renames "a": the old name is removed
        await r.publish(epoch("keep", f"a{generation}"))
    assert list(r.removed) == ["a2", "a3", "a4", "a5", "a6"]  # the oldest forgotten
    await r.publish(epoch("keep", "a7", "a5"))  # a name back in the catalog is no longer removed
    assert list(r.removed) == ["a2", "a3", "a4", "a6"]
    await r.publish(epoch("a7", "a5"))
    assert list(r.removed) == ["a2", "a3", "a4", "a6", "keep"]


async def test_a_call_resolved_in_an_epoch_whose_server_a_reload_removed_is_refused() -> None:
    """A reload swaps the router's servers first and publishes the next epoch after its rebuild
    (in a thread): a call resolved against the epoch before, to a server just removed, failed on
    the server lookup (``KeyError``, a JSON-RPC error naming the id). It is an isError now."""
    r = Router({})
    entry = SimpleNamespace(server="gone", original="t", declaration={})
    old = SimpleNamespace(catalog=SimpleNamespace(get={"gone__t": entry}.get), lock_refusals={})
    result = await r._gated(old, "gone__t", {}, None, None, None, "2025-11-25")  # type: ignore[arg-type]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Tool 'gone__t' is no longer available: its server 'gone' was removed from the config."
    )
