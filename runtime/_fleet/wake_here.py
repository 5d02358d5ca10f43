"""Waiting here wakes the sleepers here: ``Runtime.wait`` and ``Runtime.run`` without ``serve()``.

A process that waits for an agent (``rt.wait``, or ``rt.run`` following a
parent through its children's waits) would otherwise wait forever for a timer
only a serving runtime fires. While it waits, ``waking`` looks at the agent
and, when it waits for child agents, at its children (and theirs): each one
sleeping on a timer whose definition is registered here is resumed here once
due, by the same lease-guarded resume ``serve()`` uses
(``durably._fleet.wakeups.resume_if_runnable``). So the timer fires once: a
worker that resumes it first holds the lease, or finds it awake, and this
runtime then only follows it. An agent whose definition is not registered
here is left to the workers that serve it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from durably._loop.state import RUNNING, SLEEPING, WAITING_CHILD, AgentState
from durably.errors import DurablyError
from durably.storage._errors import StoreError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path

#: Seconds between two looks at a waited-for family with no timer known.
LOOK_EVERY = 1.0


async def waking(
    activations: Activations,
    agent_id: str,
    waiting: Callable[[], Awaitable[AgentState]],
    *,
    itself: bool = True,
) -> AgentState:
    """What ``waiting()`` returns (or raises), while the due sleepers of ``agent_id``'s family that
    this runtime can run are resumed here (``itself`` False: only its children, for a wait
    that a sleeping ``agent_id`` ends); the looking stops when ``waiting`` returns."""
    error: Exception | None = None
    state: AgentState | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_wake_due, activations, agent_id, itself)
        try:
            state = await waiting()
        except Exception as exc:  # raised as it is below, not inside the task group's ExceptionGroup
            error = exc
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    assert state is not None
    return state


async def _wake_due(activations: Activations, agent_id: str, itself: bool) -> None:
    """Forever: resume the due sleepers of the family, then sleep until its next timer (or ``LOOK_EVERY``)."""
    while activations.open:
        try:
            earliest = await _look(activations, agent_id, time.time(), itself=itself)
        except (DurablyError, StoreError) as exc:  # an outage or a purge: the wait itself reports what is lasting
            log.debug("looking for due timers of %s failed: %s", activations.stream(agent_id), exc)
            earliest = math.inf
        await anyio.sleep(max(0.0, min(LOOK_EVERY, earliest - time.time())))


async def _look(activations: Activations, agent_id: str, now: float, *, itself: bool = True) -> float:
    """Resume ``agent_id`` here if it sleeps, is due, is this runtime's to run (and ``itself``), and
    look at its running children the same way; the earliest timer not yet due (``math.inf``: none)."""
    from durably._fleet import wakeups

    state = await activations.status(agent_id)
    if itself and state.status == SLEEPING and state.definition.get("name") in activations.definitions:
        if state.wake_at is None or state.wake_at <= now:
            await wakeups.resume_if_runnable(activations, agent_id)
            return math.inf
        return state.wake_at
    earliest = math.inf
    if state.status == WAITING_CHILD:
        for child in state.children.values():
            if child["status"] == RUNNING:
                earliest = min(earliest, await _look(activations, child["agent_id"], now))
    return earliest
