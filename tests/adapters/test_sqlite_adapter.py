"""The SPI contract on the sqlite and memory adapters, and what only SQLite has.

Shared tests run against both (``store`` / ``url`` fixtures); the rest checks
the SQLite file itself: pragmas, permissions, schema version, concurrent
writers on one file (two connections, and a second process), failure and
rollback, cancellation; then the one-statement append path (one call to the
connection, its fallback, its statement sizes), the trigger that makes every
record continue its stream, and the upgrade of a version-1 file.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import sys
import textwrap
import uuid
from pathlib import Path

import anyio
import pytest

from durably.adapters.sqlite._store import SCHEMA_VERSION, SQLiteStore, _prefix_successor
from durably.storage import open_store
from durably.storage._errors import (
    BlobNotFoundError,
    ConflictError,
    InvalidRequestError,
    StoreClosedError,
    StoreUnavailableError,
    UnknownSchemaVersionError,
    UnsafeCompactionError,
)
from durably.storage._spi import CAP_BLOBS, AppendRequest, StoredRecord, StoredSnapshot, StreamId

S = StreamId("tenant", "agent-1")


@pytest.fixture(params=["memory", "sqlite"])
def url(request, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://test-{uuid.uuid4().hex}"  # named: reopening sees the same data
    return f"sqlite:///{tmp_path / 'journal.db'}"


@pytest.fixture
async def store(url: str):
    async with open_store(url) as opened:
        yield opened


async def records(store, stream: StreamId = S, after: int = 0, page_size: int = 512) -> list[tuple[int, bytes]]:
    return [(r.seq, r.data) async for r in store.read(stream, after, page_size=page_size)]


async def names(store, namespace: str, prefix: str = "") -> list[str]:
    return [s.agent_id async for s in store.list_streams(namespace, prefix)]


# -- appends ---------------------------------------------------------------------------


async def test_append_assigns_gapless_seqs(store) -> None:
    assert await store.last_seq(S) == 0
    assert await store.append(S, 0, [b"a", b"b"]) == 2
    assert await store.append(S, 2, [b"c"]) == 3
    assert await store.last_seq(S) == 3
    assert await records(store) == [(1, b"a"), (2, b"b"), (3, b"c")]


@pytest.mark.parametrize("stale", [0, 1, 3, 99])
async def test_stale_expected_seq_is_a_conflict_and_writes_nothing(store, stale: int) -> None:
    await store.append(S, 0, [b"a", b"b"])
    with pytest.raises(ConflictError) as caught:
        await store.append(S, stale, [b"x", b"y"])
    assert (caught.value.stream, caught.value.expected_seq, caught.value.actual_seq) == (S, stale, 2)
    assert await records(store) == [(1, b"a"), (2, b"b")]
    assert await store.last_seq(S) == 2


async def test_conflict_on_an_unknown_stream_leaves_no_stream_behind(store) -> None:
    with pytest.raises(ConflictError):
        await store.append(S, 4, [b"x"])
    assert await store.last_seq(S) == 0
    assert await names(store, S.namespace) == []
    assert await store.append(S, 0, [b"first"]) == 1


async def test_mixed_batch_one_conflict_others_succeed(store) -> None:
    a, b, c = (StreamId("tenant", n) for n in "abc")
    await store.append(b, 0, [b"b1"])
    results = await store.append_batch(
        [AppendRequest(a, 0, [b"a1", b"a2"]), AppendRequest(b, 0, [b"stale"]), AppendRequest(c, 0, [b"c1"])]
    )
    assert results[0] == 2 and results[2] == 1
    assert isinstance(results[1], ConflictError) and results[1].actual_seq == 1
    assert await records(store, a) == [(1, b"a1"), (2, b"a2")]
    assert await records(store, b) == [(1, b"b1")]
    assert await records(store, c) == [(1, b"c1")]


async def test_a_repeated_stream_sees_the_earlier_request(store) -> None:
    results = await store.append_batch(
        [
            AppendRequest(S, 0, [b"1", b"2"]),
            AppendRequest(S, 2, [b"3"]),
            AppendRequest(S, 2, [b"late"]),
            AppendRequest(S, 3, [b"4"]),
        ]
    )
    assert results[:2] == [2, 3] and isinstance(results[2], ConflictError) and results[3] == 4
    assert [seq for seq, _ in await records(store)] == [1, 2, 3, 4]


async def test_all_conflicting_batch(store) -> None:
    await store.append(S, 0, [b"a"])
    results = await store.append_batch([AppendRequest(S, 0, [b"x"]), AppendRequest(StreamId("t", "new"), 9, [b"y"])])
    assert all(isinstance(r, ConflictError) for r in results)
    assert await store.last_seq(S) == 1 and await store.last_seq(StreamId("t", "new")) == 0


@pytest.mark.parametrize(
    "bad",
    [AppendRequest(S, 0, []), AppendRequest(S, -1, [b"x"]), AppendRequest(S, 0, ["text"])],
    ids=["empty", "negative", "str"],
)
async def test_malformed_requests_fail_the_call_before_any_write(store, bad: AppendRequest) -> None:
    other = StreamId("tenant", "other")
    with pytest.raises(InvalidRequestError):
        await store.append_batch([AppendRequest(other, 0, [b"ok"]), bad])
    assert await store.last_seq(other) == 0
    assert await store.append_batch([]) == []


async def test_a_big_batch_across_many_streams(store) -> None:
    many = [StreamId("bulk", f"s{i:04d}") for i in range(300)]  # more than one lock statement's worth
    results = await store.append_batch(
        [AppendRequest(s, 0, [s.agent_id.encode()] * (1 + i % 2)) for i, s in enumerate(many)]
    )
    assert results == [1 + i % 2 for i in range(300)]
    assert await names(store, "bulk") == [s.agent_id for s in many]
    assert await records(store, many[298]) == [(1, b"s0298")]


# -- reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 3, 7, 512])
async def test_read_pages_in_order_after_a_seq(store, page_size: int) -> None:
    for start in range(0, 20, 4):
        await store.append(S, start, [f"r{n}".encode() for n in range(start + 1, start + 5)])
    expected = [(n, f"r{n}".encode()) for n in range(1, 21)]
    assert await records(store, page_size=page_size) == expected
    assert await records(store, after=13, page_size=page_size) == expected[13:]
    assert await records(store, after=20, page_size=page_size) == []
    assert await records(store, StreamId("tenant", "nobody"), page_size=page_size) == []


async def test_read_yields_stored_records(store) -> None:
    await store.append(S, 0, [b"\x00\xff"])
    [record] = [r async for r in store.read(S)]
    assert record == StoredRecord(1, b"\x00\xff")


# -- snapshots -------------------------------------------------------------------------


async def test_snapshots_at_or_before(store) -> None:
    await store.append(S, 0, [b"r"] * 10)
    assert await store.get_snapshot(S) is None
    for seq in (2, 5, 8):
        await store.put_snapshot(S, seq, f"snap{seq}".encode())
    assert await store.get_snapshot(S) == StoredSnapshot(8, b"snap8")
    assert await store.get_snapshot(S, 7) == StoredSnapshot(5, b"snap5")
    assert await store.get_snapshot(S, 5) == StoredSnapshot(5, b"snap5")
    assert await store.get_snapshot(S, 1) is None
    assert await store.get_snapshot(S, 2**70) == StoredSnapshot(8, b"snap8")
    await store.put_snapshot(S, 5, b"again")  # same seq: overwritten
    assert await store.get_snapshot(S, 6) == StoredSnapshot(5, b"again")
    assert await store.get_snapshot(StreamId("tenant", "nobody")) is None


@pytest.mark.parametrize("seq", [0, -1, 4])
async def test_snapshot_outside_the_journal_is_refused(store, seq: int) -> None:
    await store.append(S, 0, [b"a", b"b", b"c"])
    with pytest.raises(InvalidRequestError):
        await store.put_snapshot(S, seq, b"s")
    with pytest.raises(InvalidRequestError):
        await store.put_snapshot(StreamId("tenant", "nobody"), 1, b"s")
    assert await store.get_snapshot(S) is None


async def test_delete_snapshots_keeps_the_latest(store) -> None:
    await store.append(S, 0, [b"r"] * 9)
    for seq in (3, 6, 9):
        await store.put_snapshot(S, seq, b"s")
    await store.delete_snapshots(S, 6)
    assert [await store.get_snapshot(S, n) for n in (3, 6)] == [None, StoredSnapshot(6, b"s")]
    await store.delete_snapshots(S, 100)  # everything is older, but the latest stays
    assert await store.get_snapshot(S, 8) is None
    assert await store.get_snapshot(S) == StoredSnapshot(9, b"s")
    await store.delete_snapshots(StreamId("tenant", "nobody"), 5)


# -- compaction ------------------------------------------------------------------------


async def test_delete_records_needs_a_covering_snapshot(store) -> None:
    await store.append(S, 0, [f"r{n}".encode() for n in range(1, 11)])
    with pytest.raises(UnsafeCompactionError):
        await store.delete_records(S, 4)
    await store.put_snapshot(S, 4, b"s4")
    with pytest.raises(UnsafeCompactionError):
        await store.delete_records(S, 5)
    await store.delete_records(S, 4)
    assert [seq for seq, _ in await records(store)] == list(range(5, 11))
    await store.put_snapshot(S, 10, b"s10")
    await store.delete_records(S, 10)
    assert await records(store) == []
    assert await store.last_seq(S) == 10  # never decreases
    assert await store.append(S, 10, [b"r11"]) == 11
    with pytest.raises(ConflictError):
        await store.append(S, 0, [b"resurrected?"])


# -- streams ---------------------------------------------------------------------------


async def test_list_streams_sorted_by_prefix_and_namespace(store) -> None:
    ids = ["b", "a%b", "a_c", "abc", "ab", "Abc", "a", "é", "a\U0001f600", "zz"]
    for agent in ids:
        await store.append(StreamId("ns1", agent), 0, [b"x"])
    await store.append(StreamId("ns2", "abc"), 0, [b"x"])
    await store.append(StreamId("ns10", "abc"), 0, [b"x"])
    assert await names(store, "ns1") == sorted(ids)
    assert await names(store, "ns1", "a") == sorted(i for i in ids if i.startswith("a"))
    assert await names(store, "ns1", "a%") == ["a%b"]  # LIKE wildcards are plain characters
    assert await names(store, "ns1", "a_") == ["a_c"]
    assert await names(store, "ns1", "A") == ["Abc"]  # case-sensitive
    assert await names(store, "ns1", "ab") == ["ab", "abc"]
    assert await names(store, "ns1", "q") == []
    assert await names(store, "ns2") == ["abc"]
    assert await names(store, "ns") == []


async def test_delete_stream_purges_everything(store) -> None:
    other = StreamId("tenant", "keep")
    await store.append(S, 0, [b"a", b"b"])
    await store.put_snapshot(S, 2, b"snap")
    digest = await store.put_blob(S, b"artifact")
    await store.append(other, 0, [b"k"])
    await store.delete_stream(S)
    assert await store.last_seq(S) == 0
    assert await records(store) == []
    assert await store.get_snapshot(S) is None
    with pytest.raises(BlobNotFoundError):
        await store.get_blob(S, digest)
    assert await names(store, "tenant") == ["keep"]
    assert await store.append(S, 0, [b"reborn"]) == 1  # a reused id starts over
    assert await records(store) == [(1, b"reborn")]
    assert await records(store, other) == [(1, b"k")]
    await store.delete_stream(StreamId("tenant", "never-existed"))


# -- blobs -----------------------------------------------------------------------------


async def test_blobs_are_content_addressed_per_stream(store) -> None:
    assert CAP_BLOBS in store.capabilities
    data = os.urandom(3000)
    digest = await store.put_blob(S, data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert await store.put_blob(S, data) == digest  # idempotent
    assert await store.get_blob(S, digest) == data
    with pytest.raises(BlobNotFoundError):
        await store.get_blob(StreamId("tenant", "other"), digest)
    with pytest.raises(BlobNotFoundError):
        await store.get_blob(S, "0" * 64)
    big = os.urandom((1 << 20) + 1)  # hashed off the event loop
    assert await store.get_blob(S, await store.put_blob(S, big)) == big


# -- lifecycle -------------------------------------------------------------------------


async def test_closed_store_refuses_calls_and_reopen_keeps_data(url: str) -> None:
    store = open_store(url)
    with pytest.raises(StoreClosedError):
        await store.last_seq(S)
    async with store:
        await store.append(S, 0, [b"a", b"b"])
        await store.put_snapshot(S, 2, b"s")
        digest = await store.put_blob(S, b"blob")
    with pytest.raises(StoreClosedError):
        await store.append(S, 2, [b"c"])
    with pytest.raises(StoreClosedError):
        await records(store)
    await store.close()  # idempotent
    async with open_store(url) as reopened:
        assert await reopened.last_seq(S) == 2
        assert await records(reopened) == [(1, b"a"), (2, b"b")]
        assert await reopened.get_snapshot(S) == StoredSnapshot(2, b"s")
        assert await reopened.get_blob(S, digest) == b"blob"
        assert await reopened.append(S, 2, [b"c"]) == 3


# == SQLite only ========================================================================


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
async def sqlite_store(db_path: Path):
    async with SQLiteStore(f"sqlite:///{db_path}") as opened:
        yield opened


async def connection(store: SQLiteStore):
    """The store's aiosqlite connection; a file absent at open is created by the
    first write, so this makes it exist the way a write would."""
    async with store._lock:
        return await store._ready(create=True)


def pragma(store: SQLiteStore, name: str):
    async def read():
        ((value,),) = await (await connection(store)).execute_fetchall(f"PRAGMA {name}")
        return value

    return read()


async def test_open_store_url_builds_the_sqlite_adapter(db_path: Path) -> None:
    assert isinstance(open_store(f"sqlite:///{db_path}"), SQLiteStore)


async def test_pragmas_are_set(sqlite_store: SQLiteStore, db_path: Path) -> None:
    assert await pragma(sqlite_store, "journal_mode") == "wal"
    assert await pragma(sqlite_store, "synchronous") == 2  # FULL
    assert await pragma(sqlite_store, "busy_timeout") == 10_000
    assert await pragma(sqlite_store, "user_version") == SCHEMA_VERSION
    async with SQLiteStore(f"sqlite:///{db_path}?synchronous=normal&busy_timeout=250") as tuned:
        assert await pragma(tuned, "synchronous") == 1  # NORMAL
        assert await pragma(tuned, "busy_timeout") == 250


@pytest.mark.parametrize(
    "bad",
    [
        "sqlite://host/x.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///x.db?synchronous=OFF",
        "sqlite:///x.db?busy_timeout=-1",
        "sqlite:///x.db?cache=shared",
    ],
)
def test_malformed_urls_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        SQLiteStore(bad)


async def test_relative_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with SQLiteStore("sqlite:///rel/j.db?create=1") as store:  # a new folder: asked for
        await store.append(S, 0, [b"x"])
    assert (tmp_path / "rel" / "j.db").is_file()
    absolute = tmp_path / "abs dir" / "j.db"
    assert SQLiteStore(f"sqlite:///{absolute}").path == absolute  # sqlite:////abs/path, as SQLAlchemy
    assert SQLiteStore("sqlite:///abs%20dir/j.db").path == Path("abs dir/j.db")


async def test_new_files_and_directories_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "nested" / "journal.db"
    async with SQLiteStore(f"sqlite:///{path}?create=1") as store:
        await store.append(S, 0, [b"x"])
        for directory in (tmp_path / "new", tmp_path / "new" / "nested"):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        files = sorted(p.name for p in path.parent.iterdir())
        assert files == ["journal.db", "journal.db-shm", "journal.db-wal"]
        for name in files:
            assert stat.S_IMODE((path.parent / name).stat().st_mode) == 0o600, name


async def test_a_newer_schema_version_is_refused_and_left_untouched(db_path: Path) -> None:
    async with SQLiteStore(f"sqlite:///{db_path}") as store:
        await store.append(S, 0, [b"x"])
    with sqlite3.connect(db_path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    before = db_path.read_bytes()
    with pytest.raises(UnknownSchemaVersionError) as caught:
        await SQLiteStore(f"sqlite:///{db_path}").open()
    assert (caught.value.version, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert db_path.read_bytes() == before


async def test_a_file_that_is_not_a_database(db_path: Path) -> None:
    db_path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreUnavailableError) as caught:
        await SQLiteStore(f"sqlite:///{db_path}").open()
    assert isinstance(caught.value.__cause__, sqlite3.Error)


async def test_list_streams_pages(sqlite_store: SQLiteStore) -> None:
    agents = [f"a{i:02d}" for i in range(7)] + ["b"]
    for agent in agents:
        await sqlite_store.append(StreamId("ns", agent), 0, [b"x"])
    for page_size in (1, 2, 3, 8):
        assert [s.agent_id async for s in sqlite_store.list_streams("ns", "a", page_size=page_size)] == agents[:7]
        assert [s.agent_id async for s in sqlite_store.list_streams("ns", page_size=page_size)] == agents
    for bad in (0, -1):  # a typed error, not an IndexError after an empty page (or no LIMIT at all)
        with pytest.raises(InvalidRequestError, match="page_size"):
            [s async for s in sqlite_store.list_streams("ns", page_size=bad)]


def test_prefix_successor() -> None:
    assert _prefix_successor("") is None
    assert _prefix_successor("ab") == "ac"
    assert _prefix_successor("a\U0010ffff") == "b"
    assert _prefix_successor("\U0010ffff") is None
    assert _prefix_successor("a\ud7ff") == "a\ue000"


async def test_ids_sqlite_cannot_store_are_invalid_requests(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(InvalidRequestError):
        await sqlite_store.append(StreamId("ns", "lone \udc80 surrogate"), 0, [b"x"])
    assert await sqlite_store.append(S, 0, [b"still fine"]) == 1


async def test_locked_database_is_unavailable_and_nothing_is_acknowledged(db_path: Path) -> None:
    async with SQLiteStore(f"sqlite:///{db_path}?busy_timeout=50") as store:
        await store.append(S, 0, [b"a"])
        holder = sqlite3.connect(db_path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock past our busy timeout
            with pytest.raises(StoreUnavailableError, match="locked") as caught:
                await store.append_batch([AppendRequest(S, 1, [b"b"]), AppendRequest(StreamId("t", "x"), 0, [b"c"])])
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert await store.last_seq(StreamId("t", "x")) == 0
        assert await store.append(S, 1, [b"b"]) == 2  # the retry with the same expected seq works


async def test_an_error_mid_batch_rolls_the_whole_batch_back(sqlite_store: SQLiteStore, db_path: Path) -> None:
    broken, fine = StreamId("t", "broken"), StreamId("t", "fine")
    await sqlite_store.append(broken, 0, [b"1"])
    await sqlite_store.append(fine, 0, [b"1"])
    with sqlite3.connect(db_path) as raw:  # inject a failure on the second stream's insert
        raw.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON records WHEN NEW.stream_id = "
            "(SELECT id FROM streams WHERE agent_id = 'broken') BEGIN SELECT RAISE(ABORT, 'boom'); END"
        )
    raw.close()
    with pytest.raises(StoreUnavailableError) as caught:
        await sqlite_store.append_batch([AppendRequest(fine, 1, [b"2"]), AppendRequest(broken, 1, [b"2"])])
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert await sqlite_store.last_seq(fine) == 1 and await records(sqlite_store, fine) == [(1, b"1")]
    assert await sqlite_store.append(fine, 1, [b"2"]) == 2  # the connection is not stuck in a transaction


async def test_cancelling_the_caller_mid_transaction_leaves_a_usable_store(sqlite_store: SQLiteStore) -> None:
    db = await connection(sqlite_store)
    original = db.executemany
    inside, release = anyio.Event(), anyio.Event()

    def gated_executemany(*args, **kwargs):
        async def run():
            inside.set()
            await release.wait()
            return await original(*args, **kwargs)

        return run()

    db.executemany = gated_executemany
    try:
        scope = anyio.CancelScope()

        async def append() -> None:
            with scope:
                await sqlite_store.append(S, 0, [b"a"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(append)
            await inside.wait()  # the transaction holds the write lock now
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            release.set()
    finally:
        db.executemany = original
    # Shielded: the transaction ran to its COMMIT; the connection is free again.
    assert await sqlite_store.last_seq(S) == 1
    assert await sqlite_store.append(S, 1, [b"b"]) == 2


async def test_close_waits_for_an_inflight_append(sqlite_store: SQLiteStore) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(sqlite_store.append, S, 0, [b"a"])
        await anyio.wait_all_tasks_blocked()
        await sqlite_store.close()
    async with sqlite_store:
        assert await sqlite_store.last_seq(S) == 1


async def test_two_connections_racing_on_one_stream(db_path: Path) -> None:
    """Two stores (two connections, two threads) append to one stream: one winner per seq."""
    wins: list[tuple[int, bytes]] = []
    conflicts = 0

    async def writer(store: SQLiteStore, name: str) -> None:
        nonlocal conflicts
        for n in range(40):
            payload = f"{name}-{n}".encode()
            while True:
                seen = await store.last_seq(S)
                try:
                    wins.append((await store.append(S, seen, [payload]), payload))
                    break
                except ConflictError:
                    conflicts += 1

    async with SQLiteStore(f"sqlite:///{db_path}") as one, SQLiteStore(f"sqlite:///{db_path}") as two:
        async with anyio.create_task_group() as tg:
            for store, name in ((one, "one"), (two, "two"), (one, "one-b"), (two, "two-b")):
                tg.start_soon(writer, store, name)
        stored = await records(one)
    assert [seq for seq, _ in stored] == list(range(1, 161))
    assert sorted(wins) == stored  # each seq acknowledged to exactly one writer, with its payload
    assert len({payload for _, payload in stored}) == 160


async def test_connections_opening_a_fresh_file_at_once(tmp_path: Path) -> None:
    """Four stores first-touching one new file together all open it: switching a fresh file
    to WAL makes SQLite refuse one of two shared-lock holders at once (no busy wait), which
    must not surface as ``StoreUnavailableError: database is locked`` (unhandled, it does
    about once in 12 tries)."""
    for attempt in range(25):
        path = tmp_path / f"fresh-{attempt}.db"
        stores = [SQLiteStore(f"sqlite:///{path}") for _ in range(4)]
        acknowledged: list[int] = []

        async def first_append(store: SQLiteStore) -> None:
            async with store:
                while True:
                    try:
                        acknowledged.append(await store.append(S, await store.last_seq(S), [b"x"]))
                        return
                    except ConflictError:
                        continue

        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(first_append, store)
        assert sorted(acknowledged) == [1, 2, 3, 4]


async def test_another_process_appending_to_the_same_file(db_path: Path) -> None:
    """A second process and this one append to one stream through the file: gapless, no loss."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        from durably.adapters.sqlite import SQLiteStore
        from durably.storage._errors import ConflictError
        from durably.storage._spi import StreamId

        async def main(path):
            stream = StreamId("tenant", "agent-1")
            async with SQLiteStore(f"sqlite:///{path}") as store:
                print("ready", flush=True)
                for n in range(60):
                    while True:
                        try:
                            await store.append(stream, await store.last_seq(stream), [f"child-{n}".encode()])
                            break
                        except ConflictError:
                            pass

        asyncio.run(main(sys.argv[1]))
        """
    )
    mine = 0
    async with SQLiteStore(f"sqlite:///{db_path}") as store:
        await store.append(S, 0, [b"parent-start"])
        async with await anyio.open_process([sys.executable, "-c", script, str(db_path)]) as child:
            assert child.stdout is not None
            assert (await child.stdout.receive()).startswith(b"ready")
            child_done = anyio.Event()

            async def reap() -> None:
                await child.wait()
                child_done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reap)
                # Keep writing while the child writes (capped, in case it stalls).
                while not child_done.is_set() and mine < 5000:
                    try:
                        await store.append(S, await store.last_seq(S), [f"parent-{mine}".encode()])
                        mine += 1
                    except ConflictError:
                        pass
            assert child.returncode == 0
        stored = await records(store)
    assert [seq for seq, _ in stored] == list(range(1, len(stored) + 1))
    payloads = [data for _, data in stored]
    assert len(payloads) == len(set(payloads)) == 1 + 60 + mine
    assert {f"child-{n}".encode() for n in range(60)} <= set(payloads)
    assert {f"parent-{n}".encode() for n in range(mine)} <= set(payloads)


# -- the one-statement append path and the v2 schema ------------------------------------


def calls_to_the_connection(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``(method, sql)`` of every call the store makes on its aiosqlite connection from
    now on: each is one hop to the connection's thread."""
    calls: list[tuple[str, str]] = []
    db = store._db  # connected: the caller has written already
    for name in ("execute", "execute_fetchall", "executemany", "commit", "rollback"):
        original = getattr(db, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append((_name, args[0] if args else ""))
            return _original(*args, **kwargs)

        monkeypatch.setattr(db, name, spy)
    return calls


def triggers(path: Path) -> set[str]:
    with sqlite3.connect(path) as raw:
        names = {name for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    raw.close()
    return names


async def test_appends_to_known_streams_are_one_autocommitted_statement(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = StreamId("t", "a"), StreamId("t", "b")
    await sqlite_store.append_batch([AppendRequest(a, 0, [b"a1"]), AppendRequest(b, 0, [b"b1"])])
    calls = calls_to_the_connection(sqlite_store, monkeypatch)
    results = await sqlite_store.append_batch(
        [AppendRequest(a, 1, [b"a2", b"a3"]), AppendRequest(b, 1, [b"b2"]), AppendRequest(a, 3, [b"a4"])]
    )
    assert results == [3, 2, 4]
    assert [(method, sql.split(" (")[0]) for method, sql in calls] == [
        ("execute", "INSERT INTO records")
    ]  # no BEGIN, no COMMIT
    assert await records(sqlite_store, a) == [(1, b"a1"), (2, b"a2"), (3, b"a3"), (4, b"a4")]
    assert await records(sqlite_store, b) == [(1, b"b1"), (2, b"b2")]
    assert (await sqlite_store.last_seq(a), await sqlite_store.last_seq(b)) == (4, 2)


async def test_a_conflict_among_known_streams_is_isolated(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c, d = (StreamId("t", n) for n in "abcd")
    for s in (a, b, c, d):
        await sqlite_store.append(s, 0, [b"1", b"2"])
    calls = calls_to_the_connection(sqlite_store, monkeypatch)
    results = await sqlite_store.append_batch(
        [
            AppendRequest(a, 2, [b"3"]),
            AppendRequest(b, 1, [b"stale"]),
            AppendRequest(c, 2, [b"3"]),
            AppendRequest(StreamId("t", "nobody"), 5, [b"x"]),
            AppendRequest(d, 4, [b"ahead"]),
        ]
    )
    assert results[0] == 3 and results[2] == 3
    assert (results[1].expected_seq, results[1].actual_seq) == (1, 2)  # behind: its seq exists
    assert (results[3].expected_seq, results[3].actual_seq) == (5, 0)  # no such stream
    assert (results[4].expected_seq, results[4].actual_seq) == (4, 2)  # ahead: it would leave a gap
    # The one statement was refused (and wrote nothing); one transaction then told the requests apart.
    assert [sql.split(" (")[0] for _, sql in calls][:2] == ["INSERT INTO records", "BEGIN IMMEDIATE"]
    assert [method for method, _ in calls[-2:]] == ["executemany", "commit"]  # the good requests' records
    assert [seq for seq, _ in await records(sqlite_store, a)] == [1, 2, 3]
    assert await records(sqlite_store, b) == [(1, b"1"), (2, b"2")]
    assert [seq for seq, _ in await records(sqlite_store, c)] == [1, 2, 3]
    assert await records(sqlite_store, d) == [(1, b"1"), (2, b"2")]
    assert await names(sqlite_store, "t") == ["a", "b", "c", "d"]


@pytest.mark.parametrize("rows", [1, 15, 16, 17, 18, 33, 100, 239, 240, 241, 400])
async def test_batches_of_every_size_land_whole(sqlite_store: SQLiteStore, db_path: Path, rows: int) -> None:
    """Row counts across the statement buckets (padded rows must not land) and past the fast path's limit."""
    streams = [StreamId("sizes", f"s{i}") for i in range(3)]
    for s in streams:
        await sqlite_store.append(s, 0, [b"first"])
    split = [rows // 3, rows // 3, rows - 2 * (rows // 3)]
    requests = [
        AppendRequest(s, 1, [f"{s.agent_id}-{n}".encode() for n in range(count)])
        for s, count in zip(streams, split, strict=False)
        if count
    ]
    assert await sqlite_store.append_batch(requests) == [1 + len(r.records) for r in requests]
    for request in requests:
        assert await records(sqlite_store, request.stream) == [(1, b"first")] + [
            (2 + n, d) for n, d in enumerate(request.records)
        ]
    with sqlite3.connect(db_path) as raw:
        ((count,),) = raw.execute("SELECT count(*) FROM records")
    raw.close()
    assert count == 3 + rows


async def test_a_stream_purged_and_recreated_by_another_connection(db_path: Path) -> None:
    """Ids are looked up inside the statement, so a new stream row is never mistaken for the old one,
    not even when SQLite hands the freed id to another stream."""
    old, other = StreamId("t", "old"), StreamId("t", "other")
    async with SQLiteStore(f"sqlite:///{db_path}") as one, SQLiteStore(f"sqlite:///{db_path}") as two:
        await one.append(old, 0, [b"o1", b"o2", b"o3"])  # the highest stream id of the file
        await two.delete_stream(old)
        assert await two.append(other, 0, [b"x1"]) == 1  # takes the freed id
        with pytest.raises(ConflictError) as caught:
            await one.append(old, 3, [b"o4"])
        assert caught.value.actual_seq == 0
        assert await two.append(old, 0, [b"n1"]) == 1  # re-created
        with pytest.raises(ConflictError) as caught:
            await one.append(old, 3, [b"o4"])
        assert caught.value.actual_seq == 1
        assert await one.append(old, 1, [b"n2"]) == 2
        assert await records(one, old) == [(1, b"n1"), (2, b"n2")]
        assert await records(one, other) == [(1, b"x1")]


async def test_the_database_refuses_records_that_do_not_continue_their_stream(
    sqlite_store: SQLiteStore, db_path: Path
) -> None:
    """The trigger holds for every writer of the file, not only this adapter."""
    await sqlite_store.append(S, 0, [b"a", b"b"])
    with sqlite3.connect(db_path) as raw:
        sid = raw.execute("SELECT id FROM streams").fetchone()[0]
        for seq in (2, 4, 1):  # a repeat, a gap, the past
            with pytest.raises(sqlite3.IntegrityError, match="continue its stream"):
                raw.execute("INSERT INTO records (stream_id, seq, data) VALUES (?, ?, x'00')", (sid, seq))
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("INSERT INTO records (stream_id, seq, data) VALUES (?, 1, x'00')", (sid + 1,))  # no such stream
        raw.execute("INSERT INTO records (stream_id, seq, data) VALUES (?, 3, x'63')", (sid,))
    raw.close()
    assert await sqlite_store.last_seq(S) == 3
    assert await sqlite_store.append(S, 3, [b"d"]) == 4


V1_SCHEMA = """
CREATE TABLE streams (id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, agent_id TEXT NOT NULL,
                      last_seq INTEGER NOT NULL, UNIQUE (namespace, agent_id));
CREATE TABLE records (stream_id INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream_id, seq));
CREATE TABLE snapshots (stream_id INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream_id, seq));
CREATE TABLE blobs (stream_id INTEGER NOT NULL, digest TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream_id, digest));
CREATE TRIGGER records_advance_last_seq AFTER INSERT ON records
BEGIN
    UPDATE streams SET last_seq = NEW.seq WHERE id = NEW.stream_id AND last_seq < NEW.seq;
END;
INSERT INTO streams (id, namespace, agent_id, last_seq) VALUES (1, 'tenant', 'agent-1', 0), (2, 'tenant', 'compacted', 0);
INSERT INTO records (stream_id, seq, data) VALUES (1, 1, x'61'), (1, 2, x'62'), (2, 1, x'31'), (2, 2, x'32');
INSERT INTO snapshots (stream_id, seq, data) VALUES (2, 2, x'73');
DELETE FROM records WHERE stream_id = 2;
PRAGMA user_version = 1;
"""


async def test_a_v1_file_is_upgraded_in_place(db_path: Path) -> None:
    """Version 1 (the AFTER INSERT trigger) becomes version 3 on open: same rows, the checking trigger,
    and the status index columns (version 3), NULL for every old stream, so scans read their journals."""
    with sqlite3.connect(db_path) as raw:
        raw.executescript(V1_SCHEMA)
    raw.close()
    assert triggers(db_path) == {"records_advance_last_seq"}
    compacted = StreamId("tenant", "compacted")
    async with SQLiteStore(f"sqlite:///{db_path}") as store:
        assert await pragma(store, "user_version") == SCHEMA_VERSION == 3
        assert await records(store) == [(1, b"a"), (2, b"b")]
        assert await store.get_index(S) is None
        assert {(r.stream, r.entry) async for r in store.list_index("tenant", {"finished"})} == {
            (S, None),
            (compacted, None),
        }, "streams from before the index are listed as having no entry"
        assert (await store.last_seq(S), await store.last_seq(compacted)) == (2, 2)
        assert await records(store, compacted) == []
        assert await store.get_snapshot(compacted) == StoredSnapshot(2, b"s")
        with pytest.raises(ConflictError):
            await store.append(S, 1, [b"stale"])
        assert await store.append_batch([AppendRequest(S, 2, [b"c"]), AppendRequest(compacted, 2, [b"3"])]) == [3, 3]
    assert triggers(db_path) == {"records_continue_stream"}
    async with SQLiteStore(f"sqlite:///{db_path}") as again:  # a v2 file opens as it is
        assert await records(again) == [(1, b"a"), (2, b"b"), (3, b"c")]


async def test_the_fast_path_reports_a_locked_database(db_path: Path) -> None:
    async with SQLiteStore(f"sqlite:///{db_path}?busy_timeout=50") as store:
        await store.append(S, 0, [b"a"])
        holder = sqlite3.connect(db_path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailableError, match="locked"):
                await store.append(S, 1, [b"b"])
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert await store.append(S, 1, [b"b"]) == 2


async def test_a_lone_surrogate_on_the_fast_path_is_an_invalid_request(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(InvalidRequestError):
        await sqlite_store.append(StreamId("ns", "lone \udc80 surrogate"), 3, [b"x"])
    await sqlite_store.append(S, 0, [b"a"])
    assert await sqlite_store.append(S, 1, [b"still fine"]) == 2


async def test_cancelling_the_caller_during_the_one_statement_append(sqlite_store: SQLiteStore) -> None:
    await sqlite_store.append(S, 0, [b"a"])
    db = await connection(sqlite_store)
    original = db.execute
    inside, release = anyio.Event(), anyio.Event()

    def gated_execute(*args, **kwargs):
        async def run():
            inside.set()
            await release.wait()
            return await original(*args, **kwargs)

        return run()

    db.execute = gated_execute
    try:
        scope = anyio.CancelScope()

        async def append() -> None:
            with scope:
                await sqlite_store.append(S, 1, [b"b"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(append)
            await inside.wait()
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            release.set()
    finally:
        db.execute = original
    assert await sqlite_store.last_seq(S) == 2  # shielded: the statement ran; the store is usable
    assert await sqlite_store.append(S, 2, [b"c"]) == 3


async def test_a_record_cell_damaged_into_text_is_reported_as_corruption(tmp_path):
    """A flipped serial-type byte can turn a BLOB cell into TEXT that is not UTF-8:
    SQLite's integrity check passes, but it is damage, not an outage."""
    import sqlite3

    from durably.storage._errors import CorruptRecordError

    store = SQLiteStore(f"sqlite:///{tmp_path}/d.db")
    stream = StreamId("ns", "a")
    async with store:
        await store.append(stream, 0, [b"\xff\xfe frame"])
    with sqlite3.connect(tmp_path / "d.db") as db:
        db.execute("UPDATE records SET data = CAST(data AS TEXT)")
    async with store:
        with pytest.raises(CorruptRecordError, match="damaged"):
            [r async for r in store.read(stream)]
