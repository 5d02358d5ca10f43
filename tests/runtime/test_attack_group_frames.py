"""Attacks on group frames: a commit whose records are each storable must stay
readable once stored as one group."""

from __future__ import annotations

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Kind, Record
from durably.storage._codec import Codec, CodecLimits
from durably.storage._spi import StreamId

A = StreamId("default", "big")
LIMIT = 64 * 1024


def big_record(seq: int) -> Record:
    # Incompressible-ish text so the size is what the limit sees either way.
    text = "".join(f"{i:08x}" for i in range(seq * 10_000, seq * 10_000 + LIMIT // 8 * 6 // 10))
    return Record(seq, Kind.TOOL_RESULT, {"key": f"k{seq}", "call_id": f"c{seq}", "result": text}, 1.0)


async def test_a_commit_of_records_each_under_the_decode_limit_reads_back_after_it_is_stored() -> None:
    codec = RecordCodec(Codec(limits=CodecLimits(max_raw_size=LIMIT)))
    records = [big_record(1), big_record(2)]
    payloads = [codec.record_payload(r) for r in records]  # each accepted: under the limit
    assert all(len(p) < LIMIT for p in payloads) and sum(map(len, payloads)) > LIMIT
    async with MemoryStore() as store:
        await store.append(A, 0, codec.commit_frames(payloads, 1, A))  # acknowledged
        read = [record async for record in JournalReader(store, codec, A).records()]
    assert [r.seq for r in read] == [1, 2]
    assert read[1].data["result"] == records[1].data["result"]
