"""A parent's cancel and purge reach its child agents; a cancelled child's end reaches its parent.

The children of a parent are found by their ids (``<parent>/<call id>``, listed by
prefix) and kept only when their ``started`` record links them to that parent,
so an unrelated agent whose id happens to share the prefix is never touched,
and a child started just before its parent died (its ``child_started`` never
journaled) is still found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durably._children.delivery import deliver
from durably._loop.state import TERMINAL, AgentState
from durably.errors import AgentNotFoundError, InvalidCommandError
from durably.storage._errors import CodecError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._operate.operator import Operator
    from durably._upkeep.upkeep import Upkeep


async def children_of(activations: Activations, agent_id: str) -> list[AgentState]:
    """The states of ``agent_id``'s child agents (any run of it), in the store's listing order.

    Raises:
        StoreUnavailableError: The store cannot be reached.
    """
    found = []
    prefix = f"{agent_id}/"
    async for stream in activations.store.list_streams(activations.namespace, prefix):
        try:
            state = await activations.status(stream.agent_id)
        except (AgentNotFoundError, CodecError):
            continue
        # A grandchild links to its own parent: its parent's business.
        if state.parent is not None and state.parent.get("agent_id") == agent_id:
            found.append(state)
    return found


async def cancel_children(activations: Activations, operator: Operator, agent_id: str) -> None:
    """After ``agent_id`` was cancelled: cancel its running children (and theirs), and if it
    is a child itself, take its end to its parent.

    Raises:
        StoreUnavailableError: The store cannot be reached.
    """
    state = await activations.status(agent_id)
    for child in await children_of(activations, agent_id):
        if child.status in TERMINAL:
            continue
        try:
            await operator.cancel(child.agent_id, f"parent {agent_id} cancelled")
        except InvalidCommandError:
            pass  # it ended meanwhile
        await cancel_children(activations, operator, child.agent_id)
    await deliver(activations, state)


async def purge_children(activations: Activations, upkeep: Upkeep, agent_id: str, *, force: bool) -> None:
    """Purge ``agent_id``'s children (theirs first), before the parent itself is purged.

    Raises:
        AgentLeasedError: A live worker runs a child (without ``force``); the
            children purged so far stay purged, the parent is kept.
        StoreUnavailableError: The store cannot be reached.
    """
    for child in await children_of(activations, agent_id):
        await purge_children(activations, upkeep, child.agent_id, force=force)
        try:
            await upkeep.purge(child.agent_id, force=force)
        except AgentNotFoundError:
            pass  # purged meanwhile
