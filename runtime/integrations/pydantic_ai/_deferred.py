"""Deferred tool calls of a Pydantic AI run decided as durably approvals.

A run that ends with ``DeferredToolRequests`` (a tool with
``requires_approval=True``, a tool that raised ``ApprovalRequired`` or
``CallDeferred``) does not hand them back to the caller: each becomes one
approval of the durable run, keyed by the model's ``tool_call_id``, which
parks the agent until a human decides it (``durably approve``, the console,
``Runtime.approve``), from any process, across restarts. The decisions become
the ``DeferredToolResults`` the run continues with.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_core import to_jsonable_python

from ._ids import unique_id

__all__ = ["decide_deferred"]


def _question(verb: str, call: ToolCallPart) -> str:
    return f"{verb} {call.tool_name}({call.args_as_json_str()})?"


def _data(requests: DeferredToolRequests, call: ToolCallPart, kind: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "tool": call.tool_name,
        "tool_call_id": call.tool_call_id,
        "args": to_jsonable_python(call.args_as_dict(), serialize_unknown=True, bytes_mode="base64"),
        "metadata": to_jsonable_python(requests.metadata.get(call.tool_call_id), serialize_unknown=True),
    }


async def decide_deferred(run: Any, requests: DeferredToolRequests) -> DeferredToolResults:
    """One approval per deferred call, in the order the model made them; their decisions as ``DeferredToolResults``.

    An approval of a call that needs approval runs the tool (``approved=True``)
    or tells the model it was denied, with the decision's note. A call deferred to
    the outside world (``CallDeferred``) is answered with ``result=...``; refused,
    the model is told the call failed.

    Args:
        run: The durably ``Run`` the agent runs in.
        requests: What the Pydantic AI run ended with.

    Returns:
        The results for the next Pydantic AI run over the same messages.
    """
    results = DeferredToolResults()
    for call in requests.approvals:
        decision = await run.approval(
            _question("run", call),
            data=_data(requests, call, "approval"),
            approval_id=unique_id(run, call.tool_call_id),
        )
        if decision.get("approved"):
            results.approvals[call.tool_call_id] = True
        else:
            note = str(decision.get("note") or "")
            results.approvals[call.tool_call_id] = ToolDenied(note) if note else ToolDenied()
    for call in requests.calls:
        decision = await run.approval(
            _question("answer", call),
            data=_data(requests, call, "external"),
            approval_id=unique_id(run, call.tool_call_id),
        )
        if decision.get("approved", True) and "result" in decision:
            results.calls[call.tool_call_id] = decision["result"]
        else:
            note = str(decision.get("note") or "the call was refused")
            results.calls[call.tool_call_id] = ToolFailed(note)
    return results
