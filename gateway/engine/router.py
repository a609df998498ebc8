"""The call path: resolve -> policy -> activation -> arguments -> forward.

Every failure the model can cause or meet (an unknown name, a denied or inactive tool,
invalid arguments, a dead server, a timeout, a malformed downstream result) becomes an
``isError`` result naming what went wrong, so one bad call never takes the gateway or
the session down. Policy and activation are enforced here, at call time: the published
list never changes for them.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast, get_args

import anyio
from jsonschema_rs import ValidationError as SchemaViolation
from mcp_types import InputRequiredResult
from mcp_types.methods import SERVER_RESULTS, is_input_required
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from catalog.policy import matches
from catalog.schema import json_path
from catalog.search import DEFAULT_LIMIT, render
from catalog.text import escape, plural, quote
from catalog.validation import scalars_in_strings, unset_nulls, violation
from gateway.config import PolicyConfig, SpillConfig
from gateway.downstream.connection import Downstream
from gateway.downstream.errors import DownstreamUnavailable
from gateway.downstream.link import ProgressFn
from gateway.downstream.toolcall import call_tool
from gateway.engine.epoch import META_TOOLS, Epoch
from gateway.engine.shares import Shares
from gateway.engine.telemetry import UNKNOWN_TOOL, CallNote, Decision, Telemetry, error_type, spilled_size
from gateway.engine.validation import ValidationFailure, ValidationPool, ValidationTimeout
from gateway.eras import DEFAULT_VERSION
from gateway.results import error_result, text_result
from gateway.shapes import plain_text_result
from gateway.state.retention import Handing, collect
from gateway.state.session import ClientState, principal_key
from spill import (
    DEFAULT_MAX_VISIBLE_BYTES,
    ArtifactNotFound,
    artifact_read,
    bound_result,
    retain,
    surely_within,
    text_result_size,
    whole_number,
)

if TYPE_CHECKING:
    from gateway.engine.instances import Instances  # (it imports the relay, which imports this)

log = logging.getLogger("prefixgate.router")

T = TypeVar("T")

MAX_QUERY = 500


def not_active(name: str) -> str:
    return f"Call tool_search to activate {name} first; a declaration does not grant execution."


@dataclass(frozen=True, slots=True)
class Call:
    """One ``tools/call`` resolved against one epoch (``Router.resolve``)."""

    epoch: Epoch
    name: str
    """The tool that runs: a catalog tool (``tool_call`` unwrapped) or a meta tool."""
    arguments: Mapping[str, Any] | None
    server: str | None = None
    """The downstream server of a catalog tool; None for a meta tool or an unknown name."""
    problem: str | None = None
    """Why ``tool_call``'s own arguments cannot run anything."""
    noted: str | None = None
    """What telemetry keeps of ``problem`` when it quotes the client's own text (argument names)."""
    wrapped: bool = False
    """Called through ``tool_call``: the client checks its result against no tool's ``outputSchema``."""


MAX_REMOVED = 10_000
"""Removed names remembered for their "no longer available" answer (then: "unknown")."""


