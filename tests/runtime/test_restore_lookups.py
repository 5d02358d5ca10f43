"""A restore sends its snapshot lookup and its last-seq lookup at once, and checks the run id only after the snapshot.

On a remote store (S3: one or two round trips each) a restore that waited for
the snapshot lookup, then the run id of seq 1, then the last seq, then the
tail, one after another, would spend most of a takeover's time on it (on the
local S3 server of the torture runs). The snapshot and the last seq need nothing
from each other, so they go together; the run id check must still
read seq 1 after the snapshot was read, or a purged run's snapshot landing in
between could pass it. Checked by behaviour: the two lookups must meet while
both are in flight, and the run id read must begin after the snapshot lookup ended.
"""

from __future__ import annotations

import anyio
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably.adapters.memory import MemoryStore
from durably.storage._spi import StoredSnapshot, StreamId


class MeetingStore(MemoryStore):
    """Once ``armed``: ``get_snapshot`` and ``last_seq`` each wait (up to 5 s) until both are in
    flight; ``events`` logs when each lookup and each read begins and ends."""

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        self.armed = False
        self.events: list[str] = []
        self.met: list[bool] = []
        self._in_flight: set[str] = set()
        self._both = anyio.Event()

    async def _meet(self, name: str) -> None:
        self._in_flight.add(name)
        if {"get_snapshot", "last_seq"} <= self._in_flight:
            self._both.set()
        with anyio.move_on_after(5):
            await self._both.wait()
        self.met.append(self._both.is_set())

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        if not self.armed:
            return await super().get_snapshot(stream, at_or_before)
        self.events.append("get_snapshot begins")
        await self._meet("get_snapshot")
        try:
            return await super().get_snapshot(stream, at_or_before)
        finally:
            self.events.append("get_snapshot ends")

    async def last_seq(self, stream: StreamId) -> int:
        if not self.armed:
            return await super().last_seq(stream)
        self.events.append("last_seq begins")
        await self._meet("last_seq")
        return await super().last_seq(stream)

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512):
        if self.armed:
            self.events.append(f"read after {after_seq} begins")
        async for stored in super().read(stream, after_seq, page_size=page_size):
            yield stored


async def test_the_snapshot_and_the_last_seq_are_looked_up_at_once_and_the_run_id_after_the_snapshot() -> None:
    store = MeetingStore()
    definition = list_agent(4, [])
    async with (
        store,
        Runtime(store, agents=[definition], snapshot_policy=SnapshotPolicy(every_records=3, tail_ratio=0.0)) as rt,
    ):
        done = await rt.run(definition, "a1", "count")
        await rt._activations.services.snapshots.flush()
        assert await store.get_snapshot(rt.stream("a1")) is not None, "the check needs a snapshot to restore from"
        store.armed = True
        restored = await rt.status("a1")  # not live here: restored from the store
    assert restored.to_wire() == done.to_wire()
    assert store.met == [True, True], f"the snapshot and last-seq lookups were not in flight together: {store.events}"
    run_read = store.events.index("read after 0 begins")  # seq 1's run id (the snapshot's run check)
    assert store.events.index("get_snapshot ends") < run_read, (
        f"the run id must be read after the snapshot, never alongside it: {store.events}"
    )


async def test_a_restore_without_a_snapshot_still_replays_everything() -> None:
    store = MeetingStore()
    definition = list_agent(2, [])
    async with store, Runtime(store, agents=[definition], snapshot_policy=SnapshotPolicy(every_records=0)) as rt:
        done = await rt.run(definition, "a1", "count")
        store.armed = True
        restored = await rt.status("a1")
    assert restored.to_wire() == done.to_wire()
    assert store.met == [True, True]
    assert "read after 0 begins" in store.events  # the whole journal, from the start
