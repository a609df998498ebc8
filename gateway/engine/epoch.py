"""One cache epoch: the catalog, the declaration decision, and the exact bytes published.

An epoch is immutable. ``tools/list`` serves the same pre-built list object for the
whole epoch, so nothing that happens while serving (calls, searches, refusals) can
change a published byte. The search index and argument validators are built lazily
and cached here, because they belong to exactly this catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import anyio
import anyio.to_thread
from jsonschema_rs import Validator
from mcp_types.version import LATEST_MODERN_VERSION

from catalog.budget import ClientPolicy, Declarations, decide
from catalog.build import build
from catalog.lock import Lock, Pending, apply
from catalog.model import Catalog, ServerTools
from catalog.search import SearchIndex, tool_call_declaration, tool_search_declaration
from catalog.tasks import runs_tool_tasks
from catalog.validation import compile_validator, is_referencing
from gateway.config import Config, ServerConfig
from gateway.downstream.connection import Downstream
from gateway.engine.checks import CheckCache
from gateway.eras import DEFAULT_VERSION
from gateway.published import PublishedTools, published_tools, wire_problem
from spill import artifact_read_declaration

META_TOOLS = frozenset({"tool_search", "tool_call", "artifact_read"})
"""Names the gateway serves itself: a downstream tool never takes one."""


@dataclass
class Epoch:
    catalog: Catalog
    decision: Declarations
    discovery_ms: int = 0
    """Wall time of the discovery barrier that produced this epoch."""
    pending: tuple[Pending, ...] = ()
    """Under a catalog lock: live changes waiting for ``prefixgate catalog approve``."""
    lock_refusals: Mapping[str, str] = field(default_factory=dict)
    """Under a catalog lock: name -> why calls to it are refused (changed, removed, new).
    It gates calls and never changes a published byte: a rebuild with the same bytes publishes
    its epoch in this one's place without a new epoch for clients (``gateway.engine.publishing``)."""
    _wire: dict[str, PublishedTools] = field(default_factory=dict)
    _index: SearchIndex | None = None
    _indexing: anyio.Event | None = None
    _validators: dict[str, tuple[Validator, bool]] = field(default_factory=dict)
    _deferred: frozenset[str] = frozenset()
    _schemas: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._deferred = frozenset(self.decision.deferred_names)

    @property
    def declarations(self) -> tuple[dict[str, Any], ...]:
        """The canonical declarations ``tools/list`` publishes, in order."""
        return self.decision.declared

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the published declaration list."""
        return self.decision.fingerprint

    @property
    def identity(self) -> str:
        return self.decision.identity

    def same_for_clients(self, other: Epoch | None) -> bool:
        """Whether ``other`` publishes these bytes under this activation identity: then it
        is this epoch for clients (no list_changed, activation kept), however it was built."""
        return other is not None and self.fingerprint == other.fingerprint and self.identity == other.identity

    def declares(self, name: str) -> bool:
        return name in self.decision.declared_names

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a tool of this epoch (served, declared, or held back by the
        lock): what telemetry may record by name; anything else is a peer's own text."""
        return name in self.catalog.by_name or self.declares(name) or name in self.lock_refusals

    def is_deferred(self, name: str) -> bool:
        return name in self._deferred

    def input_schema(self, name: str) -> Any:
        """The ``inputSchema`` the 2026-07-28 ``tools/list`` publishes for ``name``, or None."""
        if self._schemas is None:
            self._schemas = {tool["name"]: tool.get("inputSchema") for tool in self.published(LATEST_MODERN_VERSION)}
        return self._schemas.get(name)

    def published(self, version: str = DEFAULT_VERSION) -> PublishedTools:
        """The wire form for a protocol version, built once per epoch and then reused."""
        wire = self._wire.get(version)
        if wire is None:
            wire = self._wire[version] = published_tools(self.declarations, version)
        return wire

    @property
    def index(self) -> SearchIndex:
        if self._index is None:
            self._index = SearchIndex(self.catalog.entries)
        return self._index

    async def searchable(self) -> SearchIndex:
        """The search index, as ``tool_search`` gets it: when the epoch has none yet, it is
        built in a worker thread (a 5,000-tool index takes ~0.2 s, which on the event loop
        would hold up every client), and other searches meanwhile wait for that build."""
        while self._index is None:
            if self._indexing is not None:
                await self._indexing.wait()
                continue
            self._indexing = building = anyio.Event()
            try:
                index = await anyio.to_thread.run_sync(SearchIndex, self.catalog.entries)
                if self._index is None:
                    self._index = index
            finally:
                self._indexing = None
                building.set()
        return self._index

    def validator(self, name: str) -> tuple[Validator, bool]:
        """The compiled validator of a catalog tool's canonical input schema, and whether
        the schema uses references (a tree-shaped one validates in linear time).

        Raises ``jsonschema_rs.ValidationError`` if it does not compile (the build
        quarantines such schemas, so only a stale check cache can get here).
        """
        compiled = self._validators.get(name)
        if compiled is None:
            schema = self.catalog.by_name[name].declaration["inputSchema"]
            compiled = self._validators[name] = (compile_validator(schema), is_referencing(schema))
        return compiled


