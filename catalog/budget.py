"""Token estimate of tool declarations and the declaration decision (fixed / on-demand).

The estimate must over-count: under-counting lets a catalog that does not fit push the
conversation into early compaction, which ends the cache epoch the gateway exists to keep.
Over-counting makes the fallback to on-demand happen early, so it should be small. The
weights are fitted against cl100k_base and o200k_base (see docs/token-estimate.md).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import canonicaljson

from catalog.activation import identity_encoded as _identity
from catalog.build import fingerprint as _fingerprint
from catalog.canonical import encode, join_object
from catalog.model import JSON, Catalog, Entry
from catalog.names import PROFILES, code_unit_key
from catalog.policy import ClientPolicy as ClientPolicy
from catalog.policy import Mode as Mode
from catalog.policy import matches

# -- token estimate -------------------------------------------------------------------
#
# BPE tokenizers first cut text into pieces (letter runs, 1-3 digit numbers, punctuation
# runs, whitespace) and then merge bytes inside each piece, so the count follows the
# pieces, not the characters. The estimate counts piece-level features of the canonical
# JSON with C-level byte operations (one ``bytes.translate`` into a class per character,
# then ``bytes.count``) and charges each a weight fitted offline so that it never
# under-counts cl100k_base or o200k_base on the committed corpus (docs/token-estimate.md).

TOKEN_DENOMINATOR = 1000
"""Weights are in thousandths of a token: integer arithmetic, exact and deterministic."""
TOOL_OVERHEAD = 8
"""Per declared tool: the provider's framing around each function definition."""


def _class_table() -> bytes:
    """UTF-8 byte -> class letter; continuation bytes are deleted, so one letter per char."""
    table = bytearray(b"." * 256)  # ASCII punctuation and control characters
    for lo, hi, cls in (
        (0x61, 0x7A, "a"), (0x41, 0x5A, "A"), (0x30, 0x39, "0"), (0x20, 0x20, " "), (0x22, 0x22, "q"),
        (0xC2, 0xCB, "L"),  # U+0080-02FF Latin-1, Latin Extended-A/B, IPA
        (0xCC, 0xCD, "M"),  # U+0300-037F combining diacritical marks
        (0xCE, 0xCF, "G"),  # U+0380-03FF Greek
        (0xD0, 0xD4, "C"),  # U+0400-053F Cyrillic (and its supplement)
        (0xD5, 0xD6, "Y"),  # U+0540-05BF Armenian (and Hebrew points)
        (0xD7, 0xD7, "H"),  # U+05C0-05FF Hebrew letters
        (0xD8, 0xDB, "R"),  # U+0600-06FF Arabic
        (0xDC, 0xDF, "S"),  # U+0700-07FF Syriac, Thaana, NKo...
        (0xE0, 0xE0, "I"),  # U+0800-0FFF Indic scripts, Thai, Lao, Tibetan
        (0xE1, 0xE1, "V"),  # U+1000-1FFF Latin Extended Additional (Vietnamese), Georgian, Khmer...
        (0xE2, 0xE2, "P"),  # U+2000-2FFF punctuation, symbols, arrows, dingbats
        (0xE3, 0xE3, "K"),  # U+3000-3FFF CJK punctuation, kana
        (0xE4, 0xE9, "Z"),  # U+4000-9FFF CJK ideographs
        (0xEA, 0xED, "K"),  # U+A000-DFFF Hangul syllables, Yi...
        (0xEE, 0xEF, "P"),  # U+E000-FFFF private use, compatibility, fullwidth, variation selectors
        (0xF0, 0xF7, "E"),  # outside the BMP: emoji, rare ideographs
    ):
        table[lo : hi + 1] = cls.encode() * (hi - lo + 1)
    return bytes(table)


_CLASSES = _class_table()
_CONTINUATION = bytes(range(0x80, 0xC0))
_KINDS = bytes.maketrans(b"aA0q.", b"aa0..")
"""Class string -> letter / digit / punctuation / other (space, non-ASCII): for run counts."""
_KIND_OTHER = bytes.maketrans(b"LMGCYHRSIVPKZE", b" " * 14)
_LATIN_ADDITIONAL = (b"\xe1\xb8", b"\xe1\xb9", b"\xe1\xba", b"\xe1\xbb")
"""Lead + first continuation byte of U+1E00-1EFF: Vietnamese letters, not Georgian or Khmer."""
_DEVANAGARI_THAI = (b"\xe0\xa4", b"\xe0\xa5", b"\xe0\xb8", b"\xe0\xb9")
"""U+0900-097F and U+0E00-0E7F: the two scripts of that block with many BPE merges."""

