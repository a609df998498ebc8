"""The shapes the gateway recognises without pydantic are ones the protocol's models accept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types.methods import SERVER_RESULTS, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from gateway.shapes import plain_call_params, plain_text_result
from gateway.upstream.fast import meta_key, valid_call

HANDSHAKE = HANDSHAKE_PROTOCOL_VERSIONS
VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
_VALUE = st.recursive(
    _LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
)
_NEAR_KEYS = st.sampled_from(["name", "arguments", "_meta", "task", "type", "text", "content", "isError", "x"])


def _near(fixed: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts around a shape: its keys with good or bad values, and strangers."""
    return st.dictionaries(_NEAR_KEYS, _VALUE, max_size=3).flatmap(
        lambda extra: st.fixed_dictionaries(fixed).map(lambda base: {**base, **extra})
    ) | st.fixed_dictionaries(fixed)


_BLOCK = _near({"type": st.sampled_from(["text", "image"]), "text": st.text(max_size=8) | _LEAF})
_CALL = _near(
    {"name": st.text(max_size=8) | _LEAF, "arguments": st.none() | st.dictionaries(st.text(max_size=4), _VALUE)}
)
_RESULT = _near({"content": st.lists(_BLOCK, max_size=3) | _LEAF, "isError": st.booleans() | _LEAF})


def _shape(era: str) -> TypeAdapter[Any]:
    return TypeAdapter[Any](SERVER_RESULTS[("tools/call", era)])


@pytest.mark.parametrize("version", HANDSHAKE)
@given(params=_CALL)
def test_plain_call_params_are_valid_in_the_handshake_era(version: str, params: dict[str, Any]) -> None:
    if plain_call_params(params):
        validate_client_request("tools/call", version, params)  # raises if the shortcut were wrong


@pytest.mark.parametrize("version", VERSIONS)
@given(result=_RESULT, complete=st.booleans())
def test_plain_text_results_are_valid_in_their_version(version: str, result: dict[str, Any], complete: bool) -> None:
    if complete:
        result = {**result, "resultType": "complete"}
    if plain_text_result(result, version in MODERN_PROTOCOL_VERSIONS):
        _shape(version).validate_python(result, by_name=False)


def test_the_common_shapes_are_recognised_and_the_rest_left_to_the_models() -> None:
    echo = {"content": [{"type": "text", "text": "hi"}], "isError": False}
    assert plain_call_params({"name": "t", "arguments": {"a": 1}}) and plain_call_params({"name": "t"})
    assert plain_text_result(echo, False) and plain_text_result({**echo, "resultType": "complete"}, True)
    assert not plain_text_result(echo, True)  # a modern result names its type
    for params in ({"name": 1}, {"name": "t", "arguments": []}, {"name": "t", "_meta": {}}, {"arguments": {}}):
        assert not plain_call_params(params), params
    for result in (
        {"content": [{"type": "text", "text": 1}]},
        {"content": [{"type": "image", "data": "", "mimeType": "image/png"}]},
        {"content": [], "isError": "yes"},
        {"content": [], "structuredContent": {}},
        {"content": [{"type": "text", "text": "x", "annotations": {}}]},
        {"isError": False},
    ):
        assert not plain_text_result(result, False), result
    with pytest.raises(ValidationError):  # what is left to the models is still refused there
        _shape("2025-11-25").validate_python({"content": [{"type": "text", "text": 1}]}, by_name=False)


_ENVELOPE_META = st.fixed_dictionaries(
    {"io.modelcontextprotocol/protocolVersion": st.sampled_from(["2026-07-28", 1])},
    optional={
        "io.modelcontextprotocol/clientCapabilities": st.sampled_from([{}, {"elicitation": {}}, []]),
        "io.modelcontextprotocol/clientInfo": st.sampled_from([{"name": "c", "version": "1"}, {"name": 1}]),
        "progressToken": _LEAF,
    },
)
_MODERN_CALL = _near(
    {
        "name": st.text(max_size=8) | _LEAF,
        "arguments": st.none() | st.dictionaries(st.text(max_size=4), _VALUE),
        "_meta": _ENVELOPE_META | _LEAF,
    }
)


