"""Attach: ``Runtime.run`` on an agent another runtime runs now waits for it instead of raising.

The other runtime holds the agent's lease, so this one may not run it; it
follows the journal instead (``Runtime.wait``) until the agent stops or parks,
and returns that state, as a ``run`` here would have. It never waits on a dead
holder: every ``RETRY_SECONDS`` (and whenever the wait ends without an
answer) it asks for the lease again, and takes the agent over once the
holder's lease is free or lapsed (a crashed holder's at once, as ``serve()``
would), to run it on here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from durably._fleet.handle import AgentHandle
from durably._loop.state import CANCELLED, FAILED, FINISHED, SLEEPING, SUSPENDED, WAITING_APPROVAL, AgentState
from durably.errors import AgentLeasedError, InvalidArgumentError, WaitTimeoutError

#: What ``run`` does about an agent running elsewhere: wait for it, or raise ``AgentLeasedError``.
OnRunning = Literal["wait", "raise"]
ON_RUNNING: frozenset[str] = frozenset({"wait", "raise"})
#: Longest wait on another runtime's activation before asking for its lease again, seconds.
RETRY_SECONDS = 2.0
#: The statuses an attached ``run`` returns at: those a ``run`` here returns at.
RETURNS_AT = frozenset({WAITING_APPROVAL, SUSPENDED, SLEEPING, FINISHED, FAILED, CANCELLED})


def check_on_running(value: object) -> None:
    """Raise ``InvalidArgumentError`` unless ``value`` is ``"wait"`` or ``"raise"``."""
    if value not in ON_RUNNING:
        raise InvalidArgumentError(f"run: on_running must be 'wait' or 'raise', got {value!r}")


async def resume_or_attach(
    agent_id: str,
    resume: Callable[[str], Awaitable[AgentHandle | None]],
    wait: Callable[[str, frozenset[str], float], Awaitable[AgentState]],
    status: Callable[[str], Awaitable[AgentState]],
) -> AgentState:
    """Run ``agent_id`` here (``resume``) to its stop or park, or, while another runtime holds
    it, follow it there (``wait(agent_id, statuses, timeout)``) until it does.

    Returns the state it stopped or parked with. Raises what ``resume`` and
    ``AgentHandle.wait`` raise, but ``AgentLeasedError``.
    """
    while True:
        try:
            handle = await resume(agent_id)
        except AgentLeasedError:
            try:
                return await wait(agent_id, RETURNS_AT, RETRY_SECONDS)
            except WaitTimeoutError:
                continue  # still running there, or its holder died: ask for the lease again
        if handle is None:
            return await status(agent_id)
        return await handle.wait()