FEATURES = (
    "lower", "upper", "words", "humps", "digits", "numbers",
    "spaces", "quotes", "punct", "punct_runs",
    "latin", "marks", "greek", "cyrillic", "armenian", "hebrew", "arabic", "syriac",
    "devanagari_thai", "u0800", "latin_additional", "u1000", "symbols", "kana_hangul", "han", "astral",
)
"""What ``token_features`` counts, in the order of ``WEIGHTS``."""

WEIGHTS = (
    149, 151, 193, 562, 0, 1589,
    414, 84, 692, 0,
    2720, 2090, 988, 671, 2072, 1140, 758, 2000, 1128, 2100,
    500, 3000, 1593, 1095, 908, 2412,
)
"""Thousandths of a token per feature, from ``tests/fixtures/tokens/fit.py --margin 1.02``."""


def token_features(data: bytes) -> list[int]:
    """Counts of ``FEATURES`` in UTF-8 ``data``.

    Letters by case, letter runs (``words``), lower-to-upper changes (``humps``: o200k
    splits camelCase), digits and the 1-3 digit pieces numbers are cut into, spaces,
    quotes, other punctuation and its runs, then characters per script class.
    """
    t = data.translate(_CLASSES, _CONTINUATION)
    k = t.translate(_KINDS).translate(_KIND_OTHER) if not data.isascii() else t.translate(_KINDS)
    k = b" " + k.replace(b"000", b"0 ")  # a piece ends after 3 digits; runs count from the start
    out = [
        t.count(b"a"), t.count(b"A"),
        k.count(b" a") + k.count(b".a") + k.count(b"0a"),
        t.count(b"aA"),
        t.count(b"0"),
        k.count(b" 0") + k.count(b".0") + k.count(b"a0"),
        t.count(b" "), t.count(b"q"), t.count(b"."),
        k.count(b" .") + k.count(b"a.") + k.count(b"0."),
    ]
    if data.isascii():
        return out + [0] * (len(FEATURES) - len(out))
    out += [t.count(c) for c in (b"L", b"M", b"G", b"C", b"Y", b"H", b"R", b"S")]
    indic = sum(data.count(p) for p in _DEVANAGARI_THAI)
    additional = sum(data.count(p) for p in _LATIN_ADDITIONAL)
    out += [indic, t.count(b"I") - indic, additional, t.count(b"V") - additional]
    out += [t.count(c) for c in (b"P", b"K", b"Z", b"E")]
    return out


def estimate_tokens(declaration: JSON) -> int:
    """Upper estimate of the tokens one declaration costs in the prompt.

    Counted over its compact canonical JSON, the bytes actually published, plus
    ``TOOL_OVERHEAD``. Only byte-level C operations per declaration, so 5,000
    declarations take milliseconds.
    """
    return estimate_encoded(canonicaljson.encode_canonical_json(declaration))


