"""BM25 search over the catalog, its model-visible rendering, and the meta tool schemas.

``tool_search`` is how the model reaches deferred tools, so search must find a tool by
the words a model would use (name parts, description, parameters) and its answer must be
deterministic bytes: the rendered text becomes part of the conversation prefix.
"""

from __future__ import annotations

import difflib
import heapq
import itertools
import json
import math
import re
import unicodedata
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import canonicaljson

from catalog.keywords import subschemas
from catalog.model import JSON, Entry
from catalog.names import code_unit_key

K1 = 1.2
B = 0.75
WEIGHT_NAME = 3
"""Qualified and original name parts: the strongest signal of what a tool does."""
WEIGHT_PARAM = 2
"""Parameter names (``owner``, ``sql``, ``url``)."""

MAX_LIMIT = 50
DEFAULT_LIMIT = 5
MAX_QUERY = 500
EXCERPT_CHARS = 300
CLOSEST = 5
_QUERY_ECHO = 100
_SHORT_ECHO = 20
"""A page's echo of the query when the long one leaves its first match no room (``_frames``)."""
_MAX_SCHEMA_DEPTH = 64

_ALNUM = re.compile(r"[^\W_]+")
_EDGE_PUNCTUATION = "\"'()[]{}<>,.;:!?`*"
_WORD = re.compile(r"[A-Z]{2,}s(?![^\W\d_A-Z])|[A-Z]+(?![^\W\d_A-Z])|[A-Z]?[^\W\d_A-Z]+|\d+")
"""Identifier parts of an ASCII word: ``HTTPServer`` -> HTTP, Server; ``getV2Url`` -> get, V,
2, Url; ``URLs``. A word with any other character is split by ``_parts``, the same rules with
every capital a capital (``re`` has no class for them)."""


def _upper(ch: str) -> bool:
    return ch.isupper() and ch.isalpha()


def _lower(ch: str) -> bool:
    """Any other letter (``[^\\W\\d_A-Z]``: word characters but digits, ``_`` and capitals)."""
    return ch.isalnum() and not ch.isdecimal() and not ch.isupper()


def _parts(word: str) -> list[str]:
    """``_WORD.findall(word)`` with ``str.isupper`` for ``[A-Z]``: ``getÜbersicht`` -> get,
    Übersicht and ``ÉTAT`` -> ÉTAT, as ``getUbersicht`` and ``ETAT`` are split (an ASCII
    capital alone was one, so Ü began no part and É ended one). Each alternative in order,
    as the pattern tries them; a character in no part is skipped, as by ``findall``."""
    parts: list[str] = []
    i, n = 0, len(word)
    while i < n:
        start, ch = i, word[i]
        if _upper(ch):
            while i < n and _upper(word[i]):
                i += 1
            run = i - start
            before_lower = i < n and _lower(word[i])
            if run >= 2 and i < n and word[i] == "s" and not (i + 1 < n and _lower(word[i + 1])):
                i += 1  # ``URLs``: the capitals and their plural s
            elif before_lower and run >= 2:
                i -= 1  # ``HTTPServer``: the last capital begins the next part
            elif before_lower:
                while i < n and _lower(word[i]):
                    i += 1
        elif _lower(ch):
            while i < n and _lower(word[i]):
                i += 1
        elif ch.isdecimal():
            while i < n and word[i].isdecimal():
                i += 1
        else:
            i += 1
            continue
        parts.append(word[start:i])
    return parts


def _is_ideographic(ch: str) -> bool:
    cp = ord(ch)
    return 0x2E80 <= cp <= 0x9FFF or 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x3FFFF


def _plural(w: str) -> str:
    """Strip a plural ``s`` (files -> file; not status, class, analysis, ids)."""
    if len(w) > 3 and w[-1] == "s" and w[-2] not in "sui" and w.isascii():
        return w[:-1]
    return w


