"""spill.bound: the visible-size measure, previews, trailers, retention and the SDK rule."""

from __future__ import annotations

import base64
import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spill import store as store_mod
from spill.bound import bound_result, canonical_json, json_size, structured_limit, structured_text, visible_size
from spill.store import ArtifactStore, StoreError, list_artifacts

SESSION = "c" * 64
TRAILER_ID = re.compile(r'saved as artifact ([A-Za-z0-9_-]+); read it with artifact_read \{"id": "([A-Za-z0-9_-]+)"\}')
NASTY = st.text(
    alphabet=st.sampled_from(['"', "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "a", "é", "漢", "😀", "…"])
)
ANY_TEXT = st.one_of(st.text(), NASTY, st.text(max_size=3000))


def reference_size(result: dict[str, Any]) -> int:
    return len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode())


def text_result(*texts: str, **extra: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t} for t in texts], **extra}


def only_text(result: dict[str, Any]) -> str:
    [block] = result["content"]
    assert block["type"] == "text"
    return str(block["text"])


STRUCTURED_ID = re.compile(
    r"structuredContent \(\d+ bytes of JSON\) saved as artifact ([A-Za-z0-9_-]+); "
    r'read it the same way: \{"id": "([A-Za-z0-9_-]+)"\}'
)


def structured_artifact(text: str, store: ArtifactStore) -> bytes:
    m = STRUCTURED_ID.search(text)
    assert m and m.group(1) == m.group(2)
    return store.read(m.group(1), 0, 1 << 30)


def artifact_of(text: str, store: ArtifactStore) -> bytes:
    m = TRAILER_ID.search(text)
    assert m and m.group(1) == m.group(2)
    return store.read(m.group(1), 0, 1 << 30)


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts", SESSION)


# --------------------------------------------------------------------------- the measure

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | ANY_TEXT,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(ANY_TEXT, kids, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_json_size_equals_compact_json_length(value: Any) -> None:
    assert json_size(value) == len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_visible_size_counts_escapes_and_every_field() -> None:
    r = text_result('a"\n\x01', structuredContent={"k": [1, None]}, isError=False, _meta={"big": "x" * 1000})
    assert (
        visible_size(r)
        == reference_size(r)
        == len(
            '{"content":[{"type":"text","text":"a\\"\\n\\u0001"}],"structuredContent":{"k":[1,null]},'
            '"isError":false,"_meta":{"big":"' + "x" * 1000 + '"}}'
        )
    )


def test_non_finite_numbers_are_written_and_measured_as_null() -> None:
    # 1e400 parses as inf; JSON has no such number: artifacts say null, as the client is sent
    # it, never the bare token Infinity (json.dumps' default), and the size counts null.
    value = {"v": float("inf"), "n": [float("nan"), -float("inf"), 1.5]}
    assert canonical_json(value) == b'{"n":[null,null,1.5],"v":null}'
    assert json.loads(structured_text(value)) == {"n": [None, None, 1.5], "v": None}
    assert json_size(value) == len(b'{"v":null,"n":[null,null,1.5]}')
    assert value["v"] == float("inf") and value["n"][2] == 1.5  # the value itself is not edited


def test_lone_surrogates_are_measured_as_replacement_characters() -> None:
    r = text_result("\ud800" * 2000)
    assert visible_size(r) == reference_size(text_result("\ufffd" * 2000))
    out = bound_result(r, max_visible_bytes=1024, store=None)
    only_text(out).encode("utf-8")  # valid UTF-8


# --------------------------------------------------------------------------- pass-through


def test_small_result_is_returned_unchanged(store: ArtifactStore) -> None:
    r = text_result("hello", structuredContent={"a": 1}, isError=False, _meta={"m": 1})
    assert bound_result(r, store=store) is r
    exact = text_result("x" * (65536 - reference_size(text_result(""))))
    assert reference_size(exact) == 65536
    assert bound_result(exact, store=store) is exact
    assert list_artifacts(store.root) == []


def test_ceiling_below_minimum_is_rejected() -> None:
    with pytest.raises(ValueError):
        bound_result(text_result("x"), max_visible_bytes=1023, store=None)


# --------------------------------------------------------------------------- properties


def check_bounded(out: dict[str, Any], ceiling: int) -> str:
    assert visible_size(out) == reference_size(out) <= ceiling
    text = only_text(out)
    text.encode("utf-8")  # no lone surrogate: valid UTF-8
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(ANY_TEXT, min_size=1, max_size=4), pad=st.integers(0, 5000), ceiling=st.integers(1024, 4096))
def test_property_text_results(store: ArtifactStore, texts: list[str], pad: int, ceiling: int) -> None:
    texts = [*texts[:-1], texts[-1] + '"\n' * pad]
    r = text_result(*texts)
    out = bound_result(r, max_visible_bytes=ceiling, store=store)
    event("fits" if reference_size(r) <= ceiling else "bounded")
    if reference_size(r) <= ceiling:
        assert out is r
        return
    text = check_bounded(out, ceiling)
    assert artifact_of(text, store) == "\n".join(texts).encode()
    assert f"exceeds the {ceiling}-byte limit" in text


