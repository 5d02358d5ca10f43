"""A budget suspends an agent; an operator extends it; the agent finishes.

The agent works through five tickets, one model step each, under a budget of
three steps. It is suspended with the reason in its state (nothing is lost, and
a suspended agent holds no memory). An operator extends the budget by five
steps, from any process, and the agent runs on to the end.

    python examples/budget_and_extension.py [DIRECTORY]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

import durably

TICKETS = ["T-1", "T-2", "T-3", "T-4", "T-5"]


@durably.tool
async def close_ticket(ticket: str) -> str:
    """Close a ticket.

    Args:
        ticket: the ticket id.
    """
    return f"{ticket} closed"


class TriageModel:
    """Closes one ticket per step, then reports (scripted; swap in a real model adapter)."""

    name = "scripted-triage"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        closed = sum(1 for m in messages if m["role"] == "tool")
        usage = durably.Usage(input_tokens=200, output_tokens=20, cost_usd=0.001)
        if closed < len(TICKETS):
            call = durably.ToolCall(f"c{closed}", "close_ticket", {"ticket": TICKETS[closed]})
            return durably.ModelResponse(f"closing {TICKETS[closed]}", (call,), usage)
        return durably.ModelResponse(f"closed {closed} tickets", (), usage)


agent = durably.AgentDefinition(
    name="triage", model=TriageModel(), tools=[close_ticket], budget=durably.Budget(steps=3)
)


async def main(workdir: Path) -> int:
    async with durably.Runtime(f"sqlite:///{workdir / 'agents.db'}", agents=[agent]) as rt:
        state = await rt.run("triage", "queue-1", "Close the open tickets.")
        print(f"{state.status}: {state.reason} after {state.usage['steps']} steps")
        if state.status != "suspended":
            return 1
        await rt.extend_budget("queue-1", steps=5)  # `durably extend queue-1 --steps 5` from a shell
        state = await rt.wait("queue-1", until=["finished", "failed", "suspended"], timeout=60)
        print(
            f"{state.status}: {state.result} after {state.usage['steps']} steps, "
            f"{state.usage['input_tokens'] + state.usage['output_tokens']} tokens, ${state.usage['cost_usd']:.3f}"
        )
        return 0 if state.status == "finished" and state.usage["steps"] == len(TICKETS) + 1 else 1


if __name__ == "__main__":
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durably-budget-"))
    sys.exit(anyio.run(main, directory))
