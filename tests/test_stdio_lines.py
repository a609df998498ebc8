"""Line framing of the stdio transports: linear re-joining, no copies, lenient decoding."""

from __future__ import annotations

import concurrent.futures
import json
import sys
from typing import Any

import mcp_types as types
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage

from gateway import jsontext
from gateway.downstream.stdio import _parse
from gateway.eras import LIST_CACHE_FIELDS
from gateway.lines import LineSplitter, Overlong, encode, encode_plain, is_blank
from gateway.published import PublishedTools
from gateway.upstream.stdio import encode_reply


@given(
    st.lists(st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",))), max_size=8),
    st.integers(1, 17),
)
def test_any_chunking_gives_the_same_lines(lines: list[str], size: int) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    splitter = LineSplitter()
    out: list[bytes] = []
    for start in range(0, len(data), size):
        out += [bytes(line) for line in splitter.feed(data[start : start + size])]
    assert out == [line.encode() for line in lines]
    assert splitter.pending == b""


@given(
    st.lists(st.binary(max_size=24).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.integers(1, 17),
    st.integers(4, 20),  # at least what each end keeps (4 here; 4,096 against 32 MiB in use)
    st.booleans(),
)
def test_any_chunking_gives_the_same_lines_within_a_limit(
    lines: list[bytes], size: int, limit: int, whole: bool
) -> None:
    """With a limit, in chunks of any size or a line at a time (``whole``): each line comes out
    as itself up to ``limit`` bytes, and as an ``Overlong`` of its size beyond."""
    data = b"".join(line + b"\n" for line in lines)
    chunks = [line + b"\n" for line in lines] if whole else [data[i : i + size] for i in range(0, len(data), size)]
    splitter = LineSplitter(limit, keep=4)
    out = [piece for chunk in chunks for piece in splitter.feed(chunk)]
    assert len(out) == len(lines)
    for got, line in zip(out, lines, strict=True):
        if len(line) > limit:
            assert (
                isinstance(got, Overlong) and got.size == len(line) and got.head == line[:4] and got.tail == line[-4:]
            )
        else:
            assert not isinstance(got, Overlong) and bytes(got) == line
    assert splitter.pending == b""


def test_a_last_line_without_a_newline_comes_out_at_the_end() -> None:
    splitter = LineSplitter(8, keep=2)
    assert [bytes(line) for line in splitter.feed(b'{"a":1}\n{"b"')] == [b'{"a":1}']
    last = splitter.end()
    assert isinstance(last, bytearray) and last == b'{"b"' and splitter.end() is None
    assert splitter.feed(b"x" * 20) == []
    over = splitter.end()
    assert isinstance(over, Overlong) and over.size == 20 and splitter.end() is None


def test_a_long_line_is_handed_over_not_copied() -> None:
    splitter = LineSplitter()
    splitter.feed(b"x" * 1000)
    pending = splitter.pending
    (line,) = splitter.feed(b"y\n")
    assert line is pending and bytes(line) == b"x" * 1000 + b"y"
    assert splitter.pending is not pending


def test_parse_replaces_invalid_utf8_and_reports_bad_json() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a\xffb"}]}}'
    message = _parse(bytearray(raw))
    assert not isinstance(message, Exception)
    assert message.message.result["content"][0]["text"] == "a\ufffdb"  # type: ignore[union-attr]
    assert isinstance(_parse(b"{not json"), ValueError)
    assert isinstance(_parse(json.dumps({"jsonrpc": "1.0"}).encode()), ValueError)
    assert is_blank(b"  \t") and is_blank(bytearray()) and not is_blank(b" x")


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
_TOOL = st.fixed_dictionaries({"name": st.text(min_size=1, max_size=12), "inputSchema": _JSON})


@given(
    st.lists(_TOOL, max_size=5),
    st.integers(0, 2**53) | st.text(max_size=10),
    st.sampled_from(["2025-11-25", "2026-07-28"]),
)
def test_cached_tools_list_bytes_equal_the_sdk_encoding(tools: list[dict[str, Any]], request_id: Any, era: str) -> None:
    """tools/list over stdio splices bytes encoded once per epoch: byte-identical to encoding the
    whole response (any JSON values, non-ASCII, big numbers, string or number ids, either era's
    result shape), and the cached bytes are made once."""
    published = PublishedTools(tools)
    extra: dict[str, Any] = {} if era == "2025-11-25" else {**LIST_CACHE_FIELDS, "_meta": {"k": '"result":{"tools":[]'}}

    def reply(listed: list[dict[str, Any]]) -> SessionMessage:
        return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"tools": listed, **extra}))

    assert encode_reply(reply(published)) == encode(reply(list(tools)))
    assert published.encoded() is published.encoded()
    assert encode_reply(reply(list(tools))) == encode(reply(list(tools)))  # a plain list: encoded as ever


