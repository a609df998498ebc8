"""``artifact_read``: pages, line ranges and literal search over one session's artifacts.

Why a tool and not a path: the model gets ids only, resolved inside its own session's store,
so it can never name a file. Every answer is one text block, a one-line header then the
artifact's bytes verbatim, and the whole answer (header included, measured like
:func:`spill.bound.visible_size`) stays within ``max_visible_bytes``: it is never spilled.

Header formats (``ID`` is the id asked for; ranges are half-open, ``A to B`` = bytes A..B-1)::

    [artifact ID] bytes A to B of SIZE; next offset B            (or: ; end reached)
    [artifact ID] lines L to M (bytes A to B) of SIZE bytes; next line M+1 (offset B)
    [artifact ID] line L, part (bytes A to B) of SIZE bytes; next offset B (rest of line L)
    [artifact ID] N matching lines for "TEXT" from line L of SIZE bytes; end reached
                                                        (or: ; next line K to search on)
    [artifact ID] no lines: the artifact is empty; end reached

A ``find`` answer lists ``N: line`` per matching line; a line over 1000 bytes is shown as
``N (excerpt at offset A): …part…`` (200 bytes before the match, 400 after), and a first
match whose entry alone is over the page's budget as the excerpt from the match on, cut to
fit: the answer always holds a match it found, so searching on from its "next line" moves on.

Character boundaries: a page never ends inside a UTF-8 character (the end moves back to the
character's start); an offset inside a character moves forward to the next character, and the
header says so. A page always holds at least one whole character, so paging by "next offset"
always progresses and the pages concatenate to the artifact exactly. Bytes that are not valid
UTF-8 (never produced by :mod:`spill.bound`) are shown as U+FFFD.

Files are mapped (``mmap``), not loaded: a 16 KiB page of a 16 MiB artifact reads 16 KiB;
``line`` counts newlines in 1 MiB slices; ``find`` scans with ``bytes.find``.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .bound import DEFAULT_MAX_VISIBLE_BYTES, MIN_VISIBLE_BYTES, text_result_size, utf8
from .store import Artifacts

_WRAPPER = text_result_size("")

__all__ = [
    "ARTIFACT_READ_SCHEMA",
    "DEFAULT_LIMIT",
    "DEFAULT_LINES",
    "DEFAULT_MATCHES",
    "MAX_LIMIT",
    "MAX_MATCHES",
    "artifact_read",
    "artifact_read_declaration",
    "find_text",
    "read_bytes",
    "read_lines",
]

DEFAULT_LIMIT = 16384
MAX_LIMIT = 65536
DEFAULT_LINES = 100
DEFAULT_MATCHES = 20
MAX_MATCHES = 50
_SCAN_CHUNK = 1 << 20
_FIND_LINE_MAX = 1000  # a longer matching line is shown as an excerpt around the match
_FIND_BEFORE = 200
_FIND_AFTER = 400
_FIND_SHOWN = 80  # characters of the search text repeated in the header

Buffer = mmap.mmap | bytes

ARTIFACT_READ_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "properties": {
        "find": {
            "description": "Literal text to search for (one line, case-sensitive); "
            "returns the matching lines with their line numbers.",
            "minLength": 1,
            "type": "string",
        },
        "id": {"description": "Artifact id, from a truncated result's trailer.", "type": "string"},
        "limit": {
            "description": f"Bytes to return from offset (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).",
            "minimum": 1,
            "type": "integer",
        },
        "line": {
            "description": "First line to return, 1-based; with find, the line the search starts at.",
            "minimum": 1,
            "type": "integer",
        },
        "lines": {
            "description": f"Number of lines to return (default {DEFAULT_LINES}).",
            "minimum": 1,
            "type": "integer",
        },
        "max_matches": {
            "description": f"Most matching lines to return (default {DEFAULT_MATCHES}, at most {MAX_MATCHES}).",
            "minimum": 1,
            "type": "integer",
        },
        "offset": {"description": "Byte offset to start at (default 0).", "minimum": 0, "type": "integer"},
    },
    "required": ["id"],
    "type": "object",
}

_DESCRIPTION = (
    "Read the full output of a tool result that was truncated: the result's trailer gives the "
    "artifact id. Give offset/limit for a page of bytes, line/lines for a line range, or find "
    "for the lines containing a literal text. Each answer starts with a header line naming the "
    "range returned, the total size and the next offset (or that the end was reached)."
)


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def artifact_read_declaration() -> dict[str, Any]:
    """The MCP tool declaration of artifact_read, keys sorted at every depth."""
    declaration: dict[str, Any] = _sorted_keys(
        {
            # read-only: clients that ask before a tool that may change something (Codex) run it at once
            "annotations": {"readOnlyHint": True},
            "description": _DESCRIPTION,
            "inputSchema": ARTIFACT_READ_SCHEMA,
            "name": "artifact_read",
        }
    )
    return declaration


# --------------------------------------------------------------------------- helpers


@contextmanager
def _mapped(store: Artifacts, artifact_id: str) -> Iterator[Buffer]:
    """The artifact as a read-only buffer (an mmap, or b"" when empty: mmap rejects size 0)."""
    with store.open(artifact_id) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            yield mm


def _is_cont(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _forward_to_boundary(buf: Buffer, pos: int) -> int:
    """pos, or the start of the next character if pos is inside one (at most 3 steps)."""
    steps = 0
    while pos < len(buf) and steps < 3 and _is_cont(buf[pos]):
        pos += 1
        steps += 1
    return pos


def _page_end(buf: Buffer, start: int, cap: int) -> int:
    """End of a page from start of at most cap bytes, never inside a character; >= 1 char."""
    end = min(start + cap, len(buf))
    if end >= len(buf):
        return end
    cut = end
    for _ in range(3):
        if cut <= start or not _is_cont(buf[cut]):
            break
        cut -= 1
    if cut > start:
        return cut if not _is_cont(buf[cut]) else end  # not UTF-8 there: no boundary to keep
    return _forward_to_boundary(buf, start + 1)  # cap smaller than one character


def _esc(data: bytes) -> int:
    return text_result_size(data.decode("utf-8", "replace"))


def _fit_end(buf: Buffer, start: int, end: int, budget: int) -> int:
    """Largest boundary end' <= end with the page's escaped size within budget (binary search)."""
    if _esc(buf[start:end]) <= budget:
        return end
    lo, hi = start + 1, end  # the escaped size only grows with the raw cut position
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _esc(buf[start : _page_end(buf, start, mid - start)]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return _page_end(buf, start, lo - start)


def _cost(text: str) -> int:
    """Visible bytes text adds to a one-text-block answer (its JSON-escaped UTF-8 size)."""
    return text_result_size(text) - _WRAPPER


def _budget(max_visible_bytes: int, reserve: int, *header_worst: str) -> int:
    """Visible bytes left for the page (wrapper included, as _esc counts it) once the
    worst-case header and its newline, and ``reserve`` (what the answer gains after this:
    the client's protocol era's fields), are paid."""
    if max_visible_bytes < MIN_VISIBLE_BYTES:
        raise ValueError(f"max_visible_bytes must be >= {MIN_VISIBLE_BYTES}")
    return max_visible_bytes - reserve - max(_cost(h + "\n") for h in header_worst)


def _nines(n: int) -> int:
    """The largest number with as many digits as n: stands in for any number <= n in a header."""
    return int(10 ** len(str(max(n, 0))) - 1)


def _beyond(n: int) -> int:
    """A size above n (one more digit): makes a worst-case header say "next ...", the longer ending."""
    return 10 * n + 9


def _answer(header: str, body: bytes) -> str:
    return header + "\n" + body.decode("utf-8", "replace")


# --------------------------------------------------------------------------- bytes


def _bytes_header(aid: str, start: int, end: int, size: int, moved_from: int | None) -> str:
    moved = f" (offset {moved_from} moved to {start}: character boundary)" if moved_from is not None else ""
    tail = "end reached" if end >= size else f"next offset {end}"
    return f"[artifact {aid}] bytes {start} to {end} of {size}{moved}; {tail}"


def read_bytes(
    store: Artifacts, artifact_id: str, *, offset: int = 0, limit: int = DEFAULT_LIMIT,
    max_visible_bytes: int = DEFAULT_MAX_VISIBLE_BYTES, reserve: int = 0,
) -> str:
    """A page of bytes from offset; limit is clamped to 1..MAX_LIMIT, and further to the budget."""
    if offset < 0:
        raise ValueError("offset must be >= 0")
    limit = min(max(limit, 1), MAX_LIMIT)
    with _mapped(store, artifact_id) as buf:
        size = len(buf)
        if offset > size:
            raise ValueError(f"offset {offset} is past the end (the artifact has {size} bytes)")
        start = _forward_to_boundary(buf, offset)
        n = _nines(size)
        moved = n if start != offset else None
        budget = _budget(max_visible_bytes, reserve, _bytes_header(artifact_id, n, n, _beyond(n), moved))
        end = _fit_end(buf, start, _page_end(buf, start, limit), budget) if start < size else start
        header = _bytes_header(artifact_id, start, end, size, offset if start != offset else None)
        return _answer(header, buf[start:end])


# --------------------------------------------------------------------------- lines


def _line_start(buf: Buffer, line: int) -> int | None:
    """Byte offset where 1-based line starts, or None if the artifact has fewer newlines."""
    need, pos = line - 1, 0
    while need > 0:
        if pos >= len(buf):
            return None
        chunk = buf[pos : pos + _SCAN_CHUNK]
        count = chunk.count(b"\n")
        if count < need:
            need, pos = need - count, pos + len(chunk)
            continue
        i = -1
        for _ in range(need):
            i = chunk.find(b"\n", i + 1)
        return pos + i + 1
    return 0


def _lines(count: int) -> str:
    return f"{count} line{'' if count == 1 else 's'}"


def _count_lines(buf: Buffer) -> int:
    newlines = sum(buf[p : p + _SCAN_CHUNK].count(b"\n") for p in range(0, len(buf), _SCAN_CHUNK))
    return newlines + (1 if len(buf) and buf[len(buf) - 1] != 0x0A else 0)


def _line_ends(window: bytes, count: int, at_eof: bool) -> list[int]:
    """Ends (after the newline) of up to count whole lines in window; EOF ends the last one."""
    ends: list[int] = []
    i = -1
    while len(ends) < count:
        i = window.find(b"\n", i + 1)
        if i < 0:
            break
        ends.append(i + 1)
    if len(ends) < count and at_eof and len(window) > (ends[-1] if ends else 0):
        ends.append(len(window))
    return ends


def _last_fitting(window: bytes, ends: list[int], budget: int) -> int:
    """How many of the line ends fit the budget (binary search: size grows with each line)."""
    lo, hi = 0, len(ends)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _esc(window[: ends[mid - 1]]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _lines_header(aid: str, first: int, last: int, start: int, end: int, size: int) -> str:
    tail = "end reached" if end >= size else f"next line {last + 1} (offset {end})"
    return f"[artifact {aid}] lines {first} to {last} (bytes {start} to {end}) of {size} bytes; {tail}"


def _part_header(aid: str, line: int, start: int, end: int, size: int) -> str:
    tail = "end reached" if end >= size else f"next offset {end} (rest of line {line})"
    return f"[artifact {aid}] line {line}, part (bytes {start} to {end}) of {size} bytes; {tail}"


def read_lines(
    store: Artifacts, artifact_id: str, *, line: int = 1, lines: int = DEFAULT_LINES,
    max_visible_bytes: int = DEFAULT_MAX_VISIBLE_BYTES, reserve: int = 0,
) -> str:
    """Whole lines from line (1-based) as fit the budget; a line too long for one page comes
    back in part, with the offset to continue from."""
    if line < 1:
        raise ValueError("line must be >= 1")
    lines = max(lines, 1)
    with _mapped(store, artifact_id) as buf:
        size = len(buf)
        start = _line_start(buf, line)
        if start is None or (start >= size and line > 1):
            raise ValueError(f"line {line} is past the end (the artifact has {_lines(_count_lines(buf))})")
        if start >= size:
            return f"[artifact {artifact_id}] no lines: the artifact is empty; end reached\n"
        n = _nines(max(size, line + lines))
        worst = (_part_header(artifact_id, n, n, n, _beyond(n)), _lines_header(artifact_id, n, n, n, n, _beyond(n)))
        budget = _budget(max_visible_bytes, reserve, *worst)
        window = buf[start : start + min(MAX_LIMIT, budget)]
        ends = _line_ends(window, lines, start + len(window) >= size)
        count = _last_fitting(window, ends, budget)
        if count:
            end = start + ends[count - 1]
            header = _lines_header(artifact_id, line, line + count - 1, start, end, size)
            return _answer(header, buf[start:end])
        end = _fit_end(buf, start, _page_end(buf, start, MAX_LIMIT), budget)
        return _answer(_part_header(artifact_id, line, start, end, size), buf[start:end])


# --------------------------------------------------------------------------- find


def _count_newlines(buf: Buffer, a: int, b: int) -> int:
    return sum(buf[p : min(b, p + _SCAN_CHUNK)].count(b"\n") for p in range(a, b, _SCAN_CHUNK))


def _match_entry(buf: Buffer, lineno: int, start: int, end: int, hit: int, pat_len: int) -> str:
    """'N: line' or, for a long line, 'N (excerpt at offset A): …part…'."""
    if end - start <= _FIND_LINE_MAX:
        return f"{lineno}: {buf[start:end].decode('utf-8', 'replace')}"
    a = _forward_to_boundary(buf, max(start, hit - _FIND_BEFORE))
    b = min(end, hit + pat_len + _FIND_AFTER)
    b = _page_end(buf, a, b - a) if b < end else end
    left = "…" if a > start else ""
    right = "…" if b < end else ""
    return f"{lineno} (excerpt at offset {a}): {left}{buf[a:b].decode('utf-8', 'replace')}{right}"


def _cut_entry(buf: Buffer, lineno: int, start: int, end: int, hit: int, budget: int) -> str:
    """A match whose entry alone is over the budget: its line from the match on, cut to fit
    (at least one character), so the answer names it and the next search starts after it."""
    left = "…" if hit > start else ""
    prefix = f"{lineno} (excerpt at offset {hit}): {left}"
    room = budget - _cost(prefix + "…\n") + _WRAPPER  # (``_fit_end`` counts the wrapper too)
    cut = _fit_end(buf, hit, _page_end(buf, hit, end - hit), room)
    return f"{prefix}{buf[hit:cut].decode('utf-8', 'replace')}{'…' if cut < end else ''}"


def _find_header(aid: str, count: int, text: str, line: int, size: int, next_line: int | None) -> str:
    shown = text if len(text) <= _FIND_SHOWN else text[:_FIND_SHOWN] + "…"
    quoted = json.dumps(shown, ensure_ascii=False)
    tail = "end reached" if next_line is None else f"next line {next_line} to search on"
    noun = "matching line" if count == 1 else "matching lines"
    return f"[artifact {aid}] {count} {noun} for {quoted} from line {line} of {size} bytes; {tail}"


def find_text(
    store: Artifacts, artifact_id: str, find: str, *, max_matches: int = DEFAULT_MATCHES, line: int = 1,
    max_visible_bytes: int = DEFAULT_MAX_VISIBLE_BYTES, reserve: int = 0,
) -> str:
    """Lines containing find (literal, case-sensitive), numbered, from line on; stops at
    max_matches (clamped 1..MAX_MATCHES) or the budget and says where to continue."""
    if not isinstance(find, str) or not find:
        raise ValueError("find must be a non-empty string")
    if "\n" in find or "\r" in find:
        raise ValueError("find must be a single line of text")
    if line < 1:
        raise ValueError("line must be >= 1")
    max_matches = min(max(max_matches, 1), MAX_MATCHES)
    pat = utf8(find)
    with _mapped(store, artifact_id) as buf:
        size = len(buf)
        start = _line_start(buf, line)
        if start is None or (start >= size and line > 1):
            raise ValueError(f"line {line} is past the end (the artifact has {_lines(_count_lines(buf))})")
        n = _nines(max(size, line))
        budget = _budget(max_visible_bytes, reserve, _find_header(artifact_id, MAX_MATCHES, find, n, _beyond(n), n))
        entries, next_line = _scan(buf, pat, start, line, max_matches, budget - _WRAPPER)
        header = _find_header(artifact_id, len(entries), find, line, size, next_line)
        return header + "\n" + "\n".join(entries)


def _scan(
    buf: Buffer, pat: bytes, pos: int, lineno: int, max_matches: int, budget: int,
) -> tuple[list[str], int | None]:
    """Matching entries within budget (pos starts line lineno) and the line to resume at."""
    size = len(buf)
    entries: list[str] = []
    used = 0
    while pos < size:
        hit = buf.find(pat, pos)
        if hit < 0:
            break
        newline = buf.rfind(b"\n", pos, hit)
        line_start = pos if newline < 0 else newline + 1
        lineno += _count_newlines(buf, pos, line_start)
        line_end = buf.find(b"\n", hit)
        line_end = size if line_end < 0 else line_end
        entry = _match_entry(buf, lineno, line_start, line_end, hit, len(pat))
        cost = _cost(entry + "\n")
        if not entries and cost > budget:
            # Alone over the budget (a small ceiling, a line of quotes or escapes): "0 matching
            # lines; next line N" would send the model back to this very line for ever.
            entry = _cut_entry(buf, lineno, line_start, line_end, hit, budget)
            cost = _cost(entry + "\n")
        if len(entries) == max_matches or used + cost > budget:
            return entries, lineno
        entries.append(entry)
        used += cost
        pos, lineno = line_end + 1, lineno + 1
    return entries, None


# --------------------------------------------------------------------------- dispatcher


_QUOTED_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")


def whole_number(value: Any) -> int | None:
    """An integer argument as JSON Schema reads one (``2.0`` is 2) or as a model quotes it
    (``"2"``, as the gate reads a catalog tool's arguments); None for anything else. Also
    ``tool_search``'s ``limit`` and ``offset``."""
    if isinstance(value, str) and _QUOTED_INT.fullmatch(value):
        value = int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return value if type(value) is int else None


def _int_arg(args: Mapping[str, Any], name: str, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    number = whole_number(value)
    if number is None:
        raise ValueError(f"arguments.{name} must be an integer")
    if abs(number) >= _MAX_ARG:  # (a 4,300-digit line number was quoted back whole as past the end)
        raise ValueError(f"arguments.{name} must be an integer of at most 18 digits")
    return number


_MAX_ARG = 10**18
"""Bound of an offset, a line or a count: beyond any artifact, and short to quote in an error."""


def _mode(args: Mapping[str, Any]) -> str:
    """"find" (line = where to start), "lines", or "bytes"; mixing modes is an error."""
    if "find" in args or "max_matches" in args:
        mode, label, clash = "find", "find", [k for k in ("offset", "limit", "lines") if k in args]
    elif "line" in args or "lines" in args:
        mode, label, clash = "lines", "line/lines", [k for k in ("offset", "limit") if k in args]
    else:
        return "bytes"
    if clash:
        raise ValueError(f"{'/'.join(clash)} cannot be combined with {label}: use one mode per call")
    return mode


def artifact_read(
    store: Artifacts, arguments: Mapping[str, Any], *, max_visible_bytes: int = DEFAULT_MAX_VISIBLE_BYTES,
    reserve: int = 0,
) -> str:
    """The artifact_read tool: validate arguments, pick the mode, return the answer's text.
    ``reserve``: the most bytes the answer gains after this (what the client's protocol era
    adds), paid from ``max_visible_bytes``.

    Raises ArtifactNotFound (bad, unknown, expired or foreign id) or ValueError (bad arguments);
    both carry a one-line message meant for an isError result. null arguments count as absent.
    """
    args = {k: v for k, v in arguments.items() if v is not None}
    unknown = sorted(set(args) - set(ARTIFACT_READ_SCHEMA["properties"]))
    if unknown:
        listed = ", ".join(map(repr, unknown))  # (quoted: a name may hold a newline)
        raise ValueError(f"unknown argument(s): {listed if len(listed) <= 200 else listed[:199] + '…'}")
    artifact_id = args.get("id")
    if not isinstance(artifact_id, str):
        raise ValueError("id is required and must be a string")
    mode = _mode(args)
    mv = max_visible_bytes
    if mode == "find":
        find = args.get("find")
        if not isinstance(find, str):
            raise ValueError("find is required with max_matches and must be a string")
        matches = _int_arg(args, "max_matches", DEFAULT_MATCHES)
        line = _int_arg(args, "line", 1)
        return find_text(
            store, artifact_id, find, max_matches=matches, line=line, max_visible_bytes=mv, reserve=reserve
        )
    if mode == "lines":
        line, lines = _int_arg(args, "line", 1), _int_arg(args, "lines", DEFAULT_LINES)
        return read_lines(store, artifact_id, line=line, lines=lines, max_visible_bytes=mv, reserve=reserve)
    offset, limit = _int_arg(args, "offset", 0), _int_arg(args, "limit", DEFAULT_LIMIT)
    return read_bytes(store, artifact_id, offset=offset, limit=limit, max_visible_bytes=mv, reserve=reserve)
