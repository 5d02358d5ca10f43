"""Small agents for the runtime tests: a scripted model and tools whose effects
are counted in a plain list or a file, never in durably's own journal."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio

from durably import AgentDefinition, ModelResponse, Reconciled, ToolCall, Usage, tool


class StepModel:
    """Calls tool ``tool_name`` with ``{"n": i}`` for i in 1..steps, then answers "done N".

    ``calls`` counts invocations (what a provider would bill)."""

    name = "step-model"

    def __init__(
        self, steps: int, tool_name: str = "effect", tokens: int = 10, per_turn: int = 1, think_s: float = 0.0
    ) -> None:
        self.steps = steps
        self.think_s = think_s  # how long each answer takes (0: answers without waiting)
        self.tool_name = tool_name
        self.tokens = tokens
        self.per_turn = per_turn  # calls per model turn (they run concurrently)
        self.calls = 0

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        self.calls += 1
        if self.think_s:
            await anyio.sleep(self.think_s)
        done = sum(1 for m in messages if m["role"] == "tool")
        usage = Usage(self.tokens, self.tokens, 0.01)
        if done < self.steps:
            batch = range(done + 1, min(done + self.per_turn, self.steps) + 1)
            calls = tuple(ToolCall(f"c{n}", self.tool_name, {"n": n}) for n in batch)
            return ModelResponse(f"step {done + 1}", calls, usage)
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return ModelResponse(f"done {results}", (), usage)


def list_agent(
    steps: int, effects: list, *, policy: str = "retry", name: str = "list-agent", **tool_kw
) -> AgentDefinition:
    """An agent whose tool appends ``(key, n)`` to ``effects`` (a list)."""

    @tool(name="effect", on_unknown_outcome=policy, **tool_kw)
    async def effect(n: int, *, ctx) -> int:
        effects.append((ctx.idempotency_key, n))
        return n * 10

    return AgentDefinition(name=name, model=StepModel(steps), tools=[effect])


def gated_agent(ran: list) -> AgentDefinition:
    """``gated``: one call of the approval-gated tool ``effect(n=1)`` (appends ``n`` to ``ran``), then "done"."""

    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx) -> int:
        ran.append(n)
        return n

    class OneCall:
        name = "one"

        async def respond(self, messages, tools):
            if messages[-1]["role"] == "tool":
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "effect", {"n": 1}),))

    return AgentDefinition(name="gated", model=OneCall(), tools=[effect])


def append_line(path: Path, line: dict[str, Any]) -> None:
    """Append a JSON line and fsync it: survives the writer's SIGKILL."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path`` (a torn last line is skipped)."""
    if not path.exists():
        return []
    out = []
    for raw in path.read_text().splitlines():
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError:
            pass
    return out


def file_agent(
    steps: int, effects: Path, *, name: str = "file-agent", on_effect=None, per_turn: int = 1, think_s: float = 0.0
) -> AgentDefinition:
    """An agent whose tool 'sends' by appending to ``effects``; reconciles by key.

    ``on_effect(phase, n)`` is called before and after the side effect (the crash
    tests use it to die in between)."""

    async def sent(ctx) -> Reconciled | None:
        found = [e for e in await anyio.to_thread.run_sync(read_lines, effects) if e["key"] == ctx.idempotency_key]
        return Reconciled(found[0]["n"] * 10) if found else None

    @tool(name="effect", on_unknown_outcome="reconcile", reconcile=sent)
    async def effect(n: int, *, ctx) -> int:
        if on_effect:
            on_effect("before", n)
        await anyio.to_thread.run_sync(append_line, effects, {"key": ctx.idempotency_key, "n": n, "pid": os.getpid()})
        if on_effect:
            on_effect("after", n)
        return n * 10

    return AgentDefinition(name=name, model=StepModel(steps, per_turn=per_turn, think_s=think_s), tools=[effect])
