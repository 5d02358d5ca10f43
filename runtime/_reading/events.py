"""Following one agent event by event: ``Runtime.events``.

Two sources, one order. The journal is the truth: every journaled event
(a model reply, a tool's start and result, a status change) is read from it,
so none is ever lost, wherever the agent runs. When the agent runs in this
process its actor also publishes them live (``durably._loop.live``), with the
pieces of text its model streams in between (deltas), which are never
journaled and so exist only here. A journaled event is yielded once, by seq:
from the live publication when it came first, from the journal otherwise.

A slow reader never holds the agent back: its buffer is bounded; deltas past
it are dropped (``AgentEvents.dropped`` counts them); journaled events past it
are read again from the journal.
"""

from __future__ import annotations

import math
import time
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.live import AgentEvent, LiveEvents, Subscription, events_of
from durably._loop.state import AgentState, apply
from durably.errors import AgentNotFoundError, InvalidCommandError
from durably.storage._errors import CodecError
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from durably._telemetry import Telemetry


class AgentEvents:
    """An async iterator of one agent's ``AgentEvent`` from the moment it was made, forever.

    Use it as ``async with rt.events(agent_id) as events: async for event in events: ...``
    (or close it with ``aclose``): it subscribes when made, so nothing the
    agent does after ``Runtime.events`` returned is missed, and unsubscribes
    when closed. Breaking out of the loop ends nothing else: the agent runs on.

    Made by ``Runtime.events``, which passes this process's ``LiveEvents``.

    Args:
        live: This process's subscriptions, subscribed to at once.
        store: The store holding the agent's journal.
        codec: Decodes its records.
        stream: The agent's stream.
        telemetry: Where the restore's span and metrics go.
        from_seq: The agent's last seq when it runs in this process (its live
            events after it are yielded), else None.
        after_seq: Also yield the journaled events after this seq already
            written (0: from the first record); None: from now on.
        buffer: Deltas, and separately journaled events, queued at most.
        poll_interval: Seconds between reads of the journal's tail.

    Raises:
        InvalidCommandError: ``after_seq``, ``buffer`` or ``poll_interval`` is out of range.
        AgentNotFoundError: When iterated: the agent has no records yet.
        CorruptRecordError: When iterated: a record cannot be read (also
            ``UnknownSchemaVersionError``); ``StoreUnavailableError``: the store
            cannot be reached.
    """

    def __init__(
        self,
        live: LiveEvents,
        store: Store,
        codec: RecordCodec,
        stream: StreamId,
        telemetry: Telemetry,
        *,
        from_seq: int | None,
        after_seq: int | None = None,
        buffer: int,
        poll_interval: float,
    ) -> None:
        if not (isinstance(poll_interval, (int, float)) and math.isfinite(poll_interval) and poll_interval > 0):
            raise InvalidCommandError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        if after_seq is not None and (isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0):
            raise InvalidCommandError(f"after_seq must be an int >= 0 or None, got {after_seq!r}")
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise InvalidCommandError(f"buffer must be an int >= 1, got {buffer!r}")
        self._live, self._store, self._codec, self._stream = live, store, codec, stream
        self._telemetry, self._poll = telemetry, poll_interval
        self._subscription: Subscription | None = live.subscribe(stream.agent_id, buffer)
        # Journaled events after this seq are yielded (None: from the first read on).
        self._from_seq = from_seq if after_seq is None else after_seq if from_seq is None else min(from_seq, after_seq)
        self._tail: AgentState | None = None  # the journal folded so far
        self._last = 0  # the seq of the last journaled event yielded (or passed over)
        self._ready: list[AgentEvent] = []  # read from the journal, not yet yielded
        self._next_read = 0.0  # when the journal is read next without being woken

    @property
    def dropped(self) -> int:
        """Deltas dropped because this reader fell behind."""
        return 0 if self._subscription is None else self._subscription.dropped

    def __aiter__(self) -> AgentEvents:
        return self

    async def __aenter__(self) -> AgentEvents:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Unsubscribe; the iterator ends (a no-op when closed already)."""
        if self._subscription is not None:
            self._live.unsubscribe(self._subscription)
            self._subscription = None

    async def __anext__(self) -> AgentEvent:
        if self._subscription is None:
            raise StopAsyncIteration
        if self._tail is None:
            await self._start()
        while True:
            subscription = self._subscription
            if subscription is None:
                raise StopAsyncIteration
            if self._ready:
                return self._ready.pop(0)
            event = subscription.take()
            if event is None:
                if subscription.behind:
                    # What was queued is yielded; what did not fit is read from the journal.
                    subscription.behind = False
                    await self._read_journal()
                elif time.monotonic() >= self._next_read:
                    await self._read_journal()
                else:
                    await subscription.ready(max(0.0, self._next_read - time.monotonic()))
                continue
            if event.seq is None:
                return event  # a delta
            if event.seq <= self._last:
                continue  # yielded already, from the journal
            if event.seq > self._last + 1:
                await self._read_journal(upto=event.seq - 1)  # written by another writer (a command)
            self._last = event.seq
            if self._ready:
                self._ready.append(event)
                continue
            return event

    async def _start(self) -> None:
        restored = await restore(self._store, self._codec, self._stream, self._telemetry)
        if restored is None:
            raise AgentNotFoundError(f"no agent {self._stream.agent_id!r} in namespace {self._stream.namespace!r}")
        now = restored.state.last_seq
        # What came live between the subscription and this read is yielded; what came before is the past.
        last = now if self._from_seq is None else min(self._from_seq, now)
        assert self._subscription is not None  # made with one, and not closed before it started
        queued = [e.seq for e in self._subscription.items if e.seq is not None]
        last = min([last, *(seq - 1 for seq in queued[:1])])
        self._tail, self._last = restored.state, now
        if last < now:
            # Fold the journal up to ``last`` only: the records after it are read again and yielded.
            try:
                earlier = await restore(self._store, self._codec, self._stream, self._telemetry, upto=last)
            except CodecError:
                earlier = None  # compacted away behind a snapshot: only what follows ``now`` is yielded
            if last == 0 or earlier is not None:
                self._tail = AgentState() if last == 0 or earlier is None else earlier.state
                self._last = last
                # Only those not published live: the queue holds the rest, in order with its deltas.
                await self._read_journal(upto=queued[0] - 1 if queued else None)
        self._next_read = time.monotonic() + self._poll

    async def _read_journal(self, upto: int | None = None) -> None:
        """Fold the records the journal holds past the tail (up to ``upto``); queue the events of those not yielded yet."""
        tail = self._tail
        assert tail is not None  # started before any read
        self._next_read = time.monotonic() + self._poll
        if await self._store.last_seq(self._stream) <= tail.last_seq:
            return
        reader = JournalReader(self._store, self._codec, self._stream)
        async with aclosing(reader.records(tail.last_seq, upto=upto)) as records:
            async for record in records:
                apply(tail, record)
                if record.seq > self._last:
                    self._ready.extend(events_of(tail.agent_id, record, tail))
                    self._last = record.seq
