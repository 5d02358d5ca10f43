"""Commands from outside an agent (a human, an API), and the records they become.

A command is validated against the agent's current state and turned into one
record. The same translation serves a live actor (which appends it between
steps, as the stream's single writer) and a parked agent (which the runtime
restores, appends to and, if it can run again, resumes), so an approval given
by another process after a restart takes exactly the same path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from durably._loop.state import RUNNING, TERMINAL, AgentState
from durably.errors import ApprovalAlreadyDecidedError, InvalidCommandError
from durably.schemas._records import Kind

#: The roles of a message sent from outside (``Runtime.send``): the user's, or an instruction.
#: A ``tool`` message answers a call of the model's and an ``assistant`` one is the model's own.
SEND_ROLES = ("user", "system")


@dataclass
class Command:
    """Base: carries the completion signal the submitter waits on."""

    done: anyio.Event = field(default_factory=anyio.Event, init=False, repr=False, compare=False)
    error: BaseException | None = field(default=None, init=False, repr=False, compare=False)

    def finish(self, error: BaseException | None = None) -> None:
        """Mark the command handled (durably appended, or rejected with ``error``)."""
        self.error = error
        self.done.set()


@dataclass
class SendMessage(Command):
    """Add a ``role`` message with ``content`` (str) to the conversation."""

    content: str = ""
    role: str = "user"


#: ``Decide.result`` when no result is reported (None is a result a call may have).
NO_RESULT: Any = type("NoResult", (), {"__repr__": lambda self: "NO_RESULT"})()


@dataclass
class Decide(Command):
    """Decide the open approval ``approval_id``: ``approved`` or not, ``by`` whom, with a ``note``;
    ``result``: the call happened and this is its result (``NO_RESULT``: none reported)."""

    approval_id: str = ""
    approved: bool = True
    by: str = ""
    note: str = ""
    result: Any = NO_RESULT


@dataclass
class ExtendBudget(Command):
    """Raise the budget by ``steps``, ``tokens`` and ``cost_usd`` (added to the current limits)."""

    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class Cancel(Command):
    """Stop the agent for good, with a ``reason``."""

    reason: str = ""


#: The kinds commands append. Records of these kinds that another process added
#: while an actor ran commute with the actor's own step, so the actor folds them
#: in and retries its append instead of giving the agent up (see AgentJournal).
COMMAND_KINDS = frozenset(
    {Kind.MESSAGE_RECEIVED, Kind.APPROVAL_DECIDED, Kind.BUDGET_EXTENDED, Kind.CANCELLED, Kind.CHILD_ENDED}
)


def to_record(state: AgentState, command: Command) -> tuple[str, dict[str, Any]]:
    """The ``(kind, data)`` record for ``command`` given ``state``.

    Raises ``ApprovalAlreadyDecidedError`` for a decision on an approval that
    was decided (whether the agent runs on or has finished since: the answer
    does not depend on what happened after the decision), and
    ``InvalidCommandError`` when the command does not apply otherwise: the
    agent is finished, failed or cancelled, or the approval is unknown.
    """
    if isinstance(command, Decide):
        _refuse_decided(state, command.approval_id)
    if state.status in TERMINAL:
        raise InvalidCommandError(f"agent {state.agent_id} is {state.status}")
    if isinstance(command, SendMessage):
        return Kind.MESSAGE_RECEIVED, {"role": command.role, "content": command.content}
    if isinstance(command, Decide):
        request = state.approvals.get(command.approval_id)
        if request is None:
            raise InvalidCommandError(f"agent {state.agent_id} has no approval {command.approval_id!r}")
        if request.get("decision") is not None:
            raise ApprovalAlreadyDecidedError(state.agent_id, command.approval_id, request["decision"])
        data = {
            "approval_id": command.approval_id,
            "approved": command.approved,
            "by": command.by,
            "note": command.note,
        }
        if command.result is not NO_RESULT:
            if not command.approved:
                raise InvalidCommandError(
                    "a reported result says the call happened: it cannot come with approved=False"
                )
            data["result"] = command.result
        return Kind.APPROVAL_DECIDED, data
    if isinstance(command, ExtendBudget):
        budget = dict(state.budget)
        extras = (("steps", command.steps), ("tokens", command.tokens), ("cost_usd", command.cost_usd))
        if any(extra < 0 for _, extra in extras):
            raise InvalidCommandError("a budget extension cannot be negative")
        for name, extra in extras:
            if extra and budget.get(name) is not None:
                budget[name] = budget[name] + extra
        if budget == state.budget:
            limited = [name for name, limit in state.budget.items() if limit is not None] or ["none"]
            raise InvalidCommandError(f"nothing to extend: agent {state.agent_id} has limits on {', '.join(limited)}")
        return Kind.BUDGET_EXTENDED, {"budget": budget}
    if isinstance(command, Cancel):
        return Kind.CANCELLED, {"reason": command.reason}
    raise InvalidCommandError(f"unknown command {type(command).__name__}")


def _refuse_decided(state: AgentState, approval_id: str) -> None:
    """Raise ``ApprovalAlreadyDecidedError`` when ``state`` shows ``approval_id`` decided."""
    request = state.approvals.get(approval_id)
    if request is not None and request.get("decision") is not None:
        raise ApprovalAlreadyDecidedError(state.agent_id, approval_id, request["decision"])


def rebase(state: AgentState, kind: str, data: dict[str, Any], limits_before: dict[str, Any]) -> dict[str, Any]:
    """A command record's ``data`` made valid again after other commands were folded into ``state``.

    The command was translated against an older state (whose budget was
    ``limits_before``) and lost its expected-seq race to the records just
    folded in. Decisions do not commute: one for an approval that is now
    decided raises ``ApprovalAlreadyDecidedError`` (the race's loser is told, not
    silently overruled). Extensions commute: the increment is re-applied on top
    of the limits now in force, so two racing ``+10`` both count. Messages and
    cancels stand unless the agent is now finished, failed or cancelled
    (``InvalidCommandError``). The idea is the rebase of operational
    transformation: re-apply the intent, not the computed result.
    """
    if kind == Kind.APPROVAL_DECIDED:
        _refuse_decided(state, data["approval_id"])
    if kind == Kind.CHILD_ENDED and state.children.get(data["key"], {}).get("status") != RUNNING:
        # A child's end is delivered once: whoever lost the race finds it there already.
        raise InvalidCommandError(f"agent {state.agent_id} has the end of child {data['agent_id']} already")
    if state.status in TERMINAL:
        raise InvalidCommandError(f"agent {state.agent_id} is {state.status}")
    if kind == Kind.APPROVAL_DECIDED:
        request = state.approvals.get(data["approval_id"])
        if request is None:
            raise InvalidCommandError(f"agent {state.agent_id} has no approval {data['approval_id']!r}")
        if request.get("decision") is not None:
            raise ApprovalAlreadyDecidedError(state.agent_id, data["approval_id"], request["decision"])
    elif kind == Kind.BUDGET_EXTENDED:
        budget = dict(state.budget)
        for name, limit in data["budget"].items():
            before = limits_before.get(name)
            if limit is not None and before is not None and budget.get(name) is not None:
                budget[name] = budget[name] + (limit - before)
        return {**data, "budget": budget}
    return data
