"""Qualified tool names: qualify, sanitise, de-collide and order them.

Names must satisfy the client's provider rule (e.g. OpenAI's ``^[a-zA-Z0-9_-]{1,64}$``)
and must not depend on which server answered first, otherwise the published catalog
(and the provider's prompt cache) would change between otherwise identical runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from catalog.model import CatalogWarning
from catalog.text import quote

SUFFIX_HEX = 8
"""Hex digits of SHA-256 appended to a renamed name: 32 bits make accidents rare."""

COLLIDERS_NAMED = 3
"""Names a rename's reason lists of the others it collides with, then how many more: every
member's reason naming every other grew with the square of the group (4,000 tools whose
names sanitise alike took 12 s and 1.4 GB to build, their warnings 350 MB)."""

_MAX_ROUNDS = 64
"""Rehash rounds before giving up; each round succeeds with overwhelming probability."""


@dataclass(frozen=True)
class Profile:
    """A client's function-name rule and function-count limit."""

    name: str
    allowed: re.Pattern[str]
    """Matches exactly one allowed character (a single character class)."""
    max_len: int
    max_functions: int | None
    wrapper: str = ""
    """How the client shows a tool to the model, ``{entry}`` standing for the name prefixgate
    is registered under (Claude Code: ``mcp__{entry}__``); ``max_len`` counts it, because
    the provider checks the wrapped name."""
    max_visible_bytes: int = 65536
    """The bound on a result the model sees (``[spill] max_visible_bytes`` when the config
    does not set it): under what the client shows of a result before it moves the rest
    elsewhere, so prefixgate's preview and its trailer (the artifact to read) reach the model."""

    def valid(self, name: str) -> bool:
        """Whether ``name`` satisfies ``^[allowed]{1,max_len}$`` (no trailing-newline gap)."""
        return 1 <= len(name) <= self.max_len and all(
            self.allowed.fullmatch(ch) for ch in name
        )

    def wrapped(self, name: str, entry: str) -> str:
        """``name`` as the model sees it through a client registered as ``entry``."""
        return self.wrapper.format(entry=sanitise(entry, self)) + name

    def for_entry(self, entry: str) -> Profile:
        """The rule for a published name: ``max_len`` less the wrapper of ``entry``, so every
        published name still fits once the client wraps it."""
        if not self.wrapper:
            return self
        return replace(self, max_len=self.max_len - len(self.wrapped("", entry)), wrapper="")


_WORD_DASH = re.compile(r"[a-zA-Z0-9_-]")

PROFILES: dict[str, Profile] = {
    "openai": Profile("openai", _WORD_DASH, 64, 128),
    "deepseek": Profile("deepseek", _WORD_DASH, 64, 128),
    "anthropic": Profile("anthropic", _WORD_DASH, 128, None),
    "mcp": Profile("mcp", re.compile(r"[A-Za-z0-9._-]"), 128, None),  # SEP-986
    # Claude Code and Claude Desktop name a tool mcp__<entry>__<tool> and reject one over 64.
    # Claude Code also saves an MCP result whose text is over 50,000 characters to a file and
    # shows the model its first 2 KB (measured, 2.1.197 and 2.1.332: 50,000 characters reach
    # the model whole, 50,001 do not): bounded under that, the trailer shows.
    "claude-code": Profile("claude-code", _WORD_DASH, 64, None, "mcp__{entry}__", 48 * 1024),
    "claude-desktop": Profile("claude-desktop", _WORD_DASH, 64, None, "mcp__{entry}__"),
    # Gemini CLI names every MCP tool mcp_<entry>_<tool> and cuts a name over 63 characters to its
    # first and last 30 around "...", which can make two names one (generateValidName in
    # packages/core/src/tools/mcp-tool.ts). The Gemini API takes letters, digits, '_', '-', '.'
    # and ':'; ':' is left out, as MCP's SEP-986 has no ':'. The API refuses a request of over 512
    # functions; 64 of them are left to Gemini CLI's own tools (27 built in) and its other servers.
    # It saves a one-text result of over 40,000 characters to a file and shows the model a part
    # (tool-executor.ts; fewer once the context is nearly full): bounded under that, the trailer shows.
    "gemini": Profile("gemini", re.compile(r"[A-Za-z0-9._-]"), 63, 512 - 64, "mcp_{entry}_", 36 * 1024),
}

