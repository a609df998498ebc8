"""The gateway's Prometheus metrics (``prometheus-client``, its own registry, text format).

Two kinds: what calls count as they finish (``Metrics.call``), and what is read from the
running gateway when scraped (servers, catalogs, waiting round trips, the audit log's
losses: ``Gauges``). Every label value is bounded by the config: server ids, catalog tool
names (a name outside the catalog is ``(unknown)``; past ``MAX_CALL_SERIES`` label sets, a
new one is ``(other)``), profile names, the gate's reasons, the protocol versions the SDK
accepts. Never an argument, a token or an id a peer chose.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.engine.telemetry import CallNote
from spill.store import list_artifacts

if TYPE_CHECKING:
    from gateway.state.audit import AuditLog

Hubs = Callable[[], Sequence[Any]]
"""Every profile's hub (``gateway.engine.hub.Hub``, not imported: it imports the router, which
counts into these metrics), the first one first."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATUSES = ("starting", "ready", "failed", "late", "disabled", "exited", "restarting")
MAX_CALL_SERIES = 10_000
"""Label sets of ``prefixgate_tool_calls`` kept. A server that renames its tools at every change
would otherwise add series for as long as the process lives (a name called once stays); past
this many, a call to a tool not yet counted is counted under ``OTHER_TOOLS``."""
OTHER_TOOLS = "(other)"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The registry of one gateway process (every profile it serves)."""

    def __init__(self, max_call_series: int = MAX_CALL_SERIES) -> None:
        self.max_call_series = max_call_series
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.calls = Counter(
            "prefixgate_tool_calls",
            "Tool calls by profile, server, tool, protocol version and outcome (ok, error, refused, "
            "input_required, cancelled) with the gate's reason for a refusal.",
            ("profile", "server", "tool", "version", "outcome", "reason"),
            registry=r,
        )
        self.latency = Histogram(
            "prefixgate_tool_call_duration_seconds",
            "Time from a tools/call reaching the gate to its answer, by server (refusals included).",
            ("server",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.spills = Counter(
            "prefixgate_spills",
            "Results bounded to the visible limit, the full output kept as artifacts.",
            ("server",),
            registry=r,
        )
        self.spilled_bytes = Counter(
            "prefixgate_spilled_bytes",
            "Size of the results that were bounded, as the client would have been sent them.",
            ("server",),
            registry=r,
        )
        self.searches = Counter("prefixgate_tool_searches", "tool_search calls.", ("profile",), registry=r)
        self.grants = Counter(
            "prefixgate_tool_activations", "Tools activated by tool_search.", ("profile",), registry=r
        )
        self._calls: dict[tuple[str, ...], Any] = {}
        self._latencies: dict[str, Any] = {}
        """Each call's children of ``calls`` and ``latency``, found once per label values
        (``labels`` checks and locks on every call): as many as the registry holds, whose
        labels are bounded (the catalog's tools, one name for every unknown one)."""
        self.epochs = Counter(
            "prefixgate_epochs",
            "Catalog epochs published (each is a prompt-cache miss for every agent), by profile and reason.",
            ("profile", "reason"),
            registry=r,
        )

    def call(self, profile: str | None, note: CallNote, outcome: str, seconds: float) -> None:
        server = note.server or ""
        reason = note.decision if note.decision != "allowed" else ""
        key = (profile or "default", server, note.tool, note.version, outcome, reason)
        counter = self._calls.get(key)
        if counter is None and len(self._calls) >= self.max_call_series:
            key = (*key[:2], OTHER_TOOLS, *key[3:])
            counter = self._calls.get(key)
        if counter is None:
            counter = self._calls[key] = self.calls.labels(*key)
        counter.inc()
        timer = self._latencies.get(server)
        if timer is None:
            timer = self._latencies[server] = self.latency.labels(server)
        timer.observe(seconds)
        if note.spilled:
            self.spills.labels(server).inc()
            self.spilled_bytes.labels(server).inc(note.spilled_bytes)
        if note.tool == "tool_search" and not note.server:
            self.searches.labels(profile or "default").inc()
            if note.granted:
                self.grants.labels(profile or "default").inc(note.granted)

    def epoch(self, profile: str | None, why: str) -> None:
        self.epochs.labels(profile or "default", epoch_reason(why)).inc()

    def watch(self, hubs: Hubs, audit: AuditLog | None, artifacts: Path | None) -> None:
        """Read the running gateway at each scrape (``hubs``: every profile's hub, the first one
        first; ``artifacts``: the file store's artifact directory, None for another store).
        Called on the gateway's event loop: the scrapes read the hubs there."""
        self.registry.register(Gauges(hubs, audit, artifacts))

    def text(self) -> bytes:
        """The exposition (blocking: a scrape reads the artifact directory at most every
        ``DISK_TTL`` seconds; call it off the event loop)."""
        return generate_latest(self.registry)


def epoch_reason(why: str) -> str:
    """A published epoch's reason as one of a few label values."""
    for start, kind in (
        ("the discovery barrier", "barrier"),
        ("warm start", "warm_start"),
        ("catalog lock", "lock"),
        ("lock file ", "lock"),
        ("config reload", "reload"),
    ):
        if why.startswith(start):
            return kind
    if why.startswith("server ") and "changed its tools" in why:
        return "server_changed"
    if why.startswith("server ") and why.endswith("is ready"):
        return "server_ready"
    return "other"


DISK_TTL = 30.0
"""Seconds the artifact directory's count and size are reused between scrapes."""


class Gauges(Collector):
    """What is read from the gateway when scraped."""

    def __init__(self, hubs: Hubs, audit: AuditLog | None, artifacts: Path | None) -> None:
        self._hubs = hubs
        self._audit = audit
        self._artifacts = artifacts
        self._disk: tuple[float, int, int] | None = None
        """When the artifact directory was last read, its artifacts and their bytes."""
        try:
            self._loop: anyio.lowlevel.EventLoopToken | None = anyio.lowlevel.current_token()
        except RuntimeError:  # (made outside an event loop: nothing runs beside the scrape)
            self._loop = None
        self._loop_thread = threading.get_ident()
        """The event loop the hubs belong to, and its thread."""

    def _on_disk(self) -> tuple[int, int] | None:
        if self._artifacts is None:
            return None
        now = time.monotonic()
        if self._disk is None or now - self._disk[0] >= DISK_TTL:
            try:
                found = list_artifacts(self._artifacts)
            except OSError:
                return None
            self._disk = (now, len(found), sum(a.size for a in found))
        return self._disk[1], self._disk[2]

    def describe(self) -> Iterable[Metric]:
        return []  # collected on each scrape only (the registry must not call collect at registration)

    def collect(self) -> Iterable[Metric]:
        live = self._on_loop()
        if live is None:
            return
        yield from live
        disk = self._on_disk()
        if disk is not None:
            yield GaugeMetricFamily("prefixgate_artifacts", "Artifacts kept on disk.", value=float(disk[0]))
            yield GaugeMetricFamily(
                "prefixgate_artifact_bytes", "Bytes of the artifacts on disk.", value=float(disk[1])
            )
        if self._audit is not None:
            lost = CounterMetricFamily(
                "prefixgate_audit_lines_lost", "Audit lines not written, by why.", labels=("why",)
            )
            lost.add_metric(("queue_full",), float(self._audit.dropped))
            lost.add_metric(("write_failed",), float(self._audit.failed))
            yield lost

    def _on_loop(self) -> list[Metric] | None:
        """``_live``, run on the event loop. A scrape is rendered in a thread (``/metrics`` of
        ``serve --http`` in a worker, the metrics listener in its own), but the hubs change on
        the loop between any two of the thread's steps: a server's instances start and stop
        (``OrderedDict mutated during iteration``), a reload replaces the servers' list in place
        (a snapshot half old, half new). On the loop, the read is one consistent snapshot."""
        if self._loop is None or threading.get_ident() == self._loop_thread:
            return self._live()
        try:
            return anyio.from_thread.run_sync(self._live, token=self._loop)
        except anyio.RunFinishedError:  # (the gateway is exiting: nothing left to read)
            return None

    def _live(self) -> list[Metric] | None:
        """What the hubs hold now (None: no hub)."""
        hubs = self._hubs()
        if not hubs:
            return None
        first = hubs[0]
        found: list[Metric] = []
        status = GaugeMetricFamily(
            "prefixgate_server_status", "1 for each server's current status.", labels=("server", "status")
        )
        restarts = CounterMetricFamily("prefixgate_server_restarts", "Restarts of each server.", labels=("server",))
        for d in first.downstreams:
            for name in STATUSES:
                status.add_metric((d.id, name), 1.0 if d.status == name else 0.0)
            restarts.add_metric((d.id,), float(d.restarts))
        found += (status, restarts)
        instances = GaugeMetricFamily(
            "prefixgate_server_instances",
            'Processes running for one principal each, per server with instances = "per-principal".',
            labels=("server",),
        )
        for d in first.downstreams:
            if d.config.instances == "per-principal":
                instances.add_metric((d.id,), float(len(first.instances.running(d.id))))
        found.append(instances)
        info = InfoMetricFamily("prefixgate_catalog", "The catalog each profile publishes.", labels=("profile",))
        tools = GaugeMetricFamily(
            "prefixgate_catalog_tools",
            "Tools each profile publishes, declared or deferred.",
            labels=("profile", "kind"),
        )
        for hub in hubs:
            epoch = hub.router.epoch
            if epoch is None:
                continue
            profile = hub.config.profile or "default"
            info.add_metric((profile,), {"fingerprint": epoch.fingerprint, "mode": epoch.decision.mode})
            deferred = len(epoch.decision.deferred_names)
            tools.add_metric((profile, "deferred"), float(deferred))
            tools.add_metric((profile, "declared"), float(len(epoch.catalog.entries) - deferred))
        found += (info, tools)
        found.append(
            GaugeMetricFamily(
                "prefixgate_round_trips_waiting",
                "Calls of 2026-07-28 clients waiting for the client's input.",
                value=float(len(first.round_trips)),
            )
        )
        clients = GaugeMetricFamily(
            "prefixgate_client_sessions", "Handshake-era client sessions connected, by profile.", labels=("profile",)
        )
        for hub in hubs:
            clients.add_metric((hub.config.profile or "default",), float(len(hub.clients.connected)))
        found.append(clients)
        counts = getattr(first.store, "counts", None)
        if counts is not None:
            operations = CounterMetricFamily(
                "prefixgate_store_operations",
                "State store operations (activation records, warm-start records, artifacts' retention, health) "
                "by operation and outcome.",
                labels=("store", "operation", "outcome"),
            )
            for (operation, outcome), count in sorted(counts.items()):
                operations.add_metric((first.store.kind, operation, outcome), float(count))
            found.append(operations)
        return found
