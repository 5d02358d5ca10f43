"""Following agents as they run: ``watch``, ``watch_namespace`` and ``wait``, by tailing the journal.

The journal is the agent, so a watcher needs no channel to the process that
runs it: it remembers the last seq it folded and reads the records after it
(a catch-up subscription, as EventStoreDB's, built on the store's ``read``).
Every record that changes what an operator cares about becomes a
``StatusChange``: started, resumed (a worker took the agent, after a crash or
an approval), approval requested, approval decided, suspended on its budget,
budget extended, finished, failed, cancelled. Since only the store is read,
an agent is followed across activations, processes and hosts alike. The store
is asked for its last seq every ``poll_interval`` seconds (one cheap query), and
only when that moved are records read and decoded; a store without change
notifications (none in the SPI today) has no cheaper way to learn of an append.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.live import STATUS_EVENTS
from durably._loop.state import (
    CANCELLED,
    FAILED,
    FINISHED,
    RUNNING,
    SLEEPING,
    SUSPENDED,
    WAITING_APPROVAL,
    WAITING_CHILD,
    AgentState,
    apply,
)
from durably.errors import (
    AgentNotFoundError,
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidCommandError,
    WaitTimeoutError,
)
from durably.storage._errors import CodecError
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from durably._telemetry import Telemetry

#: Statuses ``wait`` accepts in ``until``.
STATUSES = frozenset({RUNNING, WAITING_APPROVAL, SUSPENDED, SLEEPING, FINISHED, FAILED, CANCELLED, WAITING_CHILD})
#: What a listing may also report: a journal that cannot be read, a definition that must be migrated first.
LISTED_STATUSES = STATUSES | {"unreadable", "needs_migration"}


def check_statuses(owner: str, statuses: Iterable[str] | None) -> frozenset[str] | None:
    """``statuses`` as a set, refused when it is not a collection of known statuses.

    Args:
        owner: Who asks, for the message (``"agents"``).
        statuses: The statuses to list, or None for all.

    Returns:
        The set, or None.

    Raises:
        ArgumentTypeError: ``statuses`` is a bare ``str`` (it would be read as its
            letters) or not iterable.
        InvalidArgumentError: It names a status no agent can have.
    """
    if statuses is None:
        return None
    if isinstance(statuses, (str, bytes)) or not isinstance(statuses, Iterable):
        raise ArgumentTypeError(f"{owner}: statuses is a collection such as ['finished'], got {statuses!r}")
    wanted = frozenset(statuses)
    unknown = sorted(str(s) for s in wanted - LISTED_STATUSES)
    if unknown:
        raise InvalidArgumentError(
            f"{owner}: unknown status(es) {', '.join(unknown)}; known: {', '.join(sorted(LISTED_STATUSES))}"
        )
    return wanted


#: ``wait``'s default: the agent stopped or parked (nothing more happens without a human).
STOPPED_OR_PARKED = frozenset({WAITING_APPROVAL, SUSPENDED, FINISHED, FAILED, CANCELLED})

_EVENTS = STATUS_EVENTS  # the records that make a ``StatusChange``, and its event


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One change in an agent's life.

    Attributes:
        agent_id: The agent that changed.
        seq: The seq of the record that made the change.
        at: Unix seconds of that record.
        event: ``started``, ``resumed``, ``approval_requested``,
            ``approval_decided``, ``suspended``, ``budget_extended``,
            ``finished``, ``failed``, ``cancelled``, ``forked``,
            ``child_started`` or ``child_ended``.
        status: The agent's status after it.
        reason: Why the status is what it is, after it.
    """

    agent_id: str
    seq: int
    at: float
    event: str
    status: str
    reason: str


class _Tail:
    """The folded state of one stream and the changes its next records make."""

    def __init__(self, stream: StreamId, state: AgentState) -> None:
        self.stream = stream
        self.state = state

    async def advance(self, store: Store, codec: RecordCodec) -> list[StatusChange]:
        changes = []
        async with aclosing(JournalReader(store, codec, self.stream).records(self.state.last_seq)) as records:
            async for record in records:
                apply(self.state, record)
                event = _EVENTS.get(record.kind)
                if event is not None:
                    changes.append(
                        StatusChange(
                            self.stream.agent_id, record.seq, record.at, event, self.state.status, self.state.reason
                        )
                    )
        return changes


async def _tail_from_now(store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry) -> _Tail:
    restored = await restore(store, codec, stream, telemetry)
    if restored is None:
        raise AgentNotFoundError(f"no agent {stream.agent_id!r} in namespace {stream.namespace!r}")
    return _Tail(stream, restored.state)


def _check_interval(poll_interval: float) -> None:
    if not (isinstance(poll_interval, (int, float)) and math.isfinite(poll_interval) and poll_interval > 0):
        raise InvalidCommandError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")


