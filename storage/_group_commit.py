"""Group commit: many agents' appends share one ``append_batch`` call.

The leader/follower scheme of database WALs (PostgreSQL's ``commit_delay``,
MySQL's binlog group commit): an append enqueues itself; if no commit is in
flight it leads one at once, committing everything queued so far, else it
waits for the one in flight to finish, so while one transaction is being made
durable, the next one fills up. No background task: a waiter does the work,
which keeps structured concurrency intact.

An append that finds nothing in flight and nothing queued, while the previous
batch held one append, takes no lock and no cancel scope (each costs an
event-loop round trip): it goes straight to the store. After a batch that
grouped several appends, a leader first lets the loop run once, as taking the
lock did, so that the appends of the other agents stepping now join its batch:
without that, many agents appending at once were cut into lone commits (16
agents: no better than one lock per append). Only a batch that holds other
tasks' appends is shielded from its leader's cancellation, so that every
waiter learns its real outcome.

Each ``append`` returns only after the batch that holds it is durable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import anyio
import anyio.lowlevel

from ._errors import DurablyError, StoreUnavailableError
from ._spi import AppendRequest, IndexEntry, Store, StreamId, check_append

if TYPE_CHECKING:
    from opentelemetry import trace

_GLOBAL = object()  # GroupCommitter's default tracer: the global one, if anything records
_NO_SPAN = contextlib.nullcontext()


def _global_tracer() -> trace.Tracer | None:
    """The global ``durably`` tracer, or None while the global provider is the API's
    own no-op or proxy one (no SDK installed): nothing would be recorded."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return None if type(provider).__module__.startswith("opentelemetry.trace") else provider.get_tracer("durably")


@dataclass(slots=True)
class _Pending:
    request: AppendRequest
    outcome: int | BaseException | None = None


class GroupCommitter:
    """Funnels appends of many streams into few ``store.append_batch`` calls.

    In: ``store`` (an open ``Store``), ``max_batch`` (most appends per call),
    ``tracer`` (OpenTelemetry; by default the global ``durably`` tracer if an
    SDK is installed; None: no spans), ``attributes`` (put on every span, e.g.
    ``durably.namespace``): each commit is a ``durably.journal.append`` span
    with the appends, records and stored bytes it carried. Use one per store
    per process; ``append`` is safe from any number of tasks of one event loop.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 512,
        tracer: trace.Tracer | None | object = _GLOBAL,
        attributes: dict[str, str] | None = None,
    ) -> None:
        self._store = store
        self._tracer: trace.Tracer | None = (
            _global_tracer() if tracer is _GLOBAL else cast("trace.Tracer | None", tracer)
        )
        self._attributes = attributes or {}
        self._max_batch = max_batch
        self._queue: list[_Pending] = []
        self._busy = False  # a batch is in the store's hands (or being gathered by its leader)
        self._idle: anyio.Event | None = None  # set when that batch is done; created by the first waiter
        self._last_size = 1  # appends in the previous batch: the fast path only follows a lone one
        self.batches = 0  # commits made; appends / batches is the grouping factor

    async def append(
        self,
        stream: StreamId,
        expected_seq: int,
        records: Sequence[bytes],
        index: IndexEntry | None = None,
        *,
        fence: int | None = None,
    ) -> int:
        """Append ``records`` after ``expected_seq``; return the new last seq once durable.

        ``index``: the stream's new status index entry, committed with the records
        (``AppendRequest.index``; ignored by stores without ``CAP_STATUS_INDEX``).
        ``fence``: the writer's lease token, checked by the store with the
        expected seq (``AppendRequest.fence``; None: no check).

        Raises ``ConflictError`` (stale expected seq, nothing written), ``FencedError``
        (a ``ConflictError``: ``fence`` is no longer the stream's lease, nothing written),
        ``StoreUnavailableError`` (outcome unknown: re-read before retrying) and
        ``InvalidRequestError``. Cancelled while its batch is in the store, a
        lone append's outcome is unknown (as for any cancelled write); one
        sharing its batch with others completes it first.
        """
        request = AppendRequest(stream, expected_seq, records, index, fence)
        check_append(request)  # here, so one malformed append cannot fail its whole batch
        pending = _Pending(request)
        if not self._busy and not self._queue and self._last_size <= 1:
            await self._commit([pending])  # the fast path: nobody to wait for, nobody to group with
        else:
            self._queue.append(pending)
            try:
                # A loop: a batch in flight may not hold us, nor may one capped at max_batch.
                while pending.outcome is None:
                    if self._busy:
                        if self._idle is None:
                            self._idle = anyio.Event()
                        await self._idle.wait()
                    else:
                        await self._lead()
            except BaseException:
                # Cancelled while waiting: if no leader took the request yet, withdraw it,
                # else a retry with the same expected seq would conflict with this orphan.
                self._queue = [p for p in self._queue if p is not pending]
                raise
        outcome = pending.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None  # _commit sets every outcome of its batch, or raises
        return outcome

    async def _lead(self) -> None:
        """Commit the next batch of the queue, once the tasks ready to run now had their
        turn to join it (one uncancellable checkpoint, what acquiring a free lock costs)."""
        self._busy = True  # no second leader while this one yields
        try:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        except BaseException:
            self._done()
            raise
        self._busy = False  # _commit takes it again at once, without yielding in between
        batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        """Hand ``batch`` to the store as one ``append_batch``; set every outcome."""
        self._busy = True
        self._last_size = len(batch)
        try:
            if len(batch) == 1:
                await self._store_batch(batch)
            else:
                # Shielded: once handed to the store, a batch must finish so that every
                # waiter learns its real outcome; a cancelled leader must not strand them.
                with anyio.CancelScope(shield=True):
                    await self._store_batch(batch)
        finally:
            self._done()

    def _done(self) -> None:
        self._busy = False
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.set()  # the waiters: one of them leads the next batch

    def _span(self) -> contextlib.AbstractContextManager[trace.Span | None]:
        if self._tracer is None:
            return _NO_SPAN  # nothing records: no span object at all on the hot path
        span: contextlib.AbstractContextManager[trace.Span] = self._tracer.start_as_current_span(
            "durably.journal.append", attributes=self._attributes
        )
        return span

    async def _store_batch(self, batch: list[_Pending]) -> None:
        with self._span() as span:
            if span is not None:
                span.set_attributes(
                    {
                        "durably.append.count": len(batch),
                        "durably.record.count": sum(len(p.request.records) for p in batch),
                        "durably.bytes.stored": sum(len(r) for p in batch for r in p.request.records),
                    }
                )
            try:
                results = await self._store.append_batch([p.request for p in batch])
                if len(results) != len(batch):
                    raise StoreUnavailableError(f"store returned {len(results)} results for {len(batch)} appends")
            except BaseException as exc:
                outcome = exc
                if not isinstance(exc, DurablyError):
                    # An adapter bug or an untyped driver error: keep it as the cause.
                    outcome = StoreUnavailableError(f"append failed: {exc!r}")
                    outcome.__cause__ = exc
                for p in batch:
                    p.outcome = outcome
                if not isinstance(exc, Exception):
                    raise  # cancellation, KeyboardInterrupt and the like still end the leader
                return
        self.batches += 1
        for p, result in zip(batch, results, strict=True):
            p.outcome = result
