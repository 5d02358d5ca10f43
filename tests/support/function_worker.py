"""A worker process for the function agents' crash tests: one run with a side-effecting
call and an approval, SIGKILLed at a named boundary.

The body: ``charge`` (a journaled call whose effect is a line in ``--ledger``,
keyed by its idempotency key, fsynced), then ``run.approval("refund?")``, then
the result. Boundaries (``--crash NAME``):
  before_intent   the charge's tool_intent append is about to be committed
  before_effect   the intent is durable, the charge has not acted yet
  after_effect    the charge acted (its ledger line is durable), its result is not journaled
  after_result    the commit holding the charge's tool_result was acknowledged
  parked          the approval request was acknowledged (the agent is parked)

Without ``--crash`` the worker finishes the run: it decides every open approval
itself (an unknown outcome is reported with the ledger's result when the ledger
holds the key, else approved to run again; ``refund?`` is approved) and prints
the final state as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import append_line, read_lines

from durably import FunctionAgent, Reconciled, Run, Runtime, ToolContext
from durably._journal.writer import AgentJournal
from durably.schemas._records import Kind

args: argparse.Namespace


def die_at(boundary: str) -> None:
    if args.crash == boundary:
        os.kill(os.getpid(), signal.SIGKILL)


def install_hooks() -> None:
    original = AgentJournal._append_once

    async def append_once(self: AgentJournal, entries: Any) -> None:
        kinds = {kind for kind, _ in entries}
        if Kind.TOOL_INTENT in kinds:
            die_at("before_intent")
        await original(self, entries)
        if Kind.TOOL_RESULT in kinds:
            die_at("after_result")
        if Kind.APPROVAL_REQUESTED in kinds:
            die_at("parked")

    AgentJournal._append_once = append_once  # type: ignore[method-assign]


def ledger() -> list[dict[str, Any]]:
    return read_lines(Path(args.ledger))


async def charge(amount: int, ctx: ToolContext) -> str:
    die_at("before_effect")
    append_line(Path(args.ledger), {"key": ctx.idempotency_key, "attempt": ctx.attempt, "amount": amount})
    die_at("after_effect")
    return f"ch-{ctx.idempotency_key[:8]}"


async def find_charge(ctx: ToolContext) -> Reconciled | None:
    done = [line for line in ledger() if line["key"] == ctx.idempotency_key]
    return Reconciled(f"ch-{ctx.idempotency_key[:8]}") if done else None


async def body(run: Run, task: str) -> dict[str, Any]:
    charged = await run.call(charge, int(task), name="charge", on_unknown_outcome=args.policy, reconcile=find_charge)
    decision = await run.approval("refund?")
    return {"charge": charged, "approved": decision["approved"]}


async def main() -> None:
    definition = FunctionAgent("refunds", body)
    async with Runtime(args.store, agents=[definition]) as rt:
        state = await rt.run(definition, args.agent, "5")
        for _ in range(10):
            if state.status != "waiting_approval":
                break
            for request in state.open_approvals():
                if request["approval_id"] == "approval-1":
                    await rt.approve(args.agent, "approval-1", approved=True, by="test")
                    continue
                done = [line for line in ledger() if line["key"] == request["key"]]
                if done:
                    reported = f"ch-{request['key'][:8]}"
                    await rt.approve(args.agent, request["approval_id"], approved=True, by="test", result=reported)
                else:
                    await rt.approve(args.agent, request["approval_id"], approved=True, by="test")
            state = await rt.wait(args.agent, timeout=60)
        out = {"status": state.status, "result": state.result, "reason": state.reason, "ledger": state.ledger}
        approvals = sorted(state.approvals)
        print(json.dumps({**out, "approvals": approvals}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--agent", default="r-1")
    parser.add_argument("--policy", default="reconcile")
    parser.add_argument("--crash")
    args = parser.parse_args()
    install_hooks()
    anyio.run(main)
