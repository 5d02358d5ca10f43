"""The read and operate side of ``Runtime``: history, state at a seq, fork, describe, wait and watch.

Each method is a thin call into the module that holds its logic
(``history``, ``time_travel``, ``describe``, ``watch``), which needs only a
store and a codec: none of them needs the agent to be running here, so any
process on the same store (a CLI, a web console, a service) may use them.
``Runtime`` inherits this mixin; it provides ``store``, ``codec``, ``telemetry``,
``namespace`` and ``stream()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from . import time_travel
from . import watch as watching
from .describe import AgentDescription, describe, describe_namespace
from .history import HistoryEntry
from .history import history as read_history
from .state import AgentState

if TYPE_CHECKING:
    from durably._runtime.record_codec import RecordCodec
    from durably.storage._spi import Store, StreamId

    from .telemetry import Telemetry


class Inspection:
    """Methods of ``Runtime`` that read or branch an agent's journal (see the module docstring)."""

    if TYPE_CHECKING:  # the host's (Runtime), declared for the type checker
        store: Store
        codec: RecordCodec
        telemetry: Telemetry
        namespace: str

        def stream(self, agent_id: str) -> StreamId: ...

    def history(self, agent_id: str, *, after_seq: int = 0, kinds: Iterable[str] | None = None,
                payload: bool = False) -> AsyncIterator[HistoryEntry]:
        """The agent's records after ``after_seq`` (int), of ``kinds`` (None: all), decoded,
        as an async iterator of ``HistoryEntry`` with the data when ``payload``; bounded
        memory on any length. Raises (when iterated) ``AgentNotFoundError``,
        ``InvalidCommandError``, ``CorruptRecordError``."""
        return read_history(self.store, self.codec, self.stream(agent_id), after_seq=after_seq, kinds=kinds,
                            payload=payload)

    async def state_at(self, agent_id: str, seq: int) -> AgentState:
        """The agent's folded state right after record ``seq``, by the restore path
        (nearest snapshot at or before it, then replay). Raises ``AgentNotFoundError``,
        ``SeqOutOfRangeError``."""
        return await time_travel.state_at(self.store, self.codec, self.stream(agent_id), seq, self.telemetry)

    async def fork(self, agent_id: str, at_seq: int, new_agent_id: str) -> AgentState:
        """A new agent ``new_agent_id`` whose journal is ``agent_id``'s up to ``at_seq`` plus
        a ``forked`` record; the source is never changed. What follows runs anew, with
        new idempotency keys, once a runtime resumes it (``resume``, ``serve``); returns
        the fork's state. Raises ``AgentNotFoundError``, ``AgentExistsError``,
        ``SeqOutOfRangeError``."""
        return await time_travel.fork(self.store, self.codec, self.stream(agent_id), at_seq,
                                      self.stream(new_agent_id), self.telemetry)

    async def describe(self, agent_id: str) -> AgentDescription:
        """Status and why, definition, seq, usage and budget left, open approvals,
        pending calls, lease holder and expiry, times, fork origin (``AgentDescription``).
        Raises ``AgentNotFoundError`` and the journal's read errors."""
        return await describe(self.store, self.codec, self.stream(agent_id), self.telemetry)

    async def describe_all(self, *, statuses: Iterable[str] | None = None) -> list[AgentDescription]:
        """``describe`` of every agent of the namespace (unreadable ones with status ``unreadable``);
        ``statuses``: only agents with one of these (read from the status index where the store has one)."""
        return [d async for d in describe_namespace(self.store, self.codec, self.namespace, self.telemetry,
                                                    statuses=statuses)]

    def watch(self, agent_id: str, *, poll_interval: float = 0.2) -> AsyncIterator[watching.StatusChange]:
        """Status changes (``StatusChange``) of the agent from now on, wherever it runs:
        its journal is tailed every ``poll_interval`` seconds. Raises (when iterated)
        ``AgentNotFoundError``."""
        return watching.watch(self.store, self.codec, self.stream(agent_id), self.telemetry, poll_interval=poll_interval)

    def watch_namespace(self, *, poll_interval: float = 0.5) -> AsyncIterator[watching.StatusChange]:
        """Status changes of every agent of the namespace from now on, new agents included."""
        return watching.watch_namespace(self.store, self.codec, self.namespace, self.telemetry, poll_interval=poll_interval)

    async def wait(self, agent_id: str, until: Iterable[str] | str | None = None, *, timeout: float | None = None,
                   poll_interval: float = 0.2) -> AgentState:
        """Wait until the agent's status is one of ``until`` (default: stopped or parked)
        and return its state, following it across activations and processes. ``start()``
        launches an agent without waiting; this is how an embedding service waits later.
        Raises ``WaitTimeoutError`` (with the last state) after ``timeout`` seconds,
        ``AgentNotFoundError``, ``InvalidCommandError`` (unknown status)."""
        return await watching.wait(self.store, self.codec, self.stream(agent_id), self.telemetry, until=until,
                                   timeout=timeout, poll_interval=poll_interval)
