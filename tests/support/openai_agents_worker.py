"""A child process of the OpenAI Agents bridge's crash tests: one activation of a durable run.

The agent charges (a ``charge`` tool that writes a ledger line with its
idempotency key), then notifies (a ``notify`` tool that needs approval and
writes a ledger line too), then answers. ``run_once`` runs or resumes it and
writes where it stands to a file; ``KILL`` names the point where the process
SIGKILLs itself (inside a tool, before or after its effect). Kills during a
model request are the test's (its model server kills the child).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from agents import Agent, function_tool
from openai_agents_support import sdk_model

import durably
from durably import Reconciled
from durably.integrations.openai_agents import DurableRunner, current_call

LEDGER = Path(os.environ.get("OA_LEDGER", "/nonexistent"))
KILL = os.environ.get("OA_KILL", "")


def _kill_at(point: str) -> None:
    if KILL == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _effect(tool: str, detail: str) -> str:
    key = current_call().idempotency_key
    _kill_at(f"{tool}:before")
    with LEDGER.open("a") as ledger:
        ledger.write(f"{tool} {key} {detail}\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    _kill_at(f"{tool}:after")
    return f"{tool} done: {detail}"


@function_tool
def charge(amount: int) -> str:
    """Charge the customer.

    Args:
        amount: In cents.
    """
    return _effect("charge", str(amount))


@function_tool(needs_approval=True)
def notify(message: str) -> str:
    """Tell the customer (needs a human's approval).

    Args:
        message: The text.
    """
    return _effect("notify", message)


async def found_in_ledger(ctx: durably.ToolContext) -> Reconciled | None:
    """The reconcile hook: the ledger line with the call's idempotency key, if any."""
    for line in LEDGER.read_text().splitlines() if LEDGER.exists() else []:
        tool, key, detail = line.split(" ", 2)
        if key == ctx.idempotency_key:
            return Reconciled(f"{tool} done: {detail}")
    return None


def build(model_url: str, policy: str) -> tuple[DurableRunner, Agent]:
    """The runner (both tools under ``policy``) and the agent, asking the model at ``model_url``."""
    agent = Agent(name="biller", instructions="Bill, then notify.", model=sdk_model(model_url), tools=[charge, notify])
    hooks = {"charge": found_in_ledger, "notify": found_in_ledger} if policy == "reconcile" else {}
    runner = DurableRunner(on_unknown_outcome={"charge": policy, "notify": policy}, reconcile=hooks)
    return runner, agent


def run_once(store_url: str, model_url: str, agent_id: str, policy: str, out: str, ledger: str, kill: str) -> None:
    """Run or resume ``agent_id`` once (killing itself at ``kill``); write
    ``{"status", "output", "approvals"}`` to ``out``."""
    global LEDGER, KILL
    LEDGER, KILL = Path(ledger), kill

    async def main() -> None:
        runner, agent = build(model_url, policy)
        async with durably.Runtime(store_url) as rt:
            runner.runtime = rt
            result = await runner.run(agent, "bill 5 cents", agent_id=agent_id)
        Path(out).write_text(
            json.dumps({"status": result.status, "output": result.final_output, "approvals": result.approvals})
        )

    asyncio.run(main())


def definitions() -> list[durably.AgentDefinition]:
    """For ``durably worker --agents openai_agents_worker:definitions``: the run's definition,
    its model at ``$OA_MODEL_URL``, its ledger at ``$OA_LEDGER``, both tools under ``$OA_POLICY``."""
    global LEDGER
    LEDGER = Path(os.environ["OA_LEDGER"])
    runner, agent = build(os.environ["OA_MODEL_URL"], os.environ.get("OA_POLICY", "ask"))
    return [runner.definition(agent)]
