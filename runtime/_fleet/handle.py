"""``AgentHandle``: a live activation, what ``start``, ``resume`` and ``retry`` hand back.

User code holds a handle to wait for an activation's end; it needs only the
actor, not the runtime that made it. It is separate from ``runtime`` (one idea
per module) so that the modules making handles (``activation``, ``dispatch``)
and those naming them (``runtime``, ``placement``, ``scan``, ``wakeups``) import
it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durably._loop.actor import AgentActor
    from durably._loop.state import AgentState


class AgentHandle:
    """A live agent activation; ``await handle.wait()`` returns its state when it stops or parks.

    The runtime makes handles (``start``, ``resume``, ``retry``); user code does
    not build one.

    Args:
        actor: The activation's actor, owned by the runtime.
    """

    def __init__(self, actor: AgentActor) -> None:
        self._actor = actor

    @property
    def agent_id(self) -> str:
        """The id of the agent this activation runs."""
        return self._actor.state.agent_id

    def __repr__(self) -> str:
        state = self._actor.state
        phase = "ended" if self._actor.done.is_set() else "live"
        return (
            f"<AgentHandle {state.namespace}/{state.agent_id} {phase}, status {state.status} at seq {state.last_seq}>"
        )

    async def wait(self) -> AgentState:
        """Wait for this activation to end and give its lease back.

        Returns:
            The agent's state when it stopped or parked. A state with status
                ``running`` means this runtime stopped the activation itself
                (``drain``, leaving ``async with``).

        Raises:
            AgentFencedError: Another writer appended to the journal (this
                activation was stale).
            StoreUnavailableError: The store failed and that stopped it.
            AgentLeaseLostError: The activation's lease is not its own any more:
                another runtime took it (this one paused past its TTL, or lost the
                store for that long), it lapsed before a model or tool call, or the
                store refused its fencing token; a "running" state from here would be a lie.
        """
        await self._actor.done.wait()
        await self._actor.exited.wait()
        if self._actor.error is not None:
            raise self._actor.error
        return self._actor.state
