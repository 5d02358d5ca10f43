"""Read windows of the S3 adapter: the batches that start in one range of seqs, fetched concurrently.

``S3Store.read`` pages forward window by window ("Restore" in the
``durably.adapters.s3`` module docstring): a window is one list call for the
batches whose first seq lies in (P, P + size] and concurrent GETs of them.
The first window of a read also takes the batch holding P + 1 and reads the
compaction mark alongside, so a read from below the mark restarts at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from durably.storage._errors import CorruptRecordError
from durably.storage._spi import StreamId

from ._batch import Batch
from ._compaction import S3Compaction
from ._keys import MAX_SEQ, StreamKeys, seq_from_name
from ._requests import S3Requests


@dataclass(slots=True)
class Window:
    """One read window: its batches and whether the stream ends with them, or where to restart."""

    batches: list[Batch] = field(default_factory=list)
    complete: bool = False
    restart_at: int | None = None
    vanished: int = 0


async def read_window(
    s3: S3Requests,
    compaction: S3Compaction,
    keys: StreamKeys,
    stream: StreamId,
    position: int,
    size: int,
    first: bool,
) -> Window:
    """The batches that start in (position, position + size], in seq order, fetched concurrently.

    ``first``: ``position`` may lie inside a batch or below the compaction
    mark, so the batch holding ``position + 1`` is included when it starts
    at or before ``position``, and the compaction mark is read (in parallel
    with the batches): if it is above ``position`` the window says to
    restart there, because below the mark only leftovers of stale writers
    may remain. Later windows start at a batch end, and their batches must
    continue it.
    Raises ``CorruptRecordError`` when the batches do not continue each other.
    """
    top = min(position + size, MAX_SEQ)
    names: list[str] = []
    below: str | None = None
    token: str | None = None
    while True:
        # Descending names: this lists first seqs <= top, highest first, down to position.
        page, token = await s3.list_page(
            keys.batches, start_after=keys.batch(top + 1), max_keys=min(size + 1, 1000), token=token
        )
        below = next((name for name in page if seq_from_name(name) <= position), None)
        names.extend(name for name in page if seq_from_name(name) > position)
        if below is not None or token is None:
            break
    names.reverse()
    holder = first and below is not None and not (names and seq_from_name(names[0]) == position + 1)
    if holder and below is not None:
        names.insert(0, below)  # the batch holding position + 1, or the newest if the stream ends before
    check_mark = first
    fetched: list[Batch | Exception | None] = [None] * len(names)
    mark: list[int] = [0]

    async def fetch(index: int) -> None:
        try:
            found = await s3.get(names[index])
            fetched[index] = None if found is None else Batch.decode(found[0])
        except Exception as exc:  # kept, so the reader gets the error itself, not an ExceptionGroup
            fetched[index] = exc

    async def fetch_mark() -> None:
        try:
            mark[0] = await compaction.compacted_through(keys)
        except Exception as exc:
            fetched.append(exc)

    async with anyio.create_task_group() as group:
        for index in range(len(names)):
            group.start_soon(fetch, index)
        if check_mark:
            group.start_soon(fetch_mark)
    for item in fetched:
        if isinstance(item, CorruptRecordError) and item.stream is None:
            raise CorruptRecordError(str(item), stream=stream) from item
        if isinstance(item, Exception):
            raise item
    if check_mark and mark[0] > position:
        return Window(restart_at=mark[0])  # compacted past position: read from the mark on
    if any(batch is None for batch in fetched):
        # Deleted between list and GET: a concurrent compaction (or purge). Start over above its mark.
        return Window(restart_at=max(position, await compaction.compacted_through(keys)), vanished=1)
    batches: list[Batch] = [batch for batch in fetched if isinstance(batch, Batch)]
    expected = None if holder else position + 1
    for batch in batches:
        if expected is not None and batch.first_seq != expected:
            # Only a compaction that overtook this reader may leave such a gap (and stale writers'
            # leftovers below its mark): restart above the mark; anything else is damage.
            compacted = await compaction.compacted_through(keys)
            if compacted > position:
                return Window(restart_at=compacted, vanished=1)
            raise CorruptRecordError(
                f"batch starts at seq {batch.first_seq}, expected {expected}", stream=stream, seq=expected
            )
        expected = batch.last_seq + 1
    end = batches[-1].last_seq if batches else position
    # Complete when the seq after the last batch falls inside the listed range, where no batch started.
    return Window(batches=batches, complete=end + 1 <= top)
