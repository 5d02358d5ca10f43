"""Issue 11 item 14: frame format 2 binds a plaintext frame's checksum to its place.

Without encryption, a row copied from another agent at the same seq used to
replay silently. Format 2 seeds the CRC with namespace, agent id and seq
(``durably.storage.codec.place_seed``), so the copy fails its checksum. Format 1
frames (every golden set before this) stay readable; encrypted frames stay
format 1, their AES-GCM tag binding the place. ``tests/golden/format2`` holds
frames written by the first build of format 2 (never regenerated).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from schema_wire import validate_frame

from durably.storage.codec import FORMAT_VERSION, UNBOUND_FORMAT, Codec
from durably.storage.errors import CorruptRecordError, InvalidRequestError
from durably.runtime.record_codec import RecordCodec
from durably.storage.spi import StoredRecord, StoredSnapshot, StreamId

FORMAT2 = Path(__file__).resolve().parent / "golden" / "format2"
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