DEFAULT_ENTRY = "prefixgate"
"""The name ``doctor``'s registration snippets give prefixgate in a client."""


def code_unit_key(name: str) -> bytes:
    """Sort key in UTF-16 code-unit order, the order JavaScript clients use.

    Python's default ``sorted`` is code-point order, which differs once a name has a
    character outside the BMP (a surrogate pair sorts before U+E000..U+FFFF).
    """
    return name.encode("utf-16-be", "surrogatepass")


def qualify(prefix: str, tool: str, separator: str) -> str:
    """The unsanitised public name; an empty prefix publishes the tool name unchanged."""
    return tool if prefix == "" else prefix + separator + tool


def sanitise(name: str, profile: Profile) -> str:
    """Replace each disallowed code point (a non-BMP character is one) with ``_``."""
    if name.isascii() and _ascii_allowed(profile.allowed).issuperset(name):
        return name  # the common case, without a regex call per character
    return "".join(ch if profile.allowed.fullmatch(ch) else "_" for ch in name)


@functools.cache
def _ascii_allowed(allowed: re.Pattern[str]) -> frozenset[str]:
    """The ASCII characters ``allowed`` matches (one pattern per profile: a few entries)."""
    return frozenset(ch for ch in map(chr, range(128)) if allowed.fullmatch(ch))


def suffix_hash(server: str, tool: str, round_: int = 0) -> str:
    """8 hex of SHA-256 identifying (server, tool), stable across runs.

    Round 0 is the documented ``sha256(server + "\\x00" + tool)``; later rounds (only
    reached when a suffixed name still clashes) hash an unambiguous JSON encoding, so
    two pairs whose round-0 inputs happen to be equal still get different suffixes.
    """
    if round_ == 0:
        data = (server + "\x00" + tool).encode("utf-8", "surrogatepass")
    else:
        data = json.dumps([server, tool, round_], ensure_ascii=True).encode("ascii")
    return hashlib.sha256(data).hexdigest()[:SUFFIX_HEX]


@dataclass(slots=True)
class _Item:
    server: str
    tool: str
    qualified: str
    plain: str
    reasons: list[str] | None
    """None until there is one: thousands of empty lists cost the garbage collector."""
    suffix: bool = False
    final: str = ""

    def add(self, reason: str) -> None:
        if self.reasons is None:
            self.reasons = []
        self.reasons.append(reason)


def _items(
    requests: Sequence[tuple[str, str, str]], profile: Profile, separator: str
) -> list[_Item]:
    """One item per distinct (server, tool), in a canonical order."""
    prefixes: dict[tuple[str, str], str] = {}
    for server, prefix, tool in requests:
        seen = prefixes.setdefault((server, tool), prefix)
        if seen != prefix:
            raise ValueError(f"tool {tool!r} of server {server!r} requested with two prefixes")
    keys = sorted(prefixes, key=lambda k: (code_unit_key(k[0]), code_unit_key(k[1])))
    items = []
    for server, tool in keys:
        q = qualify(prefixes[(server, tool)], tool, separator)
        items.append(_Item(server, tool, q, sanitise(q, profile), None))
    return items


def _mark(items: list[_Item], profile: Profile, reserved: frozenset[str]) -> None:
    """Record why each item deviates from its plain qualified name."""
    groups: dict[str, list[_Item]] = defaultdict(list)
    for it in items:
        groups[it.plain].append(it)
    for it in items:
        if it.plain != it.qualified:
            it.add("disallowed characters")
        if len(it.plain) > profile.max_len:
            it.add("too long")
            it.suffix = True
        if it.plain == "":
            it.add("empty")
            it.suffix = True
        if it.plain in reserved:
            it.add(f"collides with reserved name {quote(it.plain)}")
            it.suffix = True
        group = groups[it.plain]
        if len(group) > 1:
            others = [o for o in group[: COLLIDERS_NAMED + 1] if o is not it][:COLLIDERS_NAMED]
            labels = ", ".join(f"{quote(o.qualified)} (server {quote(o.server)})" for o in others)
            if len(group) - 1 > len(others):
                labels += f" and {len(group) - 1 - len(others)} more"
            it.add(f"collides with {labels}")
            it.suffix = True