BLOCK = st.one_of(
    ANY_TEXT.map(lambda t: {"type": "text", "text": t}),
    st.binary(max_size=4000).map(
        lambda b: {"type": "image", "data": base64.b64encode(b).decode(), "mimeType": "image/png"}
    ),
    st.binary(max_size=4000).map(
        lambda b: {"type": "audio", "data": base64.b64encode(b).decode(), "mimeType": "audio/wav"}
    ),
    ANY_TEXT.map(lambda t: {"type": "resource", "resource": {"uri": "file:///a", "text": t, "mimeType": "text/plain"}}),
    st.binary(max_size=2000).map(
        lambda b: {"type": "resource", "resource": {"uri": "file:///b", "blob": base64.b64encode(b).decode()}}
    ),
    st.just({"type": "resource_link", "uri": "file:///c", "name": "c"}),
)


FILLER = st.one_of(
    st.tuples(ANY_TEXT, st.integers(1, 3000)).map(lambda p: {"type": "text", "text": (p[0] or "x") * p[1]}),
    st.integers(1000, 20_000).map(lambda n: {"type": "image", "data": "A" * n, "mimeType": "image/jpeg"}),
    st.integers(0, 5000).map(lambda n: {"type": "resource", "resource": {"uri": "u", "text": '"\n' * n}}),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    blocks=st.lists(BLOCK, max_size=4),
    filler=FILLER,
    at=st.integers(0, 4),
    structured=st.none() | st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=3) | st.just({"big": "b" * 3000}),
    ceiling=st.integers(1024, 3000),
    schema=st.booleans(),
)
def test_property_mixed_results(
    store: ArtifactStore,
    blocks: list[dict[str, Any]],
    filler: dict[str, Any],
    at: int,
    structured: Any,
    ceiling: int,
    schema: bool,
) -> None:
    blocks = [*blocks[:at], filler, *blocks[at:]]
    r: dict[str, Any] = {"content": blocks, "_meta": {"k": "v"}}
    if structured is not None:
        r["structuredContent"] = structured
    out = bound_result(r, max_visible_bytes=ceiling, store=store, output_schema={"type": "object"} if schema else None)
    event("fits" if reference_size(r) <= ceiling else "bounded")
    if reference_size(r) <= ceiling:
        assert out is r
        return
    text = check_bounded(out, ceiling)
    assert out["_meta"] == {"k": "v"}
    kept = "structuredContent" in out
    if kept:
        assert out["structuredContent"] == structured
    all_text = all(b["type"] == "text" for b in blocks)
    expected = "\n".join(b["text"] for b in blocks).encode() if all_text else canonical_json(r)
    if all_text and structured is not None and not kept:  # the structured part is its own artifact
        trailer = text.rsplit("\n[prefixgate] ", 1)[1]
        if re.search(r"^text \(\d+ bytes\)", trailer, re.M):
            assert artifact_of(text, store) == expected
            assert json.loads(structured_artifact(text, store)) == structured
        else:  # the text shown whole is not saved as well
            assert text.startswith(expected.decode() + "\n[prefixgate] ")
            assert json.loads(artifact_of(text, store)) == structured
    else:
        assert artifact_of(text, store) == expected
        assert STRUCTURED_ID.search(text) is None
    assert out.get("isError", False) is (schema and not kept)


