"""Found by ``durably torture``: a restore racing another worker's compaction reported a gap as damage.

The snapshot writer keeps two snapshots and compacts behind the older one. A
reader (another worker's ``status``, ``durably agents``) that fetched the older
snapshot just before a third was written and the records behind the second were
deleted then read a tail that starts after a hole, and restore raised
``CorruptRecordError("gap in the journal")`` for a journal that is fine. It must
begin again from the newer snapshot; a real hole (no snapshot covers it) must
still be reported.
"""

from __future__ import annotations

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably.adapters.memory import MemoryStore
from durably.storage._errors import CorruptRecordError


class CompactsDuringTheRead(MemoryStore):
    """Answers the first ``get_snapshot`` with an older snapshot, then compacts before the read: the race."""

    older: int | None = None
    compact_through: int | None = None

    async def get_snapshot(self, stream, at_or_before=None):
        if self.older is not None:
            older, self.older = self.older, None
            snapshot = await super().get_snapshot(stream, older)
            await super().delete_records(stream, self.compact_through)  # meanwhile, another worker compacts
            return snapshot
        return await super().get_snapshot(stream, at_or_before)


async def _journal(store: MemoryStore) -> list[int]:
    async with Runtime(
        store, agents=[list_agent(6, [])], snapshot_policy=SnapshotPolicy(every_records=3, tail_ratio=0.0, keep=10)
    ) as rt:
        await rt.run("list-agent", "a", "count")
        await rt._activations.services.snapshots.flush()
        stream = rt.stream("a")
        return [
            s
            for s in range(1, await store.last_seq(stream) + 1)
            if (found := await store.get_snapshot(stream, s)) is not None and found.seq == s
        ]


async def test_a_restore_begins_again_when_compaction_overtakes_it() -> None:
    store = CompactsDuringTheRead("memory://restore-race")
    async with store:
        snapshots = await _journal(store)
        assert len(snapshots) >= 2, snapshots
        store.older, store.compact_through = snapshots[0], snapshots[-1]
        async with Runtime(store, agents=[list_agent(6, [])]) as rt:
            state = await rt.status("a")
    assert state.status == "finished" and state.last_seq == await _last(store)


async def test_a_hole_no_snapshot_covers_is_still_damage() -> None:
    store = MemoryStore("memory://restore-hole")
    async with store:
        await _journal(store)
        stream = next(iter(store._streams))
        found = store._streams[stream]
        for seq in sorted(found.snapshots):
            del found.snapshots[seq]
        found.records.pop(2)
        async with Runtime(store, agents=[list_agent(6, [])]) as rt:
            with pytest.raises(CorruptRecordError, match="gap"):
                await rt.status("a")


async def _last(store: MemoryStore) -> int:
    (stream,) = store._streams
    return store._streams[stream].last_seq
