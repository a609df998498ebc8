"""Warm start: publish the last verified catalog at once, and keep the record of each verified one.

The record (``catalog.warm``) holds what every server contributed and the answers the
gateway gave, under the key of everything that determines the catalog
(``gateway.launch``). At start, ``serve`` seeds each server with its recorded lists and
publishes the epoch they build, once it is byte-identical to the record's fingerprint;
the discovery barrier then runs behind it (``Publisher.first_epoch`` compares). After every
verified build the record is written again: a server that is ready contributes what it
lists now; one that is not keeps its recorded lists for :data:`catalog.warm.MAX_MISSED`
starts in a row (one failed start never writes a server out of the catalog).

Records live in ``<state_dir>/warm`` (``gateway.state.warmrecords``), where the stdio
start reads them before anything heavy is imported, and, with a shared store, in Redis
too, so a new replica starts warm.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import anyio.to_thread

from catalog.budget import DecisionError
from catalog.lock import Lock
from catalog.text import plural
from catalog.warm import MAX_RECORD_BYTES, Answer, Contribution, Record, carried, encode_record, record_key
from gateway.config import Config
from gateway.downstream.connection import Downstream
from gateway.engine.checks import CheckCache
from gateway.engine.epoch import Epoch, build_epoch, server_tools
from gateway.launch import launch_identity, read_lock_bytes
from gateway.state.store import StateStore
from gateway.state.warmrecords import FILES, decoded, load_record, write_record

log = logging.getLogger("prefixgate.warm")

Capture = Callable[[], Awaitable[list[Answer]]]
"""The gateway's own answers for the epoch it serves now (``gateway.upstream.answers``)."""


def current_key(config: Config) -> str | None:
    """The record key of this config and its lock as they are now; None when no warm start is
    possible (warm starts are off, or a lock is there but cannot be read)."""
    if not config.gateway.warm_start:
        return None
    usable, lock = read_lock_bytes(config)
    return record_key(launch_identity(config, lock)) if usable else None


def contribution(d: Downstream) -> Contribution:
    return Contribution(d.tools, d.resources, d.templates, d.prompts, dict(d.capabilities))


