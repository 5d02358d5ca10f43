"""restore: latency to restore an agent with 100 .. 100,000 records of history.

The histories are written straight to the store, in batches, with the
runtime's own codec, fold (``durably._loop.state.apply``), snapshot
policy (``SnapshotPolicy``, default settings) and conversation pages
(``durably._journal.page_writer``, on a store with blobs): the same records and snapshots
a running agent leaves, without waiting for 100,000 fsyncs. Restore is
``Runtime.status``: the latest snapshot plus the tail after it. Cold is the
first restore on a newly opened store handle (the OS page cache stays warm:
dropping it would disturb the whole machine); warm is the median of repeats
on that handle. A restore reads and checks the snapshot's pages but decodes none;
``restore_step`` adds what the next model step reads (the whole conversation and a new
call's ledger lookup, which decode the pages). Also reported: what the restore read (snapshot seq and size,
tail records), how long decoding that snapshot alone takes, and the floor:
zstd plus plain ``cbor2.loads`` of every byte the restore reads (the snapshot
and each tail record), with the restore's ratio to it. Each length
is built twice: the whole conversation kept in the state ("full"), and a
bounded one (``HistoryPolicy``, "window-200") as a long-running agent needs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import cbor2
import zstandard

from durably import Runtime
from durably._journal.page_writer import SECTIONS, Pager
from durably._journal.records import RecordCodec
from durably._journal.snapshots import SnapshotPolicy
from durably._loop.agent import HistoryPolicy
from durably._loop.state import AgentState, apply
from durably.schemas._records import Kind, Record
from durably.storage._codec import FLAG_ZSTD, FORMAT_DICTIONARY, HEADER_SIZE, HEADER_SIZE_DICT, raw_size
from durably.storage._dictionaries import DictionaryFrames
from durably.storage._registry import open_store
from durably.storage._spi import Store, StoredSnapshot, StreamId, supports_blobs

from ..context import Bench
from ..conversation import measure_restore
from ..results import percentile
from ..workload import journal_entries

SUITE = "restore"
_BATCH = 500  # records per append while building a history


#: The bounded-conversation variant: what an agent with this ``HistoryPolicy``
#: (a 200-message context, cut back to 100) journals and restores.
WINDOW = HistoryPolicy(max_messages=200, keep_recent=100)


async def build_history(
    store: Store,
    stream: StreamId,
    entries: list[tuple[str, dict[str, Any]]],
    policy: SnapshotPolicy,
    on_records: Callable[[int], object] = lambda n: None,
    history: HistoryPolicy | None = None,
) -> None:
    """Append ``entries`` to ``stream`` and snapshot the folded state where ``policy``
    says the runtime would (after every record, as ``AgentJournal.append`` checks).
    With ``history``, a ``history_compacted`` record is added wherever the actor
    would add one (before a model turn, with no call pending)."""
    codec = RecordCodec()
    pager = Pager(store) if supports_blobs(store) else None  # the older conversation in pages, as SnapshotWriter
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

    def compactions() -> Iterator[tuple[str, dict[str, Any]]]:
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
        since_bytes += raw_size(frame)  # the policy weighs raw bytes, as AgentJournal does
        if policy.due(since_records, since_bytes, snapshot_bytes):
            await flush()
            wire = state.to_wire() if pager is None else await pager.page_out(codec, stream, seq, state.to_wire())
            snapshot = codec.encode_snapshot(seq, wire, stream)
            await store.put_snapshot(stream, seq, snapshot)
            snapshot_bytes, since_records, since_bytes = raw_size(snapshot), 0, 0
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
        params: dict[str, Any] = {"records": records, "history": label}
        r.add(SUITE, "restore_cold", cold * 1e3, "ms", **params)
        r.add(SUITE, "restore_warm_p50", percentile(warm, 50) * 1e3, "ms", **params)
        r.add(SUITE, "restore_warm_p99", percentile(warm, 99) * 1e3, "ms", **params)
        stepped = await _restore_and_step(bench.store, namespace, stream.agent_id, bench.sizes.restore_repeats)
        r.add(SUITE, "restore_step_p50", percentile(stepped, 50) * 1e3, "ms", **params)
        r.add(SUITE, "snapshot_seq", snapshot.seq if snapshot else 0, "seq", **params)
        r.add(SUITE, "snapshot_bytes", len(snapshot.data) if snapshot else 0, "B", **params)
        r.add(SUITE, "tail_records", records_stored - (snapshot.seq if snapshot else 0), "records", **params)
        if snapshot is not None:
            r.add(SUITE, "snapshot_decode", _decode_time(snapshot, stream) * 1e3, "ms", **params)
        async with open_store(bench.store) as store:
            tail = [stored.data async for stored in store.read(stream, snapshot.seq if snapshot else 0)]
            pages = await _pages(store, snapshot, stream)
        r.add(SUITE, "pages", len(pages), "pages", **params)
        r.add(SUITE, "page_bytes", sum(len(data) for _, data in pages), "B", **params)
        floor = r.add(SUITE, "floor_zstd_cbor2", _floor_time(snapshot, tail, pages) * 1e3, "ms", **params)
        r.ratio(
            SUITE,
            f"restore_warm_p50/floor ({records}, {label})",
            r.find(SUITE, "restore_warm_p50", **params),
            floor,
            better="lower",
        )
    first, last = lengths[0], lengths[-1]
    if last != first:
        for kind, label in itertools.product(("restore_warm_p50", "restore_cold"), ("full", "window-200")):
            r.ratio(
                SUITE,
                f"{kind} {last}/{first} ({label})",
                r.find(SUITE, kind, records=last, history=label),
                r.find(SUITE, kind, records=first, history=label),
                better="lower",
            )


async def _restore_and_step(url: str, namespace: str, agent_id: str, repeats: int) -> list[float]:
    """Seconds (each of ``repeats``, on one warm store handle) to restore ``agent_id`` and read what
    its next model step reads: the conversation (the model's view of it) and the ledger entry
    of a new call (not there: the whole ledger is looked in). Restore alone decodes no page;
    this is what a step after it pays on top."""
    times = []
    async with open_store(url) as store:
        async with Runtime(store, namespace=namespace) as rt:
            await rt.status(agent_id)
            for _ in range(max(1, repeats)):
                t = time.perf_counter()
                state = await rt.status(agent_id)
                len(state.messages)
                state.ledger_entry("a new call")
                times.append(time.perf_counter() - t)
    return times


def _inflate(frame: bytes, decompressor: zstandard.ZstdDecompressor, with_dictionary: DictionaryFrames) -> bytes:
    """The CBOR payload of ``frame``: zstd only, no checksum, bounds or place (the floor's work)."""
    if frame[2] == FORMAT_DICTIONARY:
        return with_dictionary.decompress(
            memoryview(frame)[HEADER_SIZE_DICT:], int.from_bytes(frame[15:19], "big"), raw_size(frame)
        )
    payload = memoryview(frame)[HEADER_SIZE:]
    return decompressor.decompress(payload) if frame[3] & FLAG_ZSTD else bytes(payload)


def _floor_time(snapshot: StoredSnapshot | None, tail: list[bytes], pages: list[tuple[dict[str, Any], bytes]]) -> float:
    """Seconds (median of 3) zstd and plain ``cbor2.loads`` take on the bytes a restore reads:
    the snapshot, its pages (``(reference, stored bytes)`` in the snapshot's order) and every
    tail record. What no restore can beat; the rest is durably's own work (checksums,
    bounds, strict decoding, the fold)."""
    frames = ([snapshot.data] if snapshot is not None else []) + tail
    decompressor, with_dictionary = zstandard.ZstdDecompressor(), DictionaryFrames(None)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        raws: dict[str, bytes] = {}
        for ref, data in pages:
            # A page continuing earlier ones is a zstd frame with their payloads as its raw-content dictionary.
            prefix = b"".join(raws[base] for base in ref.get("base", ()))
            opener = decompressor
            if prefix:
                continued = zstandard.ZstdCompressionDict(prefix, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
                opener = zstandard.ZstdDecompressor(dict_data=continued)
            raws[ref["digest"]] = raw = _inflate(data, opener, with_dictionary)
            cbor2.loads(raw)
        for frame in frames:
            cbor2.loads(_inflate(frame, decompressor, with_dictionary))
        times.append(time.perf_counter() - t)
    return sorted(times)[1]


def _decode_time(snapshot: StoredSnapshot, stream: StreamId) -> float:
    """Seconds to decode and rebuild the state from ``snapshot`` alone, not its pages (median of 3)."""
    codec = RecordCodec()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        _, wire, _ = codec.decode_snapshot(snapshot, stream)
        AgentState.from_wire({k: v for k, v in wire.items() if k not in ("pages", "ledger_pages")})
        times.append(time.perf_counter() - t)
    return sorted(times)[1]


async def _pages(store: Store, snapshot: StoredSnapshot | None, stream: StreamId) -> list[tuple[dict[str, Any], bytes]]:
    """The references and stored bytes of the pages (conversation, then ledger) ``snapshot``
    names, in its order (none without a snapshot or pages)."""
    if snapshot is None or not supports_blobs(store):
        return []
    _, wire, _ = RecordCodec().decode_snapshot(snapshot, stream)
    refs = [ref for _, pages in SECTIONS for ref in wire.get(pages, [])]
    return [(ref, await store.get_blob(stream, ref["digest"])) for ref in refs]
