"""A commit's records in one group frame: a step's records are encoded, compressed,
checksummed and sealed once, stored as a group frame at the commit's first seq and
12-byte member rows after it, and read back record by record from any seq. Each
test tries to break a guarantee: rows moved, torn, flipped or missing, reads that
start inside a group, a fork inside one, encryption, verify, re-encryption."""

from __future__ import annotations

import sqlite3
import struct
import zlib
from typing import Any

import pytest
from support_agents import StepModel

from durably import AESGCMCipher, AgentDefinition, Runtime, SnapshotPolicy, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._reading.verify import verify_stream
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Kind, Record
from durably.storage._codec import place_seed
from durably.storage._crypto import StaticKeyProvider, generate_key
from durably.storage._errors import CorruptRecordError, DecryptionError, TruncatedRecordError
from durably.storage._group_frames import FORMAT_GROUP, FORMAT_MEMBER, MEMBER_SIZE, is_member
from durably.storage._spi import StoredRecord, StreamId

A = StreamId("default", "a1")
KEYS = {"k1": generate_key(), "k2": generate_key()}


def cipher(*ids: str, current: str | None = None) -> AESGCMCipher:
    return AESGCMCipher(StaticKeyProvider({i: KEYS[i] for i in ids}, current))


def step_agent(steps: int) -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int) -> int:
        return n * 10

    return AgentDefinition(name="counter", model=StepModel(steps), tools=[effect])


def records_of(first: int, n: int) -> list[Record]:
    return [
        Record(first + i, Kind.TOOL_INTENT, {"key": f"k{i}", "call_id": f"c{i}", "tool": "read", "attempt": 1}, 1.0)
        for i in range(n)
    ]


def group(codec: RecordCodec, records: list[Record], stream: StreamId = A) -> list[bytes]:
    return codec.commit_frames([codec.record_payload(r) for r in records], records[0].seq, stream)


async def stored_rows(store: Any, stream: StreamId) -> list[StoredRecord]:
    return [row async for row in store.read(stream)]


async def test_a_step_is_stored_as_one_group_frame_and_member_rows_and_reads_back_record_by_record() -> None:
    async with Runtime("memory://", agents=[step_agent(4)]) as rt:
        state = await rt.run("counter", "a1", "count")
        rows = await stored_rows(rt.store, A)
        entries = [(e.seq, e.kind) async for e in rt.history("a1")]
    assert state.status == "finished"
    formats = [row.data[2] for row in rows]
    assert FORMAT_GROUP in formats and FORMAT_MEMBER in formats  # main: one frame per record, format 3
    assert all(len(row.data) == MEMBER_SIZE for row in rows if is_member(row.data))
    assert [seq for seq, _ in entries] == list(range(1, len(rows) + 1))
    assert Kind.TOOL_RESULT in [kind for _, kind in entries] and entries[-1][1] == Kind.FINISHED


async def test_a_read_that_starts_inside_a_group_goes_back_to_its_frame() -> None:
    async with Runtime("memory://", agents=[step_agent(3)]) as rt:
        await rt.run("counter", "a1", "count")
        rows = await stored_rows(rt.store, A)
        whole = [(e.seq, e.kind, e.summary) async for e in rt.history("a1")]
        for row in rows:
            if is_member(row.data):  # history from just before a member row: its group frame is behind it
                tail = [(e.seq, e.kind, e.summary) async for e in rt.history("a1", after_seq=row.seq - 1)]
                assert tail == whole[row.seq - 1 :]
                described = await rt.describe("a1")
                assert described.seq == rows[-1].seq


async def test_a_fork_at_a_seq_inside_a_group_holds_the_records_up_to_it_only() -> None:
    async with Runtime("memory://", agents=[step_agent(3)]) as rt:
        await rt.run("counter", "a1", "count")
        rows = await stored_rows(rt.store, A)
        inside = next(row.seq for row in rows if is_member(row.data))
        forked = await rt.fork("a1", inside, "b1")
        at = await rt.state_at("a1", inside)
        copied = [e.seq async for e in rt.history("b1")]
    assert at.last_seq == inside and forked.last_seq == inside + 1  # the copy, then its forked record
    assert copied == list(range(1, inside + 2))
    assert forked.messages == at.messages


def test_a_one_record_commit_keeps_its_own_frame_and_a_group_saves_bytes() -> None:
    codec = RecordCodec()
    (single,) = group(codec, records_of(4, 1))
    assert single[2] == 3
    rows = group(codec, records_of(4, 3))
    assert [row[2] for row in rows] == [FORMAT_GROUP, FORMAT_MEMBER, FORMAT_MEMBER]
    assert sum(map(len, rows)) < sum(len(codec.encode_record(r, A)) for r in records_of(4, 3))


def test_a_member_row_moved_to_another_seq_or_stream_fails_its_checksum() -> None:
    codec, records = RecordCodec(), records_of(4, 3)
    rows = group(codec, records)
    reader = JournalReader(MemoryStore(), codec, A)
    reader.decode_loaded(StoredRecord(4, rows[0]))
    with pytest.raises(CorruptRecordError, match="copied from another stream or seq") as caught:
        reader.decode_loaded(StoredRecord(6, rows[1]))  # index 1 stored at 6: its place says 5
    assert caught.value.seq == 6
    other = JournalReader(MemoryStore(), codec, StreamId("default", "a2"))
    with pytest.raises(CorruptRecordError, match="copied from another stream or seq"):
        other.decode_loaded(StoredRecord(5, rows[1]))


