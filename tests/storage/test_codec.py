"""The frame codec (storage/_codec.py) and the record/snapshot layer (runtime/_journal/records.py).

What is checked: every record kind and a snapshot round-trip; any flipped byte,
truncation, trailing garbage or bad magic is reported as corruption, never
decoded; unencodable values fail at save time naming the field; decoding is
bounded in size and depth; schema versions from the future are refused.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from decimal import Decimal

import cbor2
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from durably._journal.records import RecordCodec
from durably.schemas import _records as schemas
from durably.schemas._records import RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID, Kind, Record
from durably.storage import _codec as codec_module
from durably.storage import _values as values
from durably.storage._codec import FLAG_ZSTD, HEADER_SIZE, MAGIC, Codec, CodecLimits, check_encodable
from durably.storage._errors import (
    CorruptRecordError,
    FrameLimitError,
    TruncatedRecordError,
    UnencodableValueError,
    UnknownSchemaVersionError,
)
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

STREAM = StreamId("tests", "agent-1")

#: Plain data as the codec accepts it: what hypothesis generates values from.
plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


class Opaque:
    """A value of a type durably does not store."""


def sample_data(kind: Kind) -> dict:
    """A representative payload for each kind (shapes are the runtime's; the codec only needs plain data)."""
    return {
        "kind": kind.value,
        "text": "héllo wörld ✓",
        "tokens": {"in": 1234, "out": 56},
        "cost": 0.0123,
        "blob": b"\x00\x01\xff",
        "items": [1, -2, 2**63 - 1, -(2**63), None, True, [], {}],
    }


def test_every_record_kind_round_trips() -> None:
    codec = RecordCodec()
    for seq, kind in enumerate(Kind, start=1):
        record = Record(seq, kind, sample_data(kind), 1_700_000_000.25)
        decoded = codec.decode_record(StoredRecord(seq, codec.encode_record(record)), STREAM)
        assert decoded == record
        assert decoded.kind == kind.value


def test_kind_given_as_plain_string_round_trips() -> None:
    codec = RecordCodec()
    record = Record(3, "tool_result", {"ok": True}, 12.0)
    assert codec.decode_record(StoredRecord(3, codec.encode_record(record))) == record


def test_snapshot_round_trips() -> None:
    codec = RecordCodec()
    state = {
        "status": "running",
        "conversation": [{"role": "user", "content": "x" * 2000}],
        "ledger": {"k1": {"ok": 1}},
    }
    seq, decoded, frame = codec.decode_snapshot(StoredSnapshot(42, codec.encode_snapshot(42, state)), STREAM)
    assert (seq, decoded) == (42, state)
    assert frame.schema_id == SNAPSHOT_SCHEMA_ID
    assert frame.stored_size < frame.raw_size  # 2000 repeated chars compress


@settings(max_examples=150, deadline=None)
@given(value=plain)
def test_any_plain_value_round_trips(value) -> None:
    codec = Codec()
    frame = codec.decode(codec.encode(RECORD_SCHEMA_ID, 1, value))
    assert frame.value == value
    assert (frame.schema_id, frame.schema_version) == (RECORD_SCHEMA_ID, 1)


def _record_frame(text_size: int = 600) -> bytes:
    # Big enough to be compressed, so flips also land in a zstd payload.
    return RecordCodec().encode_record(Record(7, Kind.MODEL_RESPONDED, {"text": "abc " * (text_size // 4)}, 1.0))


@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "raw"])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_flipped_byte_anywhere_is_corruption(compressed: bool, data) -> None:
    frame = _record_frame(600 if compressed else 40)
    assert bool(frame[3] & FLAG_ZSTD) is compressed
    index = data.draw(st.integers(min_value=0, max_value=len(frame) - 1), label="index")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
    damaged = bytearray(frame)
    damaged[index] ^= mask
    with pytest.raises(CorruptRecordError):
        RecordCodec().decode_record(StoredRecord(7, bytes(damaged)), STREAM)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_truncated_frame_is_a_torn_write(data) -> None:
    frame = _record_frame()
    cut = data.draw(st.integers(min_value=0, max_value=len(frame) - 1), label="cut")
    with pytest.raises(TruncatedRecordError) as caught:
        Codec().decode(frame[:cut], stream=STREAM, seq=7)
    assert caught.value.seq == 7 and caught.value.stream == STREAM


def test_trailing_garbage_is_corruption_not_truncation() -> None:
    frame = _record_frame()
    with pytest.raises(CorruptRecordError, match="unexpected bytes") as caught:
        Codec().decode(frame + b"\x00junk")
    assert not isinstance(caught.value, TruncatedRecordError)


def test_bad_magic_and_unknown_format_version() -> None:
    frame = _record_frame()
    with pytest.raises(CorruptRecordError, match="bad magic"):
        Codec().decode(b"xx" + frame[2:])
    with pytest.raises(CorruptRecordError, match="format version"):
        Codec().decode(frame[:2] + b"\x09" + frame[3:])
    with pytest.raises(CorruptRecordError, match="bad magic"):
        Codec().decode(b"not a frame at all, just text")


def _forge(
    schema_id: int,
    version: int,
    raw: bytes,
    *,
    payload: bytes | None = None,
    flags: int = 0,
    raw_size: int | None = None,
) -> bytes:
    """A frame with a valid CRC around arbitrary content: what a writer bug or an attacker could store."""
    payload = raw if payload is None else payload
    header = codec_module._HEADER.pack(
        MAGIC, 1, flags, schema_id, version, len(raw) if raw_size is None else raw_size, len(payload)
    )
    return header + struct.pack(">I", zlib.crc32(payload, zlib.crc32(header))) + payload


# -- save-time checks ---------------------------------------------------------------


def test_unencodable_value_names_its_field_path() -> None:
    # (a set is stored exactly; an arbitrary object is not)
    data = {"artifacts": [{"payload": 1}, {"payload": 2}, {"payload": 3}, {"payload": {1, 2, Opaque()}}]}
    with pytest.raises(UnencodableValueError) as caught:
        RecordCodec().encode_record(Record(1, Kind.ARTIFACT_STORED, data, 0.0))
    assert caught.value.path.startswith("artifact_stored.data.artifacts[3].payload[")
    assert "Opaque is not supported" in caught.value.reason


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        (
            {"pair": (1, [Opaque()])},
            "state.pair[1][0]",
            "Opaque is not supported",
        ),  # inside a tuple (a tuple is stored)
        ({"cost": Decimal("NaN")}, "state.cost", "Decimal NaN is not finite"),
        ({"by_id": {1: "x"}}, "state.by_id[1]", "dict key of type int"),
        ({"big": 2**64}, "state.big", "does not fit in 64 bits"),
        ({"small": -(2**63) - 1}, "state.small", "does not fit in 64 bits"),
        ({"when": object()}, "state.when", "object is not supported"),
        ({"buf": bytearray(b"x")}, "state.buf", "bytearray is not supported"),
    ],
)
def test_unsupported_types_fail_at_save_time(value, path, reason) -> None:
    with pytest.raises(UnencodableValueError) as caught:
        RecordCodec().encode_snapshot(5, value)
    assert caught.value.path == path
    assert reason in caught.value.reason


def test_int_bounds_are_inclusive() -> None:
    codec = RecordCodec()
    state = {"max": 2**64 - 1, "min": -(2**63)}
    assert codec.decode_snapshot(StoredSnapshot(1, codec.encode_snapshot(1, state)))[1] == state


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_too_deep_nesting_fails_at_save_time_and_the_deepest_allowed_decodes() -> None:
    codec = RecordCodec()
    # The envelope {"s", "state": ...} takes one level of the 64 the decoder allows.
    deepest = {"x": _nested(62)}
    assert codec.decode_snapshot(StoredSnapshot(1, codec.encode_snapshot(1, deepest)))[1] == deepest
    with pytest.raises(UnencodableValueError, match="nesting deeper"):
        codec.encode_snapshot(1, {"x": _nested(63)})
    with pytest.raises(UnencodableValueError, match="nesting deeper"):
        check_encodable(_nested(65))


def test_record_envelope_is_checked_at_save_time() -> None:
    codec = RecordCodec()
    with pytest.raises(UnencodableValueError) as caught:
        codec.encode_record(Record(1, "no_such_kind", {}, 0.0))
    assert caught.value.path == "record.kind"
    with pytest.raises(UnencodableValueError) as caught:
        codec.encode_record(Record(1, Kind.STARTED, ["not", "a", "dict"], 0.0))  # type: ignore[arg-type]
    assert caught.value.path == "started.data"
    with pytest.raises(UnencodableValueError):
        codec.encode_record(Record(0, Kind.STARTED, {}, 0.0))
    with pytest.raises(UnencodableValueError):
        codec.encode_snapshot(1, [1, 2])  # type: ignore[arg-type]


# -- decode bounds ------------------------------------------------------------------


def test_raw_size_over_the_limit_is_refused_before_inflating() -> None:
    frame = Codec().encode(RECORD_SCHEMA_ID, 1, {"text": "a" * 10_000})
    small = Codec(limits=CodecLimits(max_raw_size=1_000))
    with pytest.raises(FrameLimitError, match="limit"):
        small.decode(frame)
    assert Codec().decode(frame).value == {"text": "a" * 10_000}


def test_zstd_frame_declaring_more_than_the_header_is_refused() -> None:
    # A valid CRC around a zstd frame that inflates to 1 MiB while the header claims 100 bytes:
    # the decoder must not trust zstd's own content size past the header's bound.
    raw = cbor2.dumps(b"\x00" * (1 << 20))
    bomb = zstandard.ZstdCompressor().compress(raw)
    frame = _forge(RECORD_SCHEMA_ID, 1, raw, payload=bomb, flags=FLAG_ZSTD, raw_size=100)
    with pytest.raises(CorruptRecordError, match="declares"):
        Codec(limits=CodecLimits(max_raw_size=1_000)).decode(frame)


def test_nesting_past_max_depth_is_a_frame_limit_error() -> None:
    deep = _nested(100)
    frame = Codec(limits=CodecLimits(max_depth=200)).encode(RECORD_SCHEMA_ID, 1, deep)
    with pytest.raises(FrameLimitError, match="depth"):
        Codec().decode(frame)
    assert Codec(limits=CodecLimits(max_depth=200)).decode(frame).value == deep


def test_invalid_cbor_with_a_valid_checksum_is_corruption() -> None:
    with pytest.raises(CorruptRecordError, match="cbor"):
        Codec().decode(_forge(RECORD_SCHEMA_ID, 1, b"\xff\xff\xff"))
    with pytest.raises(CorruptRecordError, match="header says"):
        Codec().decode(_forge(RECORD_SCHEMA_ID, 1, cbor2.dumps([1]), raw_size=50))


# -- schema versions and placement -------------------------------------------------


def test_unknown_future_schema_version_is_refused() -> None:
    wire = Record(1, Kind.STARTED.value, {}, 0.0).to_wire()
    future = Codec().encode(RECORD_SCHEMA_ID, 99, wire)
    with pytest.raises(UnknownSchemaVersionError) as caught:
        RecordCodec().decode_record(StoredRecord(1, future), STREAM)
    assert (caught.value.version, caught.value.supported, caught.value.seq) == (
        99,
        schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID],
        1,
    )
    assert "left untouched" in str(caught.value)
    with pytest.raises(UnknownSchemaVersionError):
        RecordCodec().decode_record(StoredRecord(1, Codec().encode(RECORD_SCHEMA_ID, 0, wire)))


