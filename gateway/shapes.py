"""The commonest protocol shapes, recognised without pydantic.

A gateway checks two shapes on every call: the client's ``tools/call`` params (before it
claims the call for the stdio fast path) and the server's result (before it goes on).
Most calls are the simplest of each: a name with arguments, and text content. pydantic
answers those in ~2 µs in a tight loop but ~15 µs in a gateway between calls, where its
validators' code and schemas are cold again each time. These checks accept only shapes
the protocol's own models always accept (tests/test_shapes.py holds them to that) and
say nothing of the rest, which still goes to the models.
"""

from __future__ import annotations

from typing import Any

_CALL_KEYS = frozenset(("name", "arguments"))
_RESULT_KEYS = frozenset(("content", "isError"))
_TEXT_KEYS = frozenset(("type", "text"))


def plain_call_params(params: dict[str, Any]) -> bool:
    """True only for ``{"name": str, "arguments"?: object | null}``: valid ``tools/call``
    params in the handshake era (2026-07-28 params carry their ``_meta`` envelope)."""
    if not params.keys() <= _CALL_KEYS or type(params.get("name")) is not str:
        return False
    arguments = params.get("arguments")
    return arguments is None or type(arguments) is dict


def plain_text_result(result: dict[str, Any], modern: bool) -> bool:
    """True only for ``{"content": [text blocks], "isError"?: bool}`` (plus ``resultType:
    "complete"`` when ``modern``): a valid ``tools/call`` result in that era."""
    keys = result.keys()
    if modern:
        if result.get("resultType") != "complete" or not keys - {"resultType"} <= _RESULT_KEYS:
            return False
    elif not keys <= _RESULT_KEYS:
        return False
    content = result.get("content")
    if type(content) is not list or ("isError" in result and type(result["isError"]) is not bool):
        return False
    for block in content:
        if (
            type(block) is not dict
            or not block.keys() <= _TEXT_KEYS
            or block.get("type") != "text"
            or type(block.get("text")) is not str
        ):
            return False
    return True
