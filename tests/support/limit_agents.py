"""A definition with a fleet limit of its own, for ``durably worker --agents limit_agents:limited``.

Its model writes one line when a call enters and one when it returns (pid,
unix time) to ``$WORKER_EFFECTS``'s folder ``calls.jsonl``, fsynced, so a test
can count the calls in flight at once across worker processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
from support_agents import append_line

from durably import AgentDefinition, Limit, ModelResponse, ToolCall, tool

#: The limit every worker running this definition shares through the store.
SHARED = Limit(key="shared-calls", concurrency=2)


class LoggedModel:
    """One tool call per turn for ``steps`` turns, then "done"; each call logged on entry and exit."""

    name = "logged-model"

    def __init__(self, log: Path, steps: int, think_s: float) -> None:
        self.log = log
        self.steps = steps
        self.think_s = think_s

    async def respond(self, messages, tools):
        append_line(self.log, {"pid": os.getpid(), "at": time.time(), "event": "enter"})
        await anyio.sleep(self.think_s)
        append_line(self.log, {"pid": os.getpid(), "at": time.time(), "event": "exit"})
        done = sum(m["role"] == "tool" for m in messages)
        if done < self.steps:
            return ModelResponse("", (ToolCall(f"c{done}", "noop", {"n": done}),))
        return ModelResponse("done")


@tool(name="noop")
async def noop(n: int) -> int:
    return n


def limited() -> list[AgentDefinition]:
    """The ``limited`` agent, configured from ``$WORKER_EFFECTS``, ``$WORKER_STEPS``, ``$WORKER_STEP_SECONDS``."""
    log = Path(os.environ["WORKER_EFFECTS"]).parent / "calls.jsonl"
    model = LoggedModel(
        log, int(os.environ.get("WORKER_STEPS", "2")), float(os.environ.get("WORKER_STEP_SECONDS", "0.1"))
    )
    return [AgentDefinition(name="limited", model=model, tools=[noop], limits=[SHARED])]
