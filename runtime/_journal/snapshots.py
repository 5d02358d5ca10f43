"""When to snapshot, and the background writer that does it off the hot path.

Policy: snapshot after ``every_records`` records or ``every_bytes`` raw bytes
since the last snapshot, *and* once the tail is at least ``tail_ratio`` of the
last snapshot's size. The second condition makes snapshot cost geometric: each
snapshot is paid for by a tail at least ``tail_ratio`` of its size, so the
amortised cost per appended byte stays constant however long the conversation
grows (the same argument as a growing array's doubling), while restore reads
at most a snapshot plus a tail bounded by ``every_records`` or that ratio.

Sizes are raw: CBOR bytes before compression (the frame header's raw size),
because both costs the ratio weighs, encoding a snapshot and decoding the tail
on restore, follow raw bytes. Compressed sizes would mislead: one large
snapshot frame compresses about 3x better than the small record frames of its
tail (zstd finds the repeats across records), so comparing stored bytes would take
snapshots about 3x more often than the ratio says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from durably import _telemetry as tm
from durably._figures import check_bool, check_figure
from durably._journal.claim import LeaseClaim
from durably._journal.page_collection import PageCollector
from durably._journal.page_reader import PageCheck
from durably._journal.page_writer import Pager
from durably._journal.records import RecordCodec
from durably._telemetry import Telemetry
from durably.errors import AgentLeaseLostError, InvalidArgumentError
from durably.storage._codec import raw_size
from durably.storage._errors import DurablyError
from durably.storage._spi import Store, StoredSnapshot, StreamId, supports_blob_delete, supports_blobs

log = logging.getLogger("durably.snapshots")


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When snapshots of an agent's state are written, and how many are kept.

    A snapshot is due after ``every_records`` records or ``every_bytes`` bytes
    *and* once the tail is at least ``tail_ratio`` of the last snapshot, so the
    cost per appended byte stays constant however long the run grows (the
    geometric policy of log-structured stores). Bytes are raw: the CBOR sizes
    before compression.

    Why one snapshot without compaction: the journal is then whole, so a
    damaged newest snapshot falls back to replaying it (slower, as correct),
    and a second full copy of the state only costs bytes (a third of the file
    after 1,000 steps). With compaction the records the
    older snapshot covers are gone, so it must stay.

    Attributes:
        every_records: Records since the last snapshot (0 turns snapshots off).
        every_bytes: Raw bytes of the tail since the last snapshot.
        tail_ratio: Raw tail bytes / raw bytes of the last snapshot.
        keep: Snapshots kept per stream (older ones are deleted); restore reads
            the newest and falls back to the one before if the newest is
            damaged, then to the journal. None (the default): 2 with
            ``compact``, else 1.
        compact: Once ``keep`` snapshots exist, delete the records covered by the
            oldest of them (the journal before it is then gone: keep it off for
            an audit trail).

    Raises:
        InvalidArgumentError: A ``ValueError``: a figure that is not a finite number >= 0,
            or ``keep`` < 1.
        ArgumentTypeError: ``compact`` is not a bool (a ``TypeError``).
    """

    every_records: int = 200
    every_bytes: int = 1 << 20
    tail_ratio: float = 0.5
    keep: int | None = None
    compact: bool = False

    def __post_init__(self) -> None:
        check_figure("SnapshotPolicy", "every_records", self.every_records, integer=True, optional=False)
        check_figure("SnapshotPolicy", "every_bytes", self.every_bytes, integer=True, optional=False)
        check_figure("SnapshotPolicy", "tail_ratio", self.tail_ratio, optional=False)
        check_bool("SnapshotPolicy", "compact", self.compact)
        if self.keep is None:
            object.__setattr__(self, "keep", 2 if self.compact else 1)
        elif self.keep < 1:
            raise InvalidArgumentError("SnapshotPolicy.keep must be at least 1")

    def due(self, records_since: int, bytes_since: int, last_snapshot_bytes: int) -> bool:
        """Whether a snapshot should be taken now.

        Args:
            records_since: The tail's record count since the last snapshot.
            bytes_since: The tail's raw bytes since the last snapshot.
            last_snapshot_bytes: The last snapshot's raw bytes (0: none yet).

        Returns:
            True when ``every_records`` or ``every_bytes`` is reached and the tail
                is at least ``tail_ratio`` of the last snapshot (always False when
                ``every_records`` is 0).
        """
        if self.every_records <= 0:
            return False
        if records_since < self.every_records and bytes_since < self.every_bytes:
            return False
        return bytes_since >= self.tail_ratio * last_snapshot_bytes