async def watch(
    store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry, *, poll_interval: float = 0.2
) -> AsyncIterator[StatusChange]:
    """Yield the agent's status changes from now on, forever (break out, or cancel, to stop).

    Raises ``AgentNotFoundError`` (no agent yet), ``InvalidCommandError`` (a bad
    ``poll_interval``), ``CorruptRecordError`` / ``UnknownSchemaVersionError``
    (a record that cannot be read) and ``StoreUnavailableError``.
    """
    _check_interval(poll_interval)
    tail = await _tail_from_now(store, codec, stream, telemetry)
    while True:
        if await store.last_seq(stream) > tail.state.last_seq:
            for change in await tail.advance(store, codec):
                yield change
        await anyio.sleep(poll_interval)


async def watch_namespace(
    store: Store, codec: RecordCodec, namespace: str, telemetry: Telemetry, *, poll_interval: float = 0.5
) -> AsyncIterator[StatusChange]:
    """Yield the status changes of every agent of ``namespace`` from now on, forever.

    Agents created after the call are followed from their first record. An
    agent whose journal cannot be read is skipped (its neighbours are not).
    Errors: ``InvalidCommandError`` (bad ``poll_interval``), ``StoreUnavailableError``.
    """
    _check_interval(poll_interval)
    tails: dict[str, _Tail] = {}
    first_scan = True
    while True:
        async for stream in store.list_streams(namespace):
            tail = tails.get(stream.agent_id)
            try:
                if tail is None:
                    tail = (
                        await _tail_from_now(store, codec, stream, telemetry)
                        if first_scan
                        else _Tail(stream, AgentState())
                    )
                    tails[stream.agent_id] = tail
                    if first_scan:
                        continue
                if await store.last_seq(stream) > tail.state.last_seq:
                    for change in await tail.advance(store, codec):
                        yield change
            except (CodecError, AgentNotFoundError, ValueError):
                tails.pop(stream.agent_id, None)  # unreadable or purged: looked at afresh next time
        first_scan = False
        await anyio.sleep(poll_interval)


def check_until(until: Iterable[str] | str | None) -> frozenset[str]:
    """``until`` as a set of statuses (None: stopped or parked). Raises ``InvalidCommandError``."""
    if until is None:
        return STOPPED_OR_PARKED
    if not isinstance(until, str) and not isinstance(until, Iterable):
        raise InvalidCommandError(f"until must be a status or statuses (str), got {type(until).__name__}")
    wanted = frozenset([until] if isinstance(until, str) else until)
    if not all(isinstance(status, str) for status in wanted):
        raise InvalidCommandError(f"until must hold statuses (str), got {sorted(map(repr, wanted))}")
    unknown = sorted(wanted - STATUSES)
    if unknown or not wanted:
        raise InvalidCommandError(
            f"cannot wait for status {unknown[0] if unknown else 'nothing'!r} (statuses: {', '.join(sorted(STATUSES))})"
        )
    return wanted


async def wait(
    store: Store,
    codec: RecordCodec,
    stream: StreamId,
    telemetry: Telemetry,
    *,
    until: Iterable[str] | str | None = None,
    timeout: float | None = None,
    poll_interval: float = 0.2,
) -> AgentState:
    """Wait until the agent's status is one of ``until``; return its state then.

    ``until``: statuses (default: finished, failed, cancelled, waiting_approval,
    suspended); ``timeout``: seconds (None: no limit). Returns at once when the
    status already is one of them. Raises ``WaitTimeoutError`` (carrying the
    last state seen) after ``timeout``, ``AgentNotFoundError``,
    ``InvalidCommandError`` (unknown status, bad timeout) and the read errors of ``watch``.
    """
    wanted = check_until(until)
    _check_interval(poll_interval)
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
        raise InvalidCommandError(f"timeout must be seconds >= 0 or None, got {timeout!r}")
    tail = await _tail_from_now(store, codec, stream, telemetry)
    with anyio.move_on_after(math.inf if timeout is None else timeout):
        while tail.state.status not in wanted:
            await anyio.sleep(poll_interval)
            if await store.last_seq(stream) > tail.state.last_seq:
                # Fold record by record: a status passed through on the way counts too.
                async with aclosing(JournalReader(store, codec, stream).records(tail.state.last_seq)) as records:
                    async for record in records:
                        apply(tail.state, record)
                        if tail.state.status in wanted:
                            break
        return tail.state
    hint = ""
    if tail.state.status == SLEEPING:
        hint = (
            "; a sleeping agent wakes in a runtime that has its definition registered and waits "
            "for it, or serves it (serve() or `durably worker`)"
        )
    raise WaitTimeoutError(
        f"agent {stream.agent_id!r} still {tail.state.status} after {timeout} s "
        f"(waited for {', '.join(sorted(wanted))}){hint}",
        tail.state,
    )
