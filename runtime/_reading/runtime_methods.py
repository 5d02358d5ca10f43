"""The read and operate side of ``Runtime``: history, state at a seq, fork, describe, wait and watch.

Each method is a thin call into the module that holds its logic
(``history``, ``time_travel``, ``describe``, ``watch``), which needs only a
store and a codec: none of them needs the agent to be running here, so any
process on the same store (a CLI, a web console, a service) may use them.
``Runtime`` inherits this mixin; it provides ``store``, ``codec``, ``telemetry``,
``namespace`` and ``stream()``. Each method imports its module when first
called: a runtime that only runs agents never loads them (import time).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from durably.errors import ArgumentTypeError

if TYPE_CHECKING:
    from durably._journal.records import RecordCodec
    from durably._loop.state import AgentState
    from durably._reading.describe import AgentDescription
    from durably._reading.history import HistoryEntry
    from durably._reading.watch import StatusChange
    from durably._telemetry import Telemetry
    from durably.storage._spi import Store, StreamId


class Inspection:
    """Methods of ``Runtime`` that read or branch an agent's journal (see the module docstring)."""

    if TYPE_CHECKING:  # the host's (Runtime), declared for the type checker
        store: Store
        codec: RecordCodec
        telemetry: Telemetry
        namespace: str

        def stream(self, agent_id: str) -> StreamId: ...

    def history(
        self, agent_id: str, *, after_seq: int = 0, kinds: Iterable[str] | None = None, payload: bool = False
    ) -> AsyncIterator[HistoryEntry]:
        """The agent's journal records, decoded, in seq order; bounded memory on any length.

        The idea is the event store's "read stream forward" (EventStoreDB) and
        LangGraph's ``get_state_history``.

        Args:
            agent_id: The agent in this runtime's namespace.
            after_seq: Only records with a seq above this (an int >= 0).
            kinds: Only records of these kinds (None: all).
            payload: Include each record's data.

        Returns:
            An async iterator of ``HistoryEntry``.

        Raises:
            ArgumentTypeError: ``kinds`` is a bare ``str`` (it would be read as its
                letters) or not iterable.
            AgentNotFoundError: When iterated: the agent has no records.
            InvalidCommandError: When iterated: a negative ``after_seq`` or an
                unknown kind.
            CorruptRecordError: When iterated, at the first record that cannot be
                read (the entries before it were yielded).
        """
        from durably._reading.history import history as read_history

        if kinds is not None and (isinstance(kinds, (str, bytes)) or not isinstance(kinds, Iterable)):
            raise ArgumentTypeError(f"history: kinds is a collection such as ['tool_result'], got {kinds!r}")
        return read_history(
            self.store, self.codec, self.stream(agent_id), after_seq=after_seq, kinds=kinds, payload=payload
        )

    async def state_at(self, agent_id: str, seq: int) -> AgentState:
        """The agent's folded state right after record ``seq``.

        It is built by the restore path: the nearest snapshot at or before
        ``seq``, then replay.

        Args:
            agent_id: The agent in this runtime's namespace.
            seq: The record to stop after (an int >= 1).

        Returns:
            The state as it was right after record ``seq``.

        Raises:
            AgentNotFoundError: The agent has no records.
            SeqOutOfRangeError: ``seq`` is below 1, past the last record, or
                before the oldest snapshot of a journal whose start was
                compacted away.
        """
        from durably._reading import time_travel

        return await time_travel.state_at(self.store, self.codec, self.stream(agent_id), seq, self.telemetry)

    async def fork(self, agent_id: str, at_seq: int, new_agent_id: str) -> AgentState:
        """Fork an agent: a new one whose journal is the source's up to ``at_seq``.

        The new journal is a copy of ``agent_id``'s records 1..``at_seq`` plus a
        ``forked`` record; the source is never changed. What follows runs anew,
        with new idempotency keys, once a runtime resumes it (``resume``,
        ``serve``).

        Args:
            agent_id: The source agent.
            at_seq: The last source record the fork copies.
            new_agent_id: The fork's agent id, in the same namespace.

        Returns:
            The fork's state (status as the source's at ``at_seq``).

        Raises:
            AgentNotFoundError: The source has no records.
            AgentExistsError: ``new_agent_id`` already has records.
            SeqOutOfRangeError: ``at_seq`` is outside the source's journal, or
                inside its compacted part (a fork copies the records).
        """
        from durably._reading import time_travel

        return await time_travel.fork(
            self.store, self.codec, self.stream(agent_id), at_seq, self.stream(new_agent_id), self.telemetry
        )

    async def describe(self, agent_id: str) -> AgentDescription:
        """Describe one agent as it is now (as ``temporal workflow describe``, ``dbos workflow get``).

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            Its ``AgentDescription``: status and why, definition, seq, usage and
                budget left, open approvals, pending calls, lease holder and expiry,
                times, fork origin.

        Raises:
            AgentNotFoundError: The agent has no records.
            CorruptRecordError: Its journal cannot be read (also
                ``UnknownSchemaVersionError``).
        """
        from durably._reading.describe import describe

        return await describe(self.store, self.codec, self.stream(agent_id), self.telemetry)

    async def describe_all(self, *, statuses: Iterable[str] | None = None) -> list[AgentDescription]:
        """``describe`` every agent of the namespace, in the store's listing order.

        An agent whose journal cannot be read is described with status
        ``unreadable`` and the error as its reason.

        Args:
            statuses: Only agents with one of these statuses (read from the
                status index where the store has one); None: all.

        Returns:
            One ``AgentDescription`` per agent.

        Raises:
            ArgumentTypeError: ``statuses`` is a bare ``str`` or not iterable.
            InvalidArgumentError: ``statuses`` names a status no agent can have.
        """
        from durably._reading import watch as watching
        from durably._reading.describe import describe_namespace

        wanted = watching.check_statuses("describe_all", statuses)
        return [
            d async for d in describe_namespace(self.store, self.codec, self.namespace, self.telemetry, statuses=wanted)
        ]

    def watch(self, agent_id: str, *, poll_interval: float = 0.2) -> AsyncIterator[StatusChange]:
        """Follow the agent's status changes from now on, wherever it runs.

        Args:
            agent_id: The agent in this runtime's namespace.
            poll_interval: Seconds between reads of its journal's tail (> 0).

        Returns:
            An endless async iterator of ``StatusChange`` (break out, or cancel,
                to stop).

        Raises:
            AgentNotFoundError: When iterated: the agent has no records yet.
            InvalidCommandError: When iterated: ``poll_interval`` is not a
                positive number.
        """
        from durably._reading import watch as watching

        return watching.watch(
            self.store, self.codec, self.stream(agent_id), self.telemetry, poll_interval=poll_interval
        )

    def watch_namespace(self, *, poll_interval: float = 0.5) -> AsyncIterator[StatusChange]:
        """Follow the status changes of every agent of the namespace from now on, new agents included.

        An agent whose journal cannot be read is skipped (its neighbours are not).

        Args:
            poll_interval: Seconds between scans of the namespace (> 0).

        Returns:
            An endless async iterator of ``StatusChange``.

        Raises:
            InvalidCommandError: When iterated: ``poll_interval`` is not a
                positive number.
        """
        from durably._reading import watch as watching

        return watching.watch_namespace(
            self.store, self.codec, self.namespace, self.telemetry, poll_interval=poll_interval
        )

    async def wait(
        self,
        agent_id: str,
        until: Iterable[str] | str | None = None,
        *,
        timeout: float | None = None,
        poll_interval: float = 0.2,
    ) -> AgentState:
        """Wait until the agent's status is one of ``until``, following it across activations and processes.

        ``start()`` launches an agent without waiting; this is how an embedding
        service waits later. Returns at once when the status already is one of
        them.

        Args:
            agent_id: The agent in this runtime's namespace.
            until: A status or statuses (None: stopped or parked: finished,
                failed, cancelled, waiting_approval, suspended).
            timeout: Seconds to wait at most (None: no limit).
            poll_interval: Seconds between reads of the journal's tail (> 0).

        Returns:
            The agent's state once its status is one of ``until``.

        Raises:
            WaitTimeoutError: ``timeout`` passed first; it carries the last state
                seen.
            AgentNotFoundError: The agent has no records.
            InvalidCommandError: An unknown status, a bad ``timeout`` or
                ``poll_interval``.
        """
        from durably._reading import watch as watching

        return await watching.wait(
            self.store,
            self.codec,
            self.stream(agent_id),
            self.telemetry,
            until=until,
            timeout=timeout,
            poll_interval=poll_interval,
        )
