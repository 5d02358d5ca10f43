"""The bench's stored bytes of a stream count what the store keeps for it: records, snapshots and the
conversation pages those snapshots name."""

from __future__ import annotations

from durably import SnapshotPolicy
from durably._journal.page_writer import KEEP, PAGE
from durably._journal.records import RecordCodec
from durably.bench.agent import run_agents, stream_bytes
from durably.bench.workload import Workload
from durably.storage._registry import open_store


async def test_pages_named_by_kept_snapshots_are_counted_once(tmp_path) -> None:
    steps = (PAGE + KEEP) // 2 + 40  # two messages a step: enough for one page of the conversation
    url = f"sqlite:///{tmp_path / 'bytes.db'}"
    async with open_store(url) as store:
        run = await run_agents(
            store, "bytes", [Workload(seed=1).conversation(steps)], policy=SnapshotPolicy(every_records=30)
        )
        stored = await stream_bytes(store, run.streams[0])
        blobs = [await store.get_blob(run.streams[0], d) for d in await _named(store, run.streams[0])]
    assert stored.pages == len(blobs) >= 1
    assert stored.page_bytes == sum(len(b) for b in blobs) > 0
    assert stored.total == stored.record_bytes + stored.snapshot_bytes + stored.page_bytes


async def _named(store, stream) -> set[str]:
    """The digests of the pages every kept snapshot of ``stream`` names."""
    digests: set[str] = set()
    snapshot = await store.get_snapshot(stream)
    while snapshot is not None:
        _seq, state, _frame = RecordCodec().decode_snapshot(snapshot, stream)
        digests.update(ref["digest"] for key in ("pages", "ledger_pages") for ref in state.get(key, ()))
        snapshot = await store.get_snapshot(stream, snapshot.seq - 1) if snapshot.seq > 1 else None
    return digests
