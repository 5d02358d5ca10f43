"""A Pydantic AI toolset whose tool calls are journaled calls of the durably run they happen in.

Every call the agent makes through the wrapped toolset (function tools, an MCP
server's tools, anything below it) is one ``Run.call`` keyed by the model's
``tool_call_id``, so parallel tool calls do not depend on task scheduling. The
tool's control-flow signals (``ModelRetry``, ``ApprovalRequired``,
``CallDeferred``, ``ToolFailed``) are journaled as outcomes, not failures, so a
replayed call raises the same signal and the agent takes the same path.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_core import to_jsonable_python

import durably
from durably.errors import NotInRunError

from ._ids import unique_id
from ._policy import ToolPolicy

__all__ = ["JournaledToolset", "tool_context"]

_tool_context: ContextVar[durably.ToolContext | None] = ContextVar("durably_pydantic_ai_tool_context", default=None)

#: The outcome kinds a journaled tool call holds.
_RETURN, _RETRY, _APPROVAL, _DEFERRED, _FAILED = "return", "model_retry", "approval_required", "call_deferred", "failed"


def tool_context() -> durably.ToolContext:
    """The ``durably.ToolContext`` of the tool call running now (its idempotency key, agent id, call id, attempt).

    Raises:
        NotInRunError: Called outside a journaled tool call of a durable run.
    """
    ctx = _tool_context.get()
    if ctx is None:
        raise NotInRunError("tool_context() is only available inside a tool call of a durable Pydantic AI run")
    return ctx


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a tool call came to: its return value, or the control-flow signal it raised."""

    kind: str
    value: Any


def _dump_outcome(outcome: Any) -> dict[str, Any]:
    # A reconcile hook reports the tool's return value as it is, not as an ``_Outcome``.
    kind, value = (outcome.kind, outcome.value) if isinstance(outcome, _Outcome) else (_RETURN, outcome)
    return {"kind": kind, "value": to_jsonable_python(value, serialize_unknown=True, bytes_mode="base64")}


def _load_outcome(payload: Any) -> _Outcome:
    # An operator (``approve(..., result=...)``) reports a plain value: that is the tool's return.
    if isinstance(payload, Mapping) and payload.get("kind") in (_RETURN, _RETRY, _APPROVAL, _DEFERRED, _FAILED):
        return _Outcome(str(payload["kind"]), payload.get("value"))
    return _Outcome(_RETURN, payload)


def _raise_or_return(outcome: _Outcome) -> Any:
    kind, value = outcome.kind, outcome.value
    if kind == _RETRY:
        raise ModelRetry(str(value))
    if kind == _APPROVAL:
        raise ApprovalRequired(metadata=value)
    if kind == _DEFERRED:
        raise CallDeferred(metadata=value.get("metadata"), kind=value.get("kind", "external"))
    if kind == _FAILED:
        raise ToolFailed(str(value))
    return value


class JournaledToolset(WrapperToolset[Any]):
    """Wraps a Pydantic AI toolset so each tool call is a journaled call of the current durably run.

    Args:
        wrapped: The toolset whose tools really run.
        policies: Unknown-outcome policy per tool name; a tool not named gets ``ask``.
    """

    def __init__(self, wrapped: AbstractToolset[Any], *, policies: Mapping[str, ToolPolicy]) -> None:
        super().__init__(wrapped)
        self._policies = policies

    def visit_and_replace(self, visitor: Any) -> AbstractToolset[Any]:
        """Keep this wrapper around whatever replaces the toolset below (Pydantic AI rebuilds toolsets per run)."""
        return JournaledToolset(self.wrapped.visit_and_replace(visitor), policies=self._policies)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run the tool once per ``tool_call_id``, or return (or raise) what the journal holds for it."""
        try:
            run = durably.current_run()
        except NotInRunError:
            return await super().call_tool(name, tool_args, ctx, tool)

        run_context = ctx

        # The parameter is named ``ctx`` so that ``Run.call`` passes the call's ``durably.ToolContext``.
        async def call(ctx: durably.ToolContext) -> _Outcome:
            token = _tool_context.set(ctx)
            try:
                return _Outcome(_RETURN, await self.wrapped.call_tool(name, tool_args, run_context, tool))
            except ModelRetry as signal:
                return _Outcome(_RETRY, signal.message)
            except ApprovalRequired as signal:
                return _Outcome(_APPROVAL, signal.metadata)
            except CallDeferred as signal:
                return _Outcome(_DEFERRED, {"metadata": signal.metadata, "kind": signal.kind})
            except ToolFailed as signal:
                return _Outcome(_FAILED, signal.message)
            finally:
                _tool_context.reset(token)

        policy = self._policies.get(name, ToolPolicy())
        # Named by tool, so it never meets the approval named by the bare tool_call_id; an approved call runs the
        # tool for real after its first call stopped at ApprovalRequired, under its own id.
        base = f"{name}:{ctx.tool_call_id}" + (":approved" if ctx.tool_call_approved else "")
        call_id = unique_id(run, base)
        outcome = await run.call(
            call,
            name=name,
            call_id=call_id,
            on_unknown_outcome=str(policy.on_unknown_outcome),
            reconcile=policy.reconcile,
            dump=_dump_outcome,
            load=_load_outcome,
            shown_arguments=tool_args,
        )
        return _raise_or_return(outcome)
