"""Bound a tool result to what a model can afford to see; keep the full output as an artifact.

Why: one screenshot, log or query dump of a few hundred kilobytes can cost a whole conversation,
and clients cut such output silently. Every result passes through :func:`bound_result`.

**Model-visible size** (:func:`visible_size`) is the UTF-8 length of the compact JSON
(``ensure_ascii=False``, separators ``,`` and ``:``) of the whole result: ``content`` (with each
block's ``annotations``, ``_meta`` and unknown keys), ``structuredContent``, ``isError``, ``_meta``
and any other key, i.e. everything the client would be sent, JSON escaping included: a quote,
backslash or newline costs two bytes, another control character six. Counting less would let a
tiny ``text`` carry megabytes in ``_meta``. :func:`visible_size` computes the number without
building the JSON text; :func:`surely_within` is a cheap upper-bound test for small results.
What the result gains after it is bounded (``reserve``: the gateway's 2026-07-28 ``resultType``
and ``serverInfo`` stamp) is counted too, so what the client receives is within the ceiling.

**At or under the ceiling** the very same object is returned.

**Over it** the full output goes to an artifact and the model sees one text block::

    <head, ~75% of the preview budget>
    … N bytes omitted …
    <tail>
    [prefixgate] result of V bytes of JSON exceeds the C-byte limit; preview above.
    full output (A bytes of text) saved as artifact ID; read it with artifact_read {"id": "ID"} ...

(V: the result as the client would be sent it; A: what the artifact holds, the text or, for
a result that is not all text, its canonical JSON, "A bytes of JSON"), or, when the output is
larger than ``max_artifact_bytes``, no store is given or the write fails, the last line is
``full output (A bytes of text) not retained: <reason>`` and no file is left behind.
The trailer is budgeted first, so it is never cut; head and tail are cut on character
boundaries. If the whole preview source fits, it is shown whole, without the omission line.

- *Full output* (the artifacts): when every block is text (and the result's other fields
  fit, below), the text blocks joined with ``"\\n"``: what the model was reading,
  line-addressable. If ``structuredContent`` was dropped too, it is a second artifact of its
  own, :func:`structured_text` (indented JSON, sorted keys), named on its own trailer line::

    text (A bytes) saved as artifact ID; read it with artifact_read {"id": "ID"} ...
    structuredContent (S bytes of JSON) saved as artifact ID2; read it the same way: {"id": "ID2"}.

  Otherwise one artifact, the canonical JSON of the whole result, binary data included. Each
  artifact is retained on its own (either line may say ``... not retained: <reason>``).
  So nothing the model lost is lost; a text the preview shows whole is not saved at all
  (only the structured part was too big), and the structured line comes first.
- *Preview source*: that same joined text; otherwise each block rendered on its own line(s):
  text verbatim, image/audio/blob as ``[image: image/png, N bytes of base64]``, an embedded
  text resource as a ``[resource: URI (MIME)]`` line plus its text, a resource link as a line,
  anything else as canonical JSON. When ``structuredContent`` is dropped and no block is text,
  its canonical JSON is the preview source too.

**Other result fields** (``isError``, ``_meta``, unknown keys) are kept in a bounded result while
together they fit ``max((max_visible_bytes - 1024) // 4, 256)`` bytes, in the order the result has them
(``isError`` always); the rest are left out (the trailer gives their number and size) and the
artifact is then the canonical JSON of the whole result. Blocks are replaced by the preview, so
their ``annotations`` and ``_meta`` are never sent; large ones also make the artifact JSON.

**structuredContent rule.** The mcp SDK client (``ClientSession.validate_tool_result``) skips
validation for ``isError`` results; otherwise, when the tool declared an ``outputSchema``, it
raises if ``structuredContent`` is missing or does not validate. So:

1. ``structuredContent`` is kept *verbatim* when its compact JSON is at most
   ``(max_visible_bytes - 1024) // 2`` bytes (half of what is left after a fixed reserve for the
   trailer and a minimal preview); kept verbatim, it validates exactly as the original would;
2. otherwise it is dropped (the trailer says so), and if ``output_schema`` is given and the
   result was not already an error, ``isError`` is set to ``true``: the only way a client that
   validates can accept a result without the structured part. Pass the ``outputSchema`` exactly
   as published to the client (None when none was published: the gateway's default is not to
   publish output schemas, so a bounded success stays a success).

Everything except the artifact id is deterministic. Memory: one pass, text encoded once (the
artifact is written from the encoded pieces without joining them); peak extra memory stays around
one copy of the output for text results (plus the structured part's JSON when it is dropped), two
for JSON ones.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import canonicaljson

from .store import Artifacts, StoreError

log = logging.getLogger("prefixgate.spill")

__all__ = [
    "DEFAULT_MAX_ARTIFACT_BYTES",
    "DEFAULT_MAX_VISIBLE_BYTES",
    "MIN_VISIBLE_BYTES",
    "bound_result",
    "canonical_json",
    "structured_text",
    "json_size",
    "structured_limit",
    "surely_within",
    "text_result_size",
    "utf8",
    "visible_size",
]

DEFAULT_MAX_VISIBLE_BYTES = 65536
MIN_VISIBLE_BYTES = 1024
DEFAULT_MAX_ARTIFACT_BYTES = 16 * 1024 * 1024
_RESERVE = 1024  # trailer (<= ~600 bytes worst case) plus a minimal preview
_REASON_MAX = 200
_MIN_OTHER_FIELDS = 256  # small _meta survives even the smallest ceiling (the trailer leaves room)
_HEAD_SHARE = 0.75

# JSON escaping (json.dumps, ensure_ascii=False): '"' '\\' and \b\f\n\r\t take 2 bytes, other
# C0 controls 6 (\u00XX). Everything else is its UTF-8 bytes.
_CONTROL = re.compile("[\x00-\x1f]")
_OTHER_CONTROL = re.compile("[\x00-\x07\x0b\x0e-\x1f]")
_SHORT_ESCAPES = "\b\f\n\r\t"
_OTHER_CONTROLS = [chr(c) for c in range(0x20) if chr(c) not in _SHORT_ESCAPES]
_SURROGATE = re.compile("[\ud800-\udfff]")
_WRAPPER = len('{"content":[{"type":"text","text":""}]}')
_STRUCTURED_KEY = len(',"structuredContent":')


# --------------------------------------------------------------------------- measuring


def utf8(s: str) -> bytes:
    """UTF-8 bytes of s; lone surrogates (only reachable via JSON \\u escapes) become U+FFFD."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s).encode("utf-8")


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(utf8(s))


