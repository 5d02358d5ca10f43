"""``ChildRuns``: how a parent's actor starts child agents and reads their ends, in one runtime.

A child is journaled as ``Runtime.submit`` journals an agent (its ``started``
record, with a ``parent`` link: the parent's id, run id and the call's
idempotency key), with no lease taken; then it runs here if its definition is
registered here, and any worker serving that definition may take it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from durably._journal.writer import AgentJournal
from durably._loop.state import CANCELLED, FAILED, FINISHED, RUNNING, WAITING_CHILD, AgentState
from durably.errors import AgentExistsError, AgentFencedError, AgentNotFoundError, DurablyError
from durably.schemas._records import Kind

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._loop.agent import AgentDefinition

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path


def end_of(state: AgentState) -> dict[str, Any] | None:
    """A child's end as ``child_ended`` data (``status``, ``result``, ``error``); None while it has not ended."""
    who = f"child agent {state.agent_id}"
    if state.status == FINISHED:
        return {"status": FINISHED, "result": state.result, "error": None}
    if state.status == FAILED:
        return {"status": FAILED, "result": None, "error": f"{who} failed: {state.reason}"}
    if state.status == CANCELLED:
        reason = f": {state.reason}" if state.reason else ""
        return {"status": CANCELLED, "result": None, "error": f"{who} was cancelled{reason}"}
    return None


class ChildRuns:
    """The runtime's side of ``durably._loop.child_calls.ChildAgents``.

    Args:
        activations: The runtime's activations (its store, namespace and live agents).
    """

    def __init__(self, activations: Activations) -> None:
        self.activations = activations

    async def start(self, definition: AgentDefinition, agent_id: str, task: str, parent: dict[str, Any]) -> str | None:
        """Journal the child's ``started`` record, unless it exists as this call's child already.

        Returns:
            None when the child exists now; otherwise why it cannot (its id is
                another agent's), for the call's error.

        Raises:
            StoreUnavailableError: The store cannot be reached (the parent's
                activation stops; its resume starts the child again, idempotently).
        """
        from durably._fleet import wakeups
        from durably._fleet.submit import started_data  # here: a runtime whose agents start no child never loads it

        activations = self.activations
        data = started_data(activations, definition, agent_id, task, None)
        data["parent"] = parent
        journal = AgentJournal(activations.services, activations.stream(agent_id), AgentState())
        try:
            async with activations.activating.hold(agent_id):
                if agent_id in activations.live:
                    raise AgentExistsError(agent_id)
                # Expected seq 0: of two attempts of one parent call, the first start is the only one.
                await journal.append((Kind.STARTED, data))
        except (AgentFencedError, AgentExistsError):
            existing = await activations.status(agent_id)
            if existing.parent != parent:
                return f"cannot start child agent {agent_id!r}: that id belongs to another agent"
            return None
        await wakeups.publish(activations.store, journal.stream)
        return None

    async def outcome(self, agent_id: str) -> dict[str, Any] | None:
        """The child's end as ``child_ended`` data; None while it runs or is parked.

        A child that no longer exists (purged) ended as ``failed``, so that its
        parent does not wait for it forever.
        """
        try:
            state = await self.activations.status(agent_id)
        except AgentNotFoundError:
            return {"status": FAILED, "result": None, "error": f"child agent {agent_id} no longer exists"}
        return end_of(state)

    def run(self, agent_id: str) -> None:
        """Resume the child here, in the background, when this runtime can run it (and, when it waits
        for children of its own, those); else the workers will."""
        activations = self.activations
        if activations.draining or not activations.open:
            return
        activations.task_group.start_soon(self._run, agent_id)

    async def _run(self, agent_id: str) -> None:
        from durably._fleet import wakeups

        try:
            if await wakeups.resume_if_runnable(self.activations, agent_id) is None:
                state = await self.activations.status(agent_id)
                for child in state.children.values() if state.status == WAITING_CHILD else ():
                    if child["status"] == RUNNING:
                        self.run(child["agent_id"])  # a grandchild a dead process ran goes on here too
        except DurablyError as exc:  # an outage: a worker's scan takes the child later
            log.warning("child agent %s not started here: %s", self.activations.stream(agent_id), exc)