def test_older_versions_are_lifted_through_upcasters(monkeypatch: pytest.MonkeyPatch) -> None:
    # Written at this build's version, read by a build of the next one.
    now = schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID]
    v1 = RecordCodec().encode_record(Record(1, Kind.STARTED, {"task": "t"}, 0.0))
    monkeypatch.setitem(schemas.CURRENT_VERSIONS, RECORD_SCHEMA_ID, now + 1)
    with pytest.raises(UnknownSchemaVersionError):  # no migration path yet
        RecordCodec().decode_record(StoredRecord(1, v1))

    def v1_to_v2(value: dict) -> dict:
        return {**value, "d": {**value["d"], "upcast": True}}

    monkeypatch.setitem(schemas.UPCASTERS, (RECORD_SCHEMA_ID, now), v1_to_v2)
    assert RecordCodec().decode_record(StoredRecord(1, v1)).data == {"task": "t", "upcast": True}


def test_a_frame_stored_under_another_seq_is_corruption() -> None:
    codec = RecordCodec()
    frame = codec.encode_record(Record(5, Kind.PLAN_UPDATED, {"plan": []}, 0.0))
    with pytest.raises(CorruptRecordError, match="moved") as caught:
        codec.decode_record(StoredRecord(6, frame), STREAM)
    assert caught.value.seq == 6
    snapshot = codec.encode_snapshot(5, {})
    with pytest.raises(CorruptRecordError):
        codec.decode_snapshot(StoredSnapshot(4, snapshot))


