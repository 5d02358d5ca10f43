"""``RuntimeHost``: what the fleet and operator helpers need of the ``Runtime`` that calls them.

The helpers (``scan``, ``serving``, ``wakeups``, ``dispatch``, ``placement``) and
the method groups ``Runtime`` is made of are handed a runtime; they are typed
against this protocol, not the ``Runtime`` class, so that the class can import
them without an import circle. ``Runtime`` satisfies it structurally.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from durably._fleet.handle import AgentHandle
    from durably._fleet.leases import LeaseKeeper
    from durably._fleet.owner import LeaseHolder
    from durably._journal.writer import AgentJournal
    from durably._loop.actor import AgentActor
    from durably._loop.agent import AgentDefinition
    from durably._telemetry import Telemetry
    from durably.storage import Store, StreamId


class RuntimeHost(Protocol):
    """The runtime's members the helpers use: its store and namespace, its live actors, leases and
    definitions, and the activation entry points (``_resume``, ``_restore_journal``)."""

    store: Store
    namespace: str
    worker_id: str
    telemetry: Telemetry
    draining: bool
    _definitions: dict[str, AgentDefinition]
    _live: dict[str, AgentActor]
    _leases: LeaseKeeper

    def stream(self, agent_id: str) -> StreamId: ...

    def _require_started(self) -> None: ...

    async def lease_holder(self, agent_id: str) -> LeaseHolder | None: ...

    async def drain(self, timeout: float = 30.0) -> None: ...

    async def _restore_journal(self, agent_id: str) -> AgentJournal: ...

    async def _resume(
        self,
        agent_id: str,
        *,
        force: bool = False,
        seen: Any = ...,
        gather: Callable[[], Awaitable[None]] | None = None,
    ) -> AgentHandle | None: ...