def estimate_encoded(encoded: bytes) -> int:
    """:func:`estimate_tokens` of the declaration whose canonical JSON is ``encoded``."""
    return -(-_units(encoded) // TOKEN_DENOMINATOR) + TOOL_OVERHEAD


def _units(data: bytes) -> int:
    return sum(map(operator.mul, WEIGHTS, token_features(data)))


_SHAPE_MEMBERS = ("inputSchema", "outputSchema")
_PUNCT_RUN = WEIGHTS[FEATURES.index("punct_runs")]
_MAX_SHAPES = 4096
_shape_units: dict[bytes, int] = {}
"""Units of schema members by their bytes: many tools share a shape (bounded)."""


def estimate_members(members: Mapping[str, bytes]) -> int:
    """:func:`estimate_encoded` of ``catalog.canonical.join_object(members)``, each schema
    member counted once per shape.

    Every feature counts characters or pairs of neighbours, and members meet at punctuation
    (``{``, ``,`` or ``}`` before the ``"`` of a key), where no pair feature matches: so the
    counts of the object are those of the object without its schemas plus those of each
    schema member with a comma, less the punctuation run a lone member starts with.
    """
    shapes = [k for k in _SHAPE_MEMBERS if k in members]
    if not shapes:
        return estimate_encoded(join_object(members))
    rest = join_object({k: v for k, v in members.items() if k not in shapes})
    units = _units(rest) + sum(_member_units(members[k]) for k in shapes)
    return -(-units // TOKEN_DENOMINATOR) + TOOL_OVERHEAD


def _member_units(member: bytes) -> int:
    units = _shape_units.get(member)
    if units is None:
        if len(_shape_units) >= _MAX_SHAPES:
            _shape_units.clear()
        units = _shape_units[member] = _units(member + b",") - _PUNCT_RUN
    return units


def _estimate(entry: Entry) -> int:
    members = entry.members
    return estimate_members(members) if members is not None else estimate_encoded(entry.encoded)


# -- policy and decision --------------------------------------------------------------

META_NAMES = ("artifact_read", "tool_call", "tool_search")
"""Meta tools the gateway may add; ``decide`` declares only the ones the mode needs."""


class DecisionError(ValueError):
    """The client's constraints cannot be met (e.g. ``fixed`` over the function limit)."""


Fallback = Literal["tool-count", "context-budget"]


@dataclass(frozen=True)
class Declarations:
    """The exact tool list to publish for one epoch, and why.

    ``fallback`` is ``None`` when the requested (for ``auto``: fixed) plan was used, else
    the limit that forced the change: ``"tool-count"`` or ``"context-budget"``. Falling
    back means on-demand, and when even the always-loaded tools break a limit, every
    catalog tool deferred; ``detail`` is one human line saying which, with the numbers.
    """

    mode: Literal["fixed", "on-demand"]
    fallback: Fallback | None
    detail: str
    declared: tuple[dict[str, JSON], ...]
    declared_names: tuple[str, ...]
    deferred_names: tuple[str, ...]
    """Catalog tools that need a ``tool_search`` activation before they run."""
    function_count: int
    function_limit: int | None
    declared_tokens: int
    token_budget: int | None
    fingerprint: str
    identity: str

    def numbers(self) -> dict[str, JSON]:
        """The decision as ``catalog --json`` and ``doctor --json`` report it."""
        return {
            "mode": self.mode,
            "fallback": self.fallback,
            "detail": self.detail,
            "functions": {"declared": self.function_count, "limit": self.function_limit},
            "tokens": {"declared": self.declared_tokens, "budget": self.token_budget},
            "deferred": len(self.deferred_names),
        }



def _is_deferred(entry: Entry, globs: Sequence[str]) -> bool:
    return entry.deferred or any(matches(entry.name, g) for g in globs)


class _Plan:
    """One candidate declaration list. Its count is known at once; its order, declarations
    and tokens only when asked: a fallback for the tool count needs neither the sort nor a
    token estimate of thousands of tools it will not declare."""

    def __init__(
        self,
        mode: Literal["fixed", "on-demand"],
        tools: Sequence[Entry],
        meta: Mapping[str, dict[str, JSON]],
        meta_names: Sequence[str],
        tokens: Callable[[str], int],
    ) -> None:
        for name in meta_names:
            if name not in meta:
                raise DecisionError(f"mode {mode} needs the meta tool {name}, which was not given")
        self.mode = mode
        self._decls = {e.name: e.declaration for e in tools}
        self._decls.update((name, meta[name]) for name in meta_names)
        self._tokens = tokens

    @property
    def count(self) -> int:
        return len(self._decls)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._decls, key=code_unit_key))

    @functools.cached_property
    def declared(self) -> tuple[dict[str, JSON], ...]:
        return tuple(self._decls[n] for n in self.names)

    @functools.cached_property
    def tokens(self) -> int:
        return sum(self._tokens(n) for n in self.names)


def _allows(policy: ClientPolicy, limit: int | None) -> str:
    """Whose function limit it is: the profile's, or the config's ``max_functions``."""
    profile = PROFILES.get(policy.profile)
    if profile is not None and profile.max_functions == limit:
        return f"profile {policy.profile} allows {limit}"
    return f"max_functions is {limit}"


def _over(plan: _Plan, limit: int | None, budget: int | None) -> Fallback | None:
    """Which limit ``plan`` breaks (count first), or ``None`` when it fits."""
    if limit is not None and plan.count > limit:
        return "tool-count"
    if budget is not None and plan.tokens > budget:
        return "context-budget"
    return None


def _numbers(plan: _Plan, limit: int | None, budget: int | None) -> str:
    lim = "no limit" if limit is None else f"limit {limit}"
    bud = "no context window" if budget is None else f"budget {budget}"
    return f"{plan.count} functions ({lim}), ~{plan.tokens} tokens ({bud})"


def _why(reason: str, plan: _Plan, limit: int | None, budget: int | None) -> str:
    if reason == "tool-count":
        return f"{plan.mode} needs {plan.count} functions > limit {limit}"
    return f"{plan.mode} needs ~{plan.tokens} tokens > budget {budget}"