def _analyse(word: str) -> tuple[str, ...]:
    """Terms of one whitespace-delimited word: camelCase/digit parts, case-folded,
    plural-stripped, CJK ideographs one term each (CJK text has no spaces)."""
    core = word.strip(_EDGE_PUNCTUATION)
    if core.isascii() and core.isalpha() and (core.islower() or core[1:].islower()):
        return (_plural(core.lower()),)  # the common case: a plain word, no regex needed
    out: list[str] = []
    for part in _WORD.findall(word) if word.isascii() else _parts(word):
        part = part.casefold()
        if part.isascii() or not any(_is_ideographic(c) for c in part):
            out.append(_plural(part))
            continue
        run = ""
        for c in part:
            if _is_ideographic(c):
                if run:
                    out.append(_plural(run))
                    run = ""
                out.append(c)
            else:
                run += c
        if run:
            out.append(_plural(run))
    return tuple(out)


class _WordCache(dict[str, tuple[str, ...]]):
    """word -> its terms. A catalog's vocabulary is small next to its word count, and a
    dict hit costs less than any wrapper; cleared when large (results never depend on it).
    A word over ``LONGEST`` characters is analysed each time, never kept: queries are a
    client's, and 131,072 kept words of 500 characters held some 150 MB.
    """

    LIMIT = 1 << 15
    LONGEST = 64

    def __missing__(self, word: str) -> tuple[str, ...]:
        terms = _analyse(word)
        if len(word) <= self.LONGEST:
            if len(self) >= self.LIMIT:
                self.clear()
            self[word] = terms
        return terms


_WORDS = _WordCache()
_word_terms = _WORDS.__getitem__


def tokens(text: str) -> list[str]:
    """Search terms of ``text``: identifier parts, case-folded, CJK split per character.

    Separators (``__``, ``_``, ``-``, ``.``, spaces, punctuation), camelCase and digit
    boundaries all split; queries and documents use this same function. Whitespace is
    split in C and each distinct word analysed once (cached), so indexing stays fast.
    """
    return list(itertools.chain.from_iterable(map(_word_terms, text.split())))


def _compound(name: str) -> str:
    """``read_file`` -> ``readfile``: a query written without separators still finds it.

    Plural-stripped as a query's word is (``listissues`` is searched as ``listissue``), or
    ``list_issues`` would never be found by its own name written together."""
    return _plural("".join(_ALNUM.findall(name)).casefold())