def _escaped_len(s: str) -> int:
    """Bytes of s inside a JSON string literal, quotes excluded; counts, never copies."""
    n = _utf8_len(s) + s.count('"') + s.count("\\")
    if _CONTROL.search(s) is None:
        return n
    n += sum(s.count(c) for c in _SHORT_ESCAPES)
    if _OTHER_CONTROL.search(s) is not None:
        n += 5 * sum(s.count(c) for c in _OTHER_CONTROLS)
    return n


def _key_text(k: object) -> str:
    """json.dumps' conversion of a non-string dict key."""
    if isinstance(k, str):
        return k
    return json.dumps(k) if isinstance(k, bool | int | float) or k is None else str(k)


def _scalar_size(v: object) -> int:
    if v is None or v is True:
        return 4
    if v is False:
        return 5
    if isinstance(v, float) and not math.isfinite(v):
        return 4  # written as null (see finite)
    if isinstance(v, int | float):
        return len(json.dumps(v))
    return 2 + _escaped_len(str(v))


def json_size(value: object) -> int:
    """len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()), computed
    iteratively without building the text (a 16 MiB string is counted, not escaped)."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += 2 + _escaped_len(v)
        elif isinstance(v, Mapping):
            total += 2 + max(len(v) - 1, 0) + len(v)  # braces, commas, colons
            for k, item in v.items():
                total += 2 + _escaped_len(_key_text(k))
                stack.append(item)
        elif isinstance(v, list | tuple):
            total += 2 + max(len(v) - 1, 0)
            stack.extend(v)
        else:
            total += _scalar_size(v)
    return total


def visible_size(result: Mapping[str, Any]) -> int:
    """The model-visible size of a CallToolResult dict: all of it (see the module docstring)."""
    return json_size(result)


_MAX_CHAR_BYTES = 6
"""Most bytes one Python character can cost in compact JSON (a control character as \\u00XX)."""


def surely_within(value: object, limit: int, max_nodes: int = 256) -> bool:
    """True only if ``json_size(value) <= limit``, decided from at most ``max_nodes`` values.

    An upper bound: every character counts as 6 bytes, numbers at their longest. Big or
    deeply structured values answer False (measure them exactly, off the event loop). Every
    call's arguments and result pass here: the exact JSON types are tested first, and a
    string value is counted beside its key (an ``isinstance`` against ``Mapping`` costs
    several times a ``type`` test; together a third of this function's time).
    """
    total, stack = 0, [value]
    v: Any
    while stack:
        max_nodes -= 1
        if max_nodes < 0:
            return False
        v = stack.pop()
        kind = type(v)
        if kind is str:
            total += 2 + _MAX_CHAR_BYTES * len(v)
        elif kind is dict or (kind is not list and isinstance(v, Mapping)):
            if len(v) > max_nodes:
                return False  # (before walking it: a client's million-key object costs nothing here)
            total += 2 + 2 * len(v)
            for k, item in v.items():
                if type(k) is not str and not isinstance(k, str):
                    return False
                if type(item) is str:
                    max_nodes -= 1
                    total += 4 + _MAX_CHAR_BYTES * (len(k) + len(item))
                else:
                    total += 2 + _MAX_CHAR_BYTES * len(k)
                    stack.append(item)
        elif kind is list or isinstance(v, list | tuple):
            if len(v) > max_nodes:
                return False
            total += 2 + len(v)
            stack.extend(v)
        elif isinstance(v, str):
            total += 2 + _MAX_CHAR_BYTES * len(v)
        elif v is None or kind is bool:
            total += 5
        elif isinstance(v, int):
            total += 2 + v.bit_length() // 3  # sign plus at least one digit per 3.32 bits
        elif isinstance(v, float):
            total += 24  # the longest repr of a finite float
        else:
            return False
        if total > limit:
            return False
    return max_nodes >= 0


def text_result_size(text: str) -> int:
    """visible_size of a result made of one text block holding text."""
    return _WRAPPER + _escaped_len(text)


def structured_limit(max_visible_bytes: int) -> int:
    """Largest structuredContent (compact JSON bytes) a bounded result keeps verbatim."""
    return (max_visible_bytes - _RESERVE) // 2


def canonical_json(value: object) -> bytes:
    """Canonical JSON (sorted keys, compact, UTF-8); a lenient fallback for a non-finite number
    (written null, see :func:`finite`) or surrogates. Always valid JSON."""
    try:
        return canonicaljson.encode_canonical_json(value)
    except (ValueError, TypeError):
        text = json.dumps(
            finite(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str, allow_nan=False
        )
        return utf8(text)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (``inf`` from a number too large for a double,
    such as ``1e400``, or a peer's non-standard ``NaN``/``Infinity`` token) as None: JSON has
    no such number, and the gateway's writer (pydantic-core's) sends them to the client as
    ``null``, so an artifact says what the client was sent and stays JSON (``json.dumps``
    would write the bare token ``Infinity``). Containers are copied, never edited; iterative."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, dict | list):
        return value
    top: dict[Any, Any] | list[Any] = dict(value) if isinstance(value, dict) else list(value)
    stack = [top]
    while stack:
        node = stack.pop()
        for key, item in list(node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(item, float) and not math.isfinite(item):
                node[key] = None
            elif isinstance(item, dict | list):
                node[key] = child = dict(item) if isinstance(item, dict) else list(item)
                stack.append(child)
    return top


# --------------------------------------------------------------------------- full output


def _is_text_block(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _joined(pieces: Iterable[bytes]) -> list[bytes]:
    """Pieces with b"\\n" between them, as a list (never concatenated)."""
    out: list[bytes] = []
    for piece in pieces:
        if out:
            out.append(b"\n")
        out.append(piece)
    return out


def _label(v: object) -> str:
    return " ".join(v.split()) if isinstance(v, str) and v.strip() else "unknown"


def _render_resource(resource: object) -> bytes:
    r = resource if isinstance(resource, dict) else {}
    head = f"[resource: {_label(r.get('uri'))} ({_label(r.get('mimeType'))})"
    if isinstance(r.get("text"), str):
        return utf8(head + "]\n" + r["text"])
    if isinstance(r.get("blob"), str):
        return utf8(f"{head}, {len(r['blob'])} bytes of base64]")
    return utf8(head + "]")


def _render_block(block: object) -> bytes:
    """One block as preview text: binary data becomes a line naming type, mimeType and size."""
    if _is_text_block(block):
        assert isinstance(block, dict)
        return utf8(block["text"])
    if isinstance(block, dict):
        kind = block.get("type")
        if kind in ("image", "audio"):
            data = block.get("data")
            size = len(data) if isinstance(data, str) else 0
            return utf8(f"[{kind}: {_label(block.get('mimeType'))}, {size} bytes of base64]")
        if kind == "resource":
            return _render_resource(block.get("resource"))
        if kind == "resource_link":
            name, mime = _label(block.get("name")), _label(block.get("mimeType"))
            return utf8(f"[resource_link: {_label(block.get('uri'))} ({name}, {mime})]")
    return canonical_json(block)


def _preview_source(blocks: Sequence[object], structured: object, dropped: bool) -> list[bytes]:
    pieces = [_render_block(b) for b in blocks]
    if dropped and structured is not None and not any(_is_text_block(b) for b in blocks):
        pieces.append(b"structuredContent: " + canonical_json(structured))
    return _joined(pieces)


# --------------------------------------------------------------------------- preview


def _first_bytes(chunks: Sequence[bytes], n: int) -> bytes:
    out, need = [], n
    for c in chunks:
        if need <= 0:
            break
        out.append(c[:need])
        need -= len(out[-1])
    return b"".join(out)


def _last_bytes(chunks: Sequence[bytes], n: int) -> bytes:
    out, need = [], n
    for c in reversed(chunks):
        if need <= 0:
            break
        out.append(c[-need:] if need < len(c) else c)
        need -= len(out[-1])
    return b"".join(reversed(out))


def _fit(s: str, budget: int, *, from_end: bool) -> str:
    """Longest prefix (or suffix) of s whose escaped size is <= budget: binary search."""
    if _escaped_len(s) <= budget:
        return s
    lo, hi = 0, len(s)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        part = s[len(s) - mid :] if from_end else s[:mid]
        if _escaped_len(part) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return s[len(s) - lo :] if from_end else s[:lo]


def _marker(omitted: int) -> str:
    return f"\n… {omitted} bytes omitted …\n"


def _preview(chunks: Sequence[bytes], total: int, budget: int) -> str:
    """Head + omission line + tail within budget escaped bytes; the whole source if it fits.

    Raw slices are never longer than the budget (escaping only adds), so the work is
    proportional to the budget, not to the output. Decoding with errors="ignore" drops just the
    partial character at a cut: the source itself is always valid UTF-8.
    """
    if total <= budget:
        whole = _first_bytes(chunks, total).decode("utf-8", "ignore")
        if _escaped_len(whole) <= budget:
            return whole
    avail = budget - _escaped_len(_marker(total))
    if avail <= 0:
        return ""
    head_budget = int(avail * _HEAD_SHARE)
    head = _fit(_first_bytes(chunks, head_budget).decode("utf-8", "ignore"), head_budget, from_end=False)
    head_n = len(utf8(head))
    tail_budget = avail - _escaped_len(head)
    tail_raw = _last_bytes(chunks, min(tail_budget, total - head_n))
    tail = _fit(tail_raw.decode("utf-8", "ignore"), tail_budget, from_end=True)
    return head + _marker(total - head_n - len(utf8(tail))) + tail


# --------------------------------------------------------------------------- trailer


def _one_line(reason: str) -> str:
    line = " ".join(reason.split()) or "unknown error"
    return line if len(line) <= _REASON_MAX else line[: _REASON_MAX - 1] + "…"


def retain(
    chunks: Sequence[bytes], size: int, store: Artifacts | None, max_artifact_bytes: int,
) -> tuple[str | None, str | None]:
    """(artifact id, None) or (None, one-line reason it was not kept, naming no path: the
    model sees it): also what ``tool_search`` keeps a schema too long for its page in."""
    if store is None:
        return None, "no artifact store is configured"
    if size > max_artifact_bytes:
        return None, f"larger than the {max_artifact_bytes}-byte artifact limit"
    try:
        return store.put_chunks(chunks), None
    except StoreError as e:
        # The log names what is broken (a path, a session's key); the model, ids only, never paths.
        log.warning("an output of %d bytes was not retained: %s", size, e)
        return None, _one_line(e.shown)
    except OSError as e:
        log.warning("an output of %d bytes was not retained: cannot write artifact: %s", size, e)
        return None, _one_line(f"cannot write artifact: {e.strerror or type(e).__name__}")
    except Exception as e:  # noqa: BLE001 - any other failure of a store costs the artifact, never the call
        log.warning("an output of %d bytes was not retained: cannot write artifact: %r", size, e)
        return None, f"cannot write artifact: {type(e).__name__}"


@dataclass(frozen=True)
class _Part:
    """One retained (or not) piece of the output: what it is, its size, its id or why not."""

    what: str
    size: int
    artifact_id: str | None
    reason: str | None
    unit: str = ""
    """What its bytes are ("text", "JSON"), said when ``what`` does not say it."""


def _keep(
    what: str, chunks: Sequence[bytes], store: Artifacts | None, max_artifact_bytes: int, unit: str = ""
) -> _Part:
    size = sum(len(c) for c in chunks)
    artifact_id, reason = retain(chunks, size, store, max_artifact_bytes)
    return _Part(what, size, artifact_id, reason, unit)


def _keep_structured(value: object, compact: int, store: Artifacts | None, max_artifact_bytes: int) -> _Part:
    """structuredContent as indented JSON with sorted keys: one value per line, so a model can
    read it by line and ``find`` shows whole lines. Never encoded when its compact form alone
    is already over the artifact limit."""
    if compact > max_artifact_bytes:
        limit = f"larger than the {max_artifact_bytes}-byte artifact limit"
        return _Part("structuredContent", compact, None, limit, "JSON")
    return _keep("structuredContent", [structured_text(value)], store, max_artifact_bytes, "JSON")


def structured_text(value: object) -> bytes:
    """The structured-part artifact: sorted keys, one-space indent, UTF-8; canonical JSON if
    the value cannot be sorted (never the case for parsed JSON)."""
    try:
        return utf8(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1, allow_nan=False))
    except ValueError:  # a non-finite number: written null, as the client was sent it
        return structured_text(finite(value))
    except TypeError:
        return canonical_json(value)


def _part_line(part: _Part, explain: bool) -> str:
    """A part's trailer line; ``explain``: the first retained part says how to read artifacts."""
    size = f"{part.size} bytes of {part.unit}" if part.unit else f"{part.size} bytes"
    if part.artifact_id is None:
        return f"{part.what} ({size}) not retained: {part.reason}"
    aid = part.artifact_id
    if explain:
        return (
            f"{part.what} ({size}) saved as artifact {aid}; read it with "
            f'artifact_read {{"id": "{aid}"}} plus "offset"/"limit" (bytes), '
            f'"line"/"lines" (line range) or "find" (literal text).'
        )
    return f'{part.what} ({size}) saved as artifact {aid}; read it the same way: {{"id": "{aid}"}}.'


def _trailer(
    visible: int, ceiling: int, parts: Sequence[_Part],
    dropped_structured: int | None, forced_error: bool, left_out: tuple[int, int] | None = None,
) -> str:
    first = f"[prefixgate] result of {visible} bytes of JSON exceeds the {ceiling}-byte limit; preview above."
    if dropped_structured is not None:
        first += f" structuredContent ({dropped_structured} bytes) not shown"
        first += "; isError set since the tool's outputSchema needs it." if forced_error else "."
    if left_out is not None:
        count, size = left_out
        first += f" {count} other result field{'s' if count > 1 else ''} ({size} bytes) not shown."
    lines = [first]
    explained = False
    for part in parts:
        lines.append(_part_line(part, explain=not explained))
        explained = explained or part.artifact_id is not None
    return "\n".join(lines)


# --------------------------------------------------------------------------- entry point


def bound_result(
    result: dict[str, Any],
    *,
    max_visible_bytes: int = DEFAULT_MAX_VISIBLE_BYTES,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    store: Artifacts | None,
    output_schema: Mapping[str, Any] | None = None,
    reserve: int = 0,
) -> dict[str, Any]:
    """Return result itself if it fits max_visible_bytes, else a bounded copy (module docstring).

    ``reserve``: the most bytes the result gains after this (what the client's protocol era
    adds), counted as part of it. Never raises because of the store: a failed write becomes
    the non-retention line.
    """
    if max_visible_bytes < MIN_VISIBLE_BYTES:
        raise ValueError(f"max_visible_bytes must be >= {MIN_VISIBLE_BYTES}")
    visible = visible_size(result) + reserve
    if visible <= max_visible_bytes:
        return result

    raw_blocks = result.get("content")
    blocks: list[object] = raw_blocks if isinstance(raw_blocks, list) else []
    structured = result.get("structuredContent")
    structured_size = json_size(structured) if structured is not None else None
    keep = structured_size is not None and structured_size <= structured_limit(max_visible_bytes)
    dropped = structured_size if structured is not None and not keep else None
    forced_error = output_schema is not None and not keep and not result.get("isError")
    others, left_out = _other_fields(result, max_visible_bytes, forced_error)

    text_blocks = (
        bool(blocks)
        and all(_is_text_block(b) for b in blocks)
        and left_out is None
        and sum(_block_extras(b) for b in blocks) <= _RESERVE
    )
    fixed = _WRAPPER + (_STRUCTURED_KEY + structured_size if keep and structured_size is not None else 0)
    fixed += json_size(others) - 1 if others else 0  # each: a comma, "key", a colon, the value

    def budget_beside(parts: Sequence[_Part]) -> tuple[str, int]:
        """The trailer naming ``parts``, and the escaped bytes left for the preview beside it."""
        trailer = _trailer(visible, max_visible_bytes, parts, dropped, forced_error, left_out)
        return trailer, max_visible_bytes - reserve - fixed - _escaped_len("\n" + trailer)

    if text_blocks:
        # What the model was reading, line-addressable; a dropped structured part is its own artifact.
        full = _joined(utf8(b["text"]) for b in blocks)  # type: ignore[index]
        source = full
        if dropped is None:
            parts = [_keep("full output", full, store, max_artifact_bytes, "text")]
        else:
            parts = [_keep_structured(structured, dropped, store, max_artifact_bytes)]
            # A text the preview shows whole is not saved as well: only the structured part was too big.
            left = budget_beside(parts)[1]
            if sum(len(c) for c in full) > left or _escaped_len(b"".join(full).decode()) > left:
                parts.insert(0, _keep("text", full, store, max_artifact_bytes))
    else:
        full = [canonical_json(result)]
        source = _preview_source(blocks, structured, dropped is not None)
        parts = [_keep("full output", full, store, max_artifact_bytes, "JSON")]
    del full

    trailer, budget = budget_beside(parts)
    preview = _preview(source, sum(len(c) for c in source), budget)
    text = f"{preview}\n{trailer}" if preview else trailer

    bounded: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if keep:
        bounded["structuredContent"] = structured
    bounded.update(others)
    return bounded


def _block_extras(block: object) -> int:
    """Bytes of a text block's fields other than its text (annotations, _meta, unknown)."""
    assert isinstance(block, dict)
    return sum(json_size(k) + json_size(v) for k, v in block.items() if k not in ("type", "text"))


def _other_fields(
    result: Mapping[str, Any], max_visible_bytes: int, forced_error: bool
) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """The result's other fields a bounded result keeps, and (number, bytes) of those left out."""
    budget = max((max_visible_bytes - _RESERVE) // 4, _MIN_OTHER_FIELDS)
    kept: dict[str, Any] = {}
    count = size = 0
    for key, value in result.items():
        if key in ("content", "structuredContent"):
            continue
        if key == "isError" and isinstance(value, bool):
            kept[key] = value  # tiny, and its meaning must survive (covered by _RESERVE)
            continue
        cost = json_size(key) + json_size(value) + 2
        if cost <= budget:
            kept[key] = value
            budget -= cost
        else:
            count, size = count + 1, size + cost
    if forced_error:
        kept["isError"] = True
    return kept, (count, size) if count else None
