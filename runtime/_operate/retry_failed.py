"""Bringing a failed agent back: what ``Runtime.retry`` appends.

An agent fails when its model stays unreachable past the retry policy, when
a tool's result cannot be stored, when a call's outcome is unknown under the
``fail`` policy, or on an internal error. Its journal still holds everything
up to the failure, so once an operator has fixed the cause the run goes on
from there instead of starting over (as a workflow engine's "retry" of a
failed workflow does: Temporal's reset, AWS Step Functions' redrive).
"""

from __future__ import annotations

from typing import Any

from durably._loop.agent import AgentDefinition
from durably._loop.state import FAILED, AgentState
from durably._tools.tool import OnUnknownOutcome
from durably.errors import InvalidCommandError
from durably.schemas._records import Kind

#: Expected-seq attempts of ``Runtime.retry`` racing another writer (each re-reads first).
RETRY_APPEND_ATTEMPTS = 8

_QUESTION = (
    "outcome of attempt {previous} unknown (the agent failed on it, policy fail); approve to run it "
    "again, deny to skip it, or report that it happened with its result"
)


def retry_entries(
    state: AgentState, definition: AgentDefinition | None, worker: str
) -> list[tuple[str, dict[str, Any]]]:
    """The records that turn failed ``state`` back into a runnable agent.

    A ``retried`` record (status back to running), then, for each pending call
    whose outcome is unknown and whose tool's policy is ``fail``, an approval
    request: a human decides whether it happened, since running it again
    blindly is what the policy forbids. Without the ``definition`` (an
    operator's command line registers none) every call whose outcome is
    unknown becomes such a request: asking is never a duplicate effect.
    Raises ``InvalidCommandError`` when the agent is not failed.
    """
    if state.status != FAILED:
        raise InvalidCommandError(f"agent {state.agent_id} is {state.status}, not failed: nothing to retry")
    entries: list[tuple[str, dict[str, Any]]] = [(Kind.RETRIED, {"worker": worker, "reason": state.reason})]
    for call in state.pending_calls:
        entry = state.ledger.get(call["key"])
        if entry is None or entry["done"]:
            continue
        tool = definition.tool(call["name"]) if definition is not None else None
        if definition is not None and (tool is None or tool.on_unknown_outcome is not OnUnknownOutcome.FAIL):
            continue
        attempt = entry["attempts"] + 1
        approval_id = f"{call['id']}#attempt{attempt}"
        if approval_id in state.approvals:
            continue
        entries.append(
            (
                Kind.APPROVAL_REQUESTED,
                {
                    "approval_id": approval_id,
                    "call_id": call["id"],
                    "tool": call["name"],
                    "arguments": call["arguments"],
                    "key": call["key"],
                    "reason": _QUESTION.format(previous=attempt - 1),
                },
            )
        )
    return entries
