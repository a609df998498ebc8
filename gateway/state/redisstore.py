"""The Redis (or Valkey) store: state shared by every gateway replica that names the same URL.

Keys (``prefixgate:`` then the owner's key, a SHA-256 hex: never a principal or a session id):

- ``prefixgate:<owner>:activation``: the owner's last activation record (the bytes
  ``catalog.activation`` writes); replaced only by compare-and-set (a Lua script), so two
  replicas granting at once both end up in the record instead of one overwriting the other.
- ``prefixgate:<owner>:artifact:<id>``: one artifact's bytes, expiring after ``max_age_days``.
  It is written in pieces under ``prefixgate:<owner>:partial:<random>`` (itself expiring, so an
  abandoned write vanishes; a piece is written only onto all the pieces before it, so a
  partial evicted mid-write fails the write instead of coming back zero-filled) and published
  by one Lua script that renames it and indexes it: a reader sees a whole artifact or none.
- ``prefixgate:artifacts`` (sorted set ``<owner>/<id>`` by time) and
  ``prefixgate:artifact-sizes`` (hash): retention by total size across the whole store.
- ``prefixgate:warm:<key>``: the warm-start record of a launch identity (``catalog.warm``),
  expiring 30 days after its last write.
- ``prefixgate:integrity-key``: the HMAC key of input round trips, set once (``SET NX``) by
  the first replica, and put back by every grant if a Redis restarted without persistence.

Two clients from one URL: ``redis.asyncio`` on the event loop (activation, the key, health),
and redis-py's blocking client for artifacts, because spilling and ``artifact_read`` are
blocking code that already runs in worker threads (as file I/O does). Both have socket and
connect timeouts, so no call waits forever, and one retry on a fresh connection when a
connection was closed (a pooled connection from before a Redis restart fails once; that retry
is the reconnect), none after a timeout (``_RETRIED``). Every
write is safe to repeat: pieces go to their offset (``SETRANGE``), the record is a
compare-and-set, publishing refuses a second run.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import anyio.to_thread
import redis
import redis.asyncio
import redis.asyncio.retry
import redis.exceptions
import redis.retry
from redis.backoff import NoBackoff

from catalog.warm import MAX_RECORD_BYTES
from gateway.config import env_number
from gateway.redact import redact_url
from gateway.state.store import StoreHealth, StoreUnavailable
from spill import ArtifactInfo, ArtifactNotFound, Artifacts, StoreError, artifact_not_found, new_id, valid_id
from spill.retention import doomed

PREFIX = "prefixgate:"
INDEX = PREFIX + "artifacts"
SIZES = PREFIX + "artifact-sizes"
KEY = PREFIX + "integrity-key"
TIMEOUT = env_number("PREFIXGATE_STORE_TIMEOUT", 5.0)
"""Seconds any one Redis command (or connecting) may take before it fails."""
PARTIAL_TTL = 3600
"""Seconds an unfinished artifact write is kept (a replica that died mid-write leaves nothing)."""
WARM_TTL = 30 * 86400
"""Seconds a warm-start record is kept after its last write (each config change leaves one)."""
LONGEST_TTL = 1000 * 365 * 86400
"""Seconds past which an artifact is given no expiry: a ``max_age_days`` longer than this (or
``inf``) means never, and Redis's EXPIRE refuses what overflows its clock."""
PROTECT_SECONDS = 60.0
"""An owner's artifact younger than this survives its own retention pass (its id was just handed out)."""
COPIES_BYTES = 32 << 20
"""Memory for copies of artifacts read lately (one process, all principals)."""
_PIECE = 1 << 20
_UNAVAILABLE = "store unavailable"
_FULL = "store full: Redis refused the write (out of memory: its maxmemory, with noeviction)"
_VANISHED = "cannot write artifact: its partial write vanished (evicted, or Redis restarted)"
_ERRORS = (redis.exceptions.RedisError, OSError)
log = logging.getLogger("prefixgate.store")

