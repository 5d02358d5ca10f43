"""growth: stored bytes per step over a long run.

Reads back the stream of the long single-agent conversation (the frames the
store holds, through the SPI, so any store can be measured the same way) and
splits it by step: journal bytes per step at the start and at the end of the
run (flat when a step costs the same whatever the history), snapshot bytes,
and the cumulative total at every tenth of the run.
"""

from __future__ import annotations

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

from ..context import Bench
from ..conversation import conversation

SUITE = "growth"


async def _step_ends(bench: Bench, namespace: str, agent_id: str) -> list[int]:
    """The seq of each step's last record (a step starts at a ``model_responded``)."""
    codec = RecordCodec()
    starts: list[int] = []
    last = 0
    async with open_store(bench.store) as store:
        stream = StreamId(namespace, agent_id)
        async for record in JournalReader(store, codec, stream).records():
            if record.kind == Kind.MODEL_RESPONDED:
                starts.append(record.seq)
            last = record.seq
    return [s - 1 for s in starts[1:]] + [last]


async def run(bench: Bench) -> None:
    """Measure growth on the ``sizes.growth_steps``-step conversation."""
    steps = bench.sizes.growth_steps
    conv = await conversation(bench, steps)
    r, stored = bench.results, conv.stored
    ends = await _step_ends(bench, conv.namespace, conv.run.streams[0].agent_id)
    sizes = dict(stored.record_sizes)
    per_step, seq = [], 0
    for end in ends[:steps]:
        per_step.append(sum(sizes.get(s, 0) for s in range(seq + 1, end + 1)))
        seq = end
    tenth = max(1, len(per_step) // 10)
    r.add(SUITE, "journal_bytes_per_step_first10", sum(per_step[:tenth]) / tenth, "B/step", steps=steps)
    r.add(SUITE, "journal_bytes_per_step_last10", sum(per_step[-tenth:]) / tenth, "B/step", steps=steps)
    r.add(SUITE, "journal_bytes_per_step", stored.record_bytes / steps, "B/step", steps=steps)
    r.add(SUITE, "snapshot_bytes_per_step", stored.snapshot_bytes / steps, "B/step", steps=steps)
    r.add(SUITE, "page_bytes_per_step", stored.page_bytes / steps, "B/step", steps=steps)
    r.add(SUITE, "pages", stored.pages, "count", steps=steps)
    r.add(SUITE, "stored_bytes_per_step", stored.total / steps, "B/step", steps=steps)
    r.add(SUITE, "snapshots", stored.snapshots, "count", steps=steps)
    r.add(SUITE, "largest_snapshot", max((b for _, b in stored.snapshot_sizes), default=0), "B", steps=steps)
    r.add(SUITE, "stored_bytes", stored.total, "B", steps=steps)
    # What the store would hold if superseded snapshots were deleted (restore reads only the latest):
    # measured sizes, not a model, to show how much of the total old snapshots are.
    latest = max(stored.snapshot_sizes, default=(0, 0))[1]
    r.add(SUITE, "journal_plus_latest_snapshot", stored.record_bytes + latest + stored.page_bytes, "B", steps=steps)
    for decile in range(1, 11):
        # The last tenth also holds the final response and the finished record.
        upto = ends[-1] if decile == 10 else ends[steps * decile // 10 - 1]
        total = sum(b for s, b in stored.record_sizes + stored.snapshot_sizes + stored.page_sizes if s <= upto)
        r.add(SUITE, "stored_bytes_at", total, "B", steps=steps, at_step=steps * decile // 10)
