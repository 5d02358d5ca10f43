"""The agents the torture harness runs: a scripted model and tools whose effects go to the ledger.

The model is a pure function of the conversation (call ``effect`` with
n = 1..steps, then answer with every result), so an interrupted run and an
uninterrupted one must end in the same state. The tool's side effect is a
line in the external effects ledger (fsynced before the tool returns), which
is what a duplicate would show in: the "email sent twice". Two definitions
differ only in the tool's policy for an unknown outcome: ``reconcile`` (the
tool looks its idempotency key up in the ledger, as a payment API would) and
``fail`` (the agent fails rather than risk a second effect).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import anyio

from durably._loop.agent import AgentDefinition
from durably._loop.model import ModelResponse, ToolCall, Usage
from durably._tools.tool import Reconciled, ToolContext, tool
from durably.storage._torture import Ledger

#: Namespace of the tortured agents.
NAMESPACE = "torture"
#: The two tool policies tortured, and the definition name of each.
POLICIES = ("reconcile", "fail")


def definition_name(policy: str) -> str:
    """The agent definition name for a tool ``policy``."""
    return f"torture-{policy}"


class ScriptedModel:
    """Calls ``effect`` with ``{"n": i}`` for i in 1..``steps``, then answers ``done [results]``."""

    name = "torture-model"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        results = [m["content"] for m in messages if m["role"] == "tool"]
        usage = Usage(10, 10, 0.001)
        if len(results) < self.steps:
            n = len(results) + 1
            return ModelResponse(f"step {n}", (ToolCall(f"call-{n}", "effect", {"n": n}),), usage)
        return ModelResponse(f"done {results}", (), usage)


def torture_definitions(
    steps: int,
    effects: Ledger,
    hit: Callable[[str], None] = lambda boundary: None,
) -> list[AgentDefinition]:
    """The ``reconcile`` and ``fail`` definitions; ``hit(boundary)`` is called before and after each effect."""

    async def already_done(ctx: ToolContext) -> Reconciled | None:
        entries = await anyio.to_thread.run_sync(effects.entries)
        found = [e for e in entries if e.get("key") == ctx.idempotency_key]
        return Reconciled(found[0]["n"] * 10) if found else None

    definitions = []
    for policy in POLICIES:

        @tool(name="effect", on_unknown_outcome=policy, reconcile=already_done if policy == "reconcile" else None)
        async def effect(n: int, *, ctx: ToolContext) -> int:
            hit("before_effect")
            line = {"key": ctx.idempotency_key, "agent": ctx.agent_id, "n": n, "pid": os.getpid()}
            await anyio.to_thread.run_sync(effects.append, line)
            hit("after_effect")
            return n * 10

        definitions.append(AgentDefinition(name=definition_name(policy), model=ScriptedModel(steps), tools=[effect]))
    return definitions
