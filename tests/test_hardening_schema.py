"""Hardening (issue 10): hostile schemas, names, results and secrets cost one request at most.

Every test runs the real gateway with a deliberately misbehaving downstream
(``tests/rogue_schema.py``, raw JSON lines on stdio) and the real SDK client.
"""

from __future__ import annotations

import contextlib
import json
import os
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bench.common import loopback_server
from spill import ArtifactStore, bound_result, json_size, list_artifacts, surely_within, visible_size
from tests.helpers import (
    ERAS,
    PYTHON,
    catalog_json,
    demo,
    http_gateway,
    run_cli,
    schemas_server,
    sdk_client,
    text,
    url_process,
    write_config,
)

pytestmark = pytest.mark.anyio

ROGUE = str(Path(__file__).with_name("rogue_schema.py"))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
    max_leaves=30,
)


def rogue(**spec: Any) -> dict[str, Any]:
    """A server table running the rogue server with this spec."""
    return {"command": PYTHON, "args": [ROGUE, json.dumps(spec)]}


def tool(name: str, schema: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": schema or {"type": "object"}, **extra}


# --------------------------------------------------------------------------- item 2: schemas


@contextmanager
def recording_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that serves a secret schema and records every hit."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            hits.append(self.path)
            body = json.dumps({"enum": ["INTERNAL-SECRET"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with loopback_server(Handler) as base:
        yield base, hits


def test_remote_ref_is_quarantined_and_never_fetched(tmp_path: Path) -> None:
    with recording_server() as (base, hits):
        ref = f"{base}/internal/admin.json"
        schema = {"type": "object", "properties": {"role": {"$ref": ref}}}
        config = write_config(tmp_path, {"r": rogue(tools=[tool("admin", schema), tool("fine")])})
        report = catalog_json(config)
        proc = run_cli("catalog", "--config", str(config), "--log-level", "warning")
        assert hits == []
    names = [t["name"] for t in report["tools"]]
    assert names == ["r__fine"]
    (warning,) = [w for w in report["warnings"] if w["kind"] == "quarantined"]
    assert warning["tool"] == "admin"
    assert warning["detail"] == (
        f"inputSchema.properties.role: $ref '{ref}' cannot be resolved: remote references are never fetched"
    )
    assert f"$ref '{ref}' cannot be resolved" in proc.stderr  # the log names it too
    assert "INTERNAL-SECRET" not in proc.stdout + proc.stderr + json.dumps(report)


def test_dangling_local_pointer_is_quarantined(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    config = write_config(tmp_path, {"r": rogue(tools=[tool("dangling", schema)])})
    report = catalog_json(config)
    (warning,) = report["warnings"]
    assert warning["kind"] == "quarantined"
    assert "$ref '#/$defs/missing' cannot be resolved" in warning["detail"]


@pytest.mark.parametrize("mode", ERAS)
async def test_remote_ref_tool_call_is_an_error_and_fetches_nothing(tmp_path: Path, mode: str) -> None:
    with recording_server() as (base, hits):
        schema = {"type": "object", "properties": {"role": {"$ref": f"{base}/internal/admin.json"}}}
        config = write_config(tmp_path, {"r": rogue(tools=[tool("admin", schema)])})
        async with sdk_client(config, mode) as client:
            with anyio.fail_after(30):
                result = await client.call_tool("r__admin", {"role": "x"})
        assert hits == []
    assert result.is_error
    assert "INTERNAL-SECRET" not in text(result)


REDOS = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
CYCLE = {
    "type": "object",
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    "properties": {"x": {"$ref": "#/$defs/a"}},
    "required": ["y"],
}


@pytest.mark.parametrize("mode", ERAS)
async def test_redos_pattern_answers_quickly_and_others_keep_running(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"r": rogue(tools=[tool("redos", REDOS), tool("other")])})
    async with sdk_client(config, mode) as client:
        await client.list_tools()
        slow: list[Any] = []

        async def attack() -> None:
            slow.append(await client.call_tool("r__redos", {"s": "a" * 30 + "!"}))

        with anyio.fail_after(20):  # main: 30 a's take minutes of backtracking on the event loop
            async with anyio.create_task_group() as group:
                group.start_soon(attack)
                other = await client.call_tool("r__other", {})
        assert not other.is_error and text(other) == "other ran"
        (result,) = slow
        assert result.is_error
        assert text(result).startswith("Invalid arguments for r__redos: arguments.s: ")
        assert "does not match" in text(result)


def exponential(levels: int) -> dict[str, Any]:
    """Each level refers to the next one twice: 2**levels evaluations for a wrong type."""
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


@pytest.mark.parametrize("mode", ERAS)
async def test_exponential_schema_is_cut_off_and_others_keep_running(tmp_path: Path, mode: str) -> None:
    tools = [tool("blowup", exponential(48)), tool("other"), tool("shared", exponential(3))]
    config = write_config(tmp_path, {"r": rogue(tools=tools)})
    async with sdk_client(config, mode) as client:
        await client.list_tools()
        slow: list[Any] = []

        async def attack() -> None:
            slow.append(await client.call_tool("r__blowup", {"x": 1}))

        # main and a worker thread alike: jsonschema holds the event loop (and the GIL) for hours
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(attack)
                await anyio.sleep(0.5)
                other = await client.call_tool("r__other", {})
                assert not other.is_error and text(other) == "other ran"
                fine = await client.call_tool("r__shared", {"x": "text"})
                assert not fine.is_error and text(fine) == "shared ran"
                wrong = await client.call_tool("r__shared", {"x": 1})
                assert wrong.is_error and text(wrong).startswith("Invalid arguments for r__shared: arguments.x: ")
        (result,) = slow
        assert result.is_error
        assert text(result) == (
            "Validation of arguments for r__blowup took longer than 2 s; the call was not forwarded."
        )
        again = await client.call_tool("r__shared", {"x": "again"})  # a fresh worker replaced the killed one
        assert not again.is_error


@pytest.mark.parametrize("mode", ERAS)
async def test_one_principal_s_slow_validations_leave_the_others_a_worker(tmp_path: Path, mode: str) -> None:
    """Alice sends twelve calls whose arguments take the whole validation budget; Bob's call to
    a referencing schema is validated at once, beside hers, not behind them. Before, the four
    workers were one queue for everybody: Bob waited for every one of Alice's calls."""
    from tests.test_principals import tokens_file

    tools = [tool("blowup", exponential(48)), tool("shared", exponential(3))]
    config = write_config(tmp_path, {"r": rogue(tools=tools)})
    with tokens_file(tmp_path, "token-of-alice", "token-of-bob") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, log):
            alice_headers = {"Authorization": "Bearer token-of-alice"}
            async with sdk_client(url, mode, headers={"Authorization": "Bearer token-of-bob"}) as bob:
                await bob.list_tools()
                done: list[Any] = []
                with anyio.fail_after(60):
                    async with sdk_client(url, mode, headers=alice_headers) as alice, anyio.create_task_group() as tg:

                        async def attack() -> None:
                            done.append(await alice.call_tool("r__blowup", {"x": 1}))

                        for _ in range(12):
                            tg.start_soon(attack)
                        while "argument validation took longer than 2 s" not in log.read_text():
                            await anyio.sleep(0.05)  # (all twelve are waiting or running by now)
                        fine = await bob.call_tool("r__shared", {"x": "text"})
                        finished_before_bob = len(done)
                        tg.cancel_scope.cancel()
                assert not fine.is_error and text(fine) == "shared ran"
                assert finished_before_bob <= 4, finished_before_bob  # (her first, her second pair at most)
                assert all(text(r).startswith("Validation of arguments for r__blowup took longer") for r in done)


def validation_workers(config: Path) -> int:
    """The validation workers of the gateway serving ``config`` (children of that process)."""
    parents = set()
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if not entry.name.isdigit():
                continue
            command = (entry / "cmdline").read_bytes()
            if str(config).encode() in command and b"serve" in command:
                parents.add(entry.name)
            elif b"gateway.engine.validation_worker" in command:
                found.append((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
    return sum(parent in parents for parent in found)


@pytest.mark.real_processes
@pytest.mark.parametrize("mode", ERAS)
async def test_a_principal_s_validations_at_every_profile_share_one_pool(tmp_path: Path, mode: str) -> None:
    """Each profile's endpoint had a pool of its own (four workers each, two a principal): one
    token calling at three endpoints ran six workers where one endpoint allows it two, and a
    gateway of N profiles four times N. One pool now serves every profile."""
    from tests.test_principals import tokens_file

    tools = [tool("blowup", exponential(48))]
    profiles = {name: {"servers": ["r"]} for name in ("one", "two")}
    config = write_config(tmp_path, {"r": rogue(tools=tools)}, profiles=profiles)
    with tokens_file(tmp_path, "token-of-alice") as tokens:
        with http_gateway(config, "--token-file", str(tokens)) as (url, log):
            headers = {"Authorization": "Bearer token-of-alice"}
            seen = 0
            with anyio.fail_after(60):
                async with contextlib.AsyncExitStack() as stack:
                    clients = [
                        await stack.enter_async_context(sdk_client(url + path, mode, headers=headers))
                        for path in ("", "/one", "/two")
                    ]
                    async with anyio.create_task_group() as tg:
                        for client in clients:
                            for _ in range(3):
                                tg.start_soon(client.call_tool, "r__blowup", {"x": 1})
                        while log.read_text().count("argument validation took longer than 2 s") < 2:
                            seen = max(seen, validation_workers(config))
                            await anyio.sleep(0.05)
                        tg.cancel_scope.cancel()
    assert 1 <= seen <= 2, seen  # (her share of the one pool: two workers)


@pytest.mark.parametrize("mode", ERAS)
async def test_ref_cycle_is_an_is_error_result(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"r": rogue(tools=[tool("cycle", CYCLE)])})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("r__cycle", {"x": 1})  # main: a JSON-RPC recursion error
            ok = await client.call_tool("r__cycle", {"x": 1, "y": 2})
    assert result.is_error
    assert text(result) == 'Invalid arguments for r__cycle: arguments: "y" is a required property'
    assert not ok.is_error and text(ok) == "cycle ran"


# --------------------------------------------------------------------------- item 4: policy


def renamed_crash(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.startswith("demo__crash_"))


@pytest.mark.parametrize("mode", ERAS)
async def test_deny_rule_survives_a_name_collision(tmp_path: Path, mode: str) -> None:
    config = write_config(
        tmp_path,
        {"demo": demo("--tools", 0), "r": {**rogue(tools=[tool("demo__crash")]), "prefix": ""}},
        policy={"deny": ["demo__crash"]},
    )
    async with sdk_client(config, mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "demo__crash" not in names
        both = renamed_crash(names)
        assert len(both) == 2  # demo's crash and the rogue's demo__crash, both suffixed
        for name in both:  # main: neither matched the rule and demo's real crash ran
            refused = await client.call_tool(name, {})
            assert refused.is_error
            assert "denied by policy (deny pattern 'demo__crash'" in text(refused)
        alive = await client.call_tool("demo__echo", {"text": "still here"})
    assert text(alive) == "still here"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_deny_pattern_typed_composed_denies_a_tool_listed_decomposed(tmp_path: Path, mode: str) -> None:
    """``deny = ["r__löschen"]`` as typed (``ö`` one code point, NFC) and a server listing
    ``löschen`` decomposed (``o`` + U+0308, NFD): the same text, but compared code point by
    code point the rule matched nothing, and the tool (published ``r__lo_schen``) ran."""
    decomposed = unicodedata.normalize("NFD", "löschen")
    config = write_config(tmp_path, {"r": rogue(tools=[tool(decomposed)])}, policy={"deny": ["r__löschen"]})
    async with sdk_client(config, mode) as client:
        (name,) = [t.name for t in (await client.list_tools()).tools if t.name.startswith("r__l")]
        refused = await client.call_tool(name, {})
    assert refused.is_error and "denied by policy (deny pattern 'r__löschen'" in text(refused), text(refused)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_deny_pattern_that_is_the_tools_own_name_denies_it_brackets_and_all(tmp_path: Path, mode: str) -> None:
    """``deny = ["r__drop[all]"]``, the name ``catalog`` shows for the tool before its rename:
    fnmatch read ``[all]`` as a character class, so the rule matched nothing and the tool ran."""
    config = write_config(tmp_path, {"r": rogue(tools=[tool("drop[all]")])}, policy={"deny": ["r__drop[all]"]})
    async with sdk_client(config, mode) as client:
        (name,) = [t.name for t in (await client.list_tools()).tools if "drop" in t.name]
        refused = await client.call_tool(name, {})
    assert refused.is_error and "denied by policy (deny pattern 'r__drop[all]'" in text(refused), text(refused)


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("over", ["stdio", "http"])
async def test_a_change_announced_while_the_gateway_starts_is_published(tmp_path: Path, mode: str, over: str) -> None:
    """A server that changes its tools right after answering its first ``tools/list``: its
    ``list_changed`` comes while the gateway is still listing it, or publishing its first
    catalog, and the change is published all the same (it was dropped in both windows: the
    old list then stayed for good)."""
    late = rogue(tools=[tool("before")], tools2=[tool("before"), tool("after")], tools2_after_list=True)
    config = write_config(tmp_path, {"r": {**late, "prefix": ""}})  # alone: the barrier follows its listing at once
    with contextlib.ExitStack() as stack:
        target: Path | str = config if over == "stdio" else stack.enter_context(http_gateway(config))[0]
        async with sdk_client(target, mode) as client:
            names: list[str] = []
            with anyio.fail_after(20):
                while "after" not in names:
                    names = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
                    await anyio.sleep(0.05)
            assert text(await client.call_tool("after", {})) == "after ran"


@pytest.mark.parametrize("mode", ERAS)
async def test_deny_rule_survives_a_rename_through_list_changed(tmp_path: Path, mode: str) -> None:
    config = write_config(
        tmp_path,
        {
            "demo": demo("--tools", 0),
            "r": {**rogue(tools=[tool("mutate")], tools2=[tool("mutate"), tool("demo__crash")]), "prefix": ""},
        },
        policy={"deny": ["demo__crash"]},
    )
    async with sdk_client(config, mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "demo__crash" in names
        await client.call_tool("mutate", {})
        with anyio.fail_after(20):
            while not renamed_crash(names):
                await anyio.sleep(0.1)
                names = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
        for name in renamed_crash(names):
            refused = await client.call_tool(name, {})
            assert refused.is_error and "deny pattern 'demo__crash'" in text(refused)
        alive = await client.call_tool("demo__echo", {"text": "still here"})
    assert text(alive) == "still here"


# --------------------------------------------------------------------------- item 5: the bound

PADS = ("_meta", "annotations", "block_meta", "unknown")
PAD_BYTES = 1_000_000


@given(JSON_VALUES, st.integers(0, 5000))
def test_surely_within_is_an_upper_bound(value: Any, limit: int) -> None:
    if surely_within(value, limit):
        assert json_size(value) <= limit


@given(JSON_VALUES)
@example({"": "abc"})
@example({"key": "x" * 100, "list": ["y" * 50, {"z": "w" * 20}], "n": 10**30, "f": 1.5, "b": True, "null": None})
@example(["s" * 40, "t"])
def test_surely_within_never_passes_a_value_one_byte_over(value: Any) -> None:
    # The limit one byte below the exact size: any undercount of any field shows here.
    assert not surely_within(value, json_size(value) - 1)


class _Unwalkable(list[Any]):
    def __iter__(self) -> Any:
        raise AssertionError("walked")


class _UnwalkableMap(dict[str, Any]):
    def items(self) -> Any:
        raise AssertionError("walked")


def test_surely_within_answers_a_long_container_without_walking_it() -> None:
    # A client's million-item argument or a server's million-item result is too long to be
    # surely within any small limit: known from its length, at no cost on the event loop.
    assert not surely_within({"a": _Unwalkable(range(1000))}, 1 << 30)
    assert not surely_within({"a": _UnwalkableMap((str(i), i) for i in range(1000))}, 1 << 30)
    assert surely_within({"a": list(range(100))}, 1 << 30)


@pytest.mark.parametrize("where", PADS)
def test_bound_result_counts_and_bounds_every_field(tmp_path: Path, where: str) -> None:
    from tests.rogue_schema import padded

    store = ArtifactStore(tmp_path / "artifacts", "c" * 64)
    result = padded(where, PAD_BYTES)
    assert visible_size(result) > PAD_BYTES
    out = bound_result(result, store=store)
    assert json_size(out) <= 65536
    assert out["content"][0]["text"].startswith("ok\n[prefixgate] result of ")
    (artifact,) = list_artifacts(store.root)
    assert artifact.size > PAD_BYTES  # the full result, padding included, is kept


@pytest.mark.parametrize("mode", ERAS)
async def test_padded_results_are_bounded_through_the_gateway(tmp_path: Path, mode: str) -> None:
    pads = {f"pad_{where.strip('_')}": [where, PAD_BYTES] for where in PADS}
    config = write_config(tmp_path, {"r": rogue(tools=[tool(name) for name in pads], pads=pads)})
    async with sdk_client(config, mode) as client:
        for name in pads:
            with anyio.fail_after(30):
                result = await client.call_tool(f"r__{name}", {})
            wire = result.model_dump_json(by_alias=True, exclude_none=True)
            assert len(wire.encode()) <= 65536, name  # main: over 1 MB passed through
            assert "exceeds the 65536-byte limit" in text(result)
            assert "saved as artifact" in text(result)


# --------------------------------------------------------------------------- item 10: names printed

FORGED = "2026-12-01 prefixgate WARNING forged line"
HOSTILE_NAMES = ["\ud800x", f"evil\n{FORGED}", "\x1b[31mred", "bell\x07", "csi\x9b2J", "rev\u202eesrever\u2066x"]
"""A lone surrogate, a forged log line, ESC and BEL, a C1 CSI (a terminal's ESC [), bidi
controls (an override and an isolate, which reorder what a terminal shows)."""


def assert_clean(output: str) -> None:
    assert "Traceback" not in output
    unprintable = {ch for ch in output if not ch.isprintable() and ch != "\n"}
    assert not unprintable, sorted(unprintable)
    assert not any(line.startswith(FORGED) for line in output.splitlines())


@pytest.mark.parametrize("command", [["catalog"], ["catalog", "--json"], ["doctor"], ["doctor", "--json"]])
def test_hostile_names_are_printed_quoted(tmp_path: Path, command: list[str]) -> None:
    tools = [tool(name) for name in HOSTILE_NAMES]
    tools.append(tool("schema\n" + FORGED, {"type": "string"}))  # quarantined: its name is in a warning
    config = write_config(tmp_path, {"r": rogue(tools=tools)})
    proc = run_cli(*command, "--config", str(config), "--log-level", "info")
    assert proc.returncode in ((0, 1) if command[0] == "doctor" else (0,)), proc.stderr
    assert_clean(proc.stdout)
    assert_clean(proc.stderr)
    assert "evil\\u000a" in proc.stdout + proc.stderr  # named, escaped
    if "--json" in command:
        report = json.loads(proc.stdout)  # every value exact, lone surrogates as \\u escapes
        if command[0] == "catalog":
            assert f"evil\n{FORGED}" in {t["original"] for t in report["tools"]}
            # The wire replaced the lone surrogate where it was parsed (U+FFFD).
            assert "\ufffdx" in {w["tool"] for w in report["warnings"]}


# --------------------------------------------------------------------------- item 11: secrets

SECRET = "s3cr3t-t0ken-value"


def test_header_with_cr_lf_in_the_config_is_a_config_error_that_hides_the_value(tmp_path: Path) -> None:
    value = f"Bearer {SECRET}\r\nX-Injected: 1"
    with echoing_server() as url:
        config = write_config(tmp_path, {"r": {"url": url, "headers": {"Authorization": value}}})
        runs = [(command, run_cli(*command, "--config", str(config))) for command in (["catalog"], ["doctor"])]
    for command, proc in runs:
        assert SECRET not in proc.stdout + proc.stderr  # main: h11's error quoted the value
        assert "servers.r.headers.Authorization: invalid header value" in proc.stdout + proc.stderr
        if command[0] == "catalog":  # main: a failed server, the h11 error quoting the value
            assert proc.returncode == 2
            assert proc.stderr.strip().count("\n") == 0  # one line


@pytest.mark.parametrize("value", [f"Bearer {SECRET}\r\nX-Injected: 1", f"Bearer {SECRET}\n", f"Bearer {SECRET}\t"])
def test_a_header_variable_with_a_control_character_fails_its_server_alone(tmp_path: Path, value: str) -> None:
    """As with an unset variable: the server that names it fails, naming the variable and the
    key (never the value); the other servers serve. The environment's value is not the config's
    text: a token read with its trailing newline must not stop every server."""
    from tests.helpers import catalog_json, demo

    with echoing_server() as url:
        config = write_config(
            tmp_path, {"r": {"url": url, "headers": {"Authorization": "Bearer ${PG_TEST_TOKEN}"}}, "d": demo()}
        )
        os.environ["PG_TEST_TOKEN"] = value.removeprefix("Bearer ")
        try:
            report = catalog_json(config)
            doctor = run_cli("doctor", "--config", str(config))
        finally:
            del os.environ["PG_TEST_TOKEN"]
    servers = {s["id"]: s for s in report["servers"]}
    assert servers["d"]["status"] == "ready" and servers["r"]["status"] == "failed"
    reason = servers["r"]["error"]
    assert "PG_TEST_TOKEN" in reason and "servers.r.headers.Authorization" in reason and "control character" in reason
    assert SECRET not in json.dumps(report) and SECRET not in doctor.stdout + doctor.stderr
    assert "PG_TEST_TOKEN" in doctor.stdout


@contextmanager
def echoing_server(bare: bool = False) -> Iterator[str]:
    """A remote MCP endpoint that rejects every request, quoting the Authorization header
    (``bare``: only the token in it, as "invalid token X" does)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            authorization = str(self.headers.get("Authorization"))
            message = f"rejected credentials {authorization.removeprefix('Bearer ') if bare else authorization}"
            data = json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32600, "message": message}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(405)
            self.end_headers()

        do_DELETE = do_GET  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    with loopback_server(Handler) as base:
        yield f"{base}/mcp"


@pytest.mark.parametrize("bare", [False, True], ids=["header", "token"])
def test_secret_quoted_by_a_failing_server_is_redacted(tmp_path: Path, bare: bool) -> None:
    """Whether the server quotes the whole header value or the token in it (the value of the
    ``${VAR}`` in ``Bearer ${VAR}``): it is masked everywhere it is recorded."""
    with echoing_server(bare) as url:
        config = write_config(tmp_path, {"r": {"url": url, "headers": {"Authorization": f"Bearer {SECRET}"}}})
        report = catalog_json(config)
        outputs = [run_cli(*command, "--config", str(config)) for command in (["doctor"], ["doctor", "--json"])]
    (server,) = report["servers"]
    assert server["status"] == "failed"
    assert server["error"] == "rejected credentials ***"  # main: the token, verbatim
    for proc in outputs:
        assert SECRET not in proc.stdout + proc.stderr
        assert "rejected credentials ***" in proc.stdout


def test_a_secret_a_stdio_server_writes_to_its_stderr_is_masked_in_the_log(tmp_path: Path) -> None:
    """Each stderr line of a server is logged (``[id] line``): a server that prints its
    configured token at start-up put it in the gateway's log, unmasked."""
    script = tmp_path / "leaky.py"
    script.write_text("import os, sys\nprint('starting with token', os.environ['LEAK_TOKEN'], file=sys.stderr)\n")
    config = write_config(
        tmp_path, {"leaky": {"command": PYTHON, "args": [str(script)], "env": {"LEAK_TOKEN": SECRET}}}
    )
    proc = run_cli("catalog", "--config", str(config))
    assert "[leaky] starting with token ***" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr


def test_a_secret_a_variable_puts_into_args_is_masked_where_it_is_quoted(tmp_path: Path) -> None:
    """``args = ["--token", "${TOKEN}"]``: a server that echoes its command line (on stderr,
    then failing) put the token in the log, ``catalog --json`` and ``doctor``, where an
    ``env`` value is masked. Now the values variables put into args are masked too; literal
    args, in the config in clear anyway, and values under 4 characters are left alone."""
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint('started with', *sys.argv[1:], file=sys.stderr)\nsys.exit(3)\n")
    args = [str(script), "--token", "${PG_ARG_TOKEN}", "--mode=${PG_ARG_MODE}", "--literal", "plainvalue"]
    config = write_config(tmp_path, {"leaky": {"command": PYTHON, "args": args}})
    env = {"PG_ARG_TOKEN": SECRET, "PG_ARG_MODE": "on"}
    proc = run_cli("catalog", "--config", str(config), "--json", env=env)
    outputs = [run_cli(*command, "--config", str(config), env=env) for command in (["doctor"], ["doctor", "--json"])]
    shown = "started with --token *** --mode=on --literal plainvalue"
    (server,) = json.loads(proc.stdout)["servers"]
    assert server["status"] == "failed" and server["error"].endswith(f"stderr: {shown}"), server
    assert f"[leaky] {shown}" in proc.stderr, proc.stderr  # the log
    for each in (proc, *outputs):
        assert SECRET not in each.stdout + each.stderr
    for each in outputs:
        assert shown in each.stdout


def test_redaction_covers_quoted_forms_and_spares_short_values() -> None:
    from gateway.config import ServerConfig
    from gateway.redact import redact

    config = ServerConfig(
        id="r", transport="http", url="http://x/mcp", headers={"Authorization": "Bearer tok'en\\1"}, env={"A": "on"}
    )
    assert redact("got Bearer tok'en\\1 back", config) == "got *** back"
    assert redact(f"h11: {'Bearer tok' + chr(39) + 'en' + chr(92) + '1'!r}", config) == 'h11: "***"'
    assert redact(f"{b'Bearer tok' + bytes([39]) + b'en' + bytes([92]) + b'1'!r}", config) == 'b"***"'
    assert redact("turned on", config) == "turned on"


def test_a_secret_in_a_servers_url_is_masked_where_an_error_quotes_the_url() -> None:
    """``url = "http://user:${KEY}@host/sse"`` or ``...?api_key=${KEY}``: an HTTP library's
    error quotes the URL it failed on, and that error reached the model and the log."""
    from gateway.config import ServerConfig
    from gateway.redact import redact

    url = "http://qa:S3CRETKEY%2F1@127.0.0.1:18202/sse?api_key=OTHER%20KEY456&v=2"
    config = ServerConfig(id="r", transport="sse", url=url)
    said = redact(f"Server error '500 Internal Server Error' for url '{url}' (S3CRETKEY/1, OTHER KEY456)", config)
    assert "S3CRETKEY" not in said and "OTHER" not in said and "KEY456" not in said, said
    assert said.startswith("Server error '500 Internal Server Error' for url 'http://qa:***@127.0.0.1:18202/sse?")


def test_pattern_the_validator_cannot_compile_is_a_quarantine_reason_with_its_path() -> None:
    from catalog.schema import check

    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "\\A[a-z]+\\Z"}}}
    reason = check(schema)
    assert reason is not None and reason.startswith("inputSchema.properties.x.pattern: ")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_ecma_262_pattern_python_cannot_compile_is_published_and_validated(tmp_path: Path, mode: str) -> None:
    """JSON Schema's regexes are ECMA-262: ``\\p{L}`` (and zod's ``.emoji()``) are valid there
    and were quarantined because Python's ``re`` refused them, so a tool a direct client lists
    was missing through the gateway. Now it is published, and its pattern still gates calls."""
    patterns = {"word": "^\\p{L}+$", "emoji": "^(\\p{Extended_Pictographic}|\\p{Emoji_Component})+$"}
    tools = [
        {"name": name, "inputSchema": {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}}
        for name, pattern in patterns.items()
    ]
    config = write_config(tmp_path, {"s": schemas_server(tmp_path, tools)})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"s__word", "s__emoji"} <= names, names
            assert text(await client.call_tool("s__word", {"x": "héllo"})) == '{"x": "h\\u00e9llo"}'
            refused = await client.call_tool("s__word", {"x": "h3llo"})
            assert refused.is_error and "does not match" in text(refused), text(refused)
            assert not (await client.call_tool("s__emoji", {"x": "🙂"})).is_error


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_ref_that_is_no_uri_is_published_and_validated(tmp_path: Path, mode: str) -> None:
    """zod-to-json-schema refers to a reused subschema by its path, as written: a property
    called ``home address`` or ``住所`` gives ``{"$ref": "#/properties/home address"}``.
    python-jsonschema resolves it, a direct client lists the tool; jsonschema-rs refused it
    (not a URI-reference) and the tool was quarantined. Now it is published as its server
    wrote it, and the reference still gates calls."""
    address = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [
        {
            "name": name,
            "inputSchema": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {home: address, "work": {"$ref": f"#/properties/{home}"}},
            },
        }
        for name, home in (("spaced", "home address"), ("kanji", "住所"))
    ]
    config = write_config(tmp_path, {"s": schemas_server(tmp_path, tools)})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            listed = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            assert {"s__spaced", "s__kanji"} <= set(listed), listed
            assert listed["s__kanji"]["properties"]["work"] == {"$ref": "#/properties/住所"}
            for name in ("s__spaced", "s__kanji"):
                passed = await client.call_tool(name, {"work": {"city": "Oslo"}})
                assert text(passed) == '{"work": {"city": "Oslo"}}', text(passed)
                refused = await client.call_tool(name, {"work": {"city": 5}})
                assert refused.is_error and "arguments.work.city" in text(refused), text(refused)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_path_of_a_bad_argument_is_bounded_however_long_or_deep(tmp_path: Path, mode: str) -> None:
    """The refusal names the argument's path, and stays one short line when the call's own
    names are long (an identifier-like key was quoted whole: a 100 KB isError text) or its
    nesting deep (a schema that refers to itself): the path's start and end are kept."""
    strings = {"type": "object", "additionalProperties": {"type": "string"}}
    nested = {"type": "array", "maxItems": 1, "items": {"$ref": "#/$defs/nested"}}
    tools = [
        {"name": "long", "inputSchema": {"type": "object", "additionalProperties": strings}},
        {  # validated in a worker process, whose answer names the path too
            "name": "longref",
            "inputSchema": {"type": "object", "additionalProperties": {"$ref": "#/$defs/s"}, "$defs": {"s": strings}},
        },
        {
            "name": "deep",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/nested"}},
                "$defs": {"nested": nested},
            },
        },
    ]
    deep: list[Any] = [[], []]
    for _ in range(100):  # (the SDK client serialises 255 levels at most)
        deep = [deep]
    config = write_config(tmp_path, {"s": schemas_server(tmp_path, tools)})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(120):
            long = await client.call_tool("s__long", {"k" * 50_000: {"v" * 50_000: 1}})
            assert long.is_error and len(text(long)) < 400, len(text(long))
            assert text(long).startswith("Invalid arguments for s__long: arguments.kkkk"), text(long)[:100]
            assert text(long).endswith('vvvv: 1 is not of type "string"'), text(long)[-100:]
            longer = "k" * 600_000  # (a path of two such names: more than the worker's answer line may hold)
            referring = await client.call_tool("s__longref", {longer: {longer: 1}})
            assert referring.is_error and len(text(referring)) < 400, len(text(referring))
            assert text(referring).startswith("Invalid arguments for s__longref: arguments.kkkk"), text(referring)[:200]
            assert text(referring).endswith('kkkk: 1 is not of type "string"'), text(referring)[-100:]
            refused = await client.call_tool("s__deep", {"a": deep})
            assert refused.is_error and len(text(refused)) < 400, len(text(refused))
            assert text(refused).startswith("Invalid arguments for s__deep: arguments.a[0][0]"), text(refused)[:100]
            assert "…[0][0]" in text(refused) and text(refused).endswith("has more than 1 item"), text(refused)[-100:]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_conditional_rule_a_call_breaks_is_named(tmp_path: Path, mode: str) -> None:
    """'"b" is a required property' where the schema's ``required`` lists no ``b`` named no rule
    the model could find: a violation under dependentRequired, dependencies or if/then/else
    says which (in the gateway and in the worker that validates referencing schemas)."""
    conditional = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "then": {"type": "string"}},
        "dependentRequired": {"a": ["b"]},
        "if": {"properties": {"a": {"const": "x"}}, "required": ["a"]},
        "then": {"required": ["then"]},
    }
    referring = {"type": "object", "properties": {"o": {"$ref": "#/$defs/c"}}, "$defs": {"c": conditional}}
    tools = [{"name": "plain", "inputSchema": conditional}, {"name": "referring", "inputSchema": referring}]
    config = write_config(tmp_path, {"s": schemas_server(tmp_path, tools)})
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            for name, wrap in (("s__plain", dict), ("s__referring", lambda **a: {"o": a})):
                where = "arguments" if name == "s__plain" else "arguments.o"
                needs_b = await client.call_tool(name, wrap(a="y"))
                assert text(needs_b) == (
                    f'Invalid arguments for {name}: {where}: "b" is a required property '
                    "(under the schema's dependentRequired)"
                ), text(needs_b)
                needs_then = await client.call_tool(name, wrap(a="x", b="z"))
                assert text(needs_then) == (
                    f'Invalid arguments for {name}: {where}: "then" is a required property '
                    "(under the schema's if/then)"
                ), text(needs_then)
                wrong_then = await client.call_tool(name, wrap(a="x", b="z", then=5))  # (a property called then)
                assert text(wrong_then) == f'Invalid arguments for {name}: {where}.then: 5 is not of type "string"'


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_union_no_branch_of_which_matched_names_the_argument_inside(tmp_path: Path, mode: str) -> None:
    """A discriminated union of objects in an array (zod's, pydantic's): the refusal named only
    the element and quoted it whole ('{...} is not valid under any of the schemas listed in
    the anyOf keyword'); it names the argument inside the branch nearest to the value (its
    discriminator matched) and the rule. Two branches equally near keep the union's message."""
    union = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "text"}, "body": {"type": "string"}},
                "required": ["kind", "body"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "image"}, "width": {"type": "integer"}},
                "required": ["kind", "width"],
            },
        ]
    }
    plain = {"type": "object", "properties": {"items": {"type": "array", "items": union}}}
    referring = {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/u"}}}}
    tools = [
        {"name": "plain", "inputSchema": plain},
        {"name": "referring", "inputSchema": {**referring, "$defs": {"u": union}}},
    ]
    config = write_config(tmp_path, {"s": schemas_server(tmp_path, tools)})
    items = [{"kind": "text", "body": "a"}, {"kind": "text", "body": "b"}, {"kind": "image", "width": "wide"}]
    async with sdk_client(config, mode) as client:
        with anyio.fail_after(60):
            for name in ("s__plain", "s__referring"):
                refused = await client.call_tool(name, {"items": items})
                assert text(refused) == (
                    f'Invalid arguments for {name}: arguments.items[2].width: "wide" is not of type "integer" '
                    "(no anyOf branch matched; nearest: branch 2 of 2)"
                ), text(refused)
                unknown = await client.call_tool(name, {"items": [{"kind": "video"}]})
                assert text(unknown) == (
                    f'Invalid arguments for {name}: arguments.items[0]: {{"kind":"video"}} is not valid under any '
                    "of the schemas listed in the 'anyOf' keyword"
                ), text(unknown)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_a_server_quotes_in_its_error_is_masked_in_what_the_client_gets(
    tmp_path: Path, mode: str
) -> None:
    """docs/configuration.md: header and env values never appear in errors. A server that
    refuses a call quoting the token (a JSON-RPC error, message and data) put the configured
    token into the isError the client got, and the model's context with it."""
    with url_process([PYTHON, "-m", "tests.classic_server", "--http"]) as (server_url, _):
        headers = {"Authorization": "Bearer ${QUOTED_TOKEN}"}
        config = write_config(tmp_path, {"c": {"url": server_url, "headers": headers}})
        async with sdk_client(config, mode, env={"QUOTED_TOKEN": SECRET}) as client:
            with anyio.fail_after(60):
                refused = await client.call_tool("c__refuse_authorization", {})
    assert refused.is_error and "token rejected: ***" in text(refused), text(refused)
    assert SECRET not in text(refused)