_ANY_FLOAT = st.floats()  # NaN and the infinities too: both encoders write null


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _ANY_FLOAT | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
        max_leaves=20,
    ),
    st.integers(0, 2**53) | st.text(max_size=10),
)
def test_plain_dicts_encode_as_the_sdk_models_do(value: Any, request_id: Any) -> None:
    """The fast path writes a claimed call's answer and a raw call's request from plain dicts:
    the same bytes as the models, or the same refusal (a lone surrogate) as a ValueError."""
    params = {"name": "t", "arguments": {"v": value}}
    pairs = [
        ({"jsonrpc": "2.0", "id": request_id, "result": {"v": value}}, types.JSONRPCResponse),
        ({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}, types.JSONRPCRequest),
        ({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}, types.JSONRPCNotification),
    ]
    for plain, model in pairs:
        try:
            want: bytes | None = encode(SessionMessage(model.model_validate(plain)))
        except ValueError:
            want = None
        try:
            got: bytes | None = encode_plain(plain)
        except ValueError:
            got = None
        assert got == want


_TEXTS = st.one_of(
    _JSON.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.tuples(_JSON.map(json.dumps), st.sampled_from(["", " ", "\r", "\t\n", "\x0b", "\u00a0", " x", "]", "{}"])).map(
        "".join
    ),
    st.tuples(st.sampled_from(["", " ", "\ufeff", "\n"]), _JSON.map(json.dumps)).map("".join),
    st.text(max_size=12),
)


@given(_TEXTS)
def test_the_direct_scan_parses_exactly_as_json_loads(text: str) -> None:
    """jsontext calls json's scanner directly for a line that is one value: the same value
    for every text json.loads takes, and json.loads's own error for every other."""
    try:
        want: Any = ("ok", json.loads(text))
    except ValueError as exc:
        want = ("error", type(exc), str(exc))
    try:
        got: Any = ("ok", jsontext._parse(text))
    except ValueError as exc:
        got = ("error", type(exc), str(exc))
    assert repr(got) == repr(want)  # repr: NaN compares unequal to itself


_SURROGATE_TEXTS = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone halves, and pairs when adjacent
        st.sampled_from('\\"ux'),
        st.characters(),
    ),
    max_size=12,
)


@given(st.lists(_SURROGATE_TEXTS, max_size=4), st.booleans())
def test_scrubbed_escapes_parse_as_a_scrubbed_line(texts: list[str], upper: bool) -> None:
    """A body's bytes scrubbed (``scrub_escapes``, the HTTP entry) parse to exactly what the
    stdio entry makes of the same line (``loads``: every lone surrogate U+FFFD), which any
    encoder takes; a body with none to scrub keeps its bytes (pairs, ``\\ud800`` as text)."""
    raw = json.dumps({t: texts for t in texts}).encode()  # ensure_ascii: every surrogate an escape
    if upper:
        raw = raw.replace(b"\\ud", b"\\uD")
    scrubbed = jsontext.scrub_escapes(raw)
    parsed = json.loads(scrubbed)
    assert parsed == jsontext.loads(raw.decode())
    json.dumps(parsed, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    if json.loads(raw) == parsed:
        assert scrubbed == raw


def test_scrub_escapes_rewrites_only_lone_halves() -> None:
    raw = rb'{"a":"x\ud800y","b":"\ud83c\udf89","c":"\\ud800","d":"\udc00\ud800\udc00","e":"\uDBFF"}'
    assert (
        jsontext.scrub_escapes(raw)
        == rb'{"a":"x\ufffdy","b":"\ud83c\udf89","c":"\\ud800","d":"\ufffd\ud800\udc00","e":"\ufffd"}'
    )


def test_deep_lines_parsed_in_threads_at_once_leave_the_recursion_limit_as_it_was() -> None:
    # Long lines are parsed in worker threads (stdio.Aside), several servers' at once; a deep
    # one raises the interpreter's recursion limit (one for every thread) while it parses.
    deep = "[" * 5000 + "]" * 5000
    before = sys.getrecursionlimit()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        parsed = list(pool.map(jsontext.loads, [deep] * 16))
    assert sys.getrecursionlimit() == before
    assert all(isinstance(value, list) for value in parsed)