class WarmRecords:
    """The record of one gateway's launch identity: loaded at start, written after each verified build."""

    def __init__(self, config: Config, store: StateStore | None, *, enabled: bool = True) -> None:
        self.config = config
        self.store = store
        self.enabled = enabled and config.gateway.warm_start
        self.record: Record | None = None
        """The record this start was seeded from (None: a cold start)."""
        self.seeded: dict[str, Contribution] = {}
        self._written: bytes | None = None
        """What this process last wrote (or loaded): an unchanged record is not written again."""
        self._lock = anyio.Lock()

    @property
    def written(self) -> bool:
        """A record of this config is in place: written by this process, or found on disk."""
        return self._written is not None

    async def find(self, key: str, *, files: bool = True) -> Record | None:
        """The record of ``key``: the file under ``state_dir`` (unless ``files`` is False: read
        already), else the shared store's."""
        record = await anyio.to_thread.run_sync(load_record, self.config.gateway.state_dir, key) if files else None
        if record is None and self.store is not None and self.store.shared:
            try:
                data = await self.store.warm_record(key)
            except OSError as exc:
                log.warning("warm-start record not read from the state store: %s", exc.strerror or exc)
                data = None
            if data is not None:
                record = decoded(data, key, self.store.kind)
        return record

    def seed(self, record: Record, downstreams: Sequence[Downstream]) -> None:
        """Give each server its recorded lists until it lists its own (``Downstream.remember``)."""
        self.record = record
        self.seeded = record.servers()
        if record.where == FILES:
            self._written = record.data  # on disk already: the same record is not written again
        for d in downstreams:
            recorded = self.seeded.get(d.id)
            if recorded is not None and d.config.enabled:
                d.remember(recorded)

    def contributions(self, downstreams: Sequence[Downstream]) -> tuple[dict[str, Contribution], list[str]]:
        """What the next record holds per server, and the servers it leaves out for good."""
        kept: dict[str, Contribution] = {}
        dropped: list[str] = []
        for d in downstreams:
            if not d.config.enabled:
                continue
            if d.source == "live":
                kept[d.id] = contribution(d)
            elif d.id in self.seeded:
                still = carried(self.seeded[d.id])
                if still is None:
                    dropped.append(d.id)
                else:
                    kept[d.id] = still
        return kept, dropped

    async def save(
        self,
        downstreams: Sequence[Downstream],
        published: Epoch,
        checks: CheckCache,
        capture: Capture | None,
        lock: Lock | None,
        lock_bytes: bytes | None,
        *,
        served: bool = True,
    ) -> None:
        """Write the record of the catalog a start with this config would publish now.

        ``published`` is the epoch clients are served now; ``lock`` (and its file's bytes)
        the lock a ``serve`` runs under. ``served``: ``published`` was built under that same
        lock (``serve``, ``catalog``), so when no server is left out the record's catalog is
        ``published`` itself and the gateway's own answers to it are captured (``capture``);
        otherwise the record's catalog is built here and the record holds no answers (the
        next start rebuilds before it answers).
        """
        if not self.enabled:
            return
        async with self._lock:
            try:
                await self._write(downstreams, published, checks, capture, (lock, lock_bytes), served)
            except Exception as exc:  # noqa: BLE001 - a record not written costs the next start's speed only
                log.warning("warm-start record not written: %s", exc)

    async def _write(
        self,
        downstreams: Sequence[Downstream],
        published: Epoch,
        checks: CheckCache,
        capture: Capture | None,
        under: tuple[Lock | None, bytes | None],
        served: bool,
    ) -> None:
        lock, lock_bytes = under
        config = self.config
        servers, dropped = self.contributions(downstreams)
        epoch = published
        if dropped or not served:  # (built, and encoded below, in worker threads: thousands of tools hold a loop up)
            built = await anyio.to_thread.run_sync(_record_epoch, config, servers, checks, lock)
            if built is None:
                return
            epoch = built
        answers: list[Answer] = []
        if capture is not None and published.same_for_clients(epoch):
            answers = await capture()
        key = record_key(launch_identity(config, lock_bytes))
        data = await anyio.to_thread.run_sync(encode_record, key, epoch.fingerprint, servers, answers)
        if len(data) > MAX_RECORD_BYTES:
            log.info("warm-start record not written: %d bytes, over the %d-byte limit", len(data), MAX_RECORD_BYTES)
            return
        if data == self._written:
            return
        for server_id in dropped:
            log.warning(
                "warm-start record: server %r has not been ready in %d starts in a row; the next start "
                "publishes without its tools (they return when it does)",
                server_id,
                self.seeded[server_id].missed + 1,
            )
        await anyio.to_thread.run_sync(write_record, config.gateway.state_dir, key, data)
        if self.store is not None and self.store.shared:
            try:
                await self.store.put_warm_record(key, data)
            except OSError as exc:
                log.warning("warm-start record not shared through the state store: %s", exc.strerror or exc)
        self._written = data
        log.info(
            "warm-start record written: fingerprint %s, %s, %s",
            epoch.fingerprint[:16],
            plural(len(servers), "server"),
            plural(len(answers), "answer"),
        )


def _record_epoch(
    config: Config, servers: Mapping[str, Contribution], checks: CheckCache, lock: Lock | None
) -> Epoch | None:
    listed = [
        server_tools(s, servers[s.id].tools, servers[s.id].capabilities)
        for s in config.servers
        if s.enabled and s.id in servers
    ]
    try:
        return build_epoch(config, listed, checks, lock, frozenset(servers))
    except DecisionError:
        return None


def warm_epoch(config: Config, record: Record, checks: CheckCache, lock: Lock | None) -> Epoch | None:
    """The epoch the record's contributions build, if it is byte-identical to what the record
    says was published; None (with one log line) otherwise."""
    epoch = _record_epoch(config, record.servers(), checks, lock)
    if epoch is None or epoch.fingerprint != record.fingerprint:
        log.warning(
            "warm-start record ignored: its servers' lists build fingerprint %s, not the recorded %s",
            epoch.fingerprint[:16] if epoch is not None else "(no plan fits)",
            record.fingerprint[:16],
        )
        return None
    return epoch
