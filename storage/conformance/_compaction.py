"""Checks of compaction: never past what restore needs, last seq kept, reads and appends after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.storage._errors import ConflictError, UnsafeCompactionError
from durably.storage._spi import Store, StreamId

from ._harness import StoreHarness, expect_raises, list_all, numbered, payloads, read_pairs, sid

RECORDS = payloads("c", 10)


class CompactionChecks(StoreHarness):
    """Promises of ``delete_records``: restore = latest snapshot + the records after it, always."""

    async def _ten_records(self, store: Store, stream: StreamId) -> None:
        # Batches of 3, 3, 4, so compaction points fall inside batches as well as between them.
        await store.append(stream, 0, RECORDS[:3])
        await store.append(stream, 3, RECORDS[3:6])
        await store.append(stream, 6, RECORDS[6:])

    @pytest.mark.anyio
    async def test_compaction_without_covering_snapshot_is_unsafe(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("unsafe")
            await self._ten_records(store, stream)
            await expect_raises(
                UnsafeCompactionError, lambda: store.delete_records(stream, 5), "delete_records with no snapshot"
            )
            await store.put_snapshot(stream, 4, b"state@4")
            await expect_raises(
                UnsafeCompactionError,
                lambda: store.delete_records(stream, 5),
                "delete_records(through_seq=5) when the latest snapshot is at 4",
            )
            assert await read_pairs(store, stream) == numbered(RECORDS), "a refused compaction deletes nothing"

    @pytest.mark.anyio
    async def test_compaction_of_an_unknown_stream_is_a_no_op(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("never-written")
            await store.delete_records(stream, 5)
            assert await store.last_seq(stream) == 0, "compacting an unknown stream creates nothing"
            assert stream not in await list_all(store, stream.namespace), "compacting an unknown stream lists it"

    @pytest.mark.anyio
    async def test_compaction_deletes_through_seq_only(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("compact")
            await self._ten_records(store, stream)
            await store.put_snapshot(stream, 5, b"state@5")
            await store.delete_records(stream, 5)
            assert await read_pairs(store, stream) == numbered(RECORDS)[5:], (
                "after delete_records(5), read yields exactly seqs 6..10"
            )
            for after in (0, 3, 5, 7, 10):
                assert await read_pairs(store, stream, after, page_size=2) == numbered(RECORDS)[max(after, 5) :]
            assert await store.last_seq(stream) == 10, "compaction leaves last_seq alone"
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and snapshot.seq == 5, "the snapshot compaction relied on is kept"
            assert await read_pairs(store, stream, snapshot.seq) == numbered(RECORDS)[5:], (
                "restore (latest snapshot + records after it) still has everything it needs"
            )

    @pytest.mark.anyio
    async def test_compaction_up_to_an_older_point_than_the_snapshot(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("older")
            await self._ten_records(store, stream)
            await store.put_snapshot(stream, 8, b"state@8")
            await store.delete_records(stream, 3)
            assert await read_pairs(store, stream) == numbered(RECORDS)[3:]
            await store.delete_records(stream, 6)
            await store.delete_records(stream, 2)  # going back is a no-op, never a resurrection
            assert await read_pairs(store, stream) == numbered(RECORDS)[6:]

    @pytest.mark.anyio
    async def test_full_compaction_keeps_last_seq_and_appends_continue(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("full")
            await self._ten_records(store, stream)
            await store.put_snapshot(stream, 10, b"state@10")
            await store.delete_records(stream, 10)
            assert await read_pairs(store, stream) == []
            assert await store.last_seq(stream) == 10, "last_seq never decreases, even with no record left"
            assert stream in await list_all(store), "a compacted stream still exists"
            await expect_raises(
                ConflictError, lambda: store.append(stream, 0, [b"x"]), "expected_seq 0 after compaction"
            )
            assert await store.append(stream, 10, [b"eleven"]) == 11
            assert await read_pairs(store, stream) == [(11, b"eleven")]

    @pytest.mark.anyio
    async def test_compaction_survives_reopen(self, tmp_path: Path) -> None:
        stream = sid("reopen")
        async with self.opened(tmp_path) as store:
            await self._ten_records(store, stream)
            await store.put_snapshot(stream, 10, b"state@10")
            await store.delete_records(stream, 7)
        async with self.opened(tmp_path) as store:
            assert await store.last_seq(stream) == 10
            assert await read_pairs(store, stream) == numbered(RECORDS)[7:]
            await store.delete_records(stream, 10)
        async with self.opened(tmp_path) as store:
            assert await store.last_seq(stream) == 10, "last_seq survives full compaction and reopen"
            assert await read_pairs(store, stream) == []
            assert await store.append(stream, 10, [b"eleven"]) == 11