def _check_inputs(catalog: Catalog, policy: ClientPolicy, meta: Mapping[str, dict[str, JSON]]) -> None:
    if policy.declarations not in ("auto", "fixed", "on-demand"):
        raise DecisionError(f"declarations = {policy.declarations!r}: expected auto, fixed or on-demand")
    if policy.max_functions is not None and policy.max_functions < 0:
        raise DecisionError(f"max_functions = {policy.max_functions} is negative")
    for name, decl in meta.items():
        if name not in META_NAMES:
            raise DecisionError(f"unknown meta tool {name!r}")
        if decl.get("name") != name:
            raise DecisionError(f"meta tool {name!r} is declared with name {decl.get('name')!r}")
    seen: set[str] = set()
    for e in catalog.entries:
        if e.name in seen:
            raise DecisionError(f"tool {e.name!r} is in the catalog twice")
        if e.name in meta:
            raise DecisionError(f"tool {e.name!r} collides with the meta tool of that name")
        seen.add(e.name)


def decide(catalog: Catalog, policy: ClientPolicy, meta: Mapping[str, dict[str, JSON]]) -> Declarations:
    """Choose fixed or on-demand declarations; never truncates the catalog.

    ``meta`` maps meta tool name -> declaration (``tool_search``, ``tool_call``, and
    ``artifact_read`` only when spilling is on; ``artifact_read`` is always declared).
    Every catalog tool ends up declared or deferred (reachable through ``tool_search``).
    Raises ``DecisionError`` when ``declarations = "fixed"`` breaks the function limit,
    or when not even the meta tools fit in it.
    """
    _check_inputs(catalog, policy, meta)
    entries = sorted(catalog.entries, key=lambda e: code_unit_key(e.name))
    marked = {e.name for e in entries if _is_deferred(e, policy.defer)}
    deferred = [e for e in entries if e.name in marked]
    loaded = [e for e in entries if e.name not in marked]
    by_name = {e.name: e for e in entries}

    @functools.cache
    def tokens(name: str) -> int:  # estimated only for the plans whose tokens are asked
        return _estimate(by_name[name]) if name in by_name else estimate_tokens(meta[name])

    limit, budget = policy.max_functions, policy.token_budget()
    extra = ["artifact_read"] if "artifact_read" in meta else []

    def fixed() -> _Plan:
        return _Plan("fixed", entries, meta, extra + (["tool_search"] if deferred else []), tokens)

    def on_demand(tools: Sequence[Entry]) -> _Plan:
        return _Plan("on-demand", tools, meta, extra + ["tool_search", "tool_call"], tokens)

    fallback: Fallback | None = None
    steps: list[str] = []
    if policy.declarations in ("auto", "fixed"):
        plan = fixed()
        reason = _over(plan, limit, budget)
        if policy.declarations == "fixed":
            if reason == "tool-count":
                raise DecisionError(f"declarations = fixed needs {plan.count} functions but {_allows(policy, limit)}")
            if reason == "context-budget":
                steps.append(f"{_why(reason, plan, limit, budget)}, kept because declarations = fixed")
        elif reason is not None:
            fallback = reason
            steps.append(_why(reason, plan, limit, budget))
            plan = on_demand(loaded)
    else:
        plan = on_demand(loaded)
    if plan.mode == "on-demand":
        reason = _over(plan, limit, budget)
        if reason is not None and loaded:
            steps.append(f"{_why(reason, plan, limit, budget)} with {len(loaded)} always-loaded tools")
            fallback = fallback or reason
            plan = on_demand([])
            steps.append(f"all {len(entries)} tools deferred")
            reason = _over(plan, limit, budget)
        if reason == "context-budget":
            steps.append(f"{_why(reason, plan, limit, budget)} even with the meta tools alone")
        if limit is not None and plan.count > limit:
            raise DecisionError(
                f"on-demand needs {plan.count} functions (its meta tools alone) but {_allows(policy, limit)}"
            )
    declared_set = set(plan.names)
    deferred_names = tuple(e.name for e in entries if e.name not in declared_set or e.name in marked)
    steps.append(f"{plan.mode}: {_numbers(plan, limit, budget)}, {len(deferred_names)} deferred")
    return Declarations(
        mode=plan.mode,
        fallback=fallback,
        detail="; ".join(steps),
        declared=plan.declared,
        declared_names=plan.names,
        deferred_names=deferred_names,
        function_count=plan.count,
        function_limit=limit,
        declared_tokens=plan.tokens,
        token_budget=budget,
        fingerprint=_fingerprint(plan.declared),
        identity=_identity(
            policy.route(),
            plan.mode,
            [by_name[n].encoded if n in by_name else encode(meta[n]) for n in plan.names],
            [(str(by_name[n].declaration.get("name", "")), by_name[n].encoded) for n in deferred_names],
        ),
    )
