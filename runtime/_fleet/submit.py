"""``Runtime.submit``: create an agent for the fleet without running it here (an enqueue).

A web tier hands new agents to its workers this way. The agent's ``started``
record (and, on a store with a status index, its ``running`` entry) is
journaled exactly as ``start`` journals it, but no lease is taken and no actor
spawned: the agent is runnable in the store, and the first worker serving the
namespace with its definition resumes it, at once where the store notifies
changes (``CAP_CHANGES``: the change is published), else at its next scan.
The result's placement says whether live workers with that definition exist
(``queued``, naming them) or nobody will run it yet (``unassigned``).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from durably._fleet import wakeups
from durably._journal.writer import AgentJournal
from durably._loop.state import AgentState
from durably._loop.timers import timer_entry
from durably._operate.placement import CommandResult, Placement, Where, queued
from durably.errors import AgentExistsError, AgentFencedError
from durably.schemas._records import Kind

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._loop.agent import AgentDefinition, Budget


def started_data(
    activations: Activations, definition: AgentDefinition, agent_id: str, task: str, budget: Budget | None
) -> dict[str, Any]:
    """The payload of a new run's ``started`` record, as ``Activations.start`` journals it."""
    return {
        "namespace": activations.namespace,
        "agent_id": agent_id,
        "run_id": uuid.uuid4().hex,
        "task": task,
        "definition": {"name": definition.name, "version": definition.version, "digest": definition.digest()},
        "instructions": definition.instructions,
        "budget": (budget or definition.budget).to_wire(),
        "worker": activations.worker_id,
    }


async def submit(
    activations: Activations,
    definition: AgentDefinition,
    agent_id: str,
    task: str,
    budget: Budget | None,
    wake_at: float | None = None,
) -> CommandResult:
    """Journal ``agent_id``'s ``started`` record for the workers to run; the state and its placement.

    With ``wake_at`` (unix seconds) a ``timer_set`` record follows in the same
    append: the agent sleeps until then, and a worker runs it once it is due.

    Raises:
        AgentExistsError: ``agent_id`` already has a journal or is live here (nothing written).
        StoreUnavailableError: The store cannot be reached (nothing acknowledged).
    """
    stream = activations.stream(agent_id)
    async with activations.activating.hold(agent_id):
        if agent_id in activations.live:
            raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {activations.namespace!r}")
        journal = AgentJournal(activations.services, stream, AgentState())
        try:
            # Expected seq 0: of several submitters (or a starter) of one id, exactly one is acknowledged.
            timer = [timer_entry(wake_at)] if wake_at is not None else []
            started = (Kind.STARTED, started_data(activations, definition, agent_id, task, budget))
            await journal.append(started, *timer)
        except AgentFencedError:
            raise AgentExistsError(
                f"agent {agent_id!r} already exists in namespace {activations.namespace!r}"
            ) from None
    await wakeups.publish(activations.store, stream)
    nobody = Placement(
        Where.UNASSIGNED,
        f"nobody runs it yet: no live worker serves {definition.name!r} in namespace "
        f"{activations.namespace!r}; the next serve() with its definition resumes it",
    )
    return CommandResult.of(journal.state, await queued(activations, definition.name, nobody))
