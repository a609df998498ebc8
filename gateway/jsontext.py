"""JSON text that crosses the gateway: valid Unicode, bounded nesting, ids found in a cut line.

Python's ``json`` accepts ``"\\ud800"`` (a lone surrogate, what a JavaScript peer sends when
it cuts an emoji in half) and yields a ``str`` no encoder will write back out: one such
string would fail the writer of whatever stream it reaches. Every JSON line read on stdio
goes through ``loads`` here, so text inside the gateway is always encodable.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 10_000
"""Nesting accepted in one message. Deeper than the ~1,000 levels ``json.loads`` takes by
default, so a page holding one absurdly nested schema still arrives and the catalog
quarantines that one tool ("nested too deeply") instead of losing the server; bounded so a
100,000-level line cannot exhaust the C stack."""

PARSE_ASIDE_BYTES = 256 << 10
"""JSON text at least this long from a server is parsed in a worker thread, in its turn: a
5,000-tool listing or a 16 MiB result takes 0.1-0.2 s to parse, which on the event loop
would hold up every client's calls for as long (gateway/downstream/stdio.py ``Aside``,
httpcalls.py)."""

_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


class TooDeep(ValueError):
    """The message nests deeper than ``MAX_DEPTH``."""


def decode(raw: bytes | bytearray) -> tuple[str, bool]:
    """UTF-8 text (invalid bytes replaced) and whether it may hold a lone surrogate escape.

    Only a ``\\uD800``-``\\uDFFF`` escape can yield a lone surrogate (raw UTF-8 surrogates
    are invalid UTF-8 and were replaced here), so a large clean result costs one regex scan
    and ``loads`` skips the scrub. The caller drops ``raw`` next: two copies at most.
    """
    return raw.decode("utf-8", errors="replace"), _ESCAPED_SURROGATE.search(raw) is not None


def loads(text: str, suspicious: bool = True) -> Any:
    """Parse one JSON text; lone surrogates become U+FFFD; nesting bounded by ``MAX_DEPTH``.

    ``suspicious`` is ``decode``'s verdict: False skips the scrub.
    """
    try:
        data = _parse(text)
    except RecursionError:
        data = _loads_deep(text)
    return scrub(data) if suspicious else data


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The decoder's scanner (made in its ``__init__``; typeshed does not declare it)."""
_JSON_SPACE = " \t\n\r"


def _parse(text: str) -> Any:
    """``json.loads(text)``: its scanner called directly when the text is one value from its
    first character, as a line on the wire is (two layers of wrappers less on every
    message); anything else, an error included, is ``json.loads``'s own to answer."""
    try:
        data, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return json.loads(text)  # "Extra data"
    return data


_DEEP = threading.Lock()
"""One deep parse at a time: the limit it raises is the interpreter's, and long lines are
parsed in worker threads (gateway/downstream/stdio.py ``Aside``), several servers' at once."""


def _loads_deep(text: str) -> Any:
    """Retry with the recursion limit raised to ``MAX_DEPTH`` levels above the caller.

    ``json``'s C scanner counts one recursion level per nested array or object against
    the interpreter's limit, which is one for every thread: it is only ever raised (other
    threads meanwhile may recurse deeper, never less deep), and restored after.
    """
    depth = 0
    frame = sys._getframe()  # noqa: SLF001 - CPython's documented frame access; no public equivalent
    while frame.f_back is not None:
        frame = frame.f_back
        depth += 1
    with _DEEP:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, depth + MAX_DEPTH + 50))
        try:
            return json.loads(text)
        except RecursionError:
            raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        finally:
            sys.setrecursionlimit(old)


_ESCAPE = re.compile(
    rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a surrogate pair: one character
    rb"|(u[dD][89a-fA-F][0-9a-fA-F]{2})"  # a lone surrogate
    rb"|.)",  # any other escape, ``\\`` included, so the text after it is never read as one
    re.DOTALL,
)


def scrub_escapes(raw: bytes) -> bytes:
    """JSON text with every lone surrogate escape (``\\ud800`` unpaired) written ``\\ufffd``.

    What ``loads`` makes of a line, done to the bytes of a body that parsers other than
    the gateway's read next (the SDK's, over HTTP): once parsed, it holds no string an
    encoder refuses, and every other byte is as it came. ``raw`` itself when it has none.
    """
    if _ESCAPED_SURROGATE.search(raw) is None:
        return raw
    return _ESCAPE.sub(lambda m: b"\\ufffd" if m.group(1) is not None else m.group(0), raw)


def scrub_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return _SURROGATE.sub(REPLACEMENT, text) if _SURROGATE.search(text) else text


def scrub(value: Any) -> Any:
    """A JSON value with lone surrogates replaced in every string and key.

    Iterative, so a value nested as deep as ``MAX_DEPTH`` cannot overflow the stack;
    containers are edited in place (they were just parsed and belong to the caller).
    """
    if isinstance(value, str):
        return scrub_text(value)
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in [k for k in node if isinstance(k, str) and _SURROGATE.search(k)]:
                node[scrub_text(key)] = node.pop(key)
            for key, item in node.items():
                if isinstance(item, str):
                    node[key] = scrub_text(item)
                elif isinstance(item, dict | list):
                    stack.append(item)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, str):
                    node[i] = scrub_text(item)
                elif isinstance(item, dict | list):
                    stack.append(item)
    return value


# --- the id of a line too long to parse -----------------------------------------------

_ID = rb'("(?:[^"\\]|\\.){0,200}"|-?\d{1,30})'
_HEAD_ID = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID)
_TAIL_ID = re.compile(rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$')
_HEAD_METHOD = re.compile(rb'^\s*\{\s*(?:"(?:jsonrpc|id)"\s*:\s*(?:"[^"]*"|-?\d+)\s*,\s*){0,2}"method"\s*:')


def find_id(head: bytes, tail: bytes) -> str | int | None:
    """The JSON-RPC ``id`` of a message known only by its first and last bytes.

    Python peers write ``id`` first (``{"jsonrpc":"2.0","id":7,...``), the TypeScript SDK
    last (``...,"jsonrpc":"2.0","id":7}``); both anchors sit outside any string value.
    """
    for match in (_HEAD_ID.match(head), _TAIL_ID.search(tail)):
        if match is not None:
            try:
                found = json.loads(match.group(1))
            except ValueError:
                continue
            if isinstance(found, str):
                return scrub_text(found)
            if isinstance(found, int):
                return found
    return None


def names_method(head: bytes) -> bool:
    """Whether a cut message starts like a request or notification (``method`` among the first keys)."""
    return _HEAD_METHOD.match(head) is not None