# --------------------------------------------------------------------------- preview shape


def test_preview_has_head_omission_tail_and_trailer(store: ArtifactStore) -> None:
    body = "".join(f"line {i}\n" for i in range(100_000))
    out = bound_result(text_result(body), store=store)
    text = check_bounded(out, 65536)
    head, rest = text.split("\n… ", 1)
    omitted, rest = rest.split(" bytes omitted …\n", 1)
    tail, trailer = rest.rsplit("\n[prefixgate]", 1)
    assert body.startswith(head) and body.endswith(tail)
    assert len(head.encode()) + int(omitted) + len(tail.encode()) == len(body.encode())
    assert 0.65 < len(head) / (len(head) + len(tail)) < 0.85  # ~75% head
    total = len(body.encode())
    size = reference_size(text_result(body))
    assert trailer.startswith(f" result of {size} bytes of JSON exceeds the 65536-byte limit")
    assert f"full output ({total} bytes of text) saved as artifact" in trailer
    assert '"offset"/"limit"' in trailer and '"line"/"lines"' in trailer and '"find"' in trailer


def test_cuts_fall_on_character_boundaries(store: ArtifactStore) -> None:
    body = "😀漢é" * 50_000
    text = check_bounded(bound_result(text_result(body), max_visible_bytes=5000, store=store), 5000)
    head, _, rest = text.partition("\n… ")
    tail = rest.split(" bytes omitted …\n", 1)[1].rsplit("\n[prefixgate]", 1)[0]
    assert body.startswith(head) and body.endswith(tail) and head and tail


def test_binary_blocks_become_lines(store: ArtifactStore) -> None:
    png = base64.b64encode(b"\x89PNG" + bytes(300_000)).decode()
    r = {"content": [{"type": "text", "text": "screenshot:"}, {"type": "image", "data": png, "mimeType": "image/png"}]}
    out = bound_result(r, store=store)
    text = check_bounded(out, 65536)
    assert text.startswith(f"screenshot:\n[image: image/png, {len(png)} bytes of base64]\n[prefixgate]")
    assert artifact_of(text, store) == canonical_json(r)  # binary kept in the artifact


def test_deterministic_except_the_id(store: ArtifactStore) -> None:
    r = text_result("z" * 100_000, "tail")
    a, b = (only_text(bound_result(r, store=store)) for _ in range(2))
    ids = [TRAILER_ID.search(t).group(1) for t in (a, b)]  # type: ignore[union-attr]
    assert ids[0] != ids[1]
    assert a.replace(ids[0], "ID") == b.replace(ids[1], "ID")


def test_is_error_and_meta_are_kept(store: ArtifactStore) -> None:
    r = text_result("e" * 100_000, isError=True, _meta={"trace": "t"})
    out = bound_result(r, store=store)
    assert out["isError"] is True and out["_meta"] == {"trace": "t"}


# --------------------------------------------------------------------------- non-retention


def test_over_max_artifact_bytes_warns_and_leaves_no_file(store: ArtifactStore) -> None:
    r = text_result("w" * 300_000)
    out = bound_result(r, max_artifact_bytes=200_000, store=store)
    text = check_bounded(out, 65536)
    assert text.endswith("full output (300000 bytes of text) not retained: larger than the 200000-byte artifact limit")
    assert "artifact_read" not in text
    assert list_artifacts(store.root) == []


def test_no_store_warns() -> None:
    out = bound_result(text_result("w" * 70_000), store=None)
    assert only_text(out).endswith("full output (70000 bytes of text) not retained: no artifact store is configured")


def test_failed_write_warns_and_leaves_no_file(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    real_write = os.write
    state = {"n": 0}

    def failing_write(fd: int, data: Any) -> int:
        state["n"] += 1
        if state["n"] > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data)[:1000])

    monkeypatch.setattr(os, "write", failing_write)
    out = bound_result(text_result("f" * 100_000), store=store)
    monkeypatch.undo()
    text = check_bounded(out, 65536)
    no_space = "full output (100000 bytes of text) not retained: cannot write artifact: No space left on device"
    assert text.endswith(no_space)
    assert list_artifacts(store.root) == []


