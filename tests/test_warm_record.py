"""The warm-start record (``catalog.warm``): what is written is read back exactly, and anything
damaged, truncated or foreign is refused with a reason, never half-read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.warm import (
    MAGIC,
    MAX_MISSED,
    MAX_NESTING,
    TOOLS_SHELL,
    Answer,
    Contribution,
    Record,
    RecordError,
    carried,
    encode_record,
    record_key,
)

KEY = "a" * 64
FINGERPRINT = "b" * 64
TOOLS = b'[{"inputSchema":{"type":"object"},"name":"demo__echo"}]'
SERVERS = {
    "demo": Contribution(
        tools=({"name": "echo", "inputSchema": {"type": "object"}},),
        prompts=({"name": "greet"},),
        capabilities={"tools": {"listChanged": True}, "prompts": {}},
    ),
    "late": Contribution(tools=({"name": "x", "inputSchema": {"type": "object"}},), missed=1),
}
ANSWERS = [
    Answer("initialize", "2025-11-25", b'{"capabilities":{"tools":{}},"protocolVersion":"2025-11-25"}'),
    Answer("tools/list", "2025-11-25", TOOLS_SHELL + b"}", TOOLS),
    Answer("tools/list", "2025-06-18", TOOLS_SHELL + b"}", TOOLS),
    Answer("tools/list", "2026-07-28", TOOLS_SHELL + b',"resultType":"complete"}', TOOLS),
]


def test_a_record_reads_back_what_was_written() -> None:
    record = Record(encode_record(KEY, FINGERPRINT, SERVERS, ANSWERS))
    assert (record.key, record.fingerprint) == (KEY, FINGERPRINT)
    assert record.servers() == SERVERS
    assert record.answered() == sorted((a.method, a.version) for a in ANSWERS)
    for answer in ANSWERS:
        assert record.answer(answer.method, answer.version) == answer
    assert record.answer("tools/list", "2024-11-05") is None


def test_a_tools_array_shared_by_versions_is_kept_once() -> None:
    data = encode_record(KEY, FINGERPRINT, SERVERS, ANSWERS)
    assert data.count(TOOLS) == 1


def test_an_answer_line_is_the_json_rpc_response_with_the_tools_spliced_in() -> None:
    line = ANSWERS[3].line(b'"req-1"')
    assert line.endswith(b"\n")
    message = json.loads(line)
    assert message == {
        "jsonrpc": "2.0",
        "id": "req-1",
        "result": {"tools": json.loads(TOOLS), "resultType": "complete"},
    }
    assert ANSWERS[0].line(b"7") == b'{"jsonrpc":"2.0","id":7,"result":' + ANSWERS[0].result + b"}\n"


def test_a_tools_answer_must_begin_with_its_shell() -> None:
    with pytest.raises(RecordError, match="must begin"):
        encode_record(KEY, FINGERPRINT, {}, [Answer("tools/list", "v", b'{"x":1}', TOOLS)])


def _damaged(data: bytes, find: bytes, replace: bytes) -> bytes:
    at = data.rindex(find)
    return data[:at] + replace + data[at + len(find) :]


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda d: b"not a record\n" + d, "not a prefixgate warm-start record"),
        (lambda d: MAGIC + b"{not json\n", "header is not JSON"),
        (lambda d: MAGIC + b"[]\n", "header is not an object"),
        (lambda d: d[: len(d) - 10], "outside the record"),
        (lambda d: _damaged(d, TOOLS, TOOLS.replace(b"echo", b"ECHO")), "damaged"),
        (lambda d: d.replace(KEY.encode(), b"k" * 64, 1), "key is not a SHA-256"),
        (lambda d: MAGIC, "no header line"),
    ],
    ids=["magic", "header-json", "header-type", "truncated", "blob-bytes", "key", "no-header"],
)
def test_a_damaged_record_is_refused_with_its_reason(mangle: object, reason: str) -> None:
    data = encode_record(KEY, FINGERPRINT, SERVERS, ANSWERS)

    def read() -> None:
        record = Record(mangle(data))  # type: ignore[operator]
        record.servers()
        for method, version in record.answered():
            record.answer(method, version)

    with pytest.raises(RecordError, match=reason):
        read()


def test_malformed_contributions_are_refused() -> None:
    bad = {"demo": Contribution(tools=({"name": "echo"},))}
    data = encode_record(KEY, FINGERPRINT, bad, [])
    # Rewrite the (verified) servers blob into a shape the reader must refuse, with its digest.
    import hashlib

    record = Record(data)
    blob = record.blob(record._servers)
    wrong = blob.replace(b'"missed":0', b'"missed":true')
    header_end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC) : header_end])
    digest = hashlib.sha256(wrong).hexdigest()
    header["blobs"] = {digest: [0, len(wrong)]}
    header["servers"] = digest
    forged = MAGIC + json.dumps(header).encode() + b"\n" + wrong
    with pytest.raises(RecordError, match="missed is not a count"):
        Record(forged).servers()


def nested(levels: int) -> dict[str, object]:
    """An object schema nested ``levels`` objects deep (built without recursion)."""
    node: dict[str, object] = {"type": "string"}
    for _ in range(levels // 2):
        node = {"type": "object", "properties": {"a": node}}
    return node


def test_an_item_nested_past_the_recursion_limit_is_left_out_and_the_rest_recorded() -> None:
    """The gateway takes a tool nested 2,000 levels (and quarantines it): ``json`` can neither
    write nor read that back, and one such tool cost every start of the config its warm
    start. Only that item is left out; one nested just within the bound is kept."""
    ok = {"name": "ok", "inputSchema": {"type": "object"}}
    within = {"name": "within", "inputSchema": nested(MAX_NESTING - 10)}
    deep = {"name": "deep", "inputSchema": nested(2_000)}
    servers = {
        "s": Contribution(tools=(ok, deep, within), prompts=({"name": "p", "_meta": nested(2_000)},)),
        "other": SERVERS["demo"],
    }
    record = Record(encode_record(KEY, FINGERPRINT, servers, ANSWERS))
    assert record.servers() == {
        "s": Contribution(tools=(ok, within)),
        "other": SERVERS["demo"],
    }


def test_a_server_is_carried_until_it_misses_max_missed_starts_in_a_row() -> None:
    kept = Contribution(tools=({"name": "t"},))
    for missed in range(1, MAX_MISSED):
        after = carried(kept)
        assert after is not None and after.missed == missed and after.tools == kept.tools
        kept = after
    assert carried(kept) is None


def test_the_key_is_the_digest_of_the_canonical_identity() -> None:
    assert record_key({"b": 1, "a": [1, 2]}) == record_key({"a": [1, 2], "b": 1})
    assert record_key({"a": [1, 2]}) != record_key({"a": [2, 1]})
    assert len(record_key({})) == 64


@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_refused_or_read_never_crash(data: bytes) -> None:
    for candidate in (data, MAGIC + data):
        try:
            record = Record(candidate)
            record.servers()
        except RecordError:
            pass