_SET_IF = """
redis.call('SET', KEYS[2], ARGV[3], 'NX')
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""
"""Compare-and-set of an activation record: KEYS record, integrity key; ARGV previous, new, our key.
Each grant also puts back the integrity key if Redis lost it (restarted without persistence), so
a replica started afterwards adopts the running replicas' key instead of making another."""

_PIECE_AT = """
if redis.call('STRLEN', KEYS[1]) < tonumber(ARGV[1]) then return 0 end
redis.call('SETRANGE', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
"""Write one piece of a partial at its offset: KEYS partial; ARGV offset, bytes, expiry. Only onto
every byte before it (0: the partial is gone). A plain SETRANGE on a partial that Redis evicted
mid-write (a ``volatile-*`` policy takes it first: it expires soonest) or lost in a restart
made a new key padded with NUL bytes, published as the artifact. Safe to repeat, as SETRANGE is.
Each piece sets the expiry: a partial never exists without one, whatever part of a pipeline
Redis ran before the writer gave up on it."""

_PUBLISH = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('PERSIST', KEYS[2])
elseif tonumber(ARGV[3]) > 0 then
  return -1
else
  redis.call('SET', KEYS[2], '')
end
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
return 1
"""
"""Publish a finished artifact: KEYS partial, final, index, sizes; ARGV member, time, size, ttl.
Never overwrites: an existing id returns 0 (the caller picks another); a partial that is gone
(expired, or published by an attempt whose reply was lost) returns -1."""


def _bytes(value: Any) -> bytes:
    """A reply as bytes (the clients decode nothing: ``decode_responses`` is off)."""
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _record_key(owner: str) -> str:
    return f"{PREFIX}{owner}:activation"


def _warm_key(key: str) -> str:
    return f"{PREFIX}warm:{key}"


def _artifact_key(owner: str, artifact_id: str) -> str:
    return f"{PREFIX}{owner}:artifact:{artifact_id}"


def _ttl(max_age_seconds: float) -> int:
    """An artifact key's expiry in seconds; 0: none (no age limit, or one past ``LONGEST_TTL``).
    ``inf`` raised OverflowError, and an age past Redis's clock failed EXPIRE inside the publish
    script after its RENAME, leaving the artifact unindexed and never expiring, on every spill."""
    if not 0 < max_age_seconds <= LONGEST_TTL:
        return 0
    return max(1, int(max_age_seconds))