class Router:
    def __init__(
        self,
        downstreams: Mapping[str, Downstream],
        policy: PolicyConfig | None = None,
        spill: SpillConfig | None = None,
    ) -> None:
        self.downstreams = dict(downstreams)
        self.policy = policy or PolicyConfig()
        self.spill = spill or SpillConfig(enabled=False)
        self.epoch: Epoch | None = None
        self.removed: dict[str, None] = {}
        """Names that earlier epochs had and the current one does not, oldest first: at most
        ``MAX_REMOVED`` (a server that renames its tools on every change adds names for ever)."""
        self.ready = anyio.Event()
        """Set once an epoch is published: a warm start's, the lock's, or the discovery barrier's."""
        self.settled = anyio.Event()
        """Set once the discovery barrier's epoch is in place (what the servers really offer is known)."""
        self.validation = ValidationPool()
        """Worker processes for arguments of referencing schemas (started on first use)."""
        self.threads = Shares(THREADS_PER_PRINCIPAL)
        """Each principal's share of the worker threads its results are bounded, spilled and read in."""
        self.telemetry: Telemetry | None = None
        """Where each call is recorded (metrics, the audit log, spans); None: nowhere, at no cost."""
        self.instances: Instances | None = None
        """Where a per-principal server's calls go (the hub's ``Instances``); None: no instances."""

    def configure(
        self, downstreams: Mapping[str, Downstream], policy: PolicyConfig, spill: SpillConfig
    ) -> None:
        """A reloaded config's servers, policy and spill settings, for the calls that come next."""
        self.downstreams = dict(downstreams)
        self.policy = policy
        self.spill = spill

    async def publish(self, epoch: Epoch) -> None:
        """Make ``epoch`` current; sessions are re-bound by the caller (the hub)."""
        current = epoch.catalog.by_name
        for name in [n for n in self.removed if n in current]:  # back again
            del self.removed[name]
        if self.epoch is not None:
            for name in self.epoch.catalog.by_name:
                if name not in current:
                    self.removed[name] = None
        while len(self.removed) > MAX_REMOVED:
            del self.removed[next(iter(self.removed))]
        self.epoch = epoch
        self.ready.set()

    async def current(self) -> Epoch:
        if not self.ready.is_set():  # set once for good; waiting on a set Event is still a trip through the loop
            await self.ready.wait()
        assert self.epoch is not None
        return self.epoch

    @staticmethod
    def resolve(epoch: Epoch, name: str, arguments: Mapping[str, Any] | None) -> Call:
        """What a ``tools/call`` runs in ``epoch``: ``tool_call`` is unwrapped here, once,
        so the server a call reaches is known before it runs (its requests and logs are
        routed back to the caller) and the gate sees the tool the model really asked for."""
        if name == "tool_call" and epoch.declares("tool_call"):
            target = (arguments or {}).get("name")
            inner = (arguments or {}).get("arguments", {})
            if not isinstance(target, str) or not target:
                problem = "tool_call: arguments.name must be the name of a catalog tool."
                return Call(epoch, name, arguments, problem=problem)
            unknown = sorted(set(arguments or {}) - {"name", "arguments"})
            if unknown:  # ("argument" for "arguments": the tool would run without them)
                problem = f"tool_call: unknown argument(s): {_line(', '.join(map(quote, unknown)))}."
                return Call(epoch, name, arguments, problem=problem, noted="tool_call: unknown argument(s).")
            if inner is None:
                inner = {}
            if not isinstance(inner, dict):
                return Call(epoch, name, arguments, problem="tool_call: arguments.arguments must be an object.")
            if target in META_TOOLS:
                return Call(epoch, name, arguments, problem=f"tool_call runs catalog tools; call {target} directly.")
            entry = epoch.catalog.get(target)
            return Call(epoch, target, inner, server=entry.server if entry is not None else None, wrapped=True)
        entry = epoch.catalog.get(name)
        return Call(epoch, name, arguments, server=entry.server if entry is not None else None)

    async def call(
        self,
        call: Call,
        state: ClientState,
        *,
        meta: Mapping[str, Any] | None = None,
        on_progress: ProgressFn | None = None,
        version: str = DEFAULT_VERSION,
        answers: Mapping[str, Any] | None = None,
        reserve: int = 0,
        started: float | None = None,
    ) -> dict[str, Any]:
        """Gate and forward one resolved call. ``answers``: ``inputResponses``/``requestState``
        of a retry after the server's ``input_required`` (passed to the server as given).
        ``reserve``: the most bytes the caller adds to the result (its client's protocol era's
        fields), paid from ``max_visible_bytes`` wherever the result is bounded. ``started``:
        when the client's request reached the gateway (``time.perf_counter``), when this is one
        of the rounds the gateway runs for it."""
        telemetry = self.telemetry
        if telemetry is None:
            return await self._call(call, state, None, meta, on_progress, version, answers, reserve)
        note = _note(call, version, started)
        result: dict[str, Any] | None = None
        with telemetry.span(note):
            try:
                result = await self._call(call, state, note, meta, on_progress, version, answers, reserve)
                return result
            except Exception as exc:  # an error answer (a cancellation is no Exception: it stays "cancelled")
                note.error = error_type(exc)
                raise
            finally:
                telemetry.finished(note, state, result, call.arguments)

    def ended(
        self, call: Call, state: ClientState, version: str, started: float, result: dict[str, Any] | None
    ) -> None:
        """Record a handshake-era call whose server asked for input and whose rounds ended
        outside the router (its client could not be asked, the server kept asking; or the
        client cancelled): no round recorded it (``Telemetry.finished``)."""
        telemetry = self.telemetry
        if telemetry is not None:
            note = _note(call, version, started)
            with telemetry.span(note):
                telemetry.finished(note, state, result, call.arguments)

    async def _call(
        self,
        call: Call,
        state: ClientState,
        note: CallNote | None,
        meta: Mapping[str, Any] | None,
        on_progress: ProgressFn | None,
        version: str,
        answers: Mapping[str, Any] | None,
        reserve: int,
    ) -> dict[str, Any]:
        if call.problem is not None:
            return _refused(note, "invalid", call.problem, call.noted)
        epoch, name, arguments = call.epoch, call.name, call.arguments
        if call.server is None and epoch.declares(name):
            if name == "tool_search":
                if epoch is self.epoch:  # bound first, as a gated call is (a grant is the epoch's)
                    await state.enter(epoch.identity)
                return await self.tool_search(epoch, arguments or {}, state, note, reserve)
            if name == "artifact_read":
                return await self.artifact_read(arguments or {}, state, reserve)
        return await self._gated(
            epoch, name, arguments, state, meta, on_progress, version, answers, note, reserve, call.wrapped
        )

    async def _gated(
        self,
        epoch: Epoch,
        name: str,
        arguments: Mapping[str, Any] | None,
        state: ClientState,
        meta: Mapping[str, Any] | None,
        on_progress: ProgressFn | None,
        version: str,
        answers: Mapping[str, Any] | None = None,
        note: CallNote | None = None,
        reserve: int = 0,
        wrapped: bool = False,
    ) -> dict[str, Any]:
        entry = epoch.catalog.get(name)
        joining = None if entry is None else self.downstreams.get(entry.server)
        if joining is not None and joining.joining():
            # A warm start's catalog, its server not up yet, or up but not yet taken in: wait
            # for it, then gate the call with what the gateway knows once it is (under a lock,
            # whether the live tool still matches the approved one).
            await joining.started()
            if self.epoch is not None and self.epoch is not epoch:
                epoch = self.epoch
                entry = epoch.catalog.get(name)
        if entry is not None and entry.server not in self.downstreams:
            # An epoch published before a reload removed its server (the reload swaps the
            # servers first and publishes the next epoch after a rebuild), before the call or
            # while it waited for the server: no server to run it.
            return _refused(note, "unknown", _removed(name, entry.server))
        if entry is not None and not self.settled.is_set() and name not in epoch.lock_refusals:
            if not _still_lists(self.downstreams[entry.server], entry.original):
                # A warm start's catalog has it, but its server, up now, no longer lists it (the
                # barrier's epoch removes it): refused here, not sent to a server that lacks it.
                # (Under a lock, the lock's refusal says so, and how to approve it.)
                why = f"Tool {name!r} is no longer available: server {entry.server!r} no longer lists it."
                return _refused(note, "unknown", why)
        if entry is None and not self.settled.is_set() and name not in epoch.lock_refusals:
            # Not in a warm start's catalog: the barrier may still bring it, or say which
            # server is down (the answer a cold start gives).
            await self.settled.wait()
            epoch = self.epoch or epoch
            entry = epoch.catalog.get(name)
        if entry is None:
            if name in epoch.lock_refusals:
                return _refused(note, "lock", epoch.lock_refusals[name])
            if name in self.removed:
                return _refused(
                    note, "unknown", f"Tool {name!r} is no longer available: the catalog changed and it was removed."
                )
            why = f"Unknown tool {_as_given(name)!r}: it is not in this gateway's catalog."
            return _refused(note, "unknown", why + down_hint(self, name))
        refusal = self.why_refused(epoch, name)
        if refusal is not None:
            return _refused(note, "lock" if name in epoch.lock_refusals else "policy", refusal)
        if epoch.is_deferred(name) and not state.allows(name):
            if epoch is self.epoch:
                # Bound to this epoch first: a call that came in as it was published may run
                # before the publisher restored the client's activation (``--session``, a principal).
                await state.enter(epoch.identity)
            unreadable = await state.refresh()  # granted on another replica? (shared store)
            if unreadable is not None:
                return _refused(
                    note,
                    "activation",
                    f"Tool {name} may not run: its activation cannot be read from the state store "
                    f"({unreadable}); nothing is granted until it can.",
                )
            if not state.allows(name):
                return _refused(note, "activation", not_active(name))
        if arguments and None in arguments.values():
            dropped = unset_nulls(entry.declaration.get("inputSchema"), dict(arguments))
            if dropped:  # null for an optional, non-nullable argument: left out, as the model meant
                arguments = {k: v for k, v in arguments.items() if k not in dropped}
        problem = await argument_problem(epoch, name, arguments, self.validation, principal_key(state))
        if problem is not None and arguments:
            read = scalars_in_strings(entry.declaration.get("inputSchema"), dict(arguments))
            if read:  # "2" for an integer: read as the model meant, if then valid (as a lax server reads it)
                given = {**arguments, **read}
                if await argument_problem(epoch, name, given, self.validation, principal_key(state)) is None:
                    problem, arguments = None, given
        if problem is not None:
            return _refused(note, "arguments", problem)
        downstream = self.downstreams.get(entry.server)
        if downstream is None:  # removed by a reload while its arguments were validated (in a worker)
            return _refused(note, "unknown", _removed(name, entry.server))
        instances = self.instances
        if instances is not None and instances.serves(downstream):
            try:  # the caller's own process of the server (gateway/engine/instances.py)
                async with instances.held(downstream, principal_key(state)) as instance:
                    result = await call_tool(
                        instance, entry.original, arguments, meta=meta, on_progress=on_progress, answers=answers
                    )
            except DownstreamUnavailable as exc:
                return error_result(str(exc))
        else:
            result = await call_tool(
                downstream, entry.original, arguments, meta=meta, on_progress=on_progress, answers=answers
            )
        if is_input_required(result):
            return result  # not a result yet: the caller answers it (gateway/upstream/inputs.py)
        if self.spill.enabled:
            # Bound first: a huge result is then checked in its small, model-visible form.
            # The outputSchema as published: none with [spill] output_schemas = "omit", nor
            # through tool_call (the client checks tool_call's result against no schema).
            schema = None if wrapped else entry.declaration.get("outputSchema")
            try:
                bounded = await self.bound(result, state, schema, reserve)
                if note is not None and bounded is not result:
                    note.spilled, note.spilled_bytes = True, spilled_size(bounded)
                result = bounded
            except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
                # RecursionError: a result nested past what ``json`` writes (its parser took it).
                checked = _checked(result, version, entry.server, entry.original)
                if checked is not result:
                    return checked  # malformed: the check names the server
                # Well-formed but not boundable: never returned raw (fail closed).
                log.warning("[%s] %s: the result could not be bounded: %s", entry.server, quote(name), exc)
                return error_result(
                    f"Server {entry.server!r} answered tool {entry.original!r}, but the result could not be "
                    f"bounded for the model ({type(exc).__name__}); it is not shown."
                )
        return _checked(result, version, entry.server, entry.original)

    async def bound(
        self, result: dict[str, Any], state: ClientState, output_schema: Any, reserve: int = 0
    ) -> dict[str, Any]:
        """Bound the model-visible size, ``reserve`` included; spill the full output to the client's store."""
        spill = self.spill
        store = state.store

        def work() -> dict[str, Any]:
            handing = Handing(store) if store is not None else None
            bounded = bound_result(
                result,
                max_visible_bytes=spill.max_visible_bytes,
                max_artifact_bytes=spill.max_artifact_bytes,
                store=handing,
                output_schema=output_schema if isinstance(output_schema, dict) else None,
                reserve=reserve,
            )
            if bounded is not result and handing is not None:
                collect(handing.store, spill, handing.handed)
            return bounded

        if surely_within(result, spill.max_visible_bytes // 8):
            return result  # far below the ceiling (an upper bound over every field): skip the thread hop
        return await self._in_thread(state, work)

    async def _in_thread(self, state: ClientState, work: Callable[[], T]) -> T:
        """``work`` in a worker thread, in one of ``state``'s principal's ``THREADS_PER_PRINCIPAL``."""
        async with self.threads.held(principal_key(state)):
            return await anyio.to_thread.run_sync(work)

    async def artifact_read(self, arguments: Mapping[str, Any], state: ClientState, reserve: int = 0) -> dict[str, Any]:
        store = state.store
        if store is None:
            return error_result("artifact_read: no artifact store (spilling is disabled or the store is unusable).")
        try:
            ceiling = self.spill.max_visible_bytes
            answer = await self._in_thread(
                state, lambda: artifact_read(store, arguments, max_visible_bytes=ceiling, reserve=reserve)
            )
        except (ArtifactNotFound, ValueError) as exc:
            return error_result(f"artifact_read: {_message(exc)}")
        except OSError as exc:
            return error_result(f"artifact_read: cannot read the artifact ({exc.strerror or 'I/O error'}).")
        return text_result(answer)

    def why_refused(self, epoch: Epoch, name: str) -> str | None:
        """The catalog lock, then policy: why this resolved tool may not run, or None. Checked
        before activation, which a shared store may have to be asked for: a refused tool costs
        no store round trip, and its answer is its refusal even while the store is down."""
        if name in epoch.lock_refusals:
            return epoch.lock_refusals[name]
        identities = epoch.catalog.by_name[name].identities
        for pattern in self.policy.deny:
            matched = next((n for n in identities if matches(n, pattern)), None)
            if matched == name:
                return f"Tool {name} is denied by policy (deny pattern {pattern!r})."
            if matched is not None:
                return (
                    f"Tool {name} is denied by policy (deny pattern {pattern!r} matches its identity {quote(matched)})."
                )
        if self.policy.read_only:
            annotations = epoch.catalog.by_name[name].declaration.get("annotations")
            if not (isinstance(annotations, dict) and annotations.get("readOnlyHint") is True):
                return f"Tool {name} is refused by policy: read_only = true allows only tools with readOnlyHint."
        return None

    async def tool_search(
        self,
        epoch: Epoch,
        arguments: Mapping[str, Any],
        state: ClientState,
        note: CallNote | None = None,
        reserve: int = 0,
    ) -> dict[str, Any]:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return error_result("tool_search: arguments.query must be a non-empty string.")
        if len(query) > MAX_QUERY:
            return error_result(f"tool_search: arguments.query is longer than {MAX_QUERY} characters.")
        unknown = sorted(set(arguments) - _SEARCH_ARGUMENTS)
        if unknown:
            return error_result(f"tool_search: unknown argument(s): {_line(', '.join(map(quote, unknown)))}.")
        page: dict[str, int] = {}
        for key, default in (("limit", DEFAULT_LIMIT), ("offset", 0)):
            given = arguments.get(key)  # null: left out, as the gate reads a catalog tool's
            value = default if given is None else whole_number(given)
            if value is None or (key == "offset" and value < 0):  # (a limit out of 1-50 is clamped)
                least = " of at least 0" if key == "offset" else ""
                return error_result(f"tool_search: arguments.{key} must be an integer{least}.")
            page[key] = value
        index = await epoch.searchable()
        result = index.query(query, page["limit"], page["offset"])
        deferred = [e.name for e in result.matches if epoch.is_deferred(e.name)]
        refused = [name for name in deferred if self.why_refused(epoch, name) is not None]
        candidates = [name for name in deferred if name not in refused]  # (a refused one is never granted)
        # Bounded as any result the model sees (the servers that are down included)
        spill, (down, *shorter) = self.spill, self.unavailable_lines()
        bound = (spill.max_visible_bytes if spill.enabled else DEFAULT_MAX_VISIBLE_BYTES) - reserve
        rendered = render(
            result, candidates, bound, size=text_result_size, extra=down, shorter=shorter, refused=refused
        )
        if rendered.too_long:  # a schema no page can hold: kept as an artifact the model reads
            where = await self._in_thread(state, lambda: self._keep_schemas(epoch, rendered.too_long, state))
            rendered = render(
                result,
                candidates,
                bound,
                size=text_result_size,
                extra=down,
                shorter=shorter,
                long_schemas=where,
                refused=refused,
            )
        grant = [n for n in rendered.shown_names if n in set(candidates)]
        try:
            granted = await state.activate(grant, epoch.identity)
        except OSError as exc:
            log.error("activation journal write failed: %s", exc.strerror or exc)
            # (a journal refused, as a symlink, another user's or not a directory, has no strerror:
            # its reason names host paths, said in the log alone)
            why = exc.strerror or "its journal cannot be used; the gateway's log says why"
            return error_result(f"tool_search could not record the activation ({why}); nothing was activated.")
        if not granted:
            return error_result(
                "tool_search: the tool catalog changed during the search; nothing was activated, search again."
            )
        if note is not None:
            note.granted = len(grant)
        return text_result(rendered.text)

    def _keep_schemas(self, epoch: Epoch, names: Sequence[str], state: ClientState) -> dict[str, str]:
        """Each named tool's input schema as an artifact of the client's (indented JSON, sorted
        keys, as a spilled structuredContent): name -> where the search result says it is."""
        where: dict[str, str] = {}
        handed: list[str] = []
        store = state.store if self.spill.enabled else None
        for name in names:
            schema = epoch.catalog.by_name[name].declaration.get("inputSchema", {"type": "object"})
            data = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False).encode("utf-8")
            kept, reason = retain([data], len(data), store, self.spill.max_artifact_bytes)
            handed += [kept] if kept is not None else []
            where[name] = (
                f'saved as artifact {kept}; read it with artifact_read {{"id": "{kept}"}}'
                if kept is not None
                else f"not retained: {reason}"
            )
        if store is not None and handed:
            collect(store, self.spill, handed)
        return where

    def unavailable_lines(self) -> list[str]:
        """A line naming the enabled servers that cannot be called now ("" when none), then
        shorter forms of it, for a search page it would leave no room for a match: naming half
        as many each time (the others counted), then none.

        Said in ``tool_search`` results (genuine new results), never in the catalog or the
        ``instructions``: those are the cached prefix, answered before any server has started."""
        down = sorted(
            (server_id, _UNAVAILABLE[d.status])
            for server_id, d in self.downstreams.items()
            if d.status in _UNAVAILABLE
        )
        if not down:
            return [""]
        listed = [f"{server_id} ({status})" for server_id, status in down]
        lines = [f"{_DOWN}: {', '.join(listed)}."]
        named = len(listed) // 2
        while named:
            lines.append(f"{_DOWN}: {', '.join(listed[:named])} and {len(listed) - named} more.")
            named //= 2
        lines.append(f"{_DOWN}: {plural(len(listed), 'server')}.")
        return lines


