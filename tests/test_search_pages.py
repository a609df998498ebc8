"""``tool_search`` pages within the bound every result has (issue of a QA round): measured as
the result's JSON (escaping included, as every bounded result is) with the line naming the
servers that are down counted in, at ``[spill] max_visible_bytes``; and a tool whose schema
no page can hold is shown without it, the schema kept as an artifact the model reads, so the
tool can still be found, activated and called. Before, such a tool made every page "0 shown:
call again with the same offset", and pages of quote-heavy schemas reached ~87 KB.

Real gateway, a real stdio server listing the schemas (tests/schemas_server.py), the SDK
client in both eras.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spill import text_result_size
from tests.helpers import ERAS, PYTHON, sdk_client, text, write_config

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


def tools_file(tmp_path: Path) -> Path:
    field = {"type": "string", "description": "One field of the zebra feed."}
    giant = {"type": "object", "properties": {f"field_{i}": field for i in range(1500)}}
    quoted = {"type": "object", "properties": {"mode": {"enum": [f'say "{i}" \\ twice' for i in range(120)]}}}
    tools = [
        {"name": "giant", "description": "Feeds zebras, every field.", "inputSchema": giant},
        *({"name": f"zebra_{i}", "description": "Counts zebras.", "inputSchema": {"type": "object"}} for i in range(3)),
        *({"name": f"quoted_{i}", "description": "Quotes zebras.", "inputSchema": quoted} for i in range(30)),
    ]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    return path


def config_for(tmp_path: Path, **spill: Any) -> Path:
    listing = ["-m", "tests.schemas_server", str(tools_file(tmp_path))]
    schemas = {"command": PYTHON, "args": listing, "cwd": str(ROOT)}
    servers = {"s": schemas, "gone": {"command": "no-such-server"}}
    tables: dict[str, Any] = {"client": {"declarations": "on-demand"}}
    if spill:
        tables["spill"] = spill
    return write_config(tmp_path, servers, **tables)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_schema_no_page_holds_is_an_artifact_and_the_tool_still_runs(tmp_path: Path, mode: str) -> None:
    async with sdk_client(config_for(tmp_path), mode) as client:
        found = await client.call_tool("tool_search", {"query": "zebras feeds counts", "limit": 4})
        page = text(found)
        assert not found.is_error and text_result_size(page) <= 65536
        shown = re.findall(r"^\d+\. (\S+)$", page, re.MULTILINE)
        assert "s__giant" in shown and len(shown) == 4, page  # the small ones after it too
        where = re.search(r"inputSchema: (\d+) bytes, too long for a search page; saved as artifact (\S+); ", page)
        assert where is not None, page
        assert f'read it with artifact_read {{"id": "{where[2]}"}}.' in page
        assert "Servers not available now" in page and "gone (failed)" in page
        schema = await client.call_tool("artifact_read", {"id": where[2], "find": '"field_1499"'})
        assert not schema.is_error and '"field_1499"' in text(schema)
        ran = await client.call_tool("tool_call", {"name": "s__giant", "arguments": {"field_7": "hay"}})
        assert not ran.is_error and json.loads(text(ran)) == {"field_7": "hay"}  # activated by the search


@pytest.mark.parametrize("mode", ERAS)
async def test_a_page_is_bounded_as_json_with_the_servers_that_are_down(tmp_path: Path, mode: str) -> None:
    for bound in (65536, 8192):
        config = config_for(tmp_path, max_visible_bytes=bound)
        async with sdk_client(config, mode) as client:
            found = await client.call_tool("tool_search", {"query": "quotes zebras", "limit": 50})
        page = text(found)
        assert not found.is_error and page.endswith("gone (failed).")
        assert text_result_size(page) <= bound, bound
        assert len(page.encode()) < text_result_size(page) - 1000  # its escaping counted: it matters
        assert re.search(r"did not fit in \d+ bytes: call tool_search again with offset [1-9]", page), page


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_policy_refuses_is_shown_but_never_said_to_be_activated(tmp_path: Path, mode: str) -> None:
    """tool_search said "Activated: d__fail" for a tool policy denies, and the call right
    after was refused: the model was told a tool was ready that can never run."""
    from tests.helpers import demo

    config = write_config(tmp_path, {"d": {**demo("--tools", 1), "deferred": True}}, policy={"deny": ["d__fail"]})
    async with sdk_client(config, mode) as client:
        found = text(await client.call_tool("tool_search", {"query": "d__fail d__echo", "limit": 5}))
        assert "1. d__" in found and "d__fail" in found
        activated = re.search(r"^Activated: (.*)\.$", found, re.M)
        assert activated is not None and "d__fail" not in activated.group(1) and "d__echo" in activated.group(1)
        assert "Not activated, refused by policy or the catalog lock: d__fail." in found
        refused = await client.call_tool("d__fail", {})
        assert refused.is_error and "denied by policy" in text(refused)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_whose_description_no_page_holds_is_still_found_and_runs(tmp_path: Path, mode: str) -> None:
    """At a small ceiling the excerpt of a long description in a script of 3-byte characters
    (900 bytes for 300 characters) did not fit a page even without the schema: every page was
    "Showing 0 of 1 ... call tool_search again with offset 0", so the deferred tool could never
    be activated. It is shown with its schema and without the excerpt now."""
    tools = [{"name": "find_docs", "description": "検索" * 200, "inputSchema": {"type": "object"}}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    server = {"command": PYTHON, "args": ["-m", "tests.schemas_server", str(path)], "cwd": str(ROOT), "deferred": True}
    config = write_config(
        tmp_path, {"s": server}, client={"declarations": "on-demand"}, spill={"max_visible_bytes": 1024}
    )
    async with sdk_client(config, mode) as client:
        found = await client.call_tool("tool_search", {"query": "find docs", "limit": 1})
        page = text(found)
        assert not found.is_error and text_result_size(page) <= 1024
        assert '1. s__find_docs\ninputSchema: {"type":"object"}\n' in page and "Activated: s__find_docs." in page
        ran = await client.call_tool("tool_call", {"name": "s__find_docs", "arguments": {"q": "x"}})
        assert not ran.is_error and json.loads(text(ran)) == {"q": "x"}


@pytest.mark.parametrize("mode", ERAS)
async def test_a_small_ceiling_shows_a_match_whatever_the_echo_and_the_servers_down(tmp_path: Path, mode: str) -> None:
    """At the smallest ceiling (1 KiB) the fixed text of a page (the query's echo, 7 bytes a control
    character in the result's JSON; the line naming 15 servers that are down) left no room for a
    match: every page said "Showing 0 of 1 ... call tool_search again with offset 0", cut the servers'
    line mid-word, and the deferred tool could never run. The echo and the line give way now."""
    description = "Looks up a zebra by its stripes. " * 6
    tools = [{"name": "find_zebra", "description": description, "inputSchema": {"type": "object"}}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    server = {"command": PYTHON, "args": ["-m", "tests.schemas_server", str(path)], "cwd": str(ROOT), "deferred": True}
    down = {f"unavailable_server_number_{i:02d}_with_a_long_name": {"command": "no-such-server"} for i in range(15)}
    config = write_config(
        tmp_path, {"s": server, **down}, client={"declarations": "on-demand"}, spill={"max_visible_bytes": 1024}
    )
    async with sdk_client(config, mode) as client:
        for query in ("\x01" * 99 + " zebra", "zebra"):
            found = await client.call_tool("tool_search", {"query": query, "limit": 1})
            page = text(found)
            assert not found.is_error and text_result_size(page) <= 1024, page
            assert "1. s__find_zebra\n" in page and "Activated: s__find_zebra." in page, page
            assert page.endswith(" more.") and "unavailable_server_number_00_with_a_long_name (failed)" in page, page
        missing = text(await client.call_tool("tool_search", {"query": "unavailable_server_number_99 " * 16}))
        assert text_result_size(missing) <= 1024 and missing.startswith("No tools match "), missing
        assert "\nServers not available now" in missing and missing.endswith("."), missing  # whole, not cut
        ran = await client.call_tool("tool_call", {"name": "s__find_zebra", "arguments": {}})
        assert not ran.is_error, text(ran)
