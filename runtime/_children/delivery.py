"""A child's end, taken to its parent's journal exactly once, and the parent woken.

The child's ``finished`` (or ``failed``, ``cancelled``) and the parent's
``child_ended`` are two appends to two streams: a process may die between
them. Three paths deliver, and any one is enough:

* the child's activation, as it ends (``deliver``, from ``Activations``);
* ``Runtime.cancel`` of a child that was not live;
* every ``serve()`` scan (``recover``): it lists the parents waiting for
  children (the status index's ``waiting_child`` entries; every stream on a
  store without an index), reads each open child's journal and delivers the
  ends it finds. This is what makes a SIGKILL between the two appends
  harmless.

Delivery appends as a command does (no lease, the expected seq): the fold
refuses a second ``child_ended`` for one call and ``commands.rebase`` turns a
lost race into "delivered already", so however many paths deliver, the parent
gets each end once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from durably._children.runs import end_of
from durably._journal import status_index
from durably._loop.state import RUNNING, TERMINAL, WAITING_CHILD, AgentState
from durably.errors import AgentFencedError, AgentNotFoundError, DurablyError, InvalidCommandError
from durably.schemas._records import Kind
from durably.storage._errors import CodecError, StoreClosedError, StoreUnavailableError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path

_RETRIES = 8  # expected-seq retries against the parent's other writers
_PARKING_S = 5.0  # how long a wake-up waits for the parent's activation here to park


async def deliver(activations: Activations, child: AgentState) -> bool:
    """Take ``child``'s end to its parent and wake the parent; True if this call delivered it.

    Nothing happens for an agent that is not a child or has not ended, or when
    the parent has this end already, is gone or has ended.

    Raises:
        StoreUnavailableError: The store cannot be reached (a scan delivers later).
    """
    link, end = child.parent, end_of(child)
    if link is None or end is None:
        return False
    return await deliver_to(activations, link, child.agent_id, end)


async def deliver_to(activations: Activations, link: dict[str, Any], child_id: str, end: dict[str, Any]) -> bool:
    """Append ``end`` (``child_ended`` data) for the call ``link`` names in the parent's journal, then wake it.

    Returns:
        True if this call appended it; False when the parent does not wait
            for it (delivered already, another run of that id, gone, ended).

    Raises:
        StoreUnavailableError: The store cannot be reached.
    """
    parent_id, key = link["agent_id"], link["key"]
    for _ in range(_RETRIES):
        try:
            journal = await activations.restore_journal(parent_id)
        except AgentNotFoundError:
            return False
        state = journal.state
        child = state.children.get(key)
        if state.run_id != link["run_id"] or child is None or child["status"] != RUNNING or state.status in TERMINAL:
            return False
        data = {"key": key, "call_id": child["call_id"], "tool": child["tool"], "agent_id": child_id, **end}
        try:
            await journal.append((Kind.CHILD_ENDED, data))
        except AgentFencedError:
            continue  # the parent's journal moved on: read it again
        except InvalidCommandError:
            return False  # delivered by another path meanwhile
        await wake(activations, journal.state)
        return True
    return False


async def wake(activations: Activations, parent: AgentState) -> None:
    """Resume a parent its children's ends made runnable: here if its definition is
    registered (after its current activation, if it is live here, has parked), else
    by telling the other workers."""
    if parent.status != RUNNING:
        return
    from durably._fleet import wakeups  # here: a runtime whose agents start no child never loads it

    live = activations.live.get(parent.agent_id)
    if live is not None:
        with anyio.move_on_after(_PARKING_S):
            await live.exited.wait()  # it is parking: resumed once it let go
    handle = None
    if not activations.draining and activations.open and parent.definition.get("name") in activations.definitions:
        try:
            handle = await wakeups.resume_if_runnable(activations, parent.agent_id)
        except (StoreUnavailableError, StoreClosedError):
            handle = None
    if handle is None:
        await wakeups.publish(activations.store, activations.stream(parent.agent_id))


def on_end(activations: Activations, state: AgentState) -> None:
    """``Activations``' hook when an activation ends: deliver a child's end in the background."""
    if state.parent is None or state.status not in TERMINAL or not activations.open:
        return
    activations.task_group.start_soon(_deliver_quietly, activations, state)


async def _deliver_quietly(activations: Activations, state: AgentState) -> None:
    try:
        await deliver(activations, state)
    except DurablyError as exc:  # a serve() scan delivers it later
        log.warning("end of child agent %s not delivered yet: %s", activations.stream(state.agent_id), exc)


async def recover(activations: Activations) -> int:
    """Deliver the ends of children whose parents still wait for them (a ``serve()`` scan's step).

    Returns:
        How many ends this call delivered.

    Raises:
        StoreUnavailableError: The store cannot be reached (the scan backs off).
    """
    store, namespace = activations.store, activations.namespace
    streams = status_index.listing(store, namespace, {WAITING_CHILD})
    if streams is None:
        streams = store.list_streams(namespace)
    delivered = 0
    async for stream in streams:
        try:
            parent = (await activations.restore_journal(stream.agent_id)).state
        except (AgentNotFoundError, CodecError):
            continue  # purged meanwhile, or unreadable (the scan logs those)
        if parent.status != WAITING_CHILD:
            continue
        for key, child in list(parent.children.items()):
            if child["status"] != RUNNING:
                continue
            try:
                state = await activations.status(child["agent_id"])
            except AgentNotFoundError:
                end: dict[str, Any] | None = {
                    "status": "failed",
                    "result": None,
                    "error": f"child agent {child['agent_id']} no longer exists",
                }
            except CodecError:
                continue
            else:
                end = end_of(state)
            if end is None:
                continue
            link = {"agent_id": parent.agent_id, "run_id": parent.run_id, "key": key}
            with anyio.CancelScope(shield=True):  # an end appended is woken, not abandoned
                delivered += await deliver_to(activations, link, child["agent_id"], end)
    return delivered