THREADS_PER_PRINCIPAL = 8
"""Worker threads one principal's results may hold at once (bounding, spilling, reading
artifacts): a store that stops answering (a hung Redis holds each for its timeouts and retry)
then holds these, and one principal's many large results wait behind their own while others'
calls keep the rest of the pool (anyio's, 40 threads)."""

_SEARCH_ARGUMENTS = frozenset(("query", "limit", "offset"))
_DOWN = "Servers not available now (their tools are missing or fail until they are back)"


_UNAVAILABLE = {"failed": "failed", "exited": "down", "restarting": "restarting", "late": "still starting"}
"""The statuses a ``tool_search`` result names, in the words it uses."""


def _note(call: Call, version: str, started: float | None) -> CallNote:
    """The telemetry of ``call``, its tool named as the catalog names it or ``UNKNOWN_TOOL``."""
    epoch = call.epoch
    server = call.server
    if server is None and call.name in epoch.lock_refusals:  # held back by the lock: still its server's
        server = next((p.server for p in epoch.pending if p.name == call.name), None)
    note = CallNote(call.name if epoch.knows(call.name) else UNKNOWN_TOOL, server, version)
    if started is not None:
        note.started = started
    return note


def _refused(note: CallNote | None, decision: Decision, text: str, noted: str | None = None) -> dict[str, Any]:
    """The gate's refusal, noted for telemetry (``gateway.engine.telemetry``) as ``noted`` when
    the client's text is quoted in it (no audit field carries a name a peer made up)."""
    if note is not None:
        note.refuse(decision, noted if noted is not None else text)
    return error_result(text)


