"""``durably verify``: read every frame of a namespace and report damage, changing nothing.

Restore reads only the latest valid snapshot and the records after it, so
damage to a record a snapshot already covers (bit rot, a bad copy, a foreign
value) stays silent until that snapshot is lost too. An operator's check has
to read everything: every record (checksum, place, schema version, seq),
every snapshot down the chain, and the seqs between them (a gap, or a journal
shorter than the stream's last seq, is damage unless a snapshot covers it,
as compaction leaves it). A LangGraph thread's frames (``threads``) are checked
by their own schema: decoded, and each record's shape folded. Nothing is written, locked or repaired: the report
says what is wrong and where, as a filesystem's ``fsck -n`` or PostgreSQL's
``amcheck`` do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

from durably._journal.journal_reader import JournalReader
from durably._journal.page_reader import page_in
from durably._journal.records import RecordCodec
from durably._reading.threads import fold_record, is_thread_frame, snapshot_state
from durably.integrations._langgraph_threads import ThreadState
from durably.storage._errors import CodecError, CorruptRecordError
from durably.storage._spi import Store, StreamId


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong in a stream: ``where`` (``record``, ``snapshot`` or
    ``journal``), the ``seq`` concerned, the ``error`` type's name and a ``detail``."""

    where: str
    seq: int
    error: str
    detail: str


@dataclass(slots=True)
class StreamReport:
    """What ``verify_stream`` found in ``stream``: ``records`` and ``snapshots``
    read and valid, ``last_seq`` (the store's), ``first_seq`` (the first record
    still stored, 0 when none) and ``problems`` (empty when all is well)."""

    stream: StreamId
    last_seq: int = 0
    first_seq: int = 0
    records: int = 0
    snapshots: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """A plain dict (for ``--json``): the fields, ``ok``, and the stream as ``namespace``/``agent_id``."""
        out = asdict(self)
        out["stream"] = {"namespace": self.stream.namespace, "agent_id": self.stream.agent_id}
        out["ok"] = self.ok
        return out


def _problem(where: str, seq: int, exc: BaseException) -> Problem:
    return Problem(where, seq, type(exc).__name__, str(exc))


async def verify_stream(store: Store, codec: RecordCodec, stream: StreamId) -> StreamReport:
    """Read every record and snapshot of ``stream`` and report what does not decode or fit.

    Raises only ``StoreUnavailableError`` (the store cannot be read now);
    damage of every kind is a ``Problem`` in the report.
    """
    report = StreamReport(stream, last_seq=await store.last_seq(stream))
    snapshot_seqs = await _snapshots(store, codec, stream, report)
    expected = 0
    reader = JournalReader(store, codec, stream)
    try:
        async for stored in store.read(stream):
            if expected == 0:
                report.first_seq = stored.seq
                if stored.seq > 1 and not any(seq >= stored.seq - 1 for seq in snapshot_seqs):
                    report.problems.append(
                        Problem(
                            "journal",
                            1,
                            "CorruptRecordError",
                            f"records 1..{stored.seq - 1} are missing and no snapshot covers them",
                        )
                    )
            elif stored.seq != expected:
                report.problems.append(
                    Problem(
                        "journal", expected, "CorruptRecordError", f"gap: seqs {expected}..{stored.seq - 1} are missing"
                    )
                )
            expected = stored.seq + 1
            try:
                if is_thread_frame(stored.data):  # a LangGraph thread's record: its own schema
                    fold_record(ThreadState(), codec.codec, stored, stream)
                else:
                    await reader.decode(stored)
            except CodecError as exc:
                report.problems.append(_problem("record", stored.seq, exc))
            else:
                report.records += 1
    except CorruptRecordError as exc:  # the adapter itself could not read on (a damaged batch, a foreign key)
        report.problems.append(_problem("journal", exc.seq or expected, exc))
        return report
    end = expected - 1 if expected else max(snapshot_seqs, default=0)
    if end < report.last_seq:
        report.problems.append(
            Problem(
                "journal",
                end + 1,
                "CorruptRecordError",
                f"the journal ends at seq {end} but the stream's last seq is {report.last_seq}",
            )
        )
    return report


async def _snapshots(store: Store, codec: RecordCodec, stream: StreamId, report: StreamReport) -> list[int]:
    """The seqs of the snapshots that decode, newest first; the others become problems."""
    valid = []
    try:
        snapshot = await store.get_snapshot(stream)
        while snapshot is not None:
            try:
                if is_thread_frame(snapshot.data):
                    snapshot_state(codec.codec, snapshot, stream)
                else:
                    seq, wire, _ = codec.decode_snapshot(snapshot, stream)
                    await page_in(store, codec, stream, seq, wire)  # its pages read and checked too
            except CodecError as exc:
                report.problems.append(_problem("snapshot", snapshot.seq, exc))
            else:
                valid.append(snapshot.seq)
                report.snapshots += 1
            snapshot = await store.get_snapshot(stream, snapshot.seq - 1)
    except CorruptRecordError as exc:
        report.problems.append(_problem("snapshot", exc.seq or 0, exc))
    return valid


async def verify_namespace(store: Store, codec: RecordCodec, namespace: str) -> AsyncIterator[StreamReport]:
    """``verify_stream`` for every stream of ``namespace``, in ``list_streams`` order, one at a time
    (memory bounded by one stream's page and its snapshot seqs)."""
    async for stream in store.list_streams(namespace):
        yield await verify_stream(store, codec, stream)
