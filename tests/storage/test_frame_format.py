"""Frame format 2 binds a plaintext frame's checksum to its place.

Without encryption, a row copied from another agent at the same seq would
replay silently if its checksum did not cover its place. Format 2 seeds the CRC
with namespace, agent id and seq (``durably.storage._codec.place_seed``), so the
copy fails its checksum. Format 1 frames (the older golden sets) stay readable; encrypted frames stay
format 1, their AES-GCM tag binding the place. ``tests/golden/format2`` holds
frames written by the first build of format 2 (never regenerated).

Format 3 is format 2 plus the id of the shipped zstd dictionary a
record's payload was compressed with; ``tests/golden/format3`` holds frames
written by its first build (``tests/golden/make_format3.py``, never regenerated).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path

import pytest
import zstandard
from schema_wire import validate_frame

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Record
from durably.storage import _dictionaries as dictionaries
from durably.storage._codec import FORMAT_DICTIONARY, FORMAT_VERSION, UNBOUND_FORMAT, Codec, CodecLimits, place_seed
from durably.storage._errors import (
    CorruptRecordError,
    EncryptionRequiredError,
    FrameLimitError,
    InvalidRequestError,
    TruncatedRecordError,
    UnknownDictionaryError,
    UnknownSchemaVersionError,
)
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

FORMAT2 = Path(__file__).resolve().parents[1] / "golden" / "format2"
FRAMES = json.loads((FORMAT2 / "frames.json").read_text(encoding="utf-8"))["frames"]


@pytest.mark.parametrize("entry", FRAMES, ids=lambda e: e["file"])
def test_golden_format2_frames_decode_at_their_place_only(entry):
    data = (FORMAT2 / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], "a golden frame was modified"
    assert data[2] == FORMAT_VERSION == 2 and validate_frame(data)["format"] == 2
    place, seq = StreamId(entry["namespace"], entry["agent_id"]), entry["seq"]
    codec = RecordCodec()
    if entry["kind"] == "snapshot":
        assert codec.decode_snapshot(StoredSnapshot(seq, data), place)[1] == entry["data"]
        moved = [(StreamId(place.namespace, place.agent_id + "x"), seq)]
        decode = lambda stream, at: codec.decode_snapshot(StoredSnapshot(at, data), stream)  # noqa: E731
    else:
        record = codec.decode_record(StoredRecord(seq, data), place)
        assert (record.kind, record.data) == (entry["kind"], entry["data"])
        moved = [(StreamId(place.namespace, place.agent_id + "x"), seq), (StreamId("other", place.agent_id), seq)]
        decode = lambda stream, at: codec.decode_record(StoredRecord(at, data), stream)  # noqa: E731
    for stream, at in moved:
        with pytest.raises(CorruptRecordError, match="copied from another stream or seq"):
            decode(stream, at)
    with pytest.raises(InvalidRequestError, match="bound to its place"):
        Codec().decode(data)


def test_two_agents_same_text_same_seq_give_different_frames():
    a1, a2 = (FORMAT2 / "record-0.bin").read_bytes(), (FORMAT2 / "record-1.bin").read_bytes()
    assert a1[19:] == a2[19:] and a1 != a2  # same payload, different checksum: the place is in it


def test_format1_frames_are_still_read_and_still_written_without_a_place():
    unbound = Codec().encode(1, 1, {"k": "v"})
    assert unbound[2] == UNBOUND_FORMAT == 1
    assert Codec().decode(unbound).value == Codec().decode(unbound, stream=StreamId("n", "a"), seq=4).value


# -- format 3: record frames compressed with a shipped zstd dictionary ------------------------------

FORMAT3 = Path(__file__).resolve().parents[1] / "golden" / "format3"
FRAMES3 = json.loads((FORMAT3 / "frames.json").read_text(encoding="utf-8"))["frames"]
PLACE = StreamId("default", "a1")


def refit(frame: bytes, place: StreamId, seq: int) -> bytes:
    """``frame`` (format 3) with its CRC recomputed at ``place``: a deliberate edit, not bit rot."""
    header, payload = frame[:19], frame[23:]
    return header + struct.pack(">I", zlib.crc32(payload, zlib.crc32(header, place_seed(place, seq)))) + payload


def intent(seq: int = 2) -> Record:
    return Record(seq, "tool_intent", {"key": "k-1", "call_id": "call-1", "tool": "read_file", "attempt": 1}, 1.0)


@pytest.mark.parametrize("entry", FRAMES3, ids=lambda e: e["file"])
def test_golden_format3_frames_decode_at_their_place_only(entry):
    data = (FORMAT3 / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], "a golden frame was modified"
    header = validate_frame(data)  # the CDDL and an independent decompression with the shipped file
    assert header["format"] == FORMAT_DICTIONARY == 3 and header["dictionary-id"] == entry["dictionary_id"]
    place, seq = StreamId(entry["namespace"], entry["agent_id"]), entry["seq"]
    record = RecordCodec().decode_record(StoredRecord(seq, data), place)
    assert (record.kind, record.data) == (entry["kind"], entry["data"])
    with pytest.raises(CorruptRecordError, match="copied from another stream or seq"):
        RecordCodec().decode_record(StoredRecord(seq, data), StreamId(place.namespace, place.agent_id + "x"))
    with pytest.raises(InvalidRequestError, match="bound to its place"):
        Codec().decode(data)


def test_records_are_written_in_format3_and_snapshots_and_unplaced_frames_as_before():
    codec = RecordCodec()
    frame = codec.encode_record(intent(), PLACE)
    assert frame[2] == FORMAT_DICTIONARY and int.from_bytes(frame[15:19], "big") == dictionaries.DEFAULT
    assert len(frame) < len(RecordCodec(Codec(dictionary=None)).encode_record(intent(), PLACE))
    assert codec.encode_snapshot(3, {"status": "running"}, PLACE)[2] == FORMAT_VERSION
    assert codec.encode_record(intent())[2] == UNBOUND_FORMAT  # no place: format 1, as before
    # A codec told to use no dictionary writes format 2 and still reads format 3.
    plain = RecordCodec(Codec(dictionary=None))
    assert plain.encode_record(intent(), PLACE)[2] == FORMAT_VERSION
    assert plain.decode_record(StoredRecord(2, frame), PLACE).data == intent().data


def test_an_unknown_dictionary_id_fails_typed_and_names_it():
    frame = RecordCodec().encode_record(intent(), PLACE)
    unknown = refit(frame[:15] + struct.pack(">I", 0x6479_FFFF) + frame[19:], PLACE, 2)
    with pytest.raises(UnknownDictionaryError) as caught:
        RecordCodec().decode_record(StoredRecord(2, unknown), PLACE)
    error = caught.value
    assert isinstance(error, UnknownSchemaVersionError)  # stops the agent, leaves the data, like a newer version
    assert error.dictionary_id == 0x6479_FFFF and dictionaries.DEFAULT in error.known
    assert (error.stream, error.seq) == (PLACE, 2) and "0x6479ffff" in str(error)
    with pytest.raises(UnknownDictionaryError):
        dictionaries.load(0x6479_FFFF)


def test_format3_frames_keep_the_bounds_of_formats_1_and_2():
    frame = RecordCodec().encode_record(intent(), PLACE)
    codec = RecordCodec()
    with pytest.raises(TruncatedRecordError):
        codec.decode_record(StoredRecord(2, frame[:21]), PLACE)  # inside the longer header
    with pytest.raises(TruncatedRecordError):
        codec.decode_record(StoredRecord(2, frame[:-1]), PLACE)
    flipped = bytearray(frame)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="checksum"):
        codec.decode_record(StoredRecord(2, bytes(flipped)), PLACE)
    for flags in (0, 3):  # plaintext zstd only: an edited flag byte with a refitted CRC is refused
        with pytest.raises(CorruptRecordError, match="flags"):
            codec.decode_record(StoredRecord(2, refit(frame[:3] + bytes([flags]) + frame[4:], PLACE, 2)), PLACE)
    raw = int.from_bytes(frame[7:11], "big")
    bigger = refit(frame[:7] + struct.pack(">I", raw + 1) + frame[11:], PLACE, 2)  # the zstd frame says otherwise
    with pytest.raises(CorruptRecordError, match="declares"):
        codec.decode_record(StoredRecord(2, bigger), PLACE)
    limited = RecordCodec(Codec(limits=CodecLimits(max_raw_size=raw - 1)))
    with pytest.raises(FrameLimitError):
        limited.decode_record(StoredRecord(2, frame), PLACE)
    junk = refit(frame[:11] + struct.pack(">I", len(frame) - 23 + 3) + frame[15:] + b"\x00\x00\x00", PLACE, 2)
    with pytest.raises(CorruptRecordError, match="zstd"):
        codec.decode_record(StoredRecord(2, junk), PLACE)


def test_a_format3_frame_is_refused_where_encryption_is_required():
    frame = RecordCodec().encode_record(intent(), PLACE)

    class Required:
        required = True

        def seal(self, payload, aad):  # pragma: no cover - never called: decoding refuses first
            raise AssertionError

        def open(self, sealed, aad, *, stream=None, seq=None):  # pragma: no cover
            raise AssertionError

    with pytest.raises(EncryptionRequiredError):
        RecordCodec(Codec(cipher=Required())).decode_record(StoredRecord(2, frame), PLACE)


def test_every_shipped_dictionary_carries_the_id_it_is_filed_under():
    for dictionary_id in dictionaries.known():
        assert zstandard.ZstdCompressionDict(dictionaries.dictionary_bytes(dictionary_id)).dict_id() == dictionary_id
        assert 32_768 <= dictionary_id < 2**31, "zstd's private range (RFC 8878 section 5)"


FORMAT4 = Path(__file__).resolve().parents[1] / "golden" / "format4"
ROWS4 = json.loads((FORMAT4 / "rows.json").read_text(encoding="utf-8"))


def test_golden_format4_group_reads_record_by_record_at_its_place_only():
    place = StreamId(ROWS4["namespace"], ROWS4["agent_id"])
    rows = []
    for entry in ROWS4["rows"]:
        data = (FORMAT4 / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], "a golden row was modified"
        rows.append(StoredRecord(entry["seq"], data))
    header = validate_frame(rows[0].data)  # the CDDL, each record of the array, independent decompression
    assert header["format"] == 4 and header["count"] == len(rows)
    reader = JournalReader(MemoryStore(), RecordCodec(), place)
    decoded = [reader.decode_loaded(row) for row in rows]
    assert [(r.seq, r.kind, r.data, r.at) for r in decoded] == [
        (e["seq"], e["kind"], e["data"], e["at"]) for e in ROWS4["rows"]
    ]
    elsewhere = JournalReader(MemoryStore(), RecordCodec(), StreamId(place.namespace, place.agent_id + "x"))
    with pytest.raises(CorruptRecordError, match="copied from another stream or seq"):
        elsewhere.decode_loaded(rows[0])
    with pytest.raises(CorruptRecordError, match="copied from another stream or seq"):
        elsewhere.decode_loaded(rows[1])