def _message(exc: BaseException) -> str:
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return text


def _removed(name: str, server: str) -> str:
    """Why a call resolved in an epoch published before a reload removed its server is refused."""
    return f"Tool {name!r} is no longer available: its server {server!r} was removed from the config."


async def argument_problem(
    epoch: Epoch, name: str, arguments: Mapping[str, Any] | None, pool: ValidationPool, owner: object = None
) -> str | None:
    """The most relevant schema violation of ``arguments``, naming its path, or None.

    A tree-shaped schema is validated inline (its cost is bounded: see gateway.engine.validation);
    a referencing one in a worker process under the pool's time budget, in ``owner``'s share.
    """
    instance = {} if arguments is None else dict(arguments)
    try:
        validator, referencing = epoch.validator(name)
    except SchemaViolation as err:
        return f"Cannot validate arguments for {name}: its inputSchema does not compile ({_line(err.message)})."
    try:
        if referencing:
            found = await pool.violation(epoch.catalog.by_name[name].declaration["inputSchema"], instance, owner)
        else:
            found = violation(validator, instance)
    except ValidationTimeout:
        return f"Validation of arguments for {name} took longer than {pool.budget:g} s; the call was not forwarded."
    except (ValidationFailure, ValueError, TypeError, RecursionError, OverflowError) as exc:
        return f"Arguments for {name} could not be validated ({_line(str(exc))}); the call was not forwarded."
    if found is None:
        return None
    path, message = found
    return f"Invalid arguments for {name}: {json_path('arguments', path)}: {_line(message)}"


