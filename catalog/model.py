"""Value types shared by the catalog modules.

They are frozen so an epoch's catalog can be shared between tasks without copies; the
JSON payloads inside (``declaration``) are treated as read-only by convention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from catalog.canonical import encode, join_object, members
from catalog.text import escape

JSON = Any
"""A JSON value: dict, list, str, int, float, bool or None."""

WarningKind = Literal["renamed", "quarantined", "excluded", "duplicate", "task-only"]
INFORMATIONAL: frozenset[WarningKind] = frozenset(("renamed", "excluded"))
"""Kinds that are no fault of a server's (a name made provider-safe, a tool the config's
filters leave out): logged and rated by ``doctor`` as information, the others as warnings."""


@dataclass(frozen=True)
class ServerTools:
    """One downstream server's raw tool list plus the config that shapes its names."""

    id: str
    prefix: str
    tools: tuple[JSON, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    deferred: bool = False
    tasks: bool = False
    """The server runs ``tools/call`` as a task: a tool that runs only so is published for
    plain calls, which the gateway runs as tasks (catalog/tasks.py)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One published tool: its qualified name and the exact route back downstream."""

    name: str
    server: str
    original: str
    declaration: dict[str, JSON]
    """Canonical tool object as published: ``name`` is the qualified name."""
    deferred: bool = False
    aliases: tuple[str, ...] = ()
    """The tool's other identities, which policy rules match as well as ``name``: the
    unrenamed qualified name (prefix + separator + original, or the original with an
    empty prefix) and server id + separator + original. A rename (a collision, a too
    long name) must never take a tool past a deny rule written for one of them."""
    _members: dict[str, bytes] | None = field(default=None, init=False, compare=False, repr=False)
    _encoded: bytes | None = field(default=None, init=False, compare=False, repr=False)
    """``declaration``'s canonical members and bytes, once known (see :meth:`encoded`).
    Not init fields, so ``dataclasses.replace`` never carries them to another declaration."""

    @property
    def identities(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def members(self) -> dict[str, bytes] | None:
        """``declaration``'s members as canonical bytes (``catalog.canonical.members``; None
        when a key is not a string): the token estimate counts a shared schema once."""
        if self._encoded is None:
            self._encode()
        return self._members

    @property
    def encoded(self) -> bytes:
        """Canonical JSON of ``declaration``: the bytes the fingerprint and the activation
        identity are computed from."""
        return self._encoded if self._encoded is not None else self._encode()

    def _encode(self) -> bytes:
        parts = members(self.declaration)
        encoded = join_object(parts) if parts is not None else encode(self.declaration)
        self.know_encoding(parts, encoded)
        return encoded

    def know_encoding(self, parts: dict[str, bytes] | None, encoded: bytes) -> None:
        """Remember what :meth:`members` and :meth:`encoded` would compute (``build`` has the
        parts at hand): a cache on a frozen entry, so set as ``__post_init__`` would."""
        object.__setattr__(self, "_members", parts)
        object.__setattr__(self, "_encoded", encoded)


@dataclass(frozen=True)
class CatalogWarning:
    """A reportable event of the build: never hidden, always shown by ``catalog``."""

    kind: WarningKind
    server: str
    tool: str
    detail: str

    @property
    def informational(self) -> bool:
        return self.kind in INFORMATIONAL

    def line(self) -> str:
        """One printable line: tool names and details come from servers, so they are escaped."""
        return f"{self.kind}: {escape(self.server)}/{escape(self.tool)}: {escape(self.detail)}"


@dataclass(frozen=True)
class Catalog:
    """The deterministic catalog of one epoch: entries in UTF-16 code-unit order."""

    entries: tuple[Entry, ...]
    warnings: tuple[CatalogWarning, ...] = ()
    fingerprint: str = ""
    by_name: dict[str, Entry] = field(default_factory=dict, compare=False, repr=False)
    unmatched: tuple[tuple[str, str], ...] = ()
    """A profile's ``include``/``exclude`` patterns that match no published name, as (key,
    pattern): a typo there keeps nothing, or leaves in what it meant to take out, unremarked."""

    def get(self, name: str) -> Entry | None:
        return self.by_name.get(name)