def test_a_snapshot_frame_is_not_a_record_and_vice_versa() -> None:
    codec = RecordCodec()
    with pytest.raises(CorruptRecordError, match="schema"):
        codec.decode_record(StoredRecord(1, codec.encode_snapshot(1, {})))
    with pytest.raises(CorruptRecordError, match="schema"):
        codec.decode_snapshot(StoredSnapshot(1, codec.encode_record(Record(1, Kind.STARTED, {}, 0.0))))


def test_a_frame_of_the_wrong_shape_is_corruption() -> None:
    for value in ([1, 2], {"s": 1, "k": "started", "t": 0.0}, {"s": 1, "k": "nope", "t": 0.0, "d": {}}):
        with pytest.raises(CorruptRecordError):
            RecordCodec().decode_record(StoredRecord(1, Codec().encode(RECORD_SCHEMA_ID, 1, value)))
    with pytest.raises(CorruptRecordError):
        RecordCodec().decode_snapshot(StoredSnapshot(1, Codec().encode(SNAPSHOT_SCHEMA_ID, 1, {"s": 1})))


# -- compression ---------------------------------------------------------------------


def test_small_payloads_are_stored_raw() -> None:
    frame = Codec().encode(RECORD_SCHEMA_ID, 1, {"ok": True})
    assert frame[3] & FLAG_ZSTD == 0
    decoded = Codec().decode(frame)
    assert decoded.raw_size == decoded.stored_size == len(frame) - HEADER_SIZE


