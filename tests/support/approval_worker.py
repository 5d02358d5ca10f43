"""Worker process for the cross-process approval and budget tests: starts or
resumes agent ``a1`` on a SQLite file and prints its state as JSON when it
stops or parks. The tool needs approval and appends to ``--effects``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import StepModel, append_line

from durably import AgentDefinition, AgentExistsError, Budget, Runtime, tool


async def main(args: argparse.Namespace) -> None:
    @tool(name="effect", requires_approval=args.approval)
    async def effect(n: int, *, ctx) -> int:
        await anyio.to_thread.run_sync(
            append_line, Path(args.effects), {"key": ctx.idempotency_key, "n": n, "pid": os.getpid()}
        )
        return n * 10

    definition = AgentDefinition(name="gated", model=StepModel(args.steps), tools=[effect])
    async with Runtime(f"sqlite:///{args.db}", agents=[definition]) as rt:
        try:
            handle = await rt.start(definition, "a1", "task", budget=Budget(steps=args.budget_steps))
        except AgentExistsError:
            handle = await rt.resume("a1")
        state = await handle.wait() if handle else await rt.status("a1")
    print(
        json.dumps(
            {
                "status": state.status,
                "reason": state.reason,
                "result": state.result,
                "approvals": [a["approval_id"] for a in state.open_approvals()],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--budget-steps", type=int)
    parser.add_argument("--approval", action="store_true")
    anyio.run(main, parser.parse_args())
