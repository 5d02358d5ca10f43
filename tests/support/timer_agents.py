"""An agent that parks on a durable timer between two side effects, for the timer tests.

Its model asks for ``nap(seconds)`` (a tool returning ``durably.Sleep``), then
for ``effect(n=1)`` (appends a fsynced JSON line to a file), then answers
"done". The file says how many times the effect ran, in which process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from support_agents import append_line

from durably import AgentDefinition, ModelResponse, Sleep, ToolCall, tool


class NapModel:
    """First ``nap`` for ``seconds``, then ``effect``, then "done"."""

    name = "nap-model"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        done = [m for m in messages if m["role"] == "tool"]
        if not done:
            return ModelResponse("napping", (ToolCall("c1", "nap", {"seconds": self.seconds}),))
        if len(done) == 1:
            return ModelResponse("awake", (ToolCall("c2", "effect", {"n": 1}),))
        return ModelResponse(f"done {[m['content'] for m in done]}")


def nap_agent(effects: Path, seconds: float, *, name: str = "napper", model: NapModel | None = None) -> AgentDefinition:
    """The agent described above, its effects appended to ``effects`` (``model``: another ``NapModel``)."""

    @tool(name="nap")
    async def nap(seconds: float) -> Sleep:
        return Sleep(seconds, result=f"slept {seconds}s")

    @tool(name="effect")
    async def effect(n: int, *, ctx) -> int:
        line = {"key": ctx.idempotency_key, "n": n, "pid": os.getpid(), "agent": ctx.agent_id}
        await anyio.to_thread.run_sync(append_line, effects, line)
        return n * 10

    return AgentDefinition(name=name, model=model or NapModel(seconds), tools=[nap, effect])
