"""Records and snapshots to frames and back, with the schema version checks.

This is where the codec meets the schemas: it stamps the current schema
version on write, lifts older versions through the registered upcasters on
read, and refuses versions from the future, never guessing.
"""

from __future__ import annotations

from typing import Any

from durably.schemas.records import (
    CURRENT_VERSIONS,
    RECORD_SCHEMA_ID,
    SCHEMA_NAMES,
    SNAPSHOT_SCHEMA_ID,
    UPCASTERS,
    Record,
    WireShapeError,
    snapshot_from_wire,
    snapshot_to_wire,
)

from .codec import Codec, Frame, check_encodable
from .errors import CorruptRecordError, UnknownSchemaVersionError
from .spi import StoredRecord, StoredSnapshot, StreamId


class RecordCodec:
    """Encodes ``Record`` objects and state snapshots as frames, and decodes them.

    In: ``codec`` (a ``Codec``; a new one by default). Not thread-safe.
    """

    def __init__(self, codec: Codec | None = None) -> None:
        self.codec = codec or Codec()

    def encode_record(self, record: Record) -> bytes:
        """Frame bytes of ``record``. Raises ``UnencodableValueError`` naming the field."""
        check_encodable(record.data, f"{record.kind}.data", self.codec.limits.max_depth - 1)
        return self._encode(RECORD_SCHEMA_ID, record.to_wire())

    def _encode(self, schema_id: int, value: dict[str, Any]) -> bytes:
        # The caller checked the user part with a meaningful path; the envelope is ours.
        return self.codec.encode(schema_id, CURRENT_VERSIONS[schema_id], value, path=None)

    def decode_record(self, stored: StoredRecord, stream: StreamId | None = None) -> Record:
        """The ``Record`` in ``stored``. Raises ``CorruptRecordError`` (and subclasses)
        for bad bytes or a seq that differs from the stored one, and
        ``UnknownSchemaVersionError`` for a version newer than this build."""
        frame = self.codec.decode(stored.data, stream=stream, seq=stored.seq)
        value = self._upcast(frame, RECORD_SCHEMA_ID, stream, stored.seq)
        try:
            record = Record.from_wire(value)
        except WireShapeError as exc:
            raise CorruptRecordError(str(exc), stream=stream, seq=stored.seq) from exc
        if record.seq != stored.seq:
            raise CorruptRecordError(f"frame says seq {record.seq}: record was moved", stream=stream, seq=stored.seq)
        return record

    def encode_snapshot(self, seq: int, state: dict[str, Any]) -> bytes:
        """Frame bytes of a snapshot of ``state`` (plain dict) at ``seq``."""
        check_encodable(state, "state", self.codec.limits.max_depth - 1)
        return self._encode(SNAPSHOT_SCHEMA_ID, snapshot_to_wire(seq, state))

    def decode_snapshot(self, stored: StoredSnapshot, stream: StreamId | None = None) -> tuple[int, dict[str, Any], Frame]:
        """``(seq, state, frame)`` of a stored snapshot; errors as ``decode_record``."""
        frame = self.codec.decode(stored.data, stream=stream, seq=stored.seq)
        value = self._upcast(frame, SNAPSHOT_SCHEMA_ID, stream, stored.seq)
        try:
            seq, state = snapshot_from_wire(value)
        except WireShapeError as exc:
            raise CorruptRecordError(str(exc), stream=stream, seq=stored.seq) from exc
        if seq != stored.seq:
            raise CorruptRecordError(f"snapshot frame says seq {seq}", stream=stream, seq=stored.seq)
        return seq, state, frame

    @staticmethod
    def _upcast(frame: Frame, expected_schema: int, stream: StreamId | None, seq: int) -> Any:
        if frame.schema_id != expected_schema:
            raise CorruptRecordError(
                f"frame holds schema {frame.schema_id}, expected {SCHEMA_NAMES[expected_schema]}", stream=stream, seq=seq
            )
        current = CURRENT_VERSIONS[expected_schema]
        version, value = frame.schema_version, frame.value
        if version > current or version < 1:
            raise UnknownSchemaVersionError(SCHEMA_NAMES[expected_schema], version, current, stream=stream, seq=seq)
        while version < current:
            step = UPCASTERS.get((expected_schema, version))
            if step is None:
                raise UnknownSchemaVersionError(SCHEMA_NAMES[expected_schema], version, current, stream=stream, seq=seq)
            value, version = step(value), version + 1
        return value
