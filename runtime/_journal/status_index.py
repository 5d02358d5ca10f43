"""The status index: one small entry per stream, so scans cost what is runnable, not what ever ran.

On a store with ``CAP_STATUS_INDEX`` every append whose records change what
the entry holds (status, definition, open approvals) carries the stream's new
``IndexEntry`` in the same commit (``AgentJournal`` computes it here, from the
state before the batch and the batch's records, before anything is written).
``resume_all``, ``serve`` and ``agents(statuses=...)`` then list the index
instead of restoring every stream.

The journal stays the truth, and the index may only err in one direction:
claim a stream runnable that is not. A stream without an entry (written
before the index existed, by a writer that does not keep it, or whose entry
was lost) is listed as "look at me" by every ``list_index``, and the restore
that follows puts its entry (``repair``); a stale entry found by a restore is
corrected the same way. ``rebuild`` rewrites every entry of a namespace from
the journals (``durably verify --rebuild-index``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import NEEDS_MIGRATION, RUNNING, SLEEPING, AgentState, apply
from durably._telemetry import Telemetry
from durably.errors import InvalidArgumentError
from durably.schemas._records import Kind, Record
from durably.storage._errors import CodecError
from durably.storage._spi import IndexedStream, IndexEntry, IndexStore, Store, StreamId, supports_status_index

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path

#: Record kinds whose fold may change an entry; a batch with none of them carries none.
INDEX_KINDS = frozenset(
    {
        Kind.STARTED,
        Kind.APPROVAL_REQUESTED,
        Kind.APPROVAL_DECIDED,
        Kind.BUDGET_EXCEEDED,
        Kind.BUDGET_EXTENDED,
        Kind.HISTORY_COMPACTED,
        Kind.FINISHED,
        Kind.FAILED,
        Kind.CANCELLED,
        Kind.DEFINITION_CHANGED,
        Kind.FORKED,
        Kind.RETRIED,
        Kind.TIMER_SET,
        Kind.TIMER_FIRED,
        Kind.CHILD_STARTED,
        Kind.CHILD_ENDED,
    }
)

#: Statuses a journal can hold (the index knows them); others (``unreadable``,
#: ``needs_migration``) are worked out by a restore, so asking for them lists everything.
JOURNALED = frozenset(
    {RUNNING, "waiting_approval", "suspended", SLEEPING, "finished", "failed", "cancelled", "waiting_child"}
)


def indexed(store: Store) -> bool:
    """True when ``store`` declares ``CAP_STATUS_INDEX``."""
    return supports_status_index(store)


def index_store(store: Store) -> IndexStore | None:
    """``store`` as an ``IndexStore`` when it declares ``CAP_STATUS_INDEX``, else None."""
    return store if supports_status_index(store) else None


def entry_of(state: AgentState, updated_at: float) -> IndexEntry:
    """The entry describing ``state`` (status, definition name, open approvals, a sleeping
    agent's wake time) at its last seq."""
    return IndexEntry(
        status=state.status,
        definition=str(state.definition.get("name", "")),
        seq=state.last_seq,
        updated_at=updated_at,
        open_approvals=tuple(a for a, r in state.approvals.items() if r.get("decision") is None),
        wake_at=state.wake_at if state.status == SLEEPING else None,
    )


def _same(a: IndexEntry | None, b: IndexEntry | None) -> bool:
    """Equal in what the index is for (not the seq and time it was written at)."""
    if a is None or b is None:
        return a is b
    return (a.status, a.definition, a.open_approvals, a.wake_at) == (
        b.status,
        b.definition,
        b.open_approvals,
        b.wake_at,
    )


def entry_after(state: AgentState, records: Sequence[Record]) -> IndexEntry | None:
    """The entry once ``records`` (the next batch) are folded into ``state``; None when they change nothing it holds.

    Folds the batch into a shadow of the small parts of ``state`` (the
    conversation and ledger are left out: no handler reads them to decide a
    status), so ``state`` itself never runs ahead of the journal. A batch that
    does not fold returns None: the real fold will refuse it too.
    """
    if not any(record.kind in INDEX_KINDS for record in records):
        return None
    shadow = AgentState(
        namespace=state.namespace,
        agent_id=state.agent_id,
        run_id=state.run_id,
        definition=state.definition,
        status=state.status,
        reason=state.reason,
        pending_calls=list(state.pending_calls),
        approvals=dict(state.approvals),
        usage=dict(state.usage),
        budget=dict(state.budget),
        last_seq=state.last_seq,
        wake_at=state.wake_at,
        children=dict(state.children),
    )
    try:
        for record in records:
            apply(shadow, record)
    except (ValueError, CodecError):
        return None
    return entry_of(shadow, records[-1].at)


def listing(store: Store, namespace: str, statuses: Collection[str] | None) -> AsyncIterator[StreamId] | None:
    """The streams of ``namespace`` that may have one of ``statuses``, from the index; None
    when the store has none or a status is one only a restore can tell (then list every stream)."""
    found = index_store(store)
    if found is None or (statuses is not None and not set(statuses) <= JOURNALED):
        return None
    return _streams(found, namespace, statuses)


async def _streams(store: IndexStore, namespace: str, statuses: Collection[str] | None) -> AsyncIterator[StreamId]:
    async for row in store.list_index(namespace, statuses):
        yield row.stream


#: ``repair``'s "the caller has not read the entry": it reads it itself.
UNSEEN: Any = object()


def runnable_rows(store: Store, namespace: str) -> AsyncIterator[IndexedStream] | None:
    """The index rows of the streams of ``namespace`` that may run (status ``running``,
    ``needs_migration``, ``sleeping``, or no entry), with the entries seen; None when ``store``
    has no index. A sleeping one runs once its ``wake_at`` has come (``durably._fleet.timers``).

    ``needs_migration`` is an index-only status (the journal says ``running``)
    that a worker puts when its definition may not run the agent; it stays
    listed, so that a worker with a definition that accepts it resumes it.
    """
    found = index_store(store)
    return None if found is None else found.list_index(namespace, {RUNNING, NEEDS_MIGRATION, SLEEPING})


async def repair(store: Store, stream: StreamId, state: AgentState, seen: IndexEntry | None = UNSEEN) -> None:
    """After a restore of ``stream`` to ``state``: put its entry if the stored one (``seen``, when
    the caller read it just now, e.g. in a listing) is missing or says otherwise.

    Compare-and-set on the last seq: a record appended meanwhile wins (its
    writer knows better). ``updated_at`` of a repaired entry is the repair's time.
    """
    found = index_store(store)
    if found is None or not state.last_seq:
        return
    wanted = entry_of(state, time.time())
    stored = await found.get_index(stream) if seen is UNSEEN else seen
    if not _same(stored, wanted):
        await found.put_index(stream, wanted, state.last_seq)


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What ``rebuild`` did to one stream: ``entry`` written (None: removed, the journal
    is ``unreadable`` then and ``error`` says why), ``changed`` (it differed from the
    stored one), ``raced`` (a record was appended meanwhile: left to that writer)."""

    stream: StreamId
    entry: IndexEntry | None
    changed: bool
    raced: bool
    error: str = ""


async def rebuild(
    store: Store, codec: RecordCodec, namespace: str, telemetry: Telemetry | None = None
) -> AsyncIterator[RebuildReport]:
    """Rewrite every entry of ``namespace`` from the journals (``durably verify --rebuild-index``).

    Each stream is restored; its entry gets the time of its last record. A
    journal that cannot be read loses its entry, so every scan looks at it (and
    reports it) as before the index. Raises ``ValueError`` for a store without
    ``CAP_STATUS_INDEX`` and ``StoreUnavailableError``.
    """
    found = index_store(store)
    if found is None:
        raise InvalidArgumentError(f"{type(store).__name__} has no status index (CAP_STATUS_INDEX)")
    async for stream in found.list_streams(namespace):
        stored = await found.get_index(stream)
        try:
            restored = await restore(store, codec, stream, telemetry)
        except CodecError as exc:
            written = await found.put_index(stream, None, await found.last_seq(stream))
            yield RebuildReport(stream, None, stored is not None, not written, f"{type(exc).__name__}: {exc}")
            continue
        if restored is None:
            continue  # purged meanwhile, or holds only blobs
        wanted = entry_of(restored.state, await _last_record_time(store, codec, stream, restored.state.last_seq))
        changed = not _same(stored, wanted)
        written = await found.put_index(stream, wanted, restored.state.last_seq)
        yield RebuildReport(stream, wanted, changed, not written)


async def _last_record_time(store: Store, codec: RecordCodec, stream: StreamId, last_seq: int) -> float:
    record = await JournalReader(store, codec, stream).first_after(last_seq - 1)
    return record.at if record is not None else time.time()  # none: compacted away, the rebuild's time
