"""Reading an agent's journal: the stored rows of a stream, decoded into records.

Every part of durably that reads an agent's records (restore, the status index,
history, watch, events, describe, fork, verify, retention, re-encryption, the
writer's check of records appended after its own) reads them here, so one place
knows how a stored row maps to a record. A ``JournalReader`` is bound to one
stream; it reads forward from any seq and decodes row by row, keeping what it
decoded last, so a row whose meaning depends on an earlier row of the same
commit can be decoded without the caller knowing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from durably._journal.records import RecordCodec
from durably.schemas._records import Record
from durably.storage._errors import CorruptRecordError
from durably.storage._group_frames import is_group, is_member, read_member
from durably.storage._spi import Store, StoredRecord, StreamId


class JournalReader:
    """Decodes the stored rows of ``stream`` into ``Record`` objects.

    In: ``store`` (read only for rows a decode needs that the caller did not
    pass), ``codec`` (a ``RecordCodec``) and ``stream``. Not thread-safe: one
    reader per task. Decoding raises what ``RecordCodec.decode_record`` raises:
    ``CorruptRecordError`` (and subclasses) naming the seq for bad bytes or a
    moved row, ``UnknownSchemaVersionError`` for a version newer than this build,
    the cipher's errors for an encrypted row that does not open.
    """

    def __init__(self, store: Store, codec: RecordCodec, stream: StreamId) -> None:
        self.store = store
        self.codec = codec
        self.stream = stream
        self._group: tuple[int, list[Record]] | None = None  # (first seq, records) of the group decoded last

    def decode_loaded(self, stored: StoredRecord) -> Record:
        """The record in ``stored``, decoded from its own bytes and what this reader
        decoded before (no store read): for rows read in seq order from a commit's first
        row, as restore's one read returns them. Raises as the class says, and
        ``CorruptRecordError`` for a member row whose group frame this reader has not read."""
        data = stored.data
        if is_member(data):
            first, count = self._group_of(stored)
            group = self._group
            if group is None or group[0] != first:
                raise CorruptRecordError(
                    f"the group frame at seq {first} this row belongs to was not read",
                    stream=self.stream,
                    seq=stored.seq,
                )
            if len(group[1]) != count:
                raise CorruptRecordError(
                    f"the row names a group of {count} records, the frame at seq {first} holds {len(group[1])}",
                    stream=self.stream,
                    seq=stored.seq,
                )
            return group[1][stored.seq - first]
        if is_group(data):
            records = self.codec.decode_group(stored, self.stream)
            self._group = (stored.seq, records)
            return records[0]
        return self.codec.decode_record(stored, self.stream)

    async def decode(self, stored: StoredRecord) -> Record:
        """The record in ``stored``, reading the group frame it belongs to when this reader
        has not decoded it yet. Raises as the class says (``CorruptRecordError`` naming the
        group's seq when that frame is gone or is not the group the row names), and the
        store's errors."""
        if is_member(stored.data):
            first, _count = self._group_of(stored)
            group = self._group
            if group is None or group[0] != first:
                head = None
                async with aclosing(self.store.read(self.stream, first - 1, page_size=1)) as rows:
                    async for row in rows:
                        head = row
                        break
                if head is None or head.seq != first or not is_group(head.data):
                    raise CorruptRecordError(
                        f"gap in the journal: the group frame this row belongs to is missing at seq {first}",
                        stream=self.stream,
                        seq=stored.seq,
                    )
                self.decode_loaded(head)
        return self.decode_loaded(stored)

    def _group_of(self, stored: StoredRecord) -> tuple[int, int]:
        """``(first seq, records)`` of the group the member row ``stored`` names."""
        index, count = read_member(stored.data, self.stream, stored.seq)
        return stored.seq - index, count

    async def rows(
        self, after_seq: int = 0, *, upto: int | None = None, page_size: int = 512
    ) -> AsyncGenerator[tuple[StoredRecord, Record], None]:
        """``(stored, record)`` for each row after seq ``after_seq`` (up to ``upto``
        included when given), in seq order, read ``page_size`` rows at a time.

        Raises as ``decode`` at the first row that does not decode (the pairs before it
        were yielded) and the store's errors (``StoreUnavailableError``, ...)."""
        async with aclosing(self.store.read(self.stream, after_seq, page_size=page_size)) as stored_rows:
            async for stored in stored_rows:
                if upto is not None and stored.seq > upto:
                    return
                yield stored, await self.decode(stored)

    async def records(
        self, after_seq: int = 0, *, upto: int | None = None, page_size: int = 512
    ) -> AsyncGenerator[Record, None]:
        """The records after seq ``after_seq`` (up to ``upto``), as ``rows`` without the stored rows."""
        async with aclosing(self.rows(after_seq, upto=upto, page_size=page_size)) as pairs:
            async for _stored, record in pairs:
                yield record

    async def first_after(self, after_seq: int) -> Record | None:
        """The first record still stored after seq ``after_seq`` (e.g. ``last_seq - 1``
        for the last record), or None when none is. Raises as ``rows``."""
        async with aclosing(self.rows(after_seq, page_size=1)) as pairs:
            async for _stored, record in pairs:
                return record
        return None
