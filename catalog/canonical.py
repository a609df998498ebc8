"""Canonical JSON (``canonicaljson``'s bytes) assembled from parts that are already encoded.

A first-ever build of 5,000 tools encoded every declaration four times (memo key, token
estimate, fingerprint, activation identity), about a fifth of its time. Canonical JSON is
compact with keys sorted, so an object is ``{`` + its ``"key":value`` members joined by
``,`` + ``}`` in key order and an array ``[`` + items joined by ``,`` + ``]``: each part is
encoded once and reused, and the bytes are exactly ``encode(value)``'s
(tests/test_canonical.py, tests/test_build_identical.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import canonicaljson

JSON = Any


encode = canonicaljson.encode_canonical_json
"""The one canonical encoder: compact, keys sorted by code point, UTF-8, no NaN."""


def members(value: Mapping[str, JSON]) -> dict[str, bytes] | None:
    """Each member as its canonical ``"key":value`` bytes, or None when a key is not a string.

    Raises what :func:`encode` raises on a bad member, though not necessarily with its
    message: call ``encode(value)`` for the error to report.
    """
    if not all(isinstance(k, str) for k in value):
        return None  # the encoder would stringify (and order) such keys its own way
    return {k: _key(k) + encode(v) for k, v in value.items()}


@functools.lru_cache(maxsize=1024)
def _key(key: str) -> bytes:
    return encode(key) + b":"


def member(key: str, value: JSON) -> bytes:
    """One member's canonical ``"key":value`` bytes."""
    return _key(key) + encode(value)


def join_object(encoded: Mapping[str, bytes]) -> bytes:
    """``encode`` of the object whose members (see :func:`members`) are ``encoded``."""
    return b"{" + b",".join(encoded[k] for k in sorted(encoded)) + b"}"


def join_values(values: Mapping[str, bytes]) -> bytes:
    """``encode`` of the object whose members' values encode to ``values``."""
    return b"{" + b",".join(_key(k) + values[k] for k in sorted(values)) + b"}"


def join_array(items: Iterable[bytes]) -> bytes:
    """``encode`` of the array whose items encode to ``items``."""
    return b"[" + b",".join(items) + b"]"