class SnapshotWriter:
    """Encodes and stores snapshots in the background, newest first.

    ``submit`` never blocks the step loop: it replaces any snapshot of the
    same stream still waiting (only the newest matters). ``run`` is the
    worker; start it in the runtime's task group. A failed snapshot is logged
    and skipped: the journal alone is enough for restore.

    A snapshot is written under its activation's lease claim: the store fences
    the snapshot itself, but its pages are blobs without a fence, so the claim
    is checked before each page, and an activation gives its lease back only
    after ``release`` (nothing of its snapshots is written after that, so a
    purge made elsewhere once the lease is free is never undone). ``codec_factory``
    builds the worker thread's own ``RecordCodec`` (e.g. one that encrypts; its
    ``formats`` say whether snapshots are paged);
    ``telemetry`` gets a ``durably.snapshot.save`` span and the snapshot metrics.
    """

    def __init__(
        self,
        store: Store,
        *,
        policy: SnapshotPolicy,
        telemetry: Telemetry | None = None,
        codec_factory: Callable[[], RecordCodec] = RecordCodec,
    ) -> None:
        self._store = store
        self._policy = policy
        self._telemetry = telemetry or Telemetry.disabled()
        self._codec_factory = codec_factory
        self._writing: tuple[StreamId, LeaseClaim | None, anyio.Event] | None = None
        self._waiting: dict[StreamId, tuple[int, dict[str, Any], LeaseClaim | None]] = {}
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        # Streams whose activation waits to give its lease back until its snapshot is
        # written: taken before the others, first come first served (an ordered set).
        self._releasing: dict[StreamId, None] = {}
        self._running = False  # whether ``run`` is there to write what is waiting
        self._progress = anyio.Event()  # set (and replaced) after each write and when ``run`` stops
        self.written = 0
        self._recent: dict[StreamId, list[int]] = {}  # seqs of the snapshots written per stream, newest last
        # On a store with blobs the older conversation goes to pages, each written once.
        self._pager = Pager(store) if supports_blobs(store) else None
        # ... and the pages no kept snapshot names any more are deleted, where the store can.
        self._collector = PageCollector(store, self._pager) if self._pager and supports_blob_delete(store) else None
        # Compaction's check that every page of the snapshot it compacts behind opens.
        self._page_check = PageCheck()

    def submit(
        self, stream: StreamId, seq: int, state_wire: dict[str, Any], *, claim: LeaseClaim | None = None
    ) -> None:
        """Queue a snapshot of ``state_wire`` (from ``AgentState.to_wire``) at ``seq``.

        ``claim``: the lease claim of the activation that made the state (None: a
        writer without a lease). No page is written once the claim is lost or has
        lapsed (``LeaseClaim.check``), and its fencing token goes with the snapshot,
        checked by the store; either way a refused snapshot is logged and skipped."""
        self._waiting[stream] = (seq, state_wire, claim)
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every submitted snapshot is written or has failed."""
        await self._idle.wait()

    async def discard(self, stream: StreamId) -> None:
        """Drop the snapshot of ``stream`` still waiting, and wait for one being written.

        Called before a purge: a snapshot of the old run must not land after it,
        in a stream the same agent id may start anew.
        """
        self._waiting.pop(stream, None)
        self._recent.pop(stream, None)
        if self._pager is not None:
            self._pager.forget(stream)  # the purge deletes the stream's pages
        if self._collector is not None:
            self._collector.forget(stream)
        self._page_check.forget(stream)
        writing = self._writing
        if writing is not None and writing[0] == stream:
            await writing[2].wait()

    async def release(self, claim: LeaseClaim) -> None:
        """Before ``claim``'s lease is given back: end every snapshot write under it.

        The snapshot still waiting under it is written next, ahead of other
        streams' (the agent's last state: its restores then read that snapshot,
        not the tail), and the one being written under it is waited for: the
        write in flight (whichever stream), those of streams released earlier,
        then its own; never the other streams' waiting snapshots. Once this
        returns, this writer writes nothing more under ``claim`` (its activation
        has ended and submits no more), so another runtime may take the lease and
        purge. A snapshot waiting while the worker is not running (the runtime is
        closing) is dropped: the journal alone restores the agent. Never raises.
        """
        stream = claim.stream
        while True:
            waiting = self._waiting.get(stream)
            queued = waiting is not None and waiting[2] is claim
            writing = self._writing is not None and self._writing[1] is claim
            if not queued and not writing:
                return
            if queued and not self._running:
                del self._waiting[stream]
                return
            if queued:
                self._releasing[stream] = None
            await self._progress.wait()

    async def run(self, on_written: Callable[[StreamId, int, int], None]) -> None:
        """Worker loop; ``on_written(stream, seq, raw_bytes)`` is called after each write
        (``raw_bytes``: the snapshot's CBOR size, what the policy compares)."""
        codec = self._codec_factory()  # a thread's own codec: zstd contexts are not shareable
        self._running = True
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                while self._waiting:
                    stream, (seq, wire, claim) = self._next()
                    self._writing = (stream, claim, anyio.Event())
                    try:
                        size = await self._write(codec, stream, seq, wire, claim)
                    finally:
                        self._writing[2].set()
                        self._writing = None
                        self._progressed()
                    if size is not None:
                        on_written(stream, seq, size)
                self._idle.set()
        finally:
            self._running = False
            self._progressed()  # a release waiting for a write that will not come drops it

    def _next(self) -> tuple[StreamId, tuple[int, dict[str, Any], LeaseClaim | None]]:
        """The next snapshot to write: a releasing stream's first, else the newest submitted."""
        while self._releasing:
            stream = next(iter(self._releasing))
            del self._releasing[stream]
            if stream in self._waiting:
                return stream, self._waiting.pop(stream)
        return self._waiting.popitem()

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def _prune(
        self, codec: RecordCodec, stream: StreamId, seq: int, data: bytes, check: Callable[[], None]
    ) -> None:
        """Keep the newest ``policy.keep`` snapshots; with ``compact``, drop the
        records the oldest kept one covers, once the new one and every page it names
        read back (else the ``CorruptRecordError`` skips the write as a failed one).

        ``check`` is called before each delete and raises once the lease is gone:
        deletes carry no fencing token, and a stream purged meanwhile may hold a
        new run whose records and snapshots sit below this writer's seqs."""
        recent = self._recent.setdefault(stream, [])
        recent.append(seq)
        keep = self._policy.keep
        assert keep is not None  # SnapshotPolicy.__post_init__ resolves None to 1 or 2
        del recent[:-keep]
        if len(recent) < keep:
            return
        oldest_kept = recent[0]
        collector = self._collector
        dropped = await collector.dropping(codec, stream, oldest_kept) if collector is not None else set()
        check()
        await self._store.delete_snapshots(stream, oldest_kept)
        if collector is not None:
            check()
            await collector.pruned(stream, oldest_kept, dropped)
        if self._policy.compact:
            # Never compact behind a snapshot that does not decode: that would lose the agent.
            _, state, _ = await anyio.to_thread.run_sync(codec.decode_snapshot, StoredSnapshot(seq, data), stream)
            # Nor behind one naming a page that does not open: restore checks a page's digest
            # but decodes it only when the state first needs it, after the records are gone.
            # Paid here because deleting records cannot be undone; it reads and decodes each
            # page once per process (PageCheck remembers those it opened).
            await self._page_check.check(self._store, codec, stream, seq, state)
            check()
            await self._store.delete_records(stream, oldest_kept)

    async def _write(
        self, codec: RecordCodec, stream: StreamId, seq: int, wire: dict[str, Any], claim: LeaseClaim | None
    ) -> int | None:
        telemetry = self._telemetry
        meters = telemetry.metrics
        started = time.perf_counter() if meters is not None else 0.0
        with telemetry.span("durably.snapshot.save") as span:
            if span is not None:
                span.set_attributes({tm.AGENT_ID: stream.agent_id, tm.SEQ: seq})
            # Pages and deletes only while the lease is ours: they carry no fence.
            check = claim.check if claim is not None else _unchecked
            try:
                if self._pager is not None and codec.formats.paged:
                    # Pages first: a snapshot is only stored once every page it names is.
                    wire = await self._pager.page_out(codec, stream, seq, wire, check)
                # zstd releases the GIL, so encoding in a worker thread keeps the loop responsive.
                data = await anyio.to_thread.run_sync(codec.encode_snapshot, seq, wire, stream)
                fence = None if claim is None else claim.fence
                with anyio.CancelScope(shield=True):
                    if fence is None:  # a writer without a lease: the SPI's call as stores without leases know it
                        await self._store.put_snapshot(stream, seq, data)
                    else:
                        await self._store.put_snapshot(stream, seq, data, fence=fence)
                    if self._collector is not None:
                        self._collector.wrote(stream, seq, wire)
                    try:
                        await self._prune(codec, stream, seq, data, check)
                    except AgentLeaseLostError as exc:
                        log.warning("snapshots of %s before seq %d not pruned: %s", stream, seq, exc)
            except DurablyError as exc:
                tm.record_exception(span, exc)
                log.warning("snapshot of %s at seq %d skipped: %s", stream, seq, exc)
                return None
            if span is not None:
                span.set_attributes({tm.RAW_BYTES: raw_size(data), tm.STORED_BYTES: len(data)})
        if meters is not None:
            meters.snapshot_duration.record(time.perf_counter() - started, telemetry.attributes)
            meters.snapshot_size.record(len(data), telemetry.attributes)  # stored bytes (the metric says so)
        self.written += 1
        return raw_size(data)  # what the snapshot policy weighs


def _unchecked() -> None:
    """The lease check of a writer without a lease (a single-writer store): nothing to lose."""
