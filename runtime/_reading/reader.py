"""The reading part of ``Runtime``: history, state at a seq, fork, describe, wait and watch.

``Reader`` holds what reading needs, a store, a codec, the telemetry and the
namespace, and nothing of the agents running here: any process on the same store
(a CLI, a web console, a service) reads the same way. Each method is a call into
the module that holds its logic (``history``, ``time_travel``, ``describe``,
``watch``), imported when first called: a runtime that only runs agents never
loads them (import time). The contracts are on the ``Runtime`` methods of the
same names, which delegate here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from durably.errors import ArgumentTypeError
from durably.storage._spi import StreamId

if TYPE_CHECKING:
    from durably._journal.records import RecordCodec
    from durably._loop.state import AgentState
    from durably._reading.describe import AgentDescription
    from durably._reading.history import HistoryEntry
    from durably._reading.watch import StatusChange
    from durably._telemetry import Telemetry
    from durably.storage._spi import Store


class Reader:
    """Reads and branches the journals of one namespace (see the module docstring)."""

    def __init__(self, store: Store, codec: RecordCodec, telemetry: Telemetry, namespace: str) -> None:
        self.store = store
        self.codec = codec
        self.telemetry = telemetry
        self.namespace = namespace

    def stream(self, agent_id: str) -> StreamId:
        """The stream of ``agent_id`` in this namespace."""
        return StreamId(self.namespace, agent_id)

    def history(
        self, agent_id: str, *, after_seq: int = 0, kinds: Iterable[str] | None = None, payload: bool = False
    ) -> AsyncIterator[HistoryEntry]:
        """``Runtime.history``."""
        from durably._reading.history import history as read_history

        if kinds is not None and (isinstance(kinds, (str, bytes)) or not isinstance(kinds, Iterable)):
            raise ArgumentTypeError(f"history: kinds is a collection such as ['tool_result'], got {kinds!r}")
        return read_history(
            self.store, self.codec, self.stream(agent_id), after_seq=after_seq, kinds=kinds, payload=payload
        )

    async def state_at(self, agent_id: str, seq: int) -> AgentState:
        """``Runtime.state_at``."""
        from durably._reading import time_travel

        return await time_travel.state_at(self.store, self.codec, self.stream(agent_id), seq, self.telemetry)

    async def fork(self, agent_id: str, at_seq: int, new_agent_id: str) -> AgentState:
        """``Runtime.fork``."""
        from durably._reading import time_travel

        return await time_travel.fork(
            self.store, self.codec, self.stream(agent_id), at_seq, self.stream(new_agent_id), self.telemetry
        )

    async def describe(self, agent_id: str) -> AgentDescription:
        """``Runtime.describe``."""
        from durably._reading.describe import describe

        return await describe(self.store, self.codec, self.stream(agent_id), self.telemetry)

    async def describe_all(self, *, statuses: Iterable[str] | None = None) -> list[AgentDescription]:
        """``Runtime.describe_all``."""
        from durably._reading import watch as watching
        from durably._reading.describe import describe_namespace

        wanted = watching.check_statuses("describe_all", statuses)
        return [
            d async for d in describe_namespace(self.store, self.codec, self.namespace, self.telemetry, statuses=wanted)
        ]

    def watch(self, agent_id: str, *, poll_interval: float = 0.2) -> AsyncIterator[StatusChange]:
        """``Runtime.watch``."""
        from durably._reading import watch as watching

        return watching.watch(
            self.store, self.codec, self.stream(agent_id), self.telemetry, poll_interval=poll_interval
        )

    def watch_namespace(self, *, poll_interval: float = 0.5) -> AsyncIterator[StatusChange]:
        """``Runtime.watch_namespace``."""
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
        """``Runtime.wait``."""
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