def test_a_member_row_that_names_another_index_or_count_is_refused() -> None:
    codec, records = RecordCodec(), records_of(4, 3)
    rows = group(codec, records)
    for index, count in ((2, 3), (1, 4)):  # re-checksummed at its place: an edit, not bit rot
        edited = struct.pack(">2sBBHH", b"dy", FORMAT_MEMBER, 0, index, count)
        edited += struct.pack(">I", zlib.crc32(edited, place_seed(A, 5)))
        reader = JournalReader(MemoryStore(), codec, A)
        reader.decode_loaded(StoredRecord(4, rows[0]))
        with pytest.raises(CorruptRecordError) as caught:
            reader.decode_loaded(StoredRecord(5, edited))
        assert caught.value.seq == 5


@pytest.mark.parametrize("damage", ["flip", "torn", "moved"])
async def test_a_damaged_group_frame_fails_typed_for_every_record_of_its_group(damage: str) -> None:
    codec, records = RecordCodec(), records_of(1, 3)
    rows = group(codec, records)
    head = bytearray(rows[0])
    if damage == "flip":
        head[-3] ^= 0x40
    store = MemoryStore()
    await store.open()
    if damage == "moved":  # the same records' group frame written for another agent, copied here
        head = bytearray(group(codec, records, StreamId("default", "other"))[0])
    data = bytes(head[:-5]) if damage == "torn" else bytes(head)
    await store.append(A, 0, [data, *rows[1:]])
    for after in (0, 1, 2):  # from the group frame, and from each member row
        with pytest.raises(CorruptRecordError) as caught:
            [r async for r in JournalReader(store, codec, A).records(after)]
        assert caught.value.seq == 1
        if damage == "torn":
            assert isinstance(caught.value, TruncatedRecordError)


async def test_a_member_row_whose_group_frame_is_gone_fails_typed_naming_its_seq() -> None:
    codec, store = RecordCodec(), MemoryStore()
    await store.open()
    rows = group(codec, records_of(1, 3))
    await store.append(A, 0, rows)
    await store.put_snapshot(A, 1, codec.encode_snapshot(1, {}, A))
    await store.delete_records(A, 1)  # a cut inside the group: what compaction must never do
    with pytest.raises(CorruptRecordError, match="missing at seq 1") as caught:
        [r async for r in JournalReader(store, codec, A).records()]
    assert caught.value.seq == 2


def test_an_encrypted_group_is_sealed_once_and_bound_to_its_place() -> None:
    codec, records = RecordCodec(cipher=cipher("k1")), records_of(7, 3)
    rows = group(codec, records)
    assert rows[0][3] & 0x02  # encrypted
    reader = JournalReader(MemoryStore(), codec, A)
    assert [reader.decode_loaded(StoredRecord(7 + i, row)) for i, row in enumerate(rows)] == records
    header = rows[0][:21]
    moved_header = header  # the same frame at seq 8, re-checksummed there: the seal still names seq 7
    crc = zlib.crc32(rows[0][25:], zlib.crc32(moved_header, place_seed(A, 8)))
    moved = moved_header + struct.pack(">I", crc) + rows[0][25:]
    with pytest.raises(DecryptionError):
        JournalReader(MemoryStore(), codec, A).decode_loaded(StoredRecord(8, moved))
    with pytest.raises(DecryptionError):
        JournalReader(MemoryStore(), RecordCodec(cipher=cipher("k2")), A).decode_loaded(StoredRecord(7, rows[0]))


async def test_verify_reads_grouped_journals_and_names_a_damaged_group(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with Runtime(url, agents=[step_agent(3)]) as rt:
        await rt.run("counter", "a1", "count")
        report = await verify_stream(rt.store, RecordCodec(), A)
        rows = await stored_rows(rt.store, A)
    assert report.ok and report.records == len(rows)
    head = next(row for row in rows if row.data[2] == FORMAT_GROUP and row.seq > 1)
    damaged = bytearray(head.data)
    damaged[-1] ^= 0x01
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute("UPDATE records SET data = ? WHERE seq = ?", (bytes(damaged), head.seq))
    async with Runtime(url) as rt:
        report = await verify_stream(rt.store, RecordCodec(), A)
    assert not report.ok
    assert head.seq in {p.seq for p in report.problems}


async def test_reencrypt_moves_a_grouped_journal_to_the_new_key_and_it_still_restores(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with Runtime(url, agents=[step_agent(3)], encryption=cipher("k1")) as rt:
        before = await rt.run("counter", "a1", "task")
        rows = await stored_rows(rt.store, A)
    assert any(row.data[2] == FORMAT_GROUP for row in rows)
    async with Runtime(url, agents=[step_agent(3)], encryption=cipher("k1", "k2", current="k2")) as rt:
        (report,) = await rt.reencrypt()
        assert set(report.after) == {"k2"}  # main: member rows are not frames, the census fails
    async with Runtime(url, agents=[step_agent(3)], encryption=cipher("k2")) as rt:
        after = await rt.status("a1")
    assert after.messages == before.messages and after.status == before.status


async def test_compaction_never_leaves_a_member_row_without_its_group_frame(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0, keep=2, compact=True)
    async with Runtime(url, agents=[step_agent(6)], snapshot_policy=policy) as rt:
        before = await rt.run("counter", "a1", "count")
    async with Runtime(url, agents=[step_agent(6)]) as rt:
        rows = await stored_rows(rt.store, A)
        after = await rt.status("a1")
        entries = [e.seq async for e in rt.history("a1")]
    assert rows and rows[0].seq > 1  # compacted
    assert not is_member(rows[0].data)  # the cut is at a commit's end: the group frame stays with its rows
    assert entries == [row.seq for row in rows]
    assert after.messages == before.messages
