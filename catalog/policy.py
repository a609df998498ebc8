"""What a client allows the declarations to cost: its profile, limits, budget and route.

Apart from ``catalog.budget`` (which decides with it) because the config is parsed, and a
warm start's key computed, before anything heavier than the standard library is imported.
"""

from __future__ import annotations

import fnmatch
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Mode = Literal["auto", "fixed", "on-demand"]


def matches(name: str, pattern: str) -> bool:
    """Whether a config pattern (deny, defer, include, exclude) names ``name``: a glob
    (``fnmatchcase``), or the name itself, written out. A name with ``[`` in it (``db__drop[all]``)
    is a character class to ``fnmatch``: the name written as its own pattern did not match it.
    Both are compared in Unicode NFC: ``löschen`` typed in a config is one code point where a
    server may list it decomposed (``o`` and a combining diaeresis), and reads the same."""
    if name == pattern or fnmatch.fnmatchcase(name, pattern):
        return True
    if unicodedata.is_normalized("NFC", name) and unicodedata.is_normalized("NFC", pattern):
        return False
    name, pattern = unicodedata.normalize("NFC", name), unicodedata.normalize("NFC", pattern)
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def unmatched(patterns: Iterable[str], identities: Iterable[Iterable[str]]) -> list[str]:
    """The ``patterns`` (a ``[policy] deny``'s) that name none of ``identities`` (each tool's
    names, ``Entry.identities``), in config order: a typo there (``DEMO__ECHO``; matching is
    case-sensitive) denies nothing, and nothing else says so."""
    names = [name for tool in identities for name in tool]
    return [p for p in dict.fromkeys(patterns) if not any(matches(name, p) for name in names)]


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
