"""The agents of the fleet torture: an approval gate before each side effect.

The scripted model calls ``gate`` (a tool that needs an operator's approval)
and then ``effect`` (a side effect: one fsynced line in the external effects
ledger, keyed by the call's idempotency key), ``steps`` times, then answers
with every result. Started by the harness, an agent parks at once on its first
gate; the operator's approvals send it to the serving workers, which park it
again at the next gate. ``effect`` reconciles an unknown outcome by looking its
key up in the ledger, as a payment API would.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio

from durably._loop.agent import AgentDefinition
from durably._loop.model import ModelResponse, ToolCall, Usage
from durably._tools.tool import Reconciled, ToolContext, tool
from durably.storage._torture import Ledger

#: Namespace of the fleet's agents.
FLEET_NAMESPACE = "fleet-torture"
#: The definition's name.
FLEET_DEFINITION = "fleet-torture"


def fleet_result(steps: int) -> str:
    """The result of an uninterrupted run of ``steps`` gated effects."""
    return f"done {[n * 10 for n in range(1, steps + 1)]}"


class GatedModel:
    """Calls ``gate`` then ``effect`` with ``{"n": i}`` for i in 1..``steps``, then answers ``done [effects]``."""

    name = "fleet-torture-model"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        results = [m["content"] for m in messages if m["role"] == "tool"]
        usage = Usage(1, 1, 0.0)
        if len(results) < 2 * self.steps:
            n = len(results) // 2 + 1
            name = "gate" if len(results) % 2 == 0 else "effect"
            return ModelResponse(f"{name} {n}", (ToolCall(f"{name}-{n}", name, {"n": n}),), usage)
        return ModelResponse(f"done {results[1::2]}", (), usage)


def fleet_definition(steps: int, effects: Ledger) -> AgentDefinition:
    """The fleet agent's definition: ``steps`` gated effects, each logged to ``effects``."""

    async def already_done(ctx: ToolContext) -> Reconciled | None:
        entries = await anyio.to_thread.run_sync(effects.entries)
        found = [e for e in entries if e.get("key") == ctx.idempotency_key]
        return Reconciled(found[0]["n"] * 10) if found else None

    @tool(name="gate", requires_approval=True)
    async def gate(n: int) -> str:
        return f"gate {n} passed"

    @tool(name="effect", on_unknown_outcome="reconcile", reconcile=already_done)
    async def effect(n: int, *, ctx: ToolContext) -> int:
        line = {"key": ctx.idempotency_key, "agent": ctx.agent_id, "n": n, "pid": os.getpid(), "at": time.time()}
        await anyio.to_thread.run_sync(effects.append, line)
        return n * 10

    return AgentDefinition(name=FLEET_DEFINITION, model=GatedModel(steps), tools=[gate, effect])
