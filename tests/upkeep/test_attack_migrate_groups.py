"""``migrate_store`` reports the records this build cannot read, corruption included:
a damaged member row of a group (its commit's later records) is such a record, as a
damaged frame is."""

from __future__ import annotations

import pytest

from durably._journal.records import RecordCodec
from durably._upkeep.migrate import migrate_store
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Kind, Record
from durably.storage._group_frames import is_member
from durably.storage._spi import StreamId

A = StreamId("default", "grouped")


def rows(codec: RecordCodec) -> list[bytes]:
    records = [
        Record(seq, Kind.TOOL_INTENT, {"key": f"k{seq}", "call_id": f"c{seq}", "tool": "read", "attempt": 1}, 1.0)
        for seq in range(1, 5)
    ]
    first = [codec.record_frame(codec.record_payload(records[0]), 1, A)]
    return first + codec.commit_frames([codec.record_payload(r) for r in records[1:]], 2, A)


@pytest.mark.parametrize("damaged", ["frame", "member", "member-truncated"])
async def test_migrate_reports_a_damaged_row_of_a_grouped_journal(damaged: str) -> None:
    codec = RecordCodec()
    stored = [bytearray(row) for row in rows(codec)]
    assert is_member(bytes(stored[2]))  # seq 3: the second record of the group at seq 2
    if damaged == "frame":
        stored[0][-1] ^= 0x01
    elif damaged == "member":
        stored[2][-1] ^= 0x01  # its checksum no longer matches
    else:
        del stored[2][-3:]
    async with MemoryStore() as store:
        await store.append(A, 0, [bytes(row) for row in stored])
        (report,) = await migrate_store(store, "default", dry_run=True, codec=codec)
    assert report.problems, f"a damaged {damaged} row of seq {1 if damaged == 'frame' else 3} is not reported"
