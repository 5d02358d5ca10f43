"""Restore = the latest valid snapshot + replay of the records after it.

A snapshot that fails to decode (corrupt, or from an unknown version), or that
belongs to another run than the journal's (a purged run's write landing late),
is skipped for the one before it; the journal is the source of truth. A record
that fails to decode is never skipped: it raises, and the agent is not resumed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio

from durably import _telemetry as tm
from durably._journal.journal_reader import JournalReader
from durably._journal.page_reader import page_refs
from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably._telemetry import Telemetry
from durably.schemas._records import Kind, Record
from durably.storage._codec import raw_size
from durably.storage._errors import CodecError, CorruptRecordError, UnknownSchemaVersionError
from durably.storage._one_read import RestoreRead, offers_one_read_restore
from durably.storage._spi import Store, StoredRecord, StoredSnapshot, StreamId

log = logging.getLogger("durably.restore")


_UNREAD = object()  # the journal's run id, not looked up yet


async def _snapshot(store: Store, stream: StreamId, at_or_before: int | None) -> StoredSnapshot | None:
    """``store.get_snapshot``, with a snapshot the adapter cannot even list or
    fetch (a foreign object where snapshots live) skipped like one that does not decode."""
    try:
        return await store.get_snapshot(stream, at_or_before)
    except CorruptRecordError as exc:
        log.warning("snapshots of %s unreadable, replaying the journal: %s", stream, exc)
        return None


async def _run_of_journal(store: Store, codec: RecordCodec, stream: StreamId) -> str | None:
    """The run id in the stream's ``started`` record (seq 1), or None when that record
    was compacted away (then the snapshots of its own run cover it) or names none.

    A snapshot must belong to this run: a worker of a purged run may still have
    had its snapshot write in flight when the same agent id was started anew,
    and that snapshot must never become the new run's state.
    The window is the young new run's (one write), when seq 1 is still there.
    """
    first = await JournalReader(store, codec, stream).first_after(0)
    if first is None or first.seq != 1:
        return None
    return first.data.get("run_id") if first.kind == Kind.STARTED else None


@dataclass
class Restored:
    """A restored ``state`` and the tail after its snapshot (for the snapshot policy).

    ``snapshot_bytes`` / ``tail_bytes``: stored bytes read; ``snapshot_raw`` /
    ``tail_raw``: the same as raw CBOR bytes, which the snapshot policy compares;
    ``recent``: the last ``RECENT`` records of the tail, decoded (fewer when the tail is shorter).
    """

    state: AgentState
    snapshot_seq: int
    snapshot_bytes: int
    tail_records: int
    tail_bytes: int
    snapshot_raw: int = 0
    tail_raw: int = 0
    recent: list[Record] = field(default_factory=list)


#: Records a restore keeps decoded (``Restored.recent``): what an activation measures its
#: approval latencies on, without reading them again.
RECENT = 32


#: Restores begun again when another writer changed the stream between the restore's reads.
_RETRIES = 3


class _ChangedMeanwhile(Exception):
    """Between the restore's reads, another writer compacted the records after the snapshot read
    away behind a newer snapshot, or purged the stream and began a new run under its id."""


async def restore(
    store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry | None = None, *, upto: int | None = None
) -> Restored | None:
    """Rebuild an agent's state from ``store``; None when the stream has no records.

    ``telemetry``: where the ``durably.checkpoint.restore`` span and the restore
    metrics go (None: nowhere).

    ``upto`` (a seq): the state as it was at that seq instead of now, from the
    nearest snapshot at or before it plus the records up to it (time travel,
    ``Runtime.state_at``); a seq past the end gives the current state.

    Raises ``CorruptRecordError`` (a damaged record, or a gap in the seqs, e.g.
    records compacted away behind a snapshot that no longer decodes) and
    ``UnknownSchemaVersionError`` (written by a newer durably; also when the gap
    is behind a skipped snapshot from a newer durably, since that is its cause);
    the stored bytes are left as they are.

    A gap that another writer's compaction opened while this restore read (a
    newer snapshot now covers it: the snapshot writer keeps two and compacts
    behind the older) is not damage: the restore begins again from the newer
    snapshot, up to ``_RETRIES`` times. Found by ``durably torture``. So does a restore
    whose tail went on past the one read of ``read_restore`` when the stream was purged
    and written anew meanwhile (its first page and the new run's later records are no
    state that ever existed; found by ``tests/runtime/test_attack_restore_gather.py``).
    """
    telemetry = telemetry or _OFF
    meters = telemetry.metrics
    started = time.perf_counter() if meters is not None else 0.0
    restored = await _restore_retrying(store, codec, stream, telemetry, upto)
    if meters is not None and restored is not None:
        meters.restore_duration.record(time.perf_counter() - started, telemetry.attributes)
        meters.restore_size.record(restored.snapshot_bytes + restored.tail_bytes, telemetry.attributes)
    return restored


_OFF = Telemetry.disabled()


async def _restore_retrying(
    store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry, upto: int | None
) -> Restored | None:
    for _ in range(_RETRIES):
        try:
            return await _restore_once(store, codec, stream, telemetry, upto)
        except _ChangedMeanwhile:
            continue
    return await _restore_once(store, codec, stream, telemetry, upto, retry=False)


async def _snapshot_and_last_seq(store: Store, stream: StreamId, upto: int | None) -> tuple[StoredSnapshot | None, int]:
    """The latest snapshot at or before ``upto`` (``_snapshot``) and the stream's last seq, looked up at once.

    On a remote store each is one or two round trips and neither needs the
    other's answer, so a restore waits for the slower instead of for both.
    ``last_seq`` must be read before the replay (appends racing it only add),
    not after the snapshot: a snapshot newer than it only ends the replay later.
    (The run id check must follow the snapshot read, so it is not sent with them:
    see ``_run_of_journal``.) Raises the snapshot lookup's error, else the last seq's.
    """
    found: dict[str, Any] = {}
    failures: dict[str, Exception] = {}

    async def look(name: str, lookup: Callable[[], Awaitable[Any]]) -> None:
        try:
            found[name] = await lookup()
        except Exception as exc:
            failures[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(look, "snapshot", lambda: _snapshot(store, stream, upto))
        tg.start_soon(look, "last", lambda: store.last_seq(stream))
    for name in ("snapshot", "last"):
        if name in failures:
            raise failures[name]
    return found["snapshot"], found["last"]


#: Records per page of the tail read (``Store.read``'s default).
_PAGE = 512


async def _read_restore(store: Store, stream: StreamId, upto: int | None) -> RestoreRead | None:
    """The restore's reads in one call, from a store that offers it (``OneReadRestore``:
    SQLite's one statement, one read transaction, one hop); None for any other store, or
    when that read fails as ``CorruptRecordError`` (then the separate reads run, and
    ``_snapshot`` decides what such a failure means).

    On a loaded event loop each read of a restore waits for the loop once more: three reads
    in turn would make ``status()`` of a finished agent cost three waits.
    """
    if not offers_one_read_restore(store):
        return None
    try:
        return await store.read_restore(stream, upto, _PAGE)
    except CorruptRecordError:
        return None


def _run_in(reader: JournalReader, first: StoredRecord | None) -> str | None:
    """The run id of the journal whose record at seq 1 is ``first`` (None: compacted away), as ``_run_of_journal``."""
    if first is None or first.seq != 1:
        return None
    record = reader.decode_loaded(first)
    return record.data.get("run_id") if record.kind == Kind.STARTED else None


async def _tail(
    store: Store, stream: StreamId, after: int, read: list[StoredRecord] | None, last: int
) -> AsyncGenerator[StoredRecord, None]:
    """The records after seq ``after``: ``read`` (the first records, already read from ``after``
    with ``last``, the stream's last seq then), then ``store.read`` from the last of them while
    that is below ``last``; without ``read``, all from the store."""
    if read is not None:
        for stored in read:
            yield stored
        after = read[-1].seq if read else after
        if after >= last:
            return
    async with aclosing(store.read(stream, after)) as records:
        async for stored in records:
            yield stored


async def _first_changed(store: Store, stream: StreamId, origin: StoredRecord | None) -> bool:
    """Whether the stream's record at seq 1 is no longer ``origin`` (None: there was none then).

    A purge and a new run under the same agent id restart the seqs at 1, so a tail read in
    several transactions may go on in the new run where the old one's page ended, and the
    frames cannot tell (they are bound to namespace, agent id and seq, not to a run); seq 1,
    the ``started`` record, names the run. Compaction removing seq 1 meanwhile reads as a
    change too: the restore then only begins again.
    """
    now: StoredRecord | None = None
    async with aclosing(store.read(stream, 0, page_size=1)) as records:
        async for stored in records:
            now = stored if stored.seq == 1 else None
            break
    return (None if now is None else now.data) != (None if origin is None else origin.data)


async def _newer_snapshot_covers(store: Store, stream: StreamId, upto: int | None, used: int, missing: int) -> bool:
    """Whether a snapshot newer than the ``used`` one now covers seqs up to ``missing``."""
    newest = await store.get_snapshot(stream, upto)
    return newest is not None and newest.seq > used and newest.seq >= missing


async def _restore_once(
    store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry, upto: int | None, *, retry: bool = True
) -> Restored | None:
    """One attempt of ``restore``; raises ``_ChangedMeanwhile`` (when ``retry``) instead of a gap error
    for a gap behind a snapshot newer than the one it read, and for a stream purged and written anew
    while its tail was read past ``read_restore``'s page."""
    with telemetry.span("durably.checkpoint.restore") as span:
        if span is not None:
            span.set_attribute(tm.AGENT_ID, stream.agent_id)
        state, snap_seq, snap_bytes, raw_total, snap_raw = None, 0, 0, 0, 0
        newer: UnknownSchemaVersionError | None = None  # the first snapshot skipped for its version

        def cut_short(message: str, seq: int) -> Exception:
            error = CorruptRecordError(message, stream=stream, seq=seq)
            if newer is not None:
                newer.__cause__ = error
                return newer
            return error

        one_read = await _read_restore(store, stream, upto)
        tail_read: list[StoredRecord] | None = None  # records after the snapshot, read with it
        first: StoredRecord | None = None  # the journal's seq 1, read with the snapshot
        origin: StoredRecord | None = None  # seq 1 as the one read found it (None: there was none)
        if one_read is None:
            snapshot, last = await _snapshot_and_last_seq(store, stream, upto)
        else:
            snapshot, last, first, tail_read = one_read
            # Seq 1 as that read found it: read with the snapshot, or the tail's first record.
            origin = first if snapshot is not None else next((r for r in tail_read[:1] if r.seq == 1), None)
        run = _UNREAD
        while snapshot is not None:
            try:
                seq, wire, frame = codec.decode_snapshot(snapshot, stream)
                # Pages are read and checked here (a missing or damaged one skips this snapshot),
                # and decoded only when the state needs more than the snapshot's newest part.
                wire, older = await page_refs(store, codec, stream, seq, wire)
                candidate = AgentState.from_paged(wire, older) if older else AgentState.from_wire(wire)
                if run is _UNREAD:
                    # The journal's seq 1 read with this snapshot (the same read transaction), or
                    # after the snapshot read, never before it.
                    read_with = one_read is not None and tail_read is not None
                    run = (
                        _run_in(JournalReader(store, codec, stream), first)
                        if read_with
                        else await _run_of_journal(store, codec, stream)
                    )
                if run is not None and candidate.run_id != run:
                    # Written by a worker of a purged run whose write landed after the purge.
                    raise CorruptRecordError(
                        f"snapshot of run {candidate.run_id}, the journal is run {run}", stream=stream, seq=snapshot.seq
                    )
                state, snap_seq, snap_bytes = candidate, seq, len(snapshot.data)
                state.last_seq = seq
                raw_total = snap_raw = frame.raw_size
                break
            except CodecError as exc:
                if newer is None and isinstance(exc, UnknownSchemaVersionError):
                    newer = exc
                if span is not None:
                    span.add_event("snapshot.skipped", {tm.SNAPSHOT_SEQ: snapshot.seq})
                log.warning("snapshot of %s at seq %d unreadable, trying an older one: %s", stream, snapshot.seq, exc)
                tail_read = None  # read after the skipped snapshot: the tail is read again, after the one used
                snapshot = await _snapshot(store, stream, snapshot.seq - 1)
        state = state or AgentState()
        tail, tail_bytes = 0, 0
        recent: deque[Record] = deque(maxlen=RECENT)
        if upto is not None:
            last = min(last, upto)
        # Records read after the one read's transaction (a skipped snapshot, a tail past its page)
        # may be of a new run of this agent id: then seq 1 is no longer the one read's (see
        # _first_changed). Stores without read_restore are not checked: a read more per restore.
        later = tail_read is None or (tail_read[-1].seq if tail_read else state.last_seq) < last

        async def unchanged() -> None:
            if one_read is not None and later and await _first_changed(store, stream, origin):
                if retry:
                    raise _ChangedMeanwhile()
                raise CorruptRecordError(
                    "the stream was purged and written anew during every read of it", stream=stream, seq=1
                )

        reader = JournalReader(store, codec, stream)
        async with aclosing(_tail(store, stream, state.last_seq, tail_read, last)) as records:
            async for stored in records:
                if upto is not None and stored.seq > upto:
                    break
                record = await reader.decode(stored)
                if record.seq != state.last_seq + 1:
                    await unchanged()
                    if retry and await _newer_snapshot_covers(store, stream, upto, snap_seq, record.seq - 1):
                        raise _ChangedMeanwhile()
                    raise cut_short(f"gap in the journal: seq {state.last_seq + 1} is missing", record.seq)
                apply(state, record)
                recent.append(record)
                tail += 1
                tail_bytes += len(stored.data)
                raw_total += raw_size(stored.data)
        if state.last_seq < last:
            await unchanged()
            if retry and await _newer_snapshot_covers(store, stream, upto, snap_seq, last):
                raise _ChangedMeanwhile()
            raise cut_short(f"journal ends at seq {state.last_seq} but the stream's last seq is {last}", last)
        await unchanged()
        if state.last_seq == 0:
            return None
        if span is not None:
            span.set_attributes(
                {
                    tm.SEQ: state.last_seq,
                    tm.SNAPSHOT_SEQ: snap_seq,
                    tm.RECORD_COUNT: tail,
                    tm.STORED_BYTES: snap_bytes + tail_bytes,
                    tm.RAW_BYTES: raw_total,
                }
            )
        return Restored(state, snap_seq, snap_bytes, tail, tail_bytes, snap_raw, raw_total - snap_raw, list(recent))
