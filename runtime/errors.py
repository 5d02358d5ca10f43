"""Errors the runtime raises to its embedder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durably.storage.errors import ConflictError, DurablyError

if TYPE_CHECKING:  # state imports this module
    from .state import AgentState


class AgentFencedError(ConflictError):
    """Another writer appended to this agent's stream: this process lost it.

    The stale process stops that agent without writing anything more (its
    appends would fail their expected-seq check anyway); the new owner goes on.
    """


class AgentNotFoundError(DurablyError, KeyError):
    """No stream exists for that agent id in the runtime's namespace."""


class AgentExistsError(DurablyError):
    """``start`` was called for an agent id that already has a journal."""


class DefinitionNotRegisteredError(DurablyError, LookupError):
    """The journal names an agent definition this runtime has not registered."""


class InvalidCommandError(DurablyError, ValueError):
    """A command does not fit the agent's state (unknown approval, already decided, terminal agent...)."""


class ApprovalAlreadyDecidedError(InvalidCommandError):
    """The approval was decided already, perhaps a moment ago by another process.

    Attributes: ``agent_id``, ``approval_id`` and ``decision`` (the journaled
    decision: ``approved``, ``by``, ``note``). Of two racing decisions exactly
    one is acknowledged; the other caller gets this error.
    """

    def __init__(self, agent_id: str, approval_id: str, decision: dict[str, Any]) -> None:
        self.agent_id, self.approval_id, self.decision = agent_id, approval_id, decision
        verdict = "approved" if decision.get("approved") else "denied"
        by = f" by {decision['by']}" if decision.get("by") else ""
        super().__init__(f"approval {approval_id!r} of {agent_id} is already decided ({verdict}{by})")


class AgentLeasedError(DurablyError):
    """Another runtime holds the agent's lease: it runs the agent now.

    Attributes: ``agent_id``, ``owner`` (the holder, or None if unknown) and
    ``expires_at`` (unix seconds, or None). Wait for it to finish or park, or
    for the lease to expire if that runtime died.
    """

    def __init__(self, agent_id: str, owner: str | None, expires_at: float | None) -> None:
        self.agent_id, self.owner, self.expires_at = agent_id, owner, expires_at
        holder = f"{owner} (lease until {expires_at:.0f})" if owner else "another runtime"
        super().__init__(f"agent {agent_id!r} is run by {holder}")


class SeqOutOfRangeError(DurablyError, ValueError):
    """A seq outside an agent's journal was asked for (``state_at``, ``fork``):
    below 1, past its last record, or in a part compacted away with no snapshot
    at or before it."""


class WaitTimeoutError(DurablyError, TimeoutError):
    """``Runtime.wait`` gave up: the agent did not reach one of the wanted
    statuses in time. ``state`` holds the last state seen."""

    def __init__(self, message: str, state: AgentState) -> None:
        super().__init__(message)
        self.state = state


class AgentLeaseLostError(AgentLeasedError):
    """This runtime's activation of the agent stopped because another runtime took its lease.

    This runtime paused (or lost the store) past the lease TTL, and another
    worker took the lapsed lease: that one runs the agent now, and anything
    this one would still append is fenced by the expected seq. Raised by
    ``AgentHandle.wait`` and so ``Runtime.run``. Attributes as ``AgentLeasedError``.
    """

    def __init__(self, agent_id: str, owner: str | None, expires_at: float | None) -> None:
        super().__init__(agent_id, owner, expires_at)
        self.args = (f"agent {agent_id!r} lost its lease here; it is run by {owner or 'another runtime'} now",)