def approve_hint(profile: str | None) -> str:
    """The command that approves a change pending against ``profile``'s lock (None: the default
    profile's), as every message that names it says it: each profile has its own lock."""
    return "prefixgate catalog approve" + (f" --profile {profile}" if profile else "")


def client_policy(config: Config) -> ClientPolicy:
    """The ``[client]`` table as the policy ``decide`` applies: the same fields, and the
    function limit resolved (``max_functions`` or the profile's)."""
    c = config.client
    copied = {f.name: getattr(c, f.name) for f in fields(ClientPolicy)}
    return ClientPolicy(**{**copied, "max_functions": c.function_limit})


def meta_declarations(spill: bool) -> dict[str, dict[str, Any]]:
    """The gateway's own tools; ``artifact_read`` exists (always declared) when spilling."""
    meta = {"tool_search": tool_search_declaration(), "tool_call": tool_call_declaration()}
    if spill:
        meta["artifact_read"] = artifact_read_declaration()
    return meta


def server_tools(
    config: ServerConfig, tools: Sequence[Any], capabilities: Mapping[str, Any] | None = None
) -> ServerTools:
    """What the build takes of a server: its tools, the config that shapes their names, and
    (``capabilities``) whether it runs tool calls as tasks."""
    return ServerTools(
        id=config.id,
        prefix=config.prefix,
        tools=tuple(tools),
        include=config.include,
        exclude=config.exclude,
        deferred=config.deferred,
        tasks=runs_tool_tasks(capabilities or {}),
    )


def epoch_of(
    config: Config, downstreams: Sequence[Downstream], checks: CheckCache | None = None, lock: Lock | None = None
) -> Epoch:
    """The epoch the servers' lists build: each server that has a listing (``Downstream.listed``:
    live now, or the last one it gave or the warm record gave it while it is down)."""
    servers, ready = _listings(downstreams)
    return build_epoch(config, servers, checks, lock, ready)


async def built_epoch(
    config: Config,
    downstreams: Sequence[Downstream],
    checks: CheckCache,
    lock: Lock | None = None,
    *,
    searchable: bool = False,
) -> Epoch:
    """``epoch_of``, built in a worker thread: a catalog of thousands of tools takes a
    second or more to build, which on the event loop would hold up every client's calls
    for as long, each time a server changed its tools. The servers' listings are taken
    here, on the loop (a re-list replaces a server's list, never changes it). With
    ``searchable``, the search index is built there too (when tools are deferred), before
    the epoch is out.

    Under a catalog lock it is built on the loop, as before: there the epoch is also the
    call gate (a tool changed since the lock is refused until approved), which must change
    in the step that sees a server's new tools. Built in a thread, it would be out a
    build's time late, and calls meanwhile would pass the old gate."""
    if lock is not None:
        return epoch_of(config, downstreams, checks, lock)
    servers, ready = _listings(downstreams)

    def work() -> Epoch:
        epoch = build_epoch(config, servers, checks, lock, ready)
        if searchable and epoch.decision.deferred_names:  # (else no tool_search to serve)
            epoch.index  # noqa: B018 - built now, in this thread
        return epoch

    return await anyio.to_thread.run_sync(work)


def _listings(downstreams: Sequence[Downstream]) -> tuple[list[ServerTools], frozenset[str]]:
    """What a build takes of the servers: each enabled one's listing, and which are ready."""
    servers = [server_tools(d.config, d.tools, d.capabilities) for d in downstreams if d.config.enabled and d.listed]
    return servers, frozenset(d.config.id for d in downstreams if d.status == "ready")


def build_epoch(
    config: Config,
    servers: Sequence[ServerTools],
    checks: CheckCache | None = None,
    lock: Lock | None = None,
    ready: frozenset[str] = frozenset(),
) -> Epoch:
    """Build and decide; raises ``catalog.budget.DecisionError`` when no plan fits.

    Under a ``lock`` the catalog holds the locked declarations (catalog/lock.py): what
    the servers list now only decides what is pending (``ready``: the servers whose
    listing is live, so a tool they no longer list is pending removal) and which calls
    are refused.
    """
    checks = checks or CheckCache()
    with checks.lock:
        catalog = build(
            servers,
            config.client.names,
            config.gateway.separator,
            reserved=META_TOOLS,
            extra_check=wire_problem,
            memo=checks,
            output_schemas=config.spill.publishes_output_schemas,
            include=config.include,
            exclude=config.exclude,
        )
        checks.save()
    pending: tuple[Pending, ...] = ()
    refusals: Mapping[str, str] = {}
    if lock is not None:
        deferred = frozenset(s.id for s in config.servers if s.deferred)
        prefixes = {s.id: s.prefix for s in config.servers}
        allow_new = config.gateway.lock_new == "allow"
        # Each profile has its own lock: the command a refusal names approves in this one.
        approve = approve_hint(config.profile)
        separator, configured = config.gateway.separator, frozenset(prefixes)
        applied = apply(catalog, lock, ready, deferred, allow_new, prefixes, separator, approve, servers=configured)
        catalog, pending, refusals = applied.catalog, applied.pending, applied.refusals
    decision = decide(catalog, client_policy(config), meta_declarations(config.spill.enabled))
    return Epoch(catalog=catalog, decision=decision, pending=pending, lock_refusals=refusals)
