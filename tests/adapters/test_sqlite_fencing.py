"""SQLite fencing beyond the kit: the one-statement path with fences, files without a leases table,
and a purge ending the lease in its own transaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from durably.adapters.sqlite._store import SCHEMA_VERSION, SQLiteStore
from durably.storage._errors import ConflictError, FencedError
from durably.storage._spi import AppendRequest, StreamId

A, B = StreamId("t", "a"), StreamId("t", "b")


def statements(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first words of every statement the store sends on its writer connection from now on."""
    sent: list[str] = []
    db = store._db
    for name in ("execute", "execute_fetchall", "executemany", "commit"):
        original = getattr(db, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            sent.append(args[0].split(" (")[0][:40] if args else _name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(db, name, spy)
    return sent


def lease_rows(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT owner, token FROM leases ORDER BY agent_id").fetchall()
    raw.close()
    return rows


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"


async def test_fenced_appends_to_known_streams_are_one_statement(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with SQLiteStore(url) as store:
        a, b = await store.acquire_lease(A, "w", 60), await store.acquire_lease(B, "w", 60)
        assert a is not None and b is not None
        await store.append_batch([AppendRequest(A, 0, [b"a1"], fence=a.token), AppendRequest(B, 0, [b"b1"])])
        sent = statements(store, monkeypatch)
        results = await store.append_batch(
            [
                AppendRequest(A, 1, [b"a2", b"a3"], fence=a.token),
                AppendRequest(B, 1, [b"b2"]),
                AppendRequest(A, 3, [b"a4"], fence=a.token),
            ]
        )
        assert results == [3, 2, 4]
        assert sent == ["WITH v"], f"one autocommitted statement, no BEGIN: {sent}"
        assert [r.data async for r in store.read(A)] == [b"a1", b"a2", b"a3", b"a4"]


@pytest.mark.parametrize("rows", [1, 17, 191, 192, 193, 240])
async def test_fenced_batches_of_every_size_land_whole(url: str, tmp_path: Path, rows: int) -> None:
    """Across the fenced statement's buckets (padding must not land) and past its row limit."""
    async with SQLiteStore(url) as store:
        lease = await store.acquire_lease(A, "w", 60)
        assert lease is not None
        await store.append(A, 0, [b"first"], fence=lease.token)
        data = [f"r{n}".encode() for n in range(rows)]
        assert await store.append_batch([AppendRequest(A, 1, data, fence=lease.token)]) == [1 + rows]
        (refused,) = await store.append_batch([AppendRequest(A, 1 + rows, data, fence=lease.token + 1)])
        assert isinstance(refused, FencedError), "a token never granted is refused at every size"
        assert [r.data async for r in store.read(A)] == [b"first", *data]


async def test_another_connection_taking_over_fences_the_one_statement_path(url: str) -> None:
    """The first store has the fenced fast path ready (it knows the leases table); a takeover on a
    second connection still refuses its next append, and only that one of its group commit."""
    async with SQLiteStore(url) as first, SQLiteStore(url) as second:
        old = await first.acquire_lease(A, "old", 0.05)
        assert old is not None
        await first.append_batch([AppendRequest(A, 0, [b"a1"], fence=old.token), AppendRequest(B, 0, [b"b1"])])
        assert await first.append(A, 1, [b"a2"], fence=old.token) == 2
        new = None
        while new is None:
            new = await second.acquire_lease(A, "new", 60)
        results = await first.append_batch(
            [AppendRequest(A, 2, [b"stale"], fence=old.token), AppendRequest(B, 1, [b"b2"])]
        )
        assert isinstance(results[0], FencedError) and results[0].actual_seq == 2 and results[1] == 2
        assert await second.append(A, 2, [b"a3"], fence=new.token) == 3
        assert [r.data async for r in first.read(A)] == [b"a1", b"a2", b"a3"]


async def test_a_file_without_a_leases_table_admits_no_fence(url: str, tmp_path: Path) -> None:
    """No lease was ever taken on it, so no token was granted: fenced writes are refused, and
    the file keeps its schema (no leases table appears)."""
    path = tmp_path / "journal.db"
    async with SQLiteStore(url) as store:
        await store.append(A, 0, [b"a1"])
        with pytest.raises(FencedError):
            await store.append(A, 1, [b"a2"], fence=1)
        with pytest.raises(FencedError):
            await store.put_snapshot(A, 1, b"s", fence=1)
        results = await store.append_batch([AppendRequest(B, 0, [b"b1"], fence=1), AppendRequest(A, 1, [b"a2"])])
        assert isinstance(results[0], FencedError) and results[1] == 2
        assert await store.last_seq(B) == 0
        assert await store.get_snapshot(A) is None
    with sqlite3.connect(path) as raw:
        tables = {name for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ((version,),) = raw.execute("PRAGMA user_version").fetchall()
    raw.close()
    assert "leases" not in tables and version == SCHEMA_VERSION


async def test_purge_ends_the_lease_and_keeps_its_token(url: str, tmp_path: Path) -> None:
    async with SQLiteStore(url) as store:
        lease = await store.acquire_lease(A, "w", 60)
        assert lease is not None
        await store.append(A, 0, [b"a1"], fence=lease.token)
        await store.delete_stream(A)
        assert lease_rows(tmp_path / "journal.db") == [("", lease.token)]
        with pytest.raises(FencedError):
            await store.append(A, 0, [b"old run"], fence=lease.token)
        with pytest.raises(ConflictError):
            await store.append(A, 5, [b"unfenced"])
        assert await store.last_seq(A) == 0