_MAX_MESSAGE = 300
_MAX_NAME_SHOWN = 200
"""Characters of an unknown tool name quoted back: every profile's names fit (at most 128)."""


def _as_given(name: str) -> str:
    """A name the client made up, cut to ``_MAX_NAME_SHOWN``: the refusal stays one short line
    however long the name sent."""
    return name if len(name) <= _MAX_NAME_SHOWN else name[: _MAX_NAME_SHOWN - 1] + "…"



def _line(text: str) -> str:
    """One bounded line: messages quote argument values, which can be huge or multi-line."""
    text = " ".join(text.split()) or "invalid"
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


_SHAPES: dict[tuple[str, str], TypeAdapter[Any]] = {}


def result_shape(version: str, method: str = "tools/call") -> TypeAdapter[Any]:
    """The protocol's result shape of ``method`` in ``version`` (``KeyError`` for an unknown
    one): what the SDK's ``validate_server_result`` checks, without the dump it also makes.

    Without the 2026-07-28 row's ``input_required`` arm: such a result never gets here (the
    caller answers it, ``_gated``), and that arm's wire model (every field optional, any text
    a ``resultType``) passes any object with a ``resultType``, which the SDK client's own
    model then refuses: a malformed result would reach a 2026-07-28 client unchecked."""
    shape = _SHAPES.get((method, version))
    if shape is None:
        row = SERVER_RESULTS[(method, version)]
        arms = [arm for arm in get_args(row) or (row,) if arm.__name__ != InputRequiredResult.__name__]
        shape = _SHAPES[(method, version)] = TypeAdapter[Any](cast(Any, functools.reduce(operator.or_, arms)))
    return shape


