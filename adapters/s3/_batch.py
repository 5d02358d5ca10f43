"""The record-batch object of the S3 adapter: one append, all of its frames, one object.

One S3 PUT is atomic, so storing a whole append in one object makes the batch
all-or-nothing without any transaction. Layout (big-endian)::

    offset size  field
    0      4     magic b"dyB2" (b"dyB1": the same without the level, read as level 0)
    4      8     first seq of the batch as appended (also the seq in the key)
    12     8     last seq of the batch (first - 1 for a takeover marker: no records)
    20     8     records_from: the first seq still stored (> first after compaction trimmed it)
    28     16    writer token: random per append call, so a read-back can tell
                 "my PUT landed" from "another writer's PUT landed"
    44     4     record count (= last - records_from + 1)
    48     8     level: the fencing token the batch was written under (see "Fencing
                 tokens" in the ``durably.adapters.s3`` module docstring); 0 for none
    56     ...   per record: 4-byte length, then the frame bytes
    end-4  4     CRC-32 (zlib) of everything before it

A **takeover marker** is a batch with no records whose last seq is its first
seq - 1: it takes the key of the next append for a new lease token, so that a
stale holder's conditional PUT at that key fails. Readers see no records in it
and ``last_seq`` reads its last seq, the stream's real end.

The seqs and the token inside make every version of a batch object distinct
bytes, so an ETag (a content hash) of one version never matches another and a
stale ``If-Match`` cannot succeed by accident. The 56-byte header can be read
alone with a ranged GET to learn a batch's last seq and level.
"""

from __future__ import annotations

import secrets
import struct
import zlib
from dataclasses import dataclass

from durably.storage._errors import CorruptRecordError

MAGIC = b"dyB2"
_MAGIC_V1 = b"dyB1"
_HEADER = struct.Struct(">4sQQQ16sIQ")
_HEADER_V1 = struct.Struct(">4sQQQ16sI")
_LENGTH = struct.Struct(">I")
_CRC = struct.Struct(">I")
HEADER_SIZE = _HEADER.size
TOKEN_SIZE = 16


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """What the first ``HEADER_SIZE`` bytes of a batch object say (seqs are ints, token 16 bytes).

    ``size`` is the header's length in the object (48 for a ``dyB1`` object, which has no level).
    """

    first_seq: int
    last_seq: int
    records_from: int
    token: bytes
    count: int
    level: int = 0
    size: int = HEADER_SIZE

    @property
    def is_marker(self) -> bool:
        """True for a takeover marker: no records, its key taken for a new lease token."""
        return self.last_seq < self.first_seq

    @classmethod
    def decode(cls, data: bytes) -> BatchHeader:
        """Parse a header; raises ``CorruptRecordError`` when it is not a consistent batch header."""
        if data[:4] == _MAGIC_V1 and len(data) >= _HEADER_V1.size:
            magic, first, last, records_from, token, count = _HEADER_V1.unpack_from(data)
            level, size = 0, _HEADER_V1.size
        elif len(data) < HEADER_SIZE:
            raise CorruptRecordError(f"batch header is {len(data)} bytes, expected {HEADER_SIZE}")
        else:
            magic, first, last, records_from, token, count, level = _HEADER.unpack_from(data)
            size = HEADER_SIZE
        if magic != MAGIC and magic != _MAGIC_V1:
            raise CorruptRecordError(f"not a durably batch object (magic {magic!r})")
        if not (1 <= first <= records_from <= last + 1) or count != last - records_from + 1:
            raise CorruptRecordError(
                f"inconsistent batch header: first {first}, last {last}, from {records_from}, count {count}"
            )
        return cls(first, last, records_from, token, count, level, size)


@dataclass(frozen=True, slots=True)
class Batch:
    """A decoded batch: ``records[i]`` is the frame of seq ``records_from + i``; ``level`` as in the header."""

    first_seq: int
    last_seq: int
    records_from: int
    token: bytes
    records: tuple[bytes, ...]
    level: int = 0

    @property
    def is_marker(self) -> bool:
        """True for a takeover marker (see the module docstring)."""
        return self.last_seq < self.first_seq

    @classmethod
    def marker(cls, seq: int, level: int, token: bytes) -> Batch:
        """The takeover marker at ``seq`` (the next append's key) for the lease token ``level``."""
        return cls(seq, seq - 1, seq, token, (), level)

    def encode(self) -> bytes:
        """The object bytes (see the module docstring)."""
        parts = [
            _HEADER.pack(
                MAGIC, self.first_seq, self.last_seq, self.records_from, self.token, len(self.records), self.level
            )
        ]
        for data in self.records:
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> Batch:
        """Parse a whole batch object; raises ``CorruptRecordError`` on a bad checksum or layout."""
        if len(data) < _HEADER_V1.size + _CRC.size:
            raise CorruptRecordError(f"batch object is only {len(data)} bytes")
        body, (crc,) = data[: -_CRC.size], _CRC.unpack(data[-_CRC.size :])
        if zlib.crc32(body) != crc:
            raise CorruptRecordError("batch object checksum mismatch")
        header = BatchHeader.decode(body)
        records = []
        offset = header.size
        for _ in range(header.count):
            if offset + _LENGTH.size > len(body):
                raise CorruptRecordError("batch object ends inside a record length")
            (size,) = _LENGTH.unpack_from(body, offset)
            offset += _LENGTH.size
            if offset + size > len(body):
                raise CorruptRecordError("batch object ends inside a record")
            records.append(body[offset : offset + size])
            offset += size
        if offset != len(body):
            raise CorruptRecordError("batch object has trailing bytes")
        return cls(header.first_seq, header.last_seq, header.records_from, header.token, tuple(records), header.level)

    def seqs(self) -> range:
        """The seqs of ``records``, in order."""
        return range(self.records_from, self.last_seq + 1)

    @classmethod
    def tombstone(cls, first_seq: int, last_seq: int) -> Batch:
        """The batch ``first_seq``..``last_seq`` with every record compacted away.

        It keeps the key taken (see ``durably.adapters.s3._compaction``). Its token is fresh: the
        token only tells a writer its own PUT, and nobody reads one back here.
        """
        return cls(first_seq, last_seq, last_seq + 1, secrets.token_bytes(TOKEN_SIZE), ())

    def trimmed(self, through_seq: int) -> Batch:
        """This batch without the records at or below ``through_seq`` (compaction of a straddling batch)."""
        start = min(max(self.records_from, through_seq + 1), self.last_seq + 1)
        return Batch(
            self.first_seq, self.last_seq, start, self.token, self.records[start - self.records_from :], self.level
        )