def _suffixed(it: _Item, profile: Profile, round_: int) -> str:
    head = it.plain[: profile.max_len - SUFFIX_HEX - 1]
    return head + "_" + suffix_hash(it.server, it.tool, round_)


def _unsuffixed(name: str, server: str, tool: str) -> tuple[str, bool]:
    """``name`` without the suffix its route (server, tool) gets when renamed, and whether it had one."""
    for round_ in range(_MAX_ROUNDS):
        tail = "_" + suffix_hash(server, tool, round_)
        if name.endswith(tail):
            return name[: -len(tail)], True
    return name, False


def renamed_only(a: str, b: str, server: str, tool: str) -> bool:
    """Whether two names of one route differ only by a collision's suffix (one suffixed, or
    both with different rounds): another tool's arrival or departure renamed it, nothing of
    its own (its prefix, its name) changed. The suffix is the route's own hash, so another
    tool's name never matches."""
    (head_a, suffixed_a), (head_b, suffixed_b) = _unsuffixed(a, server, tool), _unsuffixed(b, server, tool)
    if suffixed_a == suffixed_b:
        return suffixed_a and head_a == head_b
    plain, head = (head_b, head_a) if suffixed_a else (head_a, head_b)
    return bool(head) and plain.startswith(head)  # the suffixed head is the plain name, cut to fit


def _resolve(items: list[_Item], profile: Profile, reserved: frozenset[str]) -> None:
    """Give every item a final, unique name; rehash suffixed names until nothing clashes.

    Unsuffixed names are already unique and never reserved, so they are kept; only a
    suffixed name that clashes (with one of them, a reserved name, or another suffix)
    is rehashed, with a round counter, all members of a clash at once.
    """
    taken = set(reserved)
    pending = []
    for it in items:
        if it.suffix:
            it.final = _suffixed(it, profile, 0)
            pending.append(it)
        else:
            it.final = it.plain
            taken.add(it.plain)
    for round_ in range(1, _MAX_ROUNDS + 1):
        counts: dict[str, int] = defaultdict(int)
        for it in pending:
            counts[it.final] += 1
        clash = [it for it in pending if it.final in taken or counts[it.final] > 1]
        if not clash:
            return
        for it in clash:
            if "suffix clashed, rehashed" not in (it.reasons or ()):
                it.add("suffix clashed, rehashed")
            it.final = _suffixed(it, profile, round_)
    raise RuntimeError("could not assign unique tool names")  # pragma: no cover


def assign_names(
    requests: Sequence[tuple[str, str, str]],
    profile: Profile,
    separator: str,
    reserved: frozenset[str] = frozenset(),
) -> tuple[dict[tuple[str, str], str], list[CatalogWarning]]:
    """Map each ``(server_id, prefix, tool)`` to a valid, unique public name.

    Returns ``{(server_id, tool): name}`` and one ``renamed`` warning per name that
    differs from its plain qualified name. The result depends only on the set of
    requests, never on their order: every member of a colliding group is suffixed.
    A profile whose client wraps names should come through ``Profile.for_entry``; one that
    still carries its wrapper counts the default entry's.
    """
    profile = profile.for_entry(DEFAULT_ENTRY)  # still wrapping: the entry doctor registers
    if profile.max_len <= SUFFIX_HEX + 1:
        raise ValueError(f"profile {profile.name!r}: max_len too short for a suffix")
    items = _items(requests, profile, separator)
    _mark(items, profile, reserved)
    _resolve(items, profile, reserved)
    names: dict[tuple[str, str], str] = {}
    warnings: list[CatalogWarning] = []
    for it in items:
        names[(it.server, it.tool)] = it.final
        if it.final != it.qualified:
            detail = f"{quote(it.qualified)} -> {quote(it.final)} ({'; '.join(it.reasons or ())})"
            warnings.append(CatalogWarning("renamed", it.server, it.tool, detail))
    return names, warnings