def _out_of_memory(exc: BaseException) -> bool:
    """Redis refused a write for its ``maxmemory`` (``noeviction``): a command's own ``-OOM``
    error, or one a script's call met (a pipeline wraps it in a ResponseError's text)."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or (
        isinstance(exc, redis.exceptions.ResponseError) and "-OOM command not allowed" in str(exc)
    )


_RETRIED = (redis.exceptions.ConnectionError,)
"""What one retry on a fresh connection is for: a pooled connection that a Redis restart
closed. Not a timeout: a Redis that does not answer (paused, hung, a network black hole)
would not answer the retry either, and retrying one doubled every wait for it (10 s for a
grant, a read of a grant, a new principal's first request)."""


def _options(timeout: float, retry: Any) -> dict[str, Any]:
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry": retry}


class _Failing:
    """Turn any client error into StoreUnavailable naming the store (password masked)."""

    def __init__(self, where: str, url: str, timeout: float) -> None:
        self.where, self.url, self.timeout = where, url, timeout
        self.timed_out_at = -math.inf
        """When (monotonic) a command last waited its whole timeout for an answer."""

    def note(self, exc: BaseException) -> None:
        if isinstance(exc, redis.exceptions.TimeoutError):
            self.timed_out_at = time.monotonic()

    def unanswered_lately(self) -> bool:
        """Whether a command timed out within the last timeout: Redis is not answering now."""
        return time.monotonic() - self.timed_out_at < self.timeout

    def error(self, exc: BaseException) -> StoreUnavailable:
        self.note(exc)
        reason = redact_url(str(exc) or type(exc).__name__, self.url)
        return StoreUnavailable(f"store unavailable: Redis at {self.where}: {' '.join(reason.split())}")


class RedisArtifacts:
    """One owner's artifacts in Redis, blocking (for spill's worker threads)."""

    def __init__(
        self, client: redis.Redis, owner: str, max_age: Callable[[], float], failing: _Failing, copies: _Copies
    ) -> None:
        """``max_age``: the store's age for new artifacts in seconds, read at each write (a
        principal's artifacts are opened once; a reload may change the age since)."""
        self.client, self.owner, self.max_age, self._failing = client, owner, max_age, failing
        self._copies = copies
        self._publish = client.register_script(_PUBLISH)
        self._piece_at = client.register_script(_PIECE_AT)

    def __repr__(self) -> str:
        return f"RedisArtifacts({self._failing.where!r}, {self.owner!r})"

    def put_chunks(self, chunks: Iterable[bytes | memoryview]) -> str:
        """Write the pieces under a partial key, then publish it whole; StoreError if not kept."""
        partial = f"{PREFIX}{self.owner}:partial:{secrets.token_urlsafe(12)}"
        size = 0
        try:
            pipe = self.client.pipeline(transaction=False)
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                for start in range(0, len(view), _PIECE):
                    piece = bytes(view[start : start + _PIECE])
                    self._piece_at(keys=[partial], args=[size, piece, PARTIAL_TTL], client=pipe)
                    size += len(piece)
                    if len(pipe) >= 8:  # (each piece sets the partial's expiry: _PIECE_AT)
                        if not all(pipe.execute()):
                            raise StoreError(_VANISHED)
            if not all(pipe.execute()):
                raise StoreError(_VANISHED)
            ttl = _ttl(self.max_age())
            for _ in range(16):
                artifact_id = new_id()
                member = f"{self.owner}/{artifact_id}"
                keys = [partial, _artifact_key(self.owner, artifact_id), INDEX, SIZES]
                published = self._publish(keys=keys, args=[member, repr(time.time()), size, ttl])
                if published == 1:
                    return artifact_id
                if published == -1:
                    raise StoreError(_VANISHED)
        except _ERRORS as exc:
            self._failing.note(exc)
            if not isinstance(exc, redis.exceptions.TimeoutError):  # (a Redis that does not answer
                with contextlib.suppress(*_ERRORS):  # would not answer this either: it expires)
                    self.client.delete(partial)
            if _out_of_memory(exc):  # (it answered: not "unavailable")
                raise StoreError(_FULL) from None
            # The log's line names Redis and what failed; the model's says only that.
            raise StoreError(str(self._failing.error(exc)), shown=_UNAVAILABLE) from None
        raise StoreError("cannot create artifact: no free id after repeated collisions")

    def _existing(self, artifact_id: str, command: Callable[[Any, str], Any]) -> Any:
        """``command(pipeline, key)`` on the artifact's key, in the same round trip as the check that it
        exists (a missing key reads as empty, which an empty artifact is too)."""
        if not valid_id(artifact_id):
            raise artifact_not_found(artifact_id)
        key = _artifact_key(self.owner, artifact_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.exists(key)
            command(pipe, key)
            found, value = pipe.execute()
        except _ERRORS as exc:
            raise self._failing.error(exc) from None
        if not found:
            raise artifact_not_found(artifact_id)
        return value

    def size(self, artifact_id: str) -> int:
        return int(self._existing(artifact_id, lambda pipe, key: pipe.strlen(key)))

    def read(self, artifact_id: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError("offset and length must be >= 0")
        if length == 0:
            self.size(artifact_id)  # still: not found is not found
            return b""
        end = offset + length - 1
        return _bytes(self._existing(artifact_id, lambda pipe, key: pipe.getrange(key, offset, end)))

    @contextmanager
    def open(self, artifact_id: str) -> Iterator[BinaryIO]:
        """The artifact as an anonymous in-memory file (``artifact_read`` maps it), copied
        from Redis once and then reused while it exists (see :class:`_Copies`)."""
        size = self.size(artifact_id)
        key = _artifact_key(self.owner, artifact_id)
        f = self._copies.reopen(key, size)
        if f is None:
            f = _anonymous_file()
            try:
                position = 0
                while position < size:
                    piece = self.read(artifact_id, position, _PIECE)
                    if not piece:
                        break
                    f.write(piece)
                    position += len(piece)
                f.flush()
                f.seek(0)
                self._copies.keep(key, f, position)
            except BaseException:
                f.close()
                raise
        with f:
            yield f

    def gc(
        self, *, max_age_seconds: float, max_total_bytes: int, now: float | None = None, handed: Collection[str] = ()
    ) -> list[ArtifactInfo]:
        """Retention across the whole store, sparing this owner's artifacts of the last minute.

        Skipped while Redis is not answering (a command timed out within the timeout): the pass
        after a spill that timed out held the spill's answer for another timeout, for nothing."""
        if self._failing.unanswered_lately():
            raise StoreError(f"store unavailable: Redis at {self._failing.where}: not answering; retention skipped")
        try:
            return collect(self.client, max_age_seconds, max_total_bytes, now, protect=self.owner, handed=handed)
        except _ERRORS as exc:
            raise StoreError(str(self._failing.error(exc))) from None


def _anonymous_file() -> BinaryIO:
    """A file with no name (memfd where there is one): the artifact never lands on disk."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("prefixgate-artifact", os.MFD_CLOEXEC), "w+b")
    return tempfile.TemporaryFile()  # pragma: no cover - not Linux


class _Copies:
    """Artifacts read lately, kept as in-memory files, up to ``limit`` bytes in all.

    ``artifact_read`` pages through one artifact in several calls and each maps it whole;
    without this every page would copy the whole artifact from Redis again. A published
    artifact never changes (ids are never reused), so a copy is right for as long as the
    artifact exists, which every open still asks Redis (its size, one round trip). Each
    reader gets its own open file (its own offset) on the kept one; eviction closes only
    the kept one. Used from worker threads: one lock.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[str, tuple[BinaryIO, int]] = collections.OrderedDict()
        self._total = 0

    def reopen(self, key: str, size: int) -> BinaryIO | None:
        with self._lock:
            entry = self._kept.get(key)
            if entry is None or entry[1] != size:
                return None
            self._kept.move_to_end(key)
            try:
                return open(f"/proc/self/fd/{entry[0].fileno()}", "rb")  # noqa: SIM115 - the caller closes it
            except OSError:
                return None

    def keep(self, key: str, f: BinaryIO, size: int) -> None:
        if size > self.limit or not os.path.isdir("/proc/self/fd"):
            return
        try:
            kept = open(f"/proc/self/fd/{f.fileno()}", "rb")  # noqa: SIM115 - closed on eviction
        except OSError:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                old[0].close()
                self._total -= old[1]
            self._kept[key] = (kept, size)
            self._total += size
            while self._total > self.limit:
                _, (evicted, evicted_size) = self._kept.popitem(last=False)
                evicted.close()
                self._total -= evicted_size


def _scan(client: redis.Redis) -> list[ArtifactInfo]:
    """Indexed artifacts, oldest first (ties by owner and id); sizes from the hash."""
    entries: list[Any] = list(client.zrange(INDEX, 0, -1, withscores=True))
    members = [_text(m) for m, _ in entries]
    sizes: list[Any] = list(client.hmget(SIZES, members)) if members else []
    found = []
    for member, (_, score), size in zip(members, entries, sizes, strict=True):
        owner, _, artifact_id = member.partition("/")
        try:
            parsed = int(_text(size)) if size is not None else 0
            if parsed < 0 or not math.isfinite(float(score)):
                raise ValueError("out of range")
        except (TypeError, ValueError, UnicodeDecodeError):
            # A value nothing of ours wrote: skipped (and named), never fatal.
            log.warning("state store: artifact %r has an unreadable size or time in %s; skipped", member[:80], SIZES)
            continue
        found.append(ArtifactInfo(owner, artifact_id, parsed, float(score)))
    return sorted(found, key=lambda a: (a.mtime, a.session, a.id))


def _remove(client: redis.Redis, info: ArtifactInfo) -> None:
    member = f"{info.session}/{info.id}"
    pipe = client.pipeline(transaction=True)
    pipe.delete(_artifact_key(info.session, info.id))
    pipe.zrem(INDEX, member)
    pipe.hdel(SIZES, member)
    pipe.execute()


def collect(
    client: redis.Redis,
    max_age_seconds: float,
    max_total_bytes: int,
    now: float | None,
    protect: str | None,
    handed: Collection[str] = (),
) -> list[ArtifactInfo]:
    """Past the age first (their keys have expired already: the index catches up), then until
    the whole store fits ``max_total_bytes`` the oldest of the owner that holds the most
    (``spill.retention``)."""
    now = time.time() if now is None else now
    found = _scan(client)

    def due(among: list[ArtifactInfo]) -> list[ArtifactInfo]:
        return doomed(
            among,
            max_age_seconds=max_age_seconds,
            max_total_bytes=max_total_bytes,
            now=now,
            spiller=protect,
            fresh_seconds=PROTECT_SECONDS if protect is not None else 0.0,
            handed=handed,
        )

    removed = due(found)
    if removed:
        # Only then, whether each is still there: one that Redis evicted (a ``volatile-*``
        # policy) or lost was counted too, and a real artifact went in its place.
        there = _present(client, found)
        gone = [a for a, present in zip(found, there, strict=True) if not present]
        if gone:
            removed = gone + due([a for a, present in zip(found, there, strict=True) if present])
    for a in removed:
        _remove(client, a)
    return removed


def _present(client: redis.Redis, found: list[ArtifactInfo]) -> list[bool]:
    """Whether each indexed artifact's key is there."""
    pipe = client.pipeline(transaction=False)
    for a in found:
        pipe.exists(_artifact_key(a.session, a.id))
    return [bool(there) for there in pipe.execute()]


class RedisStore:
    kind = "redis"
    shared = True

    def __init__(self, url: str, *, max_age_seconds: float = 0.0, timeout: float = TIMEOUT) -> None:
        self.url = url
        self.where = redact_url(url, url)
        self.max_age = max_age_seconds
        self._failing = _Failing(self.where, url, timeout)
        self._async = redis.asyncio.Redis.from_url(
            url, **_options(timeout, redis.asyncio.retry.Retry(NoBackoff(), 1, supported_errors=_RETRIED))
        )
        self._blocking = redis.Redis.from_url(
            url, **_options(timeout, redis.retry.Retry(NoBackoff(), 1, supported_errors=_RETRIED))
        )
        self._set_if = self._async.register_script(_SET_IF)
        self._key: bytes | None = None
        self._copies = _Copies(COPIES_BYTES)

    def _error(self, exc: BaseException) -> StoreUnavailable:
        return self._failing.error(exc)

    async def open(self) -> None:
        try:
            await self._async.ping()
        except _ERRORS as exc:
            raise self._error(exc) from None
        await self.integrity_key()

    async def aclose(self) -> None:
        with contextlib.suppress(*_ERRORS):
            await self._async.aclose()
        await anyio.to_thread.run_sync(self._blocking.close)

    async def last_record(self, owner: str) -> bytes:
        try:
            value = await self._async.get(_record_key(owner))
        except _ERRORS as exc:
            raise self._error(exc) from None
        return _bytes(value) if value is not None else b""

    def record_label(self, owner: str) -> str:
        return f"activation record {_record_key(owner)!r} in {self.where}"

    async def write_record(self, owner: str, record: bytes, previous: bytes) -> bool:
        try:
            key = await self.integrity_key()
            return bool(await self._set_if(keys=[_record_key(owner), KEY], args=[previous, record, key]))
        except _ERRORS as exc:
            if _out_of_memory(exc):  # (it answered: not "unavailable", and not the script's internals)
                why = "refused the write (out of memory: its maxmemory, with noeviction)"
                raise StoreUnavailable(f"store full: Redis at {self.where} {why}") from None
            raise self._error(exc) from None

    def artifacts(self, owner: str) -> Artifacts:
        return RedisArtifacts(self._blocking, owner, lambda: self.max_age, self._failing, self._copies)

    def keep_for(self, max_age_seconds: float) -> None:
        self.max_age = max_age_seconds

    async def list_artifacts(self) -> list[ArtifactInfo]:
        def present() -> list[ArtifactInfo]:
            found = _scan(self._blocking)
            return [a for a, there in zip(found, _present(self._blocking, found), strict=True) if there]

        try:
            return await anyio.to_thread.run_sync(present)
        except _ERRORS as exc:
            raise StoreError(str(self._error(exc))) from None

    async def find_artifact(self, artifact_id: str) -> Artifacts:
        if valid_id(artifact_id):
            for a in await self.list_artifacts():
                if a.id == artifact_id:
                    return self.artifacts(a.session)
        raise ArtifactNotFound(f"no artifact with id {artifact_id!r}")

    async def collect(self, *, max_age_seconds: float, max_total_bytes: int) -> list[ArtifactInfo]:
        try:
            return await anyio.to_thread.run_sync(
                lambda: collect(self._blocking, max_age_seconds, max_total_bytes, None, None)
            )
        except _ERRORS as exc:
            raise StoreError(str(self._error(exc))) from None

    async def warm_record(self, key: str) -> bytes | None:
        """At most one byte over the record limit is fetched: a larger value is refused, never held."""
        try:
            value = await self._async.getrange(_warm_key(key), 0, MAX_RECORD_BYTES)
        except _ERRORS as exc:
            raise self._error(exc) from None
        data = _bytes(value) if value is not None else b""
        if len(data) > MAX_RECORD_BYTES:
            raise StoreUnavailable(f"the warm-start record in {self.where} is over {MAX_RECORD_BYTES} bytes")
        return data or None

    async def put_warm_record(self, key: str, data: bytes) -> None:
        try:
            await self._async.set(_warm_key(key), data, ex=WARM_TTL)
        except _ERRORS as exc:
            raise self._error(exc) from None

    async def integrity_key(self) -> bytes:
        """One random key for every replica: the first to start sets it (``SET NX``)."""
        if self._key is None:
            self._key = await self.shared_key()
        return self._key

    async def shared_key(self) -> bytes:
        """The key Redis holds now (``SET NX`` ours, or a new one, first: a Redis restarted
        without persistence holds none). A replica started after such a restart, before any
        grant put the running replicas' key back, set one of its own: every replica then
        takes the one Redis holds (``serve``'s ``keep_the_key``), so they agree again."""
        try:
            await self._async.set(KEY, self._key or secrets.token_bytes(32), nx=True)
            value = await self._async.get(KEY)
        except _ERRORS as exc:
            raise self._error(exc) from None
        if value is None or len(value) < 32:
            raise StoreUnavailable(f"store unavailable: Redis at {self.where}: the integrity key is missing")
        self._key = _bytes(value)
        return self._key

    async def health(self) -> StoreHealth:
        try:
            info = await self._async.info()
        except _ERRORS as exc:
            return StoreHealth(self.kind, self.where, False, False, problems=(str(self._error(exc)),))
        version = str(info.get("redis_version") or info.get("valkey_version") or "unknown")
        problems = []
        policy = str(info.get("maxmemory_policy", ""))
        if policy.startswith("allkeys-"):
            problems.append(
                f"maxmemory-policy is {policy}: activation records may be evicted "
                "(use noeviction or a volatile-* policy)"
            )
        probe = f"{PREFIX}doctor:{secrets.token_hex(8)}"
        try:
            await self._async.set(probe, b"1", ex=10)
            await self._async.delete(probe)
        except _ERRORS as exc:
            return StoreHealth(self.kind, self.where, True, False, version, (*problems, str(self._error(exc))))
        return StoreHealth(self.kind, self.where, True, True, version, tuple(problems))
