"""Token estimate of tool declarations and the declaration decision (fixed / on-demand).

The estimate must over-count: under-counting lets a catalog that does not fit push the
conversation into early compaction, which ends the cache epoch the gateway exists to keep.
Over-counting only makes the fallback to on-demand happen a little early. The rates are
calibrated against cl100k_base and o200k_base (see docs/token-estimate.md).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import canonicaljson

from catalog.activation import identity as _identity
from catalog.build import fingerprint as _fingerprint
from catalog.model import JSON, Catalog, Entry
from catalog.names import code_unit_key

# -- token estimate -------------------------------------------------------------------

TOKEN_DENOMINATOR = 12
"""Rates below are in twelfths of a token per character: integer arithmetic, exact."""

RATE_ASCII = 4
"""ASCII other than digits: 1 token per 3 chars (JSON declarations measure ~3.8-5)."""
RATE_DIGIT = 9
"""ASCII digits: 3/4 token per char; numbers, hex ids and dates split into short pieces."""
RATE_LATIN = 12
"""U+0080-U+02FF, U+1E00-U+1EFF (accented Latin): 1 per char; each one breaks a word."""
RATE_CYRILLIC = 8
"""U+0400-U+052F: 2/3 per char (cl100k, the worse encoding for Cyrillic, ~0.4-0.5)."""
RATE_OTHER = 15
"""Every other BMP character (Greek, CJK, Hangul, Indic, Arabic, Hebrew, Thai...): 5/4."""
RATE_ASTRAL = 36
"""Outside the BMP (emoji, rare CJK): 3 per char; an emoji is 2-4 byte-level tokens."""
TOOL_OVERHEAD = 8
"""Per declared tool: the provider's framing around each function definition."""

_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_DIGITS = b"0123456789"


def _char_rate(ch: str) -> int:
    cp = ord(ch)
    if cp <= 0x2FF or 0x1E00 <= cp <= 0x1EFF:
        return RATE_LATIN
    if 0x400 <= cp <= 0x52F:
        return RATE_CYRILLIC
    if cp > 0xFFFF:
        return RATE_ASTRAL
    return RATE_OTHER


def estimate_tokens(declaration: JSON) -> int:
    """Upper estimate of the tokens one declaration costs in the prompt.

    Counted over its compact canonical JSON, the bytes actually published. ASCII is
    counted with C-level byte operations, so 5,000 declarations take milliseconds.
    """
    data = canonicaljson.encode_canonical_json(declaration)
    digits = len(data) - len(data.translate(None, _DIGITS))
    if data.isascii():
        units = (len(data) - digits) * RATE_ASCII + digits * RATE_DIGIT
    else:
        text = data.decode("utf-8")
        wide = _NON_ASCII.findall(text)
        ascii_other = len(text) - len(wide) - digits
        units = ascii_other * RATE_ASCII + digits * RATE_DIGIT
        units += sum(_char_rate(ch) for ch in wide)
    return -(-units // TOKEN_DENOMINATOR) + TOOL_OVERHEAD


# -- policy and decision --------------------------------------------------------------

Mode = Literal["auto", "fixed", "on-demand"]
META_NAMES = ("artifact_read", "tool_call", "tool_search")
"""Meta tools the gateway may add; ``decide`` declares only the ones the mode needs."""


@dataclass(frozen=True)
class ClientPolicy:
    """What the client (profile, context window, route) allows the declarations to cost."""

    profile: str = "openai"
    max_functions: int | None = 128
    """``None``: no function-count limit (the token budget still applies)."""
    context_window: int | None = None
    """``None``: unknown window, so no token budget."""
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000
    system_prompt_tokens: int = 0
    declarations: Mode = "auto"
    defer: tuple[str, ...] = ()
    """``fnmatchcase`` globs on qualified names, deferred in addition to ``Entry.deferred``."""
    account: str | None = None
    model: str | None = None
    api: str | None = None
    endpoint: str | None = None

    def route(self) -> dict[str, str | None]:
        """The route part of the activation identity."""
        return {"account": self.account, "model": self.model, "api": self.api, "endpoint": self.endpoint}

    def token_budget(self) -> int | None:
        """Tokens declarations may take: what keeps ``keep_recent_tokens`` below compaction."""
        if self.context_window is None:
            return None
        return (
            self.context_window - self.reserve_tokens - self.keep_recent_tokens - self.system_prompt_tokens
        )


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



def _is_deferred(entry: Entry, globs: Sequence[str]) -> bool:
    return entry.deferred or any(fnmatch.fnmatchcase(entry.name, g) for g in globs)


@dataclass(frozen=True)
class _Plan:
    mode: Literal["fixed", "on-demand"]
    declared: tuple[dict[str, JSON], ...]
    names: tuple[str, ...]
    tokens: int

    @property
    def count(self) -> int:
        return len(self.declared)


def _plan(
    mode: Literal["fixed", "on-demand"],
    tools: Sequence[Entry],
    meta: Mapping[str, dict[str, JSON]],
    meta_names: Sequence[str],
    tokens: Mapping[str, int],
) -> _Plan:
    decls = {e.name: e.declaration for e in tools}
    for name in meta_names:
        if name not in meta:
            raise DecisionError(f"mode {mode} needs the meta tool {name}, which was not given")
        decls[name] = meta[name]
    names = tuple(sorted(decls, key=code_unit_key))
    return _Plan(mode, tuple(decls[n] for n in names), names, sum(tokens[n] for n in names))


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
    tokens = {e.name: estimate_tokens(e.declaration) for e in entries}
    tokens.update({n: estimate_tokens(d) for n, d in meta.items()})
    limit, budget = policy.max_functions, policy.token_budget()
    extra = ["artifact_read"] if "artifact_read" in meta else []

    def fixed() -> _Plan:
        return _plan("fixed", entries, meta, extra + (["tool_search"] if deferred else []), tokens)

    def on_demand(tools: Sequence[Entry]) -> _Plan:
        return _plan("on-demand", tools, meta, extra + ["tool_search", "tool_call"], tokens)

    fallback: Fallback | None = None
    steps: list[str] = []
    if policy.declarations in ("auto", "fixed"):
        plan = fixed()
        reason = _over(plan, limit, budget)
        if policy.declarations == "fixed":
            if reason == "tool-count":
                raise DecisionError(
                    f"declarations = fixed needs {plan.count} functions "
                    f"but profile {policy.profile} allows {limit}"
                )
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
                f"on-demand needs {plan.count} functions (its meta tools alone) "
                f"but profile {policy.profile} allows {limit}"
            )
    declared_set = set(plan.names)
    deferred_names = tuple(e.name for e in entries if e.name not in declared_set or e.name in marked)
    steps.append(f"{plan.mode}: {_numbers(plan, limit, budget)}, {len(deferred_names)} deferred")
    by_name = {e.name: e for e in entries}
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
            policy.route(), plan.mode, plan.declared, [by_name[n].declaration for n in deferred_names]
        ),
    )
