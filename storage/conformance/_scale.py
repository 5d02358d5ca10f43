"""Checks of scale: bounded memory for paged reads, very large values, long streams.

* Reading a stream page by page must not hold the stream in memory: the peak
  of Python allocations (``tracemalloc``, which sees every thread) reading 32
  MiB may exceed the peak reading 16 MiB by less than a quarter of the 16 MiB.
* A 64 MiB snapshot and a 16 MiB record round-trip (``huge_*_size``).
* On a stream of ``scale_records`` records, ``get_snapshot``, ``last_seq`` and a
  read of the last records cost about what they cost on a short stream: the
  best of several timings may be at most ``SCALE_FACTOR`` times the short
  stream's plus ``SCALE_SLACK`` seconds, each timed with the garbage collector
  off (as ``timeit`` does: a collection is the interpreter's noise, not the
  store's). The bound catches full scans, which grow 100-fold here, not a slow
  machine: the cheapest scan there is, an in-memory one, takes 35 ms or more on
  100,000 records, about three times the bound on a quiet machine.
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from durably.storage._spi import Store, StoredRecord, StreamId

from ._harness import StoreHarness, sid

#: The paged-read stream: records of this size, this many, appended this many per batch.
BOUNDED_RECORD_SIZE = 64 * 1024
BOUNDED_RECORDS = 512
BOUNDED_BATCH = 8
BOUNDED_PAGE = 8
#: Records per append, and records between snapshots, of the long stream.
SCALE_BATCH = 1_000
SCALE_SNAPSHOT_EVERY = 10_000
#: The long stream's timings may be this many times the short one's, plus this many seconds.
SCALE_FACTOR = 10
SCALE_SLACK = 0.01  # 0.05 let an in-memory full scan (35-60 ms without a collection) pass on a quiet machine
#: Timings taken of each operation; the best counts (the others include the machine's noise).
TIMINGS = 5


async def _best_time(operation: Callable[[], Awaitable[object]]) -> float:
    best = float("inf")
    enabled = gc.isenabled()
    gc.collect()
    for _ in range(TIMINGS):
        gc.disable()
        try:
            started = time.perf_counter()
            await operation()
            best = min(best, time.perf_counter() - started)
        finally:
            if enabled:
                gc.enable()
    return best


async def _fill(store: Store, stream: StreamId, records: int) -> None:
    """``records`` small records in batches of ``SCALE_BATCH``, a snapshot every ``SCALE_SNAPSHOT_EVERY``."""
    written = 0
    while written < records:
        count = min(SCALE_BATCH, records - written)
        written = await store.append(stream, written, [b"r%d" % (written + n) for n in range(1, count + 1)])
        if written % SCALE_SNAPSHOT_EVERY == 0 or written == records:
            await store.put_snapshot(stream, written, b"state@%d" % written)


class ScaleChecks(StoreHarness):
    """Memory bounded by the page, very large values, long streams as fast as short ones at the tail."""

    async def _read_peak(self, store: Store, stream: StreamId, records: int) -> int:
        """Write ``records`` records of ``BOUNDED_RECORD_SIZE``; return the allocation peak of reading them paged."""
        for first in range(0, records, BOUNDED_BATCH):
            await store.append(stream, first, [os.urandom(BOUNDED_RECORD_SIZE) for _ in range(BOUNDED_BATCH)])
        count = 0
        tracemalloc.start()
        try:
            async for record in store.read(stream, page_size=BOUNDED_PAGE):
                count += 1
                del record
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert count == records, f"read yields every record of the {records}-record stream: {count}"
        return peak

    @pytest.mark.anyio
    async def test_paged_read_memory_is_bounded(self, tmp_path: Path) -> None:
        # Memory may depend on the page, the batch and the backend's client, never on the
        # stream's length: twice the records may not cost a quarter of the extra bytes more.
        half = BOUNDED_RECORDS // 2
        extra = half * BOUNDED_RECORD_SIZE
        async with self.opened(tmp_path) as store:
            on_short = await self._read_peak(store, sid("bounded-short"), half)
            on_long = await self._read_peak(store, sid("bounded-long"), BOUNDED_RECORDS)
        assert on_long - on_short < extra / 4, (
            f"read pages through the stream with bounded memory (page_size={BOUNDED_PAGE}): reading "
            f"{BOUNDED_RECORDS * BOUNDED_RECORD_SIZE >> 20} MiB peaked at {on_long / 2**20:.1f} MiB of allocations, "
            f"{half * BOUNDED_RECORD_SIZE >> 20} MiB at {on_short / 2**20:.1f} MiB: memory grows with the stream"
        )

    @pytest.mark.anyio
    async def test_huge_record_and_snapshot_round_trip(self, tmp_path: Path) -> None:
        stream = sid("huge")
        record = os.urandom(self.huge_record_size)
        async with self.opened(tmp_path) as store:
            assert await store.append(stream, 0, [b"small", record]) == 2
            stored = [r async for r in store.read(stream, 1, page_size=1)]
            assert len(stored) == 1 and stored[0].data == record, (
                f"a {self.huge_record_size >> 20} MiB record round-trips"
            )
            del stored, record
            snapshot = os.urandom(self.huge_snapshot_size)
            await store.put_snapshot(stream, 2, snapshot)
            found = await store.get_snapshot(stream)
            assert found is not None and found.seq == 2 and found.data == snapshot, (
                f"a {self.huge_snapshot_size >> 20} MiB snapshot round-trips"
            )

    @pytest.mark.anyio
    async def test_long_streams_are_as_fast_at_the_tail(self, tmp_path: Path) -> None:
        short, long = sid("short"), sid("long")
        short_records = max(self.scale_records // 100, 10)
        async with self.opened(tmp_path) as store:
            await _fill(store, short, short_records)
            await _fill(store, long, self.scale_records)
            for name, stream, records in (("short", short, short_records), ("long", long, self.scale_records)):
                tail = [r.seq async for r in store.read(stream, records - 3)]
                assert tail == [records - 2, records - 1, records], f"the tail of the {name} stream: {tail}"
            slow = []
            operations: dict[str, Callable[[StreamId, int], Awaitable[object]]] = {
                "get_snapshot(stream)": lambda s, n: store.get_snapshot(s),
                "get_snapshot(stream, at_or_before=last - 1)": lambda s, n: store.get_snapshot(s, n - 1),
                "last_seq(stream)": lambda s, n: store.last_seq(s),
                "read(stream, after_seq=last - 3)": lambda s, n: _drain(store, s, n - 3),
            }
            for name, operation in operations.items():
                on_short = await _best_time(lambda: operation(short, short_records))
                on_long = await _best_time(lambda: operation(long, self.scale_records))
                if on_long > SCALE_FACTOR * on_short + SCALE_SLACK:
                    slow.append(f"{name}: {on_long * 1000:.1f} ms vs {on_short * 1000:.1f} ms")
        assert not slow, (
            f"lookups and tail reads must not scan the stream: on {self.scale_records:,} records they took more "
            f"than {SCALE_FACTOR}x their time on {short_records:,} (+{SCALE_SLACK * 1000:.0f} ms): {slow}"
        )


async def _drain(store: Store, stream: StreamId, after_seq: int) -> list[StoredRecord]:
    return [record async for record in store.read(stream, after_seq)]