def _schema_words(schema: dict[str, JSON]) -> tuple[list[str], list[str]]:
    """Parameter names and descriptions, through nested properties and sub-schemas."""
    names: list[str] = []
    texts: list[str] = []
    stack: list[tuple[dict[str, JSON], int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_SCHEMA_DEPTH:
            continue
        for key, sub in node.items():
            if key == "properties" and isinstance(sub, dict):
                for name, prop in sub.items():
                    names.append(name)
                    if isinstance(prop, dict):
                        stack.append((prop, depth + 1))
            elif key == "description":
                if depth and isinstance(sub, str):
                    texts.append(sub)
            else:
                stack.extend((x, depth + 1) for x in subschemas(key, sub))
    return names, texts


def _document(entry: Entry) -> Counter[str]:
    """Weighted term frequencies of one tool (BM25F folded into one bag).

    Name terms (qualified, original, and their compounds) count once each, whichever
    name they come from; parameter names and descriptions per occurrence.
    """
    decl = entry.declaration
    schema = decl.get("inputSchema")
    params, texts = _schema_words(schema) if isinstance(schema, dict) else ([], [])
    desc = decl.get("description")
    if isinstance(desc, str):
        texts.append(desc)
    names = set(tokens(entry.name + " " + entry.original))
    names.update((_compound(entry.name), _compound(entry.original)))
    names.discard("")
    # weights by repetition, so one C-level count does all (descriptions: weight 1)
    return Counter(
        itertools.chain(
            itertools.chain.from_iterable(map(_word_terms, "\n".join(texts).split())),
            tokens(" ".join(params)) * WEIGHT_PARAM,
            list(names) * WEIGHT_NAME,
        )
    )


@dataclass(frozen=True)
class SearchResult:
    """One page of a query: ``matches`` in rank order, ``total`` over all pages."""

    query: str
    matches: tuple[Entry, ...]
    total: int
    offset: int
    limit: int
    closest: tuple[str, ...] = ()
    """When ``total == 0``: up to 5 names most similar to the query, best first."""


def _clamp(value: object, low: int, high: int | None, default: int) -> int:
    """Bound a page argument; a non-integer (callers may skip validation) is the default."""
    if type(value) is not int:
        return default
    v = max(low, value)
    return v if high is None else min(high, v)


class SearchIndex:
    """Inverted BM25 index of one epoch's catalog; its results never change once built.

    Building only counts terms; a term's finished BM25 contributions (idf, tf and length
    normalisation) are computed on its first query and cached, so building 5,000 tools
    stays fast and a query is a few dict additions per matching tool, summed in sorted
    term order so the floats are the same on every run.
    """

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._entries: tuple[Entry, ...] = tuple(sorted(entries, key=lambda e: code_unit_key(e.name)))
        n = len(self._entries)
        self._bags = [_document(e) for e in self._entries]
        lengths = [sum(bag.values()) for bag in self._bags]
        postings: defaultdict[str, list[int]] = defaultdict(list)
        for doc, bag in enumerate(self._bags):
            # postings[term].append(doc) for every term of the tool, looped in C
            deque(map(list.append, map(postings.__getitem__, bag), itertools.repeat(doc)), maxlen=0)
        avgdl = (sum(lengths) / n) if n and sum(lengths) else 1.0
        self._n = n
        self._norms = [K1 * (1.0 - B + B * dl / avgdl) for dl in lengths]
        self._docs: dict[str, list[int]] = dict(postings)
        """term -> the tools containing it, in code-unit order of their names."""
        self._scored: dict[str, tuple[tuple[int, float], ...]] = {}
        """term -> (doc, BM25 contribution): computed on first use, then reused; only the
        catalog's own terms (a query's other words match nothing and are not kept: the index
        lives as long as its epoch, and what clients ask must not grow it)."""
        self._folded = [(e.name.casefold(), e.original.casefold()) for e in self._entries]
        self._exact: dict[str, list[int]] = {}
        for doc, (name, original) in enumerate(self._folded):
            self._exact.setdefault(name, []).append(doc)
            if original != name:
                self._exact.setdefault(original, []).append(doc)

    def _postings(self, term: str) -> tuple[tuple[int, float], ...]:
        """The term's postings with finished contributions (idf, tf, length norm)."""
        scored = self._scored.get(term)
        if scored is None:
            docs = self._docs.get(term)
            if docs is None:
                return ()
            df = len(docs)
            idf = math.log(1.0 + (self._n - df + 0.5) / (df + 0.5))
            bags, norms, k = self._bags, self._norms, idf * (K1 + 1.0)
            tfs = [bags[doc][term] for doc in docs]
            scored = tuple((doc, k * tf / (tf + norms[doc])) for doc, tf in zip(docs, tfs, strict=True))
            self._scored[term] = scored
        return scored

    def __len__(self) -> int:
        return len(self._entries)

    def query(self, text: str, limit: int = DEFAULT_LIMIT, offset: int = 0) -> SearchResult:
        """Rank: exact (case-insensitive) name or original name first, then BM25, then name."""
        limit = _clamp(limit, 1, MAX_LIMIT, DEFAULT_LIMIT)
        offset = _clamp(offset, 0, None, 0)
        text = text if isinstance(text, str) else ""
        scores: dict[int, float] = {}
        for term in sorted(set(tokens(text))):
            for doc, contribution in self._postings(term):
                scores[doc] = scores.get(doc, 0.0) + contribution
        exact = set(self._exact.get(text.strip().casefold(), ()))
        for doc in exact:
            scores.setdefault(doc, 0.0)
        total = len(scores)
        if total == 0:
            return SearchResult(text, (), 0, offset, limit, self._closest(text))
        ranked = heapq.nsmallest(
            offset + limit, scores.items(), key=lambda kv: (kv[0] not in exact, -kv[1], kv[0])
        )
        page = tuple(self._entries[doc] for doc, _ in ranked[offset:])
        return SearchResult(text, page, total, offset, limit)

    def _closest(self, text: str) -> tuple[str, ...]:
        """Names most similar to the whole query (difflib ratio), ties in code-unit order."""
        q = text.strip().casefold()
        if not q:
            return ()
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(q)
        best: list[tuple[float, int]] = []  # min-heap of (ratio, -doc)
        for doc, names in enumerate(self._folded):
            ratio = 0.0
            for name in names:
                matcher.set_seq1(name)
                floor = best[0][0] if len(best) == CLOSEST else 0.0
                if matcher.real_quick_ratio() <= floor or matcher.quick_ratio() <= floor:
                    continue
                ratio = max(ratio, matcher.ratio())
            if ratio <= 0.0:
                continue
            item = (ratio, -doc)
            if len(best) < CLOSEST:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)
        return tuple(self._entries[-d].name for _, d in sorted(best, reverse=True))


# -- rendering ------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedSearch:
    """The model-visible answer and the names it actually shows.

    Only ``shown_names`` may be activated: a match cut for size was never seen by the
    model, so activating it would grant a tool the model cannot know how to call.
    """

    text: str
    shown_names: tuple[str, ...]
    too_long: tuple[str, ...] = ()
    """Shown matches whose input schema no page can hold, shown without it and with no word
    of where to read it (``render``'s ``long_schemas``): the caller may save and render again."""


def _joins(ch: str) -> bool:
    """A code point that belongs to the character before it (mark, ZWJ, selector)."""
    cp = ord(ch)
    return bool(unicodedata.combining(ch)) or cp == 0x200D or 0xFE00 <= cp <= 0xFE0F or (
        0x1F3FB <= cp <= 0x1F3FF
    ) or 0xE0100 <= cp <= 0xE01EF


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """Whitespace-collapsed ``text`` of at most ``limit`` characters, ``…`` when cut.

    The cut backs off over combining marks, joiners, selectors and half flags, so no
    visible character is split from its modifiers.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = limit - 1
    while cut > 0 and (_joins(flat[cut]) or flat[cut - 1] == "\u200d"):
        cut -= 1
    flags = 0  # regional indicators pair up into one flag: never keep half of one
    while flags < cut and _is_regional(flat[cut - 1 - flags]):
        flags += 1
    if flags % 2 and cut < len(flat) and _is_regional(flat[cut]):
        cut -= 1
    return flat[:cut].rstrip() + "…"


def _quote(query: str, limit: int = _QUERY_ECHO) -> str:
    return json.dumps(excerpt(query, limit), ensure_ascii=False)


def _frames(query: str, extra: str, shorter: Sequence[str]) -> list[tuple[str, str]]:
    """The text every page of a query holds besides its matches, as (the query's echo, the last
    line), longest first: with ``extra``, then each of its ``shorter`` forms, the echo whole,
    shortened, then left out ("the query"). A page takes the first that leaves room for what it must show: at a
    small ceiling, a long echo (a control character is 7 bytes in the result's JSON) or a long
    line of servers that are down left no match room, so every page said "Showing 0 ... call
    tool_search again with offset N" with the same N, and the tool was never shown."""
    tails = [f"\n{line}" if line else "" for line in (extra, *shorter)]
    echoes = dict.fromkeys((_quote(query), _quote(query, _SHORT_ECHO), "the query"))
    return [(echo, tail) for tail in tails for echo in echoes]


def _block(position: int, entry: Entry, too_long: str | None = None, described: bool = True) -> str:
    """One match: its name, description excerpt and canonical input schema; ``too_long``: a
    schema no page can hold, its size and where to read it (``None`` aside) said instead;
    not ``described``: an excerpt no page can hold either, left out."""
    decl = entry.declaration
    desc = decl.get("description")
    schema = canonicaljson.encode_canonical_json(decl.get("inputSchema", {"type": "object"}))
    lines = [f"{position}. {entry.name}"]
    if described and isinstance(desc, str) and desc.strip():
        lines.append(excerpt(desc))
    if too_long is None:
        lines.append("inputSchema: " + schema.decode("utf-8"))
    else:
        lines.append(f"inputSchema: {len(schema)} bytes, too long for a search page; {too_long}.")
    return "\n".join(lines) + "\n\n"


def _footer(
    result: SearchResult, shown: Sequence[str], activated: Sequence[str], max_bytes: int, refused: Sequence[str] = ()
) -> str:
    granted, barred = set(activated), set(refused)
    names = [n for n in shown if n in granted]
    parts = ["Activated: " + (", ".join(names) if names else "none") + "."]
    if kept_out := [n for n in shown if n in barred]:
        parts.append("Not activated, refused by policy or the catalog lock: " + ", ".join(kept_out) + ".")
    first, last = result.offset + 1, result.offset + len(shown)
    page = f"Showing {first}-{last} of {result.total}" if shown else f"Showing 0 of {result.total}"
    left = len(result.matches) - len(shown)
    if left:
        parts.append(
            f"{page}; {left} more on this page did not fit in {max_bytes} bytes: "
            f"call tool_search again with offset {last if shown else result.offset} "
            "(and a smaller limit)."
        )
    elif last < result.total:
        parts.append(f"{page}. More: call tool_search with the same query and offset {last}.")
    else:
        parts.append(f"{page}.")
    return "\n".join(parts)


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def _bounded(text: str, max_bytes: int, size: Callable[[str], int] = _utf8_size) -> str:
    """Last resort when even the frame does not fit: the longest prefix that does."""
    if size(text) <= max_bytes:
        return text
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if size(text[:mid]) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def render(
    result: SearchResult,
    activated: Sequence[str],
    max_bytes: int = 65536,
    *,
    size: Callable[[str], int] = _utf8_size,
    extra: str = "",
    shorter: Sequence[str] = (),
    long_schemas: Mapping[str, str] | None = None,
    refused: Sequence[str] = (),
) -> RenderedSearch:
    """Deterministic model-visible text of ``result``, at most ``max_bytes`` as ``size``
    measures it (default: UTF-8 bytes; the gateway's: the result's JSON, escaping included),
    ``extra`` (a last line: servers that are down) included. ``size`` must add up over
    concatenation, a constant aside (both do): each piece is measured once.

    Per match: qualified name, description excerpt, full canonical input schema. Then
    the ``activated`` names that were shown, and the page position. Matches are added
    while the whole text (footer included) fits; the footer says how many were left out
    and how to page. A match whose block no page could hold is shown without its schema,
    saying where to read it (``long_schemas``: name -> that note; else it is named in
    ``too_long``), so that it can be found, activated and called; one whose excerpt no page
    could hold either, with its schema and no excerpt, else by its name alone. The fixed text
    gives way to the page's first match (``_frames``): the query's echo is shortened, then
    ``extra`` replaced by its ``shorter`` forms (longest first). The caller activates
    ``activated`` ∩ ``shown_names`` only; ``refused`` names shown are said not to be (a tool
    policy or the lock refuses: the model is not told it may call it).
    """
    frames = _frames(result.query, extra, shorter)
    if not result.matches:
        return RenderedSearch(_nothing_shown(result, frames, max_bytes, size), ())
    zero = size("")

    def cost(piece: str) -> int:
        return size(piece) - zero

    notes = long_schemas or {}

    def forms(position: int, entry: Entry) -> Iterator[tuple[str, bool]]:
        """A match's blocks, best first, each with whether it leaves its schema out: made as
        asked for (each encodes the schema, and the first almost always fits)."""
        note = notes.get(entry.name) or "not shown"
        yield _block(position, entry), False
        yield _block(position, entry, note), True
        yield _block(position, entry, described=False), False
        yield _block(position, entry, note, described=False), True

    first = result.matches[0]
    first_after = cost(_footer(result, [first.name], activated, max_bytes, refused))
    fits = (
        (echo, tail)
        for block, _ in forms(result.offset + 1, first)
        for echo, tail in frames
        if zero + cost(f"Tools matching {echo}:\n\n") + cost(tail) + cost(block) + first_after <= max_bytes
    )
    echo, tail = next(fits, frames[-1])
    header = f"Tools matching {echo}:\n\n"
    frame = zero + cost(header) + cost(tail)  # what every page holds besides its blocks and footer
    blocks: list[str] = []
    used = 0
    shown: list[str] = []
    too_long: list[str] = []
    footer = _footer(result, shown, activated, max_bytes, refused)
    for i, entry in enumerate(result.matches):
        after = _footer(result, [*shown, entry.name], activated, max_bytes, refused)
        room = max_bytes - frame - cost(after)
        candidates = forms(result.offset + i + 1, entry)
        block, schemaless = next(candidates)
        if used + cost(block) > room:
            if cost(block) <= room:
                break  # the page is full: the next one starts with it
            # Not even its excerpt fits a page (a small ceiling, a long description in a script
            # of 3-byte characters): its schema without it, else its name alone; or no page
            # would ever show it, and a deferred tool no search shows is never granted.
            for candidate in candidates:  # (none fits: the last, its name alone)
                block, schemaless = candidate
                if cost(block) <= room:
                    break
            if used + cost(block) > room:
                break
            if schemaless and entry.name not in notes:
                too_long.append(entry.name)
        blocks.append(block)
        used += cost(block)
        shown.append(entry.name)
        footer = after
    text = header + "".join(blocks) + footer + tail
    return RenderedSearch(_bounded(text, max_bytes, size), tuple(shown), tuple(too_long))


def _nothing_shown(
    result: SearchResult, frames: Sequence[tuple[str, str]], max_bytes: int, size: Callable[[str], int]
) -> str:
    """A page with no match to show: none matches (the closest names said, whole), or the
    offset is past the last. The longest text that fits: closest names are left out last."""
    last = ""
    for count in range(len(result.closest), -1, -1):
        for echo, tail in frames:
            if result.total == 0:
                names = result.closest[:count]
                closest = f" Closest names: {', '.join(names)}." if names else ""
                last = f"No tools match {echo}.{closest}{tail}"
            else:
                last = (
                    f"No matches at offset {result.offset}: {echo} has {result.total} matches "
                    f"(offsets 0-{result.total - 1}).{tail}"
                )
            if size(last) <= max_bytes:
                return last
    return _bounded(last, max_bytes, size)


# -- meta tool declarations -----------------------------------------------------------


def _sorted(value: JSON) -> JSON:
    """A fresh copy with keys sorted at every depth (the SDK then serialises canonically)."""
    if isinstance(value, dict):
        return _sorted_object(value)
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _sorted_object(value: dict[str, JSON]) -> dict[str, JSON]:
    return {k: _sorted(value[k]) for k in sorted(value)}


TOOL_SEARCH_SCHEMA: dict[str, JSON] = _sorted_object(
    {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY,
                "description": "Keywords: what the tool does, its name, or parameter names.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
                "description": "Matches per page.",
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "Matches to skip, to read the next page.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
)
"""Input schema of ``tool_search``; treat as read-only (use ``tool_search_declaration``)."""

TOOL_CALL_SCHEMA: dict[str, JSON] = _sorted_object(
    {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "description": "Exact tool name as shown by tool_search.",
            },
            "arguments": {
                "type": "object",
                "default": {},
                "description": "Arguments matching that tool's inputSchema.",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    }
)
"""Input schema of ``tool_call``; treat as read-only (use ``tool_call_declaration``)."""


def tool_search_declaration() -> dict[str, JSON]:
    """A fresh ``tool_search`` declaration (keys sorted): callers may not share state."""
    return _sorted_object(
        {
            "name": "tool_search",
            # read-only (it changes only which tools this session may run): clients that ask
            # before a tool that may change something (Codex) run it at once
            "annotations": {"readOnlyHint": True},
            "description": (
                "Search the full tool catalog by keywords (tool names, descriptions, "
                "parameter names). Returns the best matches with their input schemas and "
                "activates them: a deferred tool can run only after tool_search has "
                "returned it in this session. Page through more matches with offset."
            ),
            "inputSchema": TOOL_SEARCH_SCHEMA,
        }
    )


def tool_call_declaration() -> dict[str, JSON]:
    """A fresh ``tool_call`` declaration (keys sorted)."""
    return _sorted_object(
        {
            "name": "tool_call",
            "description": (
                "Run a catalog tool by its exact name with its arguments. The tool must "
                "first have been returned (and so activated) by tool_search; its result "
                "is returned unchanged."
            ),
            "inputSchema": TOOL_CALL_SCHEMA,
        }
    )

