"""Line framing of the stdio transports: linear re-joining, no copies, lenient decoding."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.downstream.stdio import LineSplitter, _parse, is_blank


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n")), max_size=8), st.integers(1, 17))
def test_any_chunking_gives_the_same_lines(lines: list[str], size: int) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    splitter = LineSplitter()
    out: list[bytes] = []
    for start in range(0, len(data), size):
        out += [bytes(line) for line in splitter.feed(data[start : start + size])]
    assert out == [line.encode() for line in lines]
    assert splitter.pending == b""


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
