"""JSON text that crosses the gateway: valid Unicode, bounded nesting, ids found in a cut line.

Python's ``json`` accepts ``"\\ud800"`` (a lone surrogate, what a JavaScript peer sends when
it cuts an emoji in half) and yields a ``str`` no encoder will write back out: one such
string would fail the writer of whatever stream it reaches. Every JSON line read on stdio
goes through ``loads`` here, so text inside the gateway is always encodable.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import pydantic_core

from catalog.pieces import nested_within
from spill import surely_within

log = logging.getLogger("prefixgate.json")

MAX_DEPTH = 10_000
"""Nesting accepted in one message. Deeper than the ~1,000 levels ``json.loads`` takes by
default, so a page holding one absurdly nested schema still arrives and the catalog
quarantines that one tool ("nested too deeply") instead of losing the server; bounded so a
100,000-level line cannot exhaust the C stack."""

PARSE_ASIDE_BYTES = 256 << 10
"""JSON text at least this long from a peer is parsed in a worker thread, yielding (``_turn``):
a 5,000-tool listing or a 16 MiB result takes 0.1-0.2 s to parse, a client's 4 MiB body of
small objects ~0.1 s, which on the event loop would hold up every client's calls for as long
(gateway/downstream/stdio.py ``Aside``, ``parsed_aside`` below). Shorter text parses in well
under 10 ms, where the thread hop (~0.1 ms) is not worth it."""

_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPED_SURROGATE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def _turn(value: dict[str, Any]) -> dict[str, Any]:
    """The identity, as ``object_hook``: the C scanner calls it for every object it decodes.

    A call into Python code is where a thread holding the interpreter lock gives it up when
    another thread has waited ``sys.getswitchinterval()`` for it. Without such a call, one
    parse is one C call that holds the lock from start to end, so a worker thread parsing a
    long text held the event loop all the same (4 MiB of small objects: ~100 ms; with this
    hook the loop waits ~25 ms at most, for the same time to parse)."""
    return value


def loads_yielding(text: str | bytes) -> Any:
    """``json.loads(text)``, giving the interpreter lock up between objects (``_turn``): for
    long text parsed in a worker thread (``parsed_aside``)."""
    return json.loads(text, object_hook=_turn)


JITER_DEPTH = 200
"""Most arrays and objects the SDK's parser (pydantic-core's jiter) reads nested; deeper, it
refuses the text."""


def loads_as_jiter(text: bytes | str) -> Any:
    """``pydantic_core.from_json(text)``: its value, or its refusal (``ValueError``), parsed by
    ``loads_yielding``, as jiter holds the interpreter lock from start to end.

    On text json takes and jiter refuses (bytes that are not UTF-8, a lone surrogate escape)
    jiter itself answers, as it does wherever json refuses (a byte-order mark, say); nested
    deeper than ``JITER_DEPTH`` is refused as jiter refuses it. Whatever both take, they read
    as the same values (tests/test_beside_the_loop.py)."""
    try:
        decoded = text if isinstance(text, str) else text.decode("utf-8")
    except UnicodeDecodeError:
        return pydantic_core.from_json(text)
    if may_escape_a_surrogate(decoded):
        return pydantic_core.from_json(text)
    try:
        value = loads_yielding(decoded)
    except (ValueError, RecursionError):
        return pydantic_core.from_json(text)
    if not nested_within(value, JITER_DEPTH):
        raise ValueError(f"recursion limit exceeded: nested deeper than {JITER_DEPTH} levels")
    return value


async def parsed_aside(text: bytes | str, what: str, *, sdk_parser: bool = False) -> Any:
    """``json.loads(text)``, or with ``sdk_parser`` ``pydantic_core.from_json(text)`` (the SDK's
    verdicts): in a worker thread, yielding, when ``text`` is long (``PARSE_ASIDE_BYTES``);
    ``what`` names it in the debug log."""
    if len(text) < PARSE_ASIDE_BYTES:
        return pydantic_core.from_json(text) if sdk_parser else json.loads(text)
    log.debug("%s: %d bytes parsed beside the event loop", what, len(text))
    return await anyio.to_thread.run_sync(loads_as_jiter if sdk_parser else loads_yielding, text)


def may_be_long(value: Any) -> bool:
    """Whether a value may encode to ``PARSE_ASIDE_BYTES`` or more: False only when a look at
    its first few hundred values bounds it below that (``spill.surely_within``), so a common
    message costs microseconds here, and a long one is encoded in a worker thread, in pieces
    (``catalog.pieces``)."""
    return not surely_within(value, PARSE_ASIDE_BYTES)


def may_escape_a_surrogate(text: str) -> bool:
    """Whether JSON text may hold a ``\\uD800``-``\\uDFFF`` escape (``decode``'s test, on text)."""
    return _ESCAPED_SURROGATE_TEXT.search(text) is not None


class TooDeep(ValueError):
    """The message nests deeper than ``MAX_DEPTH``."""


def decode(raw: bytes | bytearray) -> tuple[str, bool]:
    """UTF-8 text (invalid bytes replaced) and whether it may hold a lone surrogate escape.

    Only a ``\\uD800``-``\\uDFFF`` escape can yield a lone surrogate (raw UTF-8 surrogates
    are invalid UTF-8 and were replaced here), so a large clean result costs one regex scan
    and ``loads`` skips the scrub. The caller drops ``raw`` next: two copies at most.
    """
    return raw.decode("utf-8", errors="replace"), _ESCAPED_SURROGATE.search(raw) is not None


def loads(text: str, suspicious: bool = True, *, yielding: bool = False) -> Any:
    """Parse one JSON text; lone surrogates become U+FFFD; nesting bounded by ``MAX_DEPTH``.

    ``suspicious`` is ``decode``'s verdict: False skips the scrub. ``yielding``: give the
    interpreter lock up between objects (``_turn``), for a long text in a worker thread.
    """
    hook = _turn if yielding else None
    try:
        data = _parse(text, hook)
    except RecursionError:
        data = _loads_deep(text, hook)
    return scrub(data) if suspicious else data


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The decoder's scanner (made in its ``__init__``; typeshed does not declare it)."""
_scan_yielding: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(object_hook=_turn).scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"


def _parse(text: str, hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """``json.loads(text, object_hook=hook)``: its scanner called directly when the text is
    one value from its first character, as a line on the wire is (two layers of wrappers
    less on every message); anything else, an error included, is ``json.loads``'s own."""
    try:
        data, end = (_scan if hook is None else _scan_yielding)(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text, object_hook=hook)
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return json.loads(text, object_hook=hook)  # "Extra data"
    return data


_DEEP = threading.Lock()
"""One deep parse at a time: the limit it raises is the interpreter's, and long lines are
parsed in worker threads (gateway/downstream/stdio.py ``Aside``), several servers' at once."""


def _loads_deep(text: str, hook: Callable[[dict[str, Any]], Any] | None) -> Any:
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
            return json.loads(text, object_hook=hook)
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
