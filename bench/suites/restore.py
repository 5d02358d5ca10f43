"""restore: latency to restore an agent with 100 .. 100,000 records of history.

The histories are written straight to the store, in batches, with the
runtime's own codec, fold (``durably.runtime.state.apply``) and snapshot
policy (``SnapshotPolicy``, default settings): the same records and snapshots
a running agent leaves, without waiting for 100,000 fsyncs. Restore is
``Runtime.status``: the latest snapshot plus the tail after it. Cold is the
first restore on a newly opened store handle (the OS page cache stays warm:
dropping it would disturb the whole machine); warm is the median of repeats
on that handle. Also reported: what the restore read (snapshot seq and size,
tail records) and how long decoding that snapshot alone takes. Each length
is built twice: the whole conversation kept in the state ("full"), and a
bounded one (``HistoryPolicy``, "window-200") as a long-running agent needs.
"""

from __future__ import annotations

import itertools
import time

from durably.runtime.agent import HistoryPolicy
from durably.runtime.snapshots import SnapshotPolicy
from durably.runtime.state import AgentState, apply
from durably.schemas.records import Kind, Record
from durably.runtime.record_codec import RecordCodec
from durably.storage.registry import open_store
from durably.storage.spi import Store, StoredSnapshot, StreamId

from ..context import Bench
from ..conversation import measure_restore
from ..results import percentile
from ..workload import journal_entries

SUITE = "restore"
_BATCH = 500  # records per append while building a history


#: The bounded-conversation variant: what an agent with this ``HistoryPolicy``
#: (a 200-message context, cut back to 100) journals and restores.
WINDOW = HistoryPolicy(max_messages=200, keep_recent=100)


async def build_history(store: Store, stream: StreamId, entries: list[tuple[str, dict]],
                        policy: SnapshotPolicy, on_records=lambda n: None,
                        history: HistoryPolicy | None = None) -> None:
    """Append ``entries`` to ``stream`` and snapshot the folded state where ``policy``
    says the runtime would (after every record, as ``AgentJournal.append`` checks).
    With ``history``, a ``history_compacted`` record is added wherever the actor
    would add one (before a model turn, with no call pending)."""
    codec = RecordCodec()
    state = AgentState()
    pending: list[bytes] = []
    written = 0
    since_records = since_bytes = snapshot_bytes = 0

    async def flush() -> None:
        nonlocal written, pending
        if pending:
            await store.append(stream, written, pending)
            written += len(pending)
            on_records(len(pending))
            pending = []

    def compactions():
        for kind, data in entries:
            if history is not None and kind == Kind.MODEL_RESPONDED and not state.pending_calls:
                cut = history.cut(state.messages)
                if cut is not None:
                    yield Kind.HISTORY_COMPACTED, {"first": cut[0], "count": cut[1]}
            yield kind, data

    for seq, (kind, data) in enumerate(compactions(), start=1):
        record = Record(seq, kind, data, 1_700_000_000.0 + seq)
        frame = codec.encode_record(record)
        apply(state, record)
        pending.append(frame)
        since_records += 1
        since_bytes += len(frame)
        if policy.due(since_records, since_bytes, snapshot_bytes):
            await flush()
            snapshot = codec.encode_snapshot(seq, state.to_wire())
            await store.put_snapshot(stream, seq, snapshot)
            snapshot_bytes, since_records, since_bytes = len(snapshot), 0, 0
        if len(pending) >= _BATCH:
            await flush()
    await flush()


async def run(bench: Bench) -> None:
    """Build and restore each history length of ``sizes.restore_records``."""
    r = bench.results
    lengths = bench.sizes.restore_records
    task = bench.progress.start("restore: build histories", 2 * sum(lengths))  # two variants each
    policy = SnapshotPolicy()
    for records, (label, history) in itertools.product(lengths, (("full", None), ("window-200", WINDOW))):
        namespace = bench.namespace(SUITE, f"{records}-{label}")
        stream = StreamId(namespace, "agent-0")
        entries = journal_entries(bench.conversation(records // 3 + 1), namespace, stream.agent_id)[:records]
        async with open_store(bench.store) as store:
            await build_history(store, stream, entries, policy, lambda n: bench.progress.advance(task, n), history)
            snapshot = await store.get_snapshot(stream)
            records_stored = await store.last_seq(stream)
        cold, warm = await measure_restore(bench.store, namespace, stream.agent_id, bench.sizes.restore_repeats)
        params = {"records": records, "history": label}
        r.add(SUITE, "restore_cold", cold * 1e3, "ms", **params)
        r.add(SUITE, "restore_warm_p50", percentile(warm, 50) * 1e3, "ms", **params)
        r.add(SUITE, "restore_warm_p99", percentile(warm, 99) * 1e3, "ms", **params)
        r.add(SUITE, "snapshot_seq", snapshot.seq if snapshot else 0, "seq", **params)
        r.add(SUITE, "snapshot_bytes", len(snapshot.data) if snapshot else 0, "B", **params)
        r.add(SUITE, "tail_records", records_stored - (snapshot.seq if snapshot else 0), "records", **params)
        if snapshot is not None:
            r.add(SUITE, "snapshot_decode", _decode_time(snapshot, stream) * 1e3, "ms", **params)
    first, last = lengths[0], lengths[-1]
    if last != first:
        for kind, label in itertools.product(("restore_warm_p50", "restore_cold"), ("full", "window-200")):
            r.ratio(SUITE, f"{kind} {last}/{first} ({label})", r.find(SUITE, kind, records=last, history=label),
                    r.find(SUITE, kind, records=first, history=label), better="lower")


def _decode_time(snapshot: StoredSnapshot, stream: StreamId) -> float:
    """Seconds to decode and rebuild the state from ``snapshot`` alone (median of 3)."""
    codec = RecordCodec()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        _, wire, _ = codec.decode_snapshot(snapshot, stream)
        AgentState.from_wire(wire)
        times.append(time.perf_counter() - t)
    return sorted(times)[1]
