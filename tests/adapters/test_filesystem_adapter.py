"""The file:// adapter's own damage handling: a batch file cut short is a typed error, never a struct.error."""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.adapters.filesystem import FileSystemStore
from durably.storage import CorruptRecordError, StreamId, TruncatedRecordError

STREAM = StreamId("ns", "agent")


def batch_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name == "records")


@pytest.mark.parametrize("keep", [0, 2, 9, 15])  # nothing, half a header, header + part of a length, part of a record
async def test_a_batch_file_cut_short_is_a_truncated_record_error(tmp_path: Path, keep: int) -> None:
    store = FileSystemStore(f"file://{tmp_path}/store")
    await store.open()
    try:
        assert await store.append(STREAM, 0, [b"first record", b"second"]) == 2
        (batch,) = batch_files(tmp_path / "store")
        batch.write_bytes(batch.read_bytes()[:keep])
        with pytest.raises(TruncatedRecordError, match="cut short") as caught:
            [r async for r in store.read(STREAM)]
        assert isinstance(caught.value, CorruptRecordError)
        if keep < 8:  # last_seq reads only the 8-byte header (magic, record count)
            with pytest.raises(TruncatedRecordError, match="cut short"):
                await store.last_seq(STREAM)
    finally:
        await store.close()
