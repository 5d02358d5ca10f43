"""Records and snapshots to frames and back, with the schema version checks.

This is where the codec meets the schemas: it stamps the current schema
version on write, lifts older versions through the registered upcasters on
read, and refuses versions from the future, never guessing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from durably.errors import MissingUpcasterError
from durably.schemas._records import (
    CURRENT_VERSIONS,
    KINDS,
    RECORD_SCHEMA_ID,
    SCHEMA_NAMES,
    SNAPSHOT_SCHEMA_ID,
    Record,
    WireShapeError,
    snapshot_from_wire,
    snapshot_to_wire,
)
from durably.schemas._upcasters import NoUpcastPathError, upcast
from durably.storage._codec import Codec, Frame, FrameCipher, check_encodable
from durably.storage._errors import (
    CorruptRecordError,
    InvalidRequestError,
    UnencodableValueError,
    UnknownSchemaVersionError,
)
from durably.storage._group_frames import MAX_GROUP, decode_group, encode_group
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

from .write_formats import FIRST_PAGED, NEWEST, WriteFormats

#: Levels a record's data may end up below the top of a snapshot (e.g.
#: ``state.messages[i].content``): records get that much less depth than
#: snapshots, so a record that was accepted never makes later snapshots fail.
STATE_NESTING = 8


class RecordCodec:
    """Encodes ``Record`` objects and state snapshots as frames, and decodes them.

    In: ``codec`` (a ``Codec``; a new one by default), ``cipher`` (a
    ``FrameCipher`` for the default codec: encryption at rest, see
    ``durably.storage._crypto``), ``formats`` (what is written: group frames or
    not, the snapshot version; ``durably._journal.write_formats``). Reading
    decodes every format whatever ``formats`` says. Not thread-safe.
    """

    def __init__(
        self, codec: Codec | None = None, *, cipher: FrameCipher | None = None, formats: WriteFormats = NEWEST
    ) -> None:
        self.codec = codec or Codec(cipher=cipher)
        self.formats = formats
        self._twins = threading.local()  # see twin_for_this_thread

    def encode_record(self, record: Record, stream: StreamId | None = None) -> bytes:
        """Frame bytes of ``record``, to be stored in ``stream`` (required, and bound
        into the ciphertext, when the codec encrypts). Raises ``UnencodableValueError``
        naming the field."""
        # The envelope is checked too: a record that encodes must also decode, so a
        # bad kind or a non-dict data fails here, at save time, not at restore.
        return self.record_frame(self.record_payload(record), record.seq, stream)

    def record_payload(self, record: Record) -> bytes:
        """The CBOR payload of ``record``, the first half of ``encode_record`` (the half
        that reads the record's values, so the one that stays on the caller's thread).
        Raises ``UnencodableValueError`` as ``encode_record``."""
        if record.kind not in KINDS:
            raise UnencodableValueError("record.kind", f"unknown record kind {record.kind!r}")
        if type(record.seq) is not int or record.seq < 1:
            raise UnencodableValueError("record.seq", f"seq must be an int >= 1, got {record.seq!r}")
        if type(record.at) not in (int, float):
            raise UnencodableValueError("record.at", f"at must be unix seconds (float), got {type(record.at).__name__}")
        if type(record.data) is not dict:
            raise UnencodableValueError(
                f"{record.kind}.data", f"{type(record.data).__name__} is not supported (use a dict)"
            )
        tagged = check_encodable(record.data, f"{record.kind}.data", self.codec.limits.max_depth - STATE_NESTING)
        label = f"{record.kind}.data"
        try:
            return self.codec.payload(record.to_wire(), path=label, check=False, tagged=tagged)
        except UnencodableValueError as exc:
            # Found on the wire map, whose "d" is the record's data: name it as the caller knows it.
            if exc.path.startswith(f"{label}.d"):
                raise UnencodableValueError(label + exc.path[len(label) + 2 :], exc.reason) from exc
            raise

    def record_frame(self, raw: bytes, seq: int, stream: StreamId | None = None) -> bytes:
        """The frame of a record's payload ``raw`` (``record_payload``) stored at ``seq`` in
        ``stream``: the second half of ``encode_record`` (zstd, cipher, CRC-32), which reads
        no Python value and so may run on another thread's ``RecordCodec`` (``twin``)."""
        return self.codec.frame(
            RECORD_SCHEMA_ID, CURRENT_VERSIONS[RECORD_SCHEMA_ID], raw, stream=stream, seq=seq, small=True
        )

    def commit_frames(self, payloads: Sequence[bytes], first: int, stream: StreamId) -> list[bytes]:
        """The stored rows of one commit's record payloads (``record_payload``), stored from
        seq ``first`` in ``stream``: one record's frame as ``record_frame``, or for two or
        more (unless ``formats`` writes no group frames) one group frame and its member rows (``durably.storage._group_frames``): one
        compression, one checksum and one seal for the commit (one frame per record when
        the group would be over the codec's decode limit or ``MAX_GROUP``). Like ``record_frame`` it reads
        no Python value. Raises ``InvalidRequestError`` for no payload."""
        if not payloads:
            raise InvalidRequestError("a commit holds at least one record")
        # A group decodes as one frame: one the decode limit would refuse (or too many
        # records for its count) is stored as one frame per record instead.
        if (
            not self.formats.group_frames
            or len(payloads) == 1
            or len(payloads) > MAX_GROUP
            or sum(map(len, payloads)) + 3 > self.codec.limits.max_raw_size
        ):
            return [self.record_frame(payload, first + i, stream) for i, payload in enumerate(payloads)]
        return encode_group(self.codec, RECORD_SCHEMA_ID, CURRENT_VERSIONS[RECORD_SCHEMA_ID], payloads, stream, first)

    def twin_for_this_thread(self) -> RecordCodec:
        """A twin of this codec (same settings and cipher, ``Codec.twin``) for the calling
        thread, made once per thread and kept while the thread lives: a worker thread
        encodes on it while this one goes on serving the loop (zstd contexts are not
        shareable between threads)."""
        twin: RecordCodec | None = getattr(self._twins, "codec", None)
        if twin is None:
            twin = self._twins.codec = RecordCodec(self.codec.twin(), formats=self.formats)
        return twin

    def _encode(
        self,
        schema_id: int,
        value: dict[str, Any],
        stream: StreamId | None,
        seq: int,
        path: str,
        tagged: bool,
        version: int,
    ) -> bytes:
        # The caller checked the user part with a meaningful path; the envelope is ours.
        return self.codec.encode(
            schema_id,
            version,
            value,
            path=path,
            check=False,
            tagged=tagged,
            stream=stream,
            seq=seq,
        )

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

    def decode_group(self, stored: StoredRecord, stream: StreamId | None = None) -> list[Record]:
        """The records of the group frame ``stored`` (``commit_frames``), from its seq on.
        Raises as ``decode_record`` (for every record of the group: each names its own seq),
        and ``InvalidRequestError`` without ``stream`` (a group frame is bound to its place)."""
        if stream is None:
            raise InvalidRequestError("a group frame is bound to its place: decoding it needs its stream")
        schema_id, version, values, raw = decode_group(self.codec, stored.data, stream, stored.seq)
        records = []
        for index, value in enumerate(values):
            seq = stored.seq + index
            upcast_value = self._upcast(Frame(schema_id, version, value, raw, 0), RECORD_SCHEMA_ID, stream, seq)
            try:
                record = Record.from_wire(upcast_value)
            except WireShapeError as exc:
                raise CorruptRecordError(str(exc), stream=stream, seq=seq) from exc
            if record.seq != seq:
                raise CorruptRecordError(f"frame says seq {record.seq}: record was moved", stream=stream, seq=seq)
            records.append(record)
        return records

    def encode_snapshot(self, seq: int, state: dict[str, Any], stream: StreamId | None = None) -> bytes:
        """Frame bytes of a snapshot of ``state`` (plain dict) at ``seq``, to be stored
        in ``stream`` (as in ``encode_record``), stamped with ``formats.snapshot_version``.

        Raises ``UnencodableValueError`` naming the field (``state...``), also for a
        state that names pages when ``formats`` writes unpaged snapshots."""
        if type(seq) is not int or seq < 0:
            raise UnencodableValueError("snapshot.seq", f"seq must be an int >= 0, got {seq!r}")
        if type(state) is not dict:
            raise UnencodableValueError("state", f"{type(state).__name__} is not supported (use a dict)")
        version = self.formats.snapshot_version
        if version < FIRST_PAGED and ("pages" in state or "ledger_pages" in state):
            # The release this version is written for would read the newest messages as the whole conversation.
            raise UnencodableValueError("state.pages", f"a snapshot of version {version} holds its conversation inline")
        tagged = check_encodable(state, "state", self.codec.limits.max_depth - 1)
        return self._encode(SNAPSHOT_SCHEMA_ID, snapshot_to_wire(seq, state), stream, seq, "state", tagged, version)

    def decode_snapshot(
        self, stored: StoredSnapshot, stream: StreamId | None = None
    ) -> tuple[int, dict[str, Any], Frame]:
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

    def encode_page(self, seq: int, items: list[Any], stream: StreamId | None = None) -> bytes:
        """Frame bytes of a page (messages, or ``(key, entry)`` ledger pairs, in order) bound
        to ``seq`` (the snapshot that writes it) and ``stream`` (snapshot-v6.cddl, ``page``),
        compressed alone. Raises ``UnencodableValueError`` naming the field (``page...``)."""
        return self.page_frame(seq, self.page_payload(seq, items), stream)

    def page_payload(self, seq: int, items: list[Any]) -> bytes:
        """The CBOR payload of the page of ``items`` written at ``seq`` (``page_frame`` frames it;
        a later page may be compressed as its continuation). Raises as ``encode_page``."""
        if type(seq) is not int or seq < 0:
            raise UnencodableValueError("page.seq", f"seq must be an int >= 0, got {seq!r}")
        tagged = check_encodable(items, "page", self.codec.limits.max_depth - 2)
        return self.codec.payload({"s": seq, "page": items}, path="page", check=False, tagged=tagged)

    def page_frame(
        self, seq: int, raw: bytes, stream: StreamId | None = None, prefix: bytes = b"", level: int | None = None
    ) -> bytes:
        """Frame bytes of the page payload ``raw`` (``page_payload`` at ``seq``), compressed at
        ``level`` (default: the codec's) as the continuation of ``prefix``: the payloads of the
        pages its reference names as its base, in order (snapshot-v6.cddl, ``page-ref``)."""
        version = CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID]  # pages exist only from FIRST_PAGED on
        return self.codec.frame(SNAPSHOT_SCHEMA_ID, version, raw, stream=stream, seq=seq, prefix=prefix, level=level)

    def decode_page(self, data: bytes, seq: int, stream: StreamId | None = None, prefix: bytes = b"") -> list[Any]:
        """The items of a page frame written by ``encode_page`` (or ``page_frame``, continuing
        ``prefix``) at ``seq``. Raises as ``open_page`` and ``page_items``."""
        return self.page_items(self.open_page(data, seq, stream, prefix), seq, stream)

    def open_page(self, data: bytes, seq: int, stream: StreamId | None = None, prefix: bytes = b"") -> bytes:
        """The CBOR payload of a page frame written at ``seq`` continuing ``prefix``, checked
        (checksum, place, decryption, sizes) but not decoded.

        Raises ``CorruptRecordError`` (bad bytes, another seq or stream, another prefix, not a
        page) and ``UnknownSchemaVersionError`` (a version newer than this build)."""
        frame = self.codec.decode(data, stream=stream, seq=seq, prefix=prefix, load=False)
        if frame.schema_id != SNAPSHOT_SCHEMA_ID or frame.schema_version < FIRST_PAGED:
            raise CorruptRecordError("the page frame is not a conversation page", stream=stream, seq=seq)
        if frame.schema_version > CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID]:
            name = SCHEMA_NAMES[SNAPSHOT_SCHEMA_ID]
            raise UnknownSchemaVersionError(
                name, frame.schema_version, CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID], stream=stream, seq=seq
            )
        assert frame.raw is not None  # decoded with load=False
        return frame.raw

    def page_items(self, raw: bytes, seq: int, stream: StreamId | None = None) -> list[Any]:
        """The items of the page payload ``raw`` (``open_page``) written at ``seq``.

        Raises ``CorruptRecordError`` (not CBOR, or not the page written at ``seq``) and
        ``FrameLimitError`` (nesting past the codec's depth limit)."""
        try:
            value = self.codec.loads(raw)
        except CorruptRecordError as exc:  # labelled with the page's place (FrameLimitError stays one)
            raise type(exc)(str(exc), stream=stream, seq=seq) from exc
        if not isinstance(value, dict) or value.get("s") != seq or not isinstance(value.get("page"), list):
            raise CorruptRecordError(f"the page frame is not the page written at seq {seq}", stream=stream, seq=seq)
        items: list[Any] = value["page"]
        return items

    @staticmethod
    def _upcast(frame: Frame, expected_schema: int, stream: StreamId | None, seq: int) -> Any:
        if frame.schema_id != expected_schema:
            raise CorruptRecordError(
                f"frame holds schema {frame.schema_id}, expected {SCHEMA_NAMES[expected_schema]}",
                stream=stream,
                seq=seq,
            )
        name, current, version = SCHEMA_NAMES[expected_schema], CURRENT_VERSIONS[expected_schema], frame.schema_version
        if version > current:
            raise UnknownSchemaVersionError(name, version, current, stream=stream, seq=seq)
        try:
            return upcast(expected_schema, version, frame.value, current)
        except NoUpcastPathError as exc:
            raise MissingUpcasterError(name, version, current, exc.missing, stream=stream, seq=seq) from None
        except Exception as exc:
            # The value is not what the version's upcaster expects: refuse it, never guess.
            raise CorruptRecordError(
                f"{name} version {version} could not be upcast: {type(exc).__name__}: {exc}", stream=stream, seq=seq
            ) from exc
