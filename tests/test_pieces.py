"""``catalog.pieces``: a value encoded a piece at a time is the encoder's own bytes for the whole."""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import pieces
from catalog.pieces import encode_in_pieces

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=6),
    max_leaves=40,
)
ENCODERS = {
    "json.dumps": lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),
    "to_json": lambda value: pydantic_core.to_json(value, inf_nan_mode="null"),
}


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SLICE", 2)  # so the generated values are cut, too


@pytest.mark.parametrize("name", ENCODERS)
@given(value=JSON_VALUES | st.dictionaries(st.integers(), st.integers(), max_size=3), depth=st.integers(0, 5))
def test_the_pieces_are_the_encoders_bytes_for_the_whole(name: str, value: Any, depth: int) -> None:
    encode = ENCODERS[name]
    try:
        whole = encode(value)
    except ValueError:  # (to_json: a lone surrogate) refused in pieces too
        with pytest.raises(ValueError):
            encode_in_pieces(value, encode, depth)
        return
    assert encode_in_pieces(value, encode, depth) == whole


def test_no_call_encodes_more_than_a_slice_of_a_long_container() -> None:
    calls: list[Any] = []

    def encode(value: Any) -> bytes:
        calls.append(value)
        return ENCODERS["to_json"](value)

    message = {"params": {"arguments": {"pad": [{"a": 1}] * 9, "map": {str(i): i for i in range(5)}}}}
    assert encode_in_pieces(message, encode) == ENCODERS["to_json"](message)
    assert max(len(v) if isinstance(v, list | dict) else 1 for v in calls) == 2
