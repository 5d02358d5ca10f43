"""Time travel over a journal: the state at any seq, and a fork of an agent from there.

``state_at`` is restore with an upper bound (``restore(..., upto=seq)``): the
nearest snapshot at or before the seq plus the records up to it, so it is the
very code that resumes agents, and costs what a restore costs. ``fork`` copies
an agent's records 1..seq into a new stream, the way LangGraph forks a thread
from a checkpoint and DBOS forks a workflow from a step: the source is only
read, never written. The copy's ``started`` record names the new agent and a
new run id, so every tool call made after the fork has new idempotency keys (a
fork is a different run, and an external system must not deduplicate its calls
against the source's); a ``forked`` record after the copy names the source and
the seq. A call the source had started but not finished at that seq keeps its
key and meets its tool's unknown-outcome policy, exactly as after a crash;
a call the source had chosen but not started gets a new key and runs anew.
"""

from __future__ import annotations

import time
import uuid
from contextlib import aclosing
from typing import TYPE_CHECKING

from durably._journal import status_index
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import AgentState
from durably._tools.tool import idempotency_key
from durably.errors import AgentExistsError, AgentNotFoundError, SeqOutOfRangeError
from durably.schemas._records import Kind, Record
from durably.storage._errors import ConflictError, CorruptRecordError
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from durably._telemetry import Telemetry

_COPY_BATCH = 256  # records per append while copying: bounded memory on any length


async def state_at(store: Store, codec: RecordCodec, stream: StreamId, seq: int, telemetry: Telemetry) -> AgentState:
    """The folded state of ``stream`` right after record ``seq`` (int >= 1).

    Raises ``AgentNotFoundError`` (no records), ``SeqOutOfRangeError`` (``seq``
    below 1, past the last record, or before the oldest snapshot of a journal
    whose start was compacted away), ``CorruptRecordError`` and
    ``UnknownSchemaVersionError`` (as restore).
    """
    last = await _last_seq(store, stream)
    if type(seq) is not int or not 1 <= seq <= last:
        raise SeqOutOfRangeError(f"seq {seq!r} is outside {stream}'s journal (1..{last})")
    await _check_not_compacted(store, stream, seq)
    try:
        restored = await restore(store, codec, stream, telemetry, upto=seq)
    except CorruptRecordError:
        # Another writer's compaction between the check and the restore (a newer snapshot, the
        # records and snapshots behind the older one deleted) leaves a gap at the start of the
        # history read: out of range now, not damage. Anything else is raised as it came.
        await _check_not_compacted(store, stream, seq)
        raise
    if restored is None:  # deleted between the two reads
        raise AgentNotFoundError(f"no agent {stream.agent_id!r} in namespace {stream.namespace!r}")
    return restored.state


async def fork(
    store: Store, codec: RecordCodec, source: StreamId, at_seq: int, target: StreamId, telemetry: Telemetry
) -> AgentState:
    """Make ``target`` a new agent whose journal is ``source``'s up to ``at_seq``, then a ``forked`` record.

    Returns the fork's state (status as the source's at ``at_seq``; a running
    one is resumed by any runtime with its definition, e.g. ``serve()``).
    Raises ``AgentNotFoundError`` (no source), ``AgentExistsError`` (``target``
    has records), ``SeqOutOfRangeError`` (``at_seq`` outside the source's
    journal, or inside its compacted part: a fork copies the records),
    ``CorruptRecordError`` / ``UnknownSchemaVersionError`` (the source cannot be
    read; nothing or a partial copy written, which the expected seq of a retry
    refuses: purge the target first), ``StoreUnavailableError``.
    """
    at = await state_at(store, codec, source, at_seq, telemetry)
    if await _first_seq(store, source) != 1:
        raise SeqOutOfRangeError(f"{source}'s first records were compacted away: a fork needs records 1..{at_seq}")
    if await store.last_seq(target) != 0:
        raise AgentExistsError(f"agent {target.agent_id!r} already exists in namespace {target.namespace!r}")
    run_id = uuid.uuid4().hex
    batch: list[bytes] = []
    written = 0
    async with aclosing(JournalReader(store, codec, source).records(0, upto=at_seq)) as records:
        async for record in records:
            data = record.data
            if record.kind == Kind.STARTED:
                data = {**data, "namespace": target.namespace, "agent_id": target.agent_id, "run_id": run_id}
            batch.append(codec.encode_record(Record(record.seq, record.kind, data, record.at), target))
            if len(batch) == _COPY_BATCH:
                written = await _append(store, target, written, batch)
                batch = []
    # Chosen but not started at the fork (no ledger entry under its key): runs anew, under a new key.
    keys = {
        c["key"]: idempotency_key(target.namespace, target.agent_id, run_id, f"fork:{c['key']}")
        for c in at.pending_calls
        if c["key"] not in at.ledger
    }
    origin = {
        "namespace": source.namespace,
        "agent_id": source.agent_id,
        "run_id": at.run_id,
        "seq": at_seq,
        "keys": keys,
    }
    batch.append(codec.encode_record(Record(at_seq + 1, Kind.FORKED, origin, time.time()), target))
    await _append(store, target, written, batch)
    restored = await restore(store, codec, target, telemetry)
    assert restored is not None  # we just wrote it
    await status_index.repair(store, target, restored.state)  # written by copy, not by an agent: no entry yet
    return restored.state


async def _append(store: Store, stream: StreamId, expected: int, frames: list[bytes]) -> int:
    try:
        return await store.append(stream, expected, frames)
    except ConflictError:
        raise AgentExistsError(
            f"agent {stream.agent_id!r} was created in namespace {stream.namespace!r} while the fork was written"
        ) from None


async def _last_seq(store: Store, stream: StreamId) -> int:
    last = await store.last_seq(stream)
    if last == 0:
        raise AgentNotFoundError(f"no agent {stream.agent_id!r} in namespace {stream.namespace!r}")
    return last


async def _check_not_compacted(store: Store, stream: StreamId, seq: int) -> None:
    """Raise ``SeqOutOfRangeError`` when the state at ``seq`` can no longer be folded: no
    snapshot at or before it, and the journal's start compacted away."""
    if await store.get_snapshot(stream, seq) is None and (first := await _first_seq(store, stream)) > 1:
        raise SeqOutOfRangeError(
            f"{stream} at seq {seq}: the records before seq {first} were compacted away and no snapshot precedes it"
        )


async def _first_seq(store: Store, stream: StreamId) -> int:
    """The seq of the oldest stored record (0 when there is none)."""
    async with aclosing(store.read(stream, 0, page_size=1)) as records:
        async for stored in records:
            return stored.seq
    return 0
