"""Checks of the optional status index (``CAP_STATUS_INDEX``): one entry per stream, kept with its records."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import cast

import anyio
import pytest

from durably.storage._errors import InvalidRequestError
from durably.storage._spi import (
    CAP_BLOBS,
    CAP_STATUS_INDEX,
    AppendRequest,
    BlobStore,
    IndexEntry,
    IndexStore,
    Store,
    StreamId,
)

from ._harness import StoreHarness, sid


def ix(store: Store) -> IndexStore:
    """``store`` as the ``IndexStore`` it declared to be (``require`` checked ``CAP_STATUS_INDEX``)."""
    return cast(IndexStore, store)


def entry(status: str, seq: int, *approvals: str, definition: str = "agent") -> IndexEntry:
    return IndexEntry(
        status=status, definition=definition, seq=seq, updated_at=1_700_000_000.5 + seq, open_approvals=tuple(approvals)
    )


async def listed(
    store: Store, namespace: str = "conformance", statuses: Collection[str] | None = None
) -> dict[StreamId, IndexEntry | None]:
    found: dict[StreamId, IndexEntry | None] = {}
    async for row in ix(store).list_index(namespace, statuses, page_size=2):
        assert row.stream not in found, f"list_index yielded {row.stream} twice"
        found[row.stream] = row.entry
    return found


class StatusIndexChecks(StoreHarness):
    """Promises of ``IndexStore``; skipped unless the store declares ``CAP_STATUS_INDEX``."""

    @pytest.mark.anyio
    async def test_an_entry_is_written_with_its_records_and_kept_by_appends_without_one(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            stream = sid("indexed")
            running = entry("running", 1)
            await store.append_batch([AppendRequest(stream, 0, [b"started"], running)])
            assert await ix(store).get_index(stream) == running, "an append's entry is stored exactly"
            await store.append_batch([AppendRequest(stream, 1, [b"step", b"step"])])
            assert await ix(store).get_index(stream) == running, "an append without an entry leaves the entry as it was"
            waiting = entry("waiting_approval", 5, "a-1", "a-2")
            await store.append_batch([AppendRequest(stream, 3, [b"x", b"asked"], waiting)])
            assert await ix(store).get_index(stream) == waiting
            assert await ix(store).get_index(sid("never-written")) is None, "an unknown stream has no entry"
        async with self.opened(tmp_path) as store:
            assert await ix(store).get_index(stream) == waiting, "an acknowledged entry survives reopen"

    @pytest.mark.anyio
    async def test_a_sleeping_entry_keeps_its_wake_time_through_append_put_list_and_reopen(
        self, tmp_path: Path
    ) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            stream, other = sid("sleeper"), sid("waker")
            sleeping = IndexEntry("sleeping", "agent", 2, 1_700_000_002.5, ("a-1",), wake_at=1_700_086_400.25)
            await store.append_batch([AppendRequest(stream, 0, [b"started", b"timer"], sleeping)])
            assert await ix(store).get_index(stream) == sleeping, "the wake time is stored exactly"
            assert (await listed(store, statuses={"sleeping"}))[stream] == sleeping, "and listed with the entry"
            await store.append_batch([AppendRequest(other, 0, [b"started"], entry("running", 1))])
            put = IndexEntry("sleeping", "agent", 1, 1_700_000_001.0, wake_at=1_700_000_060.0)
            assert await ix(store).put_index(other, put, 1)
            assert await ix(store).get_index(other) == put, "put_index keeps the wake time too"
            woken = entry("running", 3)
            await store.append_batch([AppendRequest(stream, 2, [b"fired"], woken)])
            assert (await ix(store).get_index(stream)) == woken, "an entry without one has no wake time"
        async with self.opened(tmp_path) as store:
            assert await ix(store).get_index(other) == put, "the wake time survives reopen"

    @pytest.mark.anyio
    async def test_a_conflicting_append_writes_no_entry(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            stream, other = sid("contended"), sid("bystander")
            await store.append_batch([AppendRequest(stream, 0, [b"a", b"b"], entry("running", 2))])
            results = await store.append_batch(
                [
                    AppendRequest(stream, 1, [b"stale"], entry("finished", 2)),
                    AppendRequest(other, 0, [b"new"], entry("suspended", 1)),
                ]
            )
            assert isinstance(results[0], Exception) and results[1] == 1
            assert await ix(store).get_index(stream) == entry("running", 2), "a conflict writes no entry"
            assert await ix(store).get_index(other) == entry("suspended", 1), "the batch's other requests keep theirs"
            results = await store.append_batch([AppendRequest(sid("fresh"), 3, [b"x"], entry("running", 4))])
            assert isinstance(results[0], Exception)
            assert await ix(store).get_index(sid("fresh")) is None
            assert sid("fresh") not in await listed(store), "a refused append to a new stream leaves no trace"

    @pytest.mark.anyio
    async def test_an_entry_that_is_not_an_index_entry_is_refused_before_any_io(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            bystander, stream = sid("bystander"), sid("bad-entry")
            bad = cast(IndexEntry, {"status": "running", "definition": "agent", "seq": 1, "updated_at": 0.0})
            with pytest.raises(InvalidRequestError):
                await store.append_batch(
                    [
                        AppendRequest(bystander, 0, [b"valid"], entry("running", 1)),
                        AppendRequest(stream, 0, [b"x"], bad),
                    ]
                )
            assert await store.last_seq(bystander) == 0, "the valid request beside it is not written either"
            assert await store.last_seq(stream) == 0
            assert stream not in await listed(store) and bystander not in await listed(store)

    @pytest.mark.anyio
    async def test_list_index_filters_by_status_and_always_yields_streams_without_an_entry(
        self, tmp_path: Path
    ) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            statuses = {
                "r1": "running",
                "r2": "running",
                "w": "waiting_approval",
                "f1": "finished",
                "f2": "finished",
                "s": "suspended",
            }
            await store.append_batch(
                [AppendRequest(sid(name), 0, [b"x"], entry(status, 1)) for name, status in statuses.items()]
            )
            await store.append(sid("legacy"), 0, [b"written without an entry"])
            await store.append_batch([AppendRequest(sid("r1", "elsewhere"), 0, [b"x"], entry("running", 1))])
            if CAP_BLOBS in store.capabilities:
                await cast(BlobStore, store).put_blob(sid("only-blobs"), b"artifact")
            every = await listed(store)
            assert set(every) == {sid(n) for n in statuses} | {sid("legacy")}, (
                "list_index(ns) yields every stream with records of ns (not blob-only ones, not other namespaces)"
            )
            assert every[sid("legacy")] is None and every[sid("w")] == entry("waiting_approval", 1)
            assert set(await listed(store, statuses={"running"})) == {sid("r1"), sid("r2"), sid("legacy")}, (
                "a status filter keeps matching entries and every stream without an entry"
            )
            assert set(await listed(store, statuses=["finished", "suspended"])) == {
                sid("f1"),
                sid("f2"),
                sid("s"),
                sid("legacy"),
            }
            assert set(await listed(store, statuses=())) == {sid("legacy")}
            assert set(await listed(store, "elsewhere")) == {sid("r1", "elsewhere")}

    @pytest.mark.anyio
    async def test_put_index_is_a_compare_and_set_on_the_last_seq(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            stream = sid("repaired")
            await store.append(stream, 0, [b"a", b"b"])
            assert await ix(store).put_index(stream, entry("finished", 2), 1) is False, "a stale at_seq writes nothing"
            assert await ix(store).get_index(stream) is None
            assert await ix(store).put_index(stream, entry("finished", 2), 2) is True
            assert await ix(store).get_index(stream) == entry("finished", 2)
            assert await ix(store).put_index(stream, None, 2) is True, "None removes the entry"
            assert await ix(store).get_index(stream) is None
            assert set(await listed(store, statuses={"finished"})) == {stream}, "without an entry it is listed anyway"
            assert await ix(store).put_index(sid("unknown"), entry("running", 0), 0) is False, (
                "no entry for an unknown stream"
            )
            assert sid("unknown") not in await listed(store)

    @pytest.mark.anyio
    async def test_purge_removes_the_entry_and_compaction_keeps_it(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            stream, kept = sid("purged"), sid("compacted")
            for s in (stream, kept):
                await store.append_batch([AppendRequest(s, 0, [b"a", b"b", b"c"], entry("finished", 3))])
            await store.put_snapshot(kept, 3, b"state")
            await store.delete_records(kept, 3)
            await store.delete_stream(stream)
            assert await ix(store).get_index(stream) is None, "delete_stream removes the entry"
            assert await ix(store).get_index(kept) == entry("finished", 3), "compaction keeps it"
            assert set(await listed(store)) == {kept}
            await store.append_batch([AppendRequest(stream, 0, [b"anew"], entry("running", 1))])
            assert await ix(store).get_index(stream) == entry("running", 1), "a stream started anew gets its new entry"

    @pytest.mark.anyio
    async def test_concurrent_appends_leave_the_last_acknowledged_entry(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            self.require(store, CAP_STATUS_INDEX)
            streams = [sid(f"many-{i}") for i in range(self.race_tasks)]

            async def writer(stream: StreamId) -> None:
                for seq in range(1, 6):
                    await store.append_batch([AppendRequest(stream, seq - 1, [b"r"], entry("running", seq, f"a{seq}"))])

            async with anyio.create_task_group() as tg:
                for stream in streams:
                    tg.start_soon(writer, stream)
            for stream in streams:
                assert await ix(store).get_index(stream) == entry("running", 5, "a5")
