"""The Pydantic AI agent of pydantic_ai_agent.py made durable, and a process that runs it once.

``durable_agent(work, policy)``: ``charge`` under ``policy`` (``reconcile``: the
hook looks for the call's idempotency key in the ledger; ``ask``; ``retry``).
``run_once`` is the body of a child process (forked by the crash tests) that runs
the agent until it finishes, parks or the ``KILL`` boundary kills it.
``drive`` runs it to the end in this process, deciding every approval it parks
at the way a truthful operator would: an ``ask`` about ``charge`` is answered
"it happened" (with its receipt) when the ledger holds the call's effect, else
"run it again"; the ``refund`` approval is granted.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic_ai_agent import build_agent, lines

import durably
from durably.integrations.pydantic_ai import DurableAgent, DurableRunResult, ToolPolicy, tool_context

AGENT_ID = "refund-1"
PROMPT = "refund order 42"


def durable_agent(work: Path, policy: str = "reconcile") -> DurableAgent:
    """The durable agent whose ledger and request count live in ``work``."""
    ledger = work / "ledger"

    async def find_charge(ctx: durably.ToolContext) -> durably.Reconciled | None:
        for line in lines(ledger):
            kind, amount, key = line.split()
            if kind == "charge" and key == ctx.idempotency_key:
                return durably.Reconciled(f"charge {amount} ok")
        return None

    charge = ToolPolicy("reconcile", reconcile=find_charge) if policy == "reconcile" else ToolPolicy(policy)
    agent = build_agent(work, key=lambda: tool_context().idempotency_key)
    return DurableAgent(agent, name="refunds", tools={"charge": charge})


async def run(url: str, work: Path, policy: str) -> DurableRunResult:
    """Run (or resume) the agent once, until it finishes or parks."""
    durable = durable_agent(work, policy)
    async with durably.Runtime(url, agents=[durable]) as rt:
        return await durable.run_in(rt, PROMPT, agent_id=AGENT_ID)


def run_once(url: str, work: str, policy: str, kill: str) -> None:
    """A child process's body: run once with ``KILL=kill`` (it dies there, or ends normally)."""
    os.environ["KILL"] = kill
    asyncio.run(run(url, Path(work), policy))


def _decision(request: dict[str, Any], ledger: Path) -> dict[str, Any]:
    if request.get("tool") == "charge":
        keys = [line.split()[2] for line in lines(ledger) if line.startswith("charge ")]
        if request.get("key") in keys:
            return {"approved": True, "result": "charge 5 ok"}
        return {"approved": True}
    return {"approved": True}


async def drive(url: str, work: Path, policy: str, *, rounds: int = 6) -> tuple[DurableRunResult, list[dict[str, Any]]]:
    """Resume the agent and decide what it parks at until it finishes; the result and the approvals asked."""
    durable = durable_agent(work, policy)
    asked: list[dict[str, Any]] = []
    async with durably.Runtime(url, agents=[durable]) as rt:
        result = await durable.run_in(rt, PROMPT, agent_id=AGENT_ID)
        for _ in range(rounds):
            if result.status == "finished":
                break
            state = result.state
            for request in state.open_approvals():
                asked.append(request)
                decision = _decision(request, work / "ledger")
                await rt.approve(AGENT_ID, request["approval_id"], **decision)
            result = await durable.run_in(rt, PROMPT, agent_id=AGENT_ID)
    return result, asked