def test_symlinked_store_warns(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "artifacts").symlink_to(tmp_path / "real")
    out = bound_result(text_result("s" * 100_000), store=ArtifactStore(tmp_path / "artifacts", SESSION))
    reason = "artifact directory is a symlink; refusing to use it"  # (the model sees ids, never paths)
    assert only_text(out).endswith(f"full output (100000 bytes of text) not retained: {reason}")
    assert str(tmp_path) not in only_text(out)
    assert list((tmp_path / "real").iterdir()) == []


def test_worst_case_trailer_fits_minimum_ceiling(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    long_id = "I" * 64
    monkeypatch.setattr(store_mod, "_new_id", lambda: long_id)
    r = text_result('"' * 10**6, structuredContent={"k": "v" * 600})
    out = bound_result(r, max_visible_bytes=1024, store=store, output_schema={"type": "object"})
    text = check_bounded(out, 1024)
    assert f'artifact_read {{"id": "{long_id}"}}' in text
    assert "isError set" in text and out["isError"] is True

    class Broken:
        def put_chunks(self, chunks: Any) -> str:
            raise StoreError("cannot open artifact directory '" + "/very/long/path" * 100 + "': x")

    out = bound_result(r, max_visible_bytes=1024, store=Broken(), output_schema={"type": "object"})  # type: ignore[arg-type]
    assert "not retained: cannot open artifact directory" in check_bounded(out, 1024)


def test_any_failure_of_a_store_costs_the_artifact_never_the_call() -> None:
    """A store failing in a way of its own (a Redis client's OverflowError on an expiry, a bug):
    the result is still bounded, saying the output was not retained; it was a JSON-RPC error."""

    class Failing:
        def put_chunks(self, chunks: Any) -> str:
            raise OverflowError("cannot convert float infinity to integer")

    out = bound_result(text_result("x" * 100_000), max_visible_bytes=4096, store=Failing())  # type: ignore[arg-type]
    reason = "cannot write artifact: OverflowError"
    assert only_text(out).endswith(f"full output (100000 bytes of text) not retained: {reason}")


# --------------------------------------------------------------------------- structuredContent rule

SCHEMA = {
    "type": "object",
    "properties": {"rows": {"type": "array", "items": {"type": "string"}}},
    "required": ["rows"],
}


def structured_result(rows: int, width: int = 50) -> dict[str, Any]:
    data = {"rows": ["r" * width] * rows}
    return {"content": [{"type": "text", "text": json.dumps(data)}], "structuredContent": data}


def test_small_structured_content_is_kept_verbatim(store: ArtifactStore) -> None:
    r = structured_result(10)
    r["content"].append({"type": "text", "text": "log " * 30_000})
    out = bound_result(r, store=store, output_schema=SCHEMA)
    check_bounded(out, 65536)
    assert out["structuredContent"] is r["structuredContent"]
    assert "isError" not in out
    assert json_size(r["structuredContent"]) <= structured_limit(65536)


def test_large_structured_content_is_dropped_and_marked_error(store: ArtifactStore) -> None:
    r = structured_result(2000)
    out = bound_result(r, store=store, output_schema=SCHEMA)
    text = check_bounded(out, 65536)
    assert "structuredContent" not in out and out["isError"] is True
    assert f"structuredContent ({json_size(r['structuredContent'])} bytes) not shown" in text
    assert artifact_of(text, store) == r["content"][0]["text"].encode()  # what the model was reading
    assert json.loads(structured_artifact(text, store)) == r["structuredContent"]  # nothing lost


def test_large_structured_content_without_schema_is_dropped_without_error(store: ArtifactStore) -> None:
    out = bound_result(structured_result(2000), store=store)
    assert "structuredContent" not in out and "isError" not in out


FILE_TEXT = "".join(f"line {i}: {'é' * (i % 7)} \"quoted\"\n" for i in range(40_000))  # ~1 MiB, read_text_file-like
FILE_SCHEMA = {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}
PNG = {"type": "image", "data": "A" * 80_000, "mimeType": "image/png"}
BIG = {"rows": ["r" * 50] * 2000}
TEXT, JSON_WHOLE = "text", "json"


@pytest.mark.parametrize(
    "case,result,schema,max_artifact,is_error,first,second",
    [
        # case, result, published outputSchema, max_artifact_bytes,
        #   isError?, first artifact (TEXT: the joined text; JSON_WHOLE: canonical JSON of the result),
        #   second artifact (the structured value; a "not retained" reason; None: no second line)
        ("text only", text_result(FILE_TEXT), None, None, False, TEXT, None),
        ("text+structured, schema omitted", text_result(FILE_TEXT, structuredContent={"content": FILE_TEXT}),
         None, None, False, TEXT, {"content": FILE_TEXT}),
        ("text+structured, schema published", text_result(FILE_TEXT, structuredContent={"content": FILE_TEXT}),
         FILE_SCHEMA, None, True, TEXT, {"content": FILE_TEXT}),
        ("two text blocks+structured", text_result("a\nb", FILE_TEXT, structuredContent=BIG),
         None, None, False, TEXT, BIG),
        ("already an error", text_result(FILE_TEXT, structuredContent=BIG, isError=True),
         SCHEMA, None, True, TEXT, BIG),
        ("small structured kept", text_result(FILE_TEXT, structuredContent={"n": 1}),
         FILE_SCHEMA, None, False, TEXT, None),
        ("structured over the artifact limit", text_result("t\n" * 40_000, structuredContent={"content": FILE_TEXT}),
         None, 100_000, False, TEXT, "structuredContent (1"),
        ("image+structured", {"content": [PNG], "structuredContent": BIG}, None, None, False, JSON_WHOLE, None),
        ("text+structured+big _meta", text_result(FILE_TEXT, structuredContent=BIG, _meta={"m": "x" * 20_000}),
         None, None, False, JSON_WHOLE, None),
    ],
)
def test_artifacts_hold_what_the_model_was_reading(
    store: ArtifactStore, case: str, result: dict[str, Any], schema: Any, max_artifact: int | None,
    is_error: bool, first: str, second: Any,
) -> None:
    limits = {} if max_artifact is None else {"max_artifact_bytes": max_artifact}
    out = bound_result(result, store=store, output_schema=schema, **limits)
    text = check_bounded(out, 65536)
    assert out.get("isError", False) is is_error, case
    texts = "\n".join(b["text"] for b in result["content"] if b["type"] == "text")
    assert artifact_of(text, store) == (texts.encode() if first == TEXT else canonical_json(result)), case
    if first == TEXT:
        assert text.startswith(texts[:1000])  # the preview is the text itself
    if second is None:
        assert STRUCTURED_ID.search(text) is None and "structuredContent (" not in text.splitlines()[-1], case
    elif isinstance(second, str):
        assert re.search(rf"^{re.escape(second)}\d* bytes of JSON\) not retained: larger than the", text, re.M), case
    else:
        assert json.loads(structured_artifact(text, store)) == second, case
    assert len(list_artifacts(store.root)) == 1 + (isinstance(second, dict)), case


def test_structured_line_explains_reading_when_the_text_was_not_retained(store: ArtifactStore) -> None:
    r = text_result("t\n" * 100_000, structuredContent={"k": "v" * 100_000})  # text 200 KB, structured ~100 KB
    text = only_text(bound_result(r, store=store, max_artifact_bytes=150_000))
    assert "\ntext (200000 bytes) not retained: larger than the 150000-byte artifact limit\n" in text
    m = re.search(
        r"structuredContent \(\d+ bytes of JSON\) saved as artifact (\S+); "
        r'read it with artifact_read \{"id": "\1"\} plus',
        text,
    )
    assert m and json.loads(store.read(m.group(1), 0, 1 << 30)) == r["structuredContent"]


def test_a_text_shown_whole_beside_a_dropped_structured_part_is_not_saved_again(store: ArtifactStore) -> None:
    r = text_result("Done: 2000 rows.", structuredContent=BIG)  # only the structured part is over the bound
    text = only_text(bound_result(r, store=store, output_schema=SCHEMA))
    assert text.startswith("Done: 2000 rows.\n[prefixgate] result of ")
    assert "omitted" not in text and "\ntext (" not in text
    first_line = r"^structuredContent \(\d+ bytes of JSON\) saved as artifact (\S+); read it with artifact_read"
    m = re.search(first_line, text, re.M)
    assert m and json.loads(store.read(m.group(1), 0, 1 << 30)) == BIG
    assert len(list_artifacts(store.root)) == 1


def test_text_artifact_is_line_addressable_and_structured_part_readable(store: ArtifactStore) -> None:
    from spill import artifact_read

    out = bound_result(text_result(FILE_TEXT, structuredContent={"content": FILE_TEXT}), store=store)
    text = only_text(out)
    text_id = TRAILER_ID.search(text).group(1)  # type: ignore[union-attr]
    line = artifact_read(store, {"id": text_id, "line": 2, "lines": 1})
    assert line.endswith('\nline 1: é "quoted"\n') and "lines 2 to 2" in line.partition("\n")[0]
    found = artifact_read(store, {"id": text_id, "find": "line 39999:"})
    assert found.endswith('\n40000: line 39999: é "quoted"')  # a whole line, not an excerpt
    structured_id = STRUCTURED_ID.search(text).group(1)  # type: ignore[union-attr]
    assert artifact_read(store, {"id": structured_id, "line": 1, "lines": 1}).endswith("\n{\n")
    page = artifact_read(store, {"id": structured_id, "offset": 0, "limit": 40})
    assert page.endswith('\n{\n "content": "line 0:  \\"quoted\\"\\nline')


async def call_through_sdk_client(result: dict[str, Any]) -> Any:
    """Serve result from an in-process server whose tool declares SCHEMA; call it with the SDK."""
    import mcp_types as types
    from mcp import Client
    from mcp.server import Server

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(
            tools=[types.Tool(name="q", input_schema={"type": "object"}, output_schema=SCHEMA)]
        )

    async def call_tool(ctx: Any, params: Any) -> Any:
        return types.CallToolResult.model_validate(result)

    async with Client(Server("t", on_list_tools=list_tools, on_call_tool=call_tool)) as client:
        return await client.call_tool("q", {})


@pytest.mark.parametrize("rows", [10, 2000])
def test_bounded_structured_results_pass_sdk_client_validation(store: ArtifactStore, rows: int) -> None:
    r = structured_result(rows)
    r["content"].append({"type": "text", "text": "x" * 70_000})
    out = bound_result(r, store=store, output_schema=SCHEMA)
    assert out is not r
    got = anyio.run(call_through_sdk_client, out)
    assert got.is_error is (rows == 2000)
    # the rule is needed: the same bounded result without isError makes the SDK client raise
    if rows == 2000:
        with pytest.raises(BaseException) as info:
            anyio.run(call_through_sdk_client, {**out, "isError": False})
        assert "output schema but did not return structured content" in "".join(leaf_messages(info.value))


def leaf_messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        return [m for e in exc.exceptions for m in leaf_messages(e)]
    return [str(exc)]


# --------------------------------------------------------------------------- cost


@pytest.mark.parametrize("unit,kind", [("a", "text"), ("漢", "text"), ("A", "image")])
def test_16_mib_result_peak_memory_under_3x(store: ArtifactStore, unit: str, kind: str) -> None:
    size = 16 * 1024 * 1024
    text = unit * (size // len(unit.encode()) - (100 if kind == "image" else 0))  # JSON must fit 16 MiB
    r = text_result(text) if kind == "text" else {"content": [{"type": "image", "data": text, "mimeType": "image/png"}]}
    tracemalloc.start()
    try:
        out = bound_result(r, store=store)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    check_bounded(out, 65536)
    assert peak < 3 * size, peak
    [info] = list_artifacts(store.root)
    assert info.size == (len(text.encode()) if kind == "text" else len(canonical_json(r)))
