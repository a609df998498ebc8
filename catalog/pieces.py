"""A JSON value encoded a piece at a time, so a worker thread gives the interpreter lock up between pieces.

An encoder written in C or Rust (``json.dumps``, pydantic-core's ``to_json``) holds the lock
for its whole call: encoding a 4 MB message, or a 5,000-tool record, in a worker thread
still held the event loop for all of it (40-100 ms). Here the outer levels of objects and
arrays are joined in Python, and a long array or object is cut in slices of ``SLICE``
members, so one call encodes a slice or a value below ``DEPTH`` levels; between calls, a
thread that waits for the lock gets it. The bytes are the encoder's own for the whole
value: any compact encoder writes a container as its members' encodings joined by commas
inside brackets (tests/test_pieces.py). Pure: no I/O, no threads of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

Encode = Callable[[Any], bytes]
"""A compact JSON encoder: one value to its bytes (no spaces between tokens)."""

SLICE = 256
"""Members of a long array or object encoded in one call."""
DEPTH = 4
"""Levels of objects and arrays joined here; below them, values are encoded whole (a
tool call's ``arguments`` sit at the third level of its message)."""


def encode_in_pieces(value: Any, encode: Encode, depth: int = DEPTH) -> bytes:
    """``encode(value)``, its outer ``depth`` levels joined here (see the module docstring)."""
    out: list[bytes] = []
    _pieces(value, encode, depth, out)
    return b"".join(out)


def _pieces(value: Any, encode: Encode, depth: int, out: list[bytes]) -> None:
    if depth > 0 and type(value) is list:
        out.append(b"[")
        if len(value) > SLICE:
            for start in range(0, len(value), SLICE):
                out.append(b"," if start else b"")
                out.append(encode(value[start : start + SLICE])[1:-1])
        else:
            for i, item in enumerate(value):
                out.append(b"," if i else b"")
                _pieces(item, encode, depth - 1, out)
        out.append(b"]")
    elif depth > 0 and type(value) is dict and all(type(key) is str for key in value):
        out.append(b"{")
        if len(value) > SLICE:
            items = iter(value.items())
            for start in range(0, len(value), SLICE):
                out.append(b"," if start else b"")
                out.append(encode(dict(islice(items, SLICE)))[1:-1])
        else:
            for i, (key, item) in enumerate(value.items()):
                out.append(b"," if i else b"")
                out.append(encode(key) + b":")
                _pieces(item, encode, depth - 1, out)
        out.append(b"}")
    else:
        out.append(encode(value))


def nested_within(value: Any, limit: int) -> bool:
    """Whether a decoded JSON value nests at most ``limit`` arrays and objects deep: an
    iterative walk in Python code, which gives the interpreter lock up as it goes (and
    cannot itself hit the recursion limit that the encoders and parsers of ``json`` do)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if type(node) is dict else node if type(node) is list else None
        if children is None:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children if type(child) is dict or type(child) is list)
    return True