def _sdk_verdict(version: str, params: dict[str, Any]) -> bool:
    try:
        validate_client_request("tools/call", version, params)
    except (ValidationError, KeyError):
        return False
    return True


@pytest.mark.parametrize("version", VERSIONS)
@given(calls=st.lists(_MODERN_CALL, min_size=1, max_size=3))
def test_a_remembered_verdict_on_call_params_is_the_sdks(version: str, calls: list[dict[str, Any]]) -> None:
    """``valid_call`` remembers a verdict per name and ``_meta``: asked again, and for the same
    envelope with other arguments (good or bad), another name or another key, it still
    answers as the SDK does."""
    for params in calls:
        variants = [
            params,
            {**params, "arguments": {"other": [1]}},
            params,
            {**params, "arguments": [1]},
            {**params, "arguments": None},
            {**params, "arguments": "x"},
            {**params, "name": 1},
            {**params, "task": {}},
            {k: v for k, v in params.items() if k != "name"},
            params,
        ]
        for variant in variants:
            assert valid_call(version, variant, meta_key(variant)) == _sdk_verdict(version, variant), variant


def test_a_meta_with_a_progress_token_keys_nothing() -> None:
    """A ``_meta`` that carries a progress token is new on every call: it keys no remembered
    envelope, ``_meta`` model or verdict (``meta_key`` is None), while the same envelope
    without one is keyed, and a request without ``_meta`` by ""."""
    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    assert meta_key({"name": "t", "_meta": {**envelope, "progressToken": 7}}) is None
    assert meta_key({"name": "t", "_meta": envelope}) == meta_key({"name": "u", "_meta": dict(envelope)})
    assert meta_key({"name": "t", "_meta": envelope}) not in (None, "")
    assert meta_key({"name": "t"}) == ""


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@given(a=_VALUE, b=_VALUE)
def test_one_meta_key_is_one_json_value(a: Any, b: Any) -> None:
    """Two ``_meta`` values share a key only when they are the same JSON (``True`` is not
    ``1``, ``1.0`` is not ``1``, a string is not its look-alike): whatever is remembered under a
    key holds for every request with that key."""
    for x, y in ((a, b), (a, json.loads(_json(a))), ([1, True, 1.0, "1"], [True, 1, 1, "1"])):
        kx, ky = meta_key({"_meta": x}), meta_key({"_meta": y})
        if kx is not None and kx == ky:
            assert _json(x) == _json(y) and json.dumps(x) == json.dumps(y), (x, y)


def test_a_meta_too_deep_or_too_long_keys_nothing() -> None:
    """Never an exception in the reader, and nothing megabytes long kept under a key."""
    deep: Any = 1
    for _ in range(5000):
        deep = {"a": deep}
    assert meta_key({"_meta": {"x": deep}}) is None
    assert meta_key({"_meta": {"x": "y" * 5000}}) is None
    assert meta_key({"_meta": {"x": "y" * 100}}) is not None


def test_a_verdict_is_not_remembered_for_a_made_up_name_of_any_length() -> None:
    """A client's names are remembered only while short: 300 names of 100 KB keep nothing."""
    from gateway.upstream.fast import _VALID_CALLS

    for n in range(300):
        assert valid_call("2025-11-25", {"name": f"{n}" + "x" * 100_000, "arguments": {}}, "")
    assert all(len(key) < 1000 for key in _VALID_CALLS.seen), "a long name was kept"
    assert valid_call("2025-11-25", {"name": "short", "arguments": {}}, "")
    assert any(key.endswith("\0short") for key in _VALID_CALLS.seen), "a short one is"