def test_large_compressible_payloads_are_compressed() -> None:
    value = {"text": "the same sentence again. " * 200}
    frame = Codec().encode(RECORD_SCHEMA_ID, 1, value)
    assert frame[3] & FLAG_ZSTD
    decoded = Codec().decode(frame)
    assert decoded.value == value
    assert decoded.stored_size < decoded.raw_size // 10


def test_incompressible_payloads_stay_raw() -> None:
    value = {"noise": os.urandom(4096)}
    frame = Codec().encode(RECORD_SCHEMA_ID, 1, value)
    assert frame[3] & FLAG_ZSTD == 0
    assert Codec().decode(frame).value == value


def test_compression_threshold_is_configurable() -> None:
    value = {"text": "ab" * 100}  # ~210 bytes of CBOR, under the default 256
    assert Codec().encode(RECORD_SCHEMA_ID, 1, value)[3] & FLAG_ZSTD == 0
    eager = Codec(min_compress_size=16)
    frame = eager.encode(RECORD_SCHEMA_ID, 1, value)
    assert frame[3] & FLAG_ZSTD
    assert Codec().decode(frame).value == value


def test_str_and_int_subclasses_are_refused_with_their_path_not_stored_as_plain_values():
    # Stored as the plain value it equals, a StrEnum/IntEnum/IntFlag member or a
    # str/int/float subclass would come back as another type with no error. A type is
    # kept exactly or refused at save time.
    import enum

    class Color(enum.StrEnum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    class Perm(enum.IntFlag):
        R = 4

    class Name(str):
        pass

    class Ratio(float):
        pass

    codec = Codec()
    for value, kind in (
        (Color.RED, "Color (a str subclass)"),
        (Level.HIGH, "Level (a int subclass)"),
        (Perm.R, "Perm (a int subclass)"),
        (Name("x"), "Name (a str subclass)"),
        (Ratio(0.5), "Ratio (a float subclass)"),
    ):
        with pytest.raises(UnencodableValueError) as caught:
            codec.encode(1, 1, {"outer": [{"v": value}]})
        assert caught.value.path == "value.outer[0].v" and kind in caught.value.reason


def test_an_unknown_cbor_tag_is_refused_by_its_number() -> None:
    """cbor2 6 calls ``tag_hook(tag, immutable)``: the refusal names the tag (mypy --strict found
    the hook written for ``(decoder, tag)``, which failed with an AttributeError instead)."""
    data = cbor2.dumps(cbor2.CBORTag(9999, 1))
    with pytest.raises(cbor2.CBORDecodeError) as caught:
        cbor2.CBORDecoder(io.BytesIO(data), tag_hook=values.refuse_unknown).decode()
    assert isinstance(caught.value.__cause__, values.RefusedTagError)
    assert "tag 9999 is not one durably writes" in str(caught.value.__cause__)