def _checked(result: dict[str, Any], version: str, server: str, tool: str) -> dict[str, Any]:
    """Refuse a malformed downstream result here, where we can still name the server."""
    candidate = result
    modern = version in MODERN_PROTOCOL_VERSIONS
    if modern and "resultType" not in result:
        candidate = {**result, "resultType": "complete"}  # a handshake-era server's result
    if plain_text_result(candidate, modern):
        return result
    try:
        result_shape(version).validate_python(candidate, by_name=False)
    except (ValidationError, KeyError, ValueError) as exc:
        detail = exc.errors()[0].get("msg", "invalid") if isinstance(exc, ValidationError) else str(exc)
        log.warning("server %s returned an invalid result for %s: %s", server, quote(tool), escape(detail))
        return error_result(f"Server {server!r} returned an invalid result for tool {tool!r}: {detail}")
    return result


def _still_lists(downstream: Downstream, tool: str) -> bool:
    """Whether the server's own listing has ``tool`` (its original name); True while it has
    given none (the warm-start record's lists stand for it)."""
    return downstream.source != "live" or any(isinstance(t, dict) and t.get("name") == tool for t in downstream.tools)


def down_hint(router: Router, name: str) -> str:
    """For an unknown name: the server that would offer it but is not connected, and why
    (a server that needs ``prefixgate login`` has never listed its tools; the model and
    the user learn the command from the call instead of a bare "unknown")."""
    waiting = [
        d
        for d in router.downstreams.values()
        if d.status not in ("ready", "disabled") and d.error and d.config.prefix and name.startswith(d.config.prefix)
    ]
    if not waiting:
        return ""
    server = max(waiting, key=lambda d: len(d.config.prefix))
    return f" Server {server.id!r}, which may offer it, is not connected: {server.error}"
