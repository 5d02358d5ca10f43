"""A serving worker process for the dead-holder and drain tests.

``python serve_worker.py --db FILE --effects FILE [--start N] [--worker-id W]``
starts agents ``agent-0 .. agent-{N-1}`` (if ``--start``) and then serves the
store (``Runtime.serve``, which drains on SIGTERM). Each agent takes
``--steps`` steps; each step's tool appends a fsynced JSON line
``{"key", "n", "pid", "phase"}`` to ``--effects`` before and after a sleep of
``--step-seconds``, so a test can see which process ran what, and when.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import StepModel, append_line, read_lines

from durably import AgentDefinition, Reconciled, Runtime, tool


def slow_file_agent(steps: int, effects: Path, step_seconds: float, name: str = "slow-file") -> AgentDefinition:
    """Each step's tool logs ``start``, sleeps ``step_seconds``, logs ``done``; reconciles by key.
    ``name``: the definition's name (workers serving different definitions)."""

    async def happened(ctx) -> Reconciled | None:
        lines = await anyio.to_thread.run_sync(read_lines, effects)
        done = [e for e in lines if e["key"] == ctx.idempotency_key and e["phase"] == "done"]
        return Reconciled(done[0]["n"] * 10) if done else None

    @tool(name="effect", on_unknown_outcome="reconcile", reconcile=happened)
    async def effect(n: int, *, ctx) -> int:
        line = {"key": ctx.idempotency_key, "n": n, "pid": os.getpid(), "agent": ctx.agent_id}
        await anyio.to_thread.run_sync(append_line, effects, {**line, "phase": "start", "t": time.time()})
        await anyio.sleep(step_seconds)
        await anyio.to_thread.run_sync(append_line, effects, {**line, "phase": "done", "t": time.time()})
        return n * 10

    return AgentDefinition(name=name, model=StepModel(steps), tools=[effect])


async def main(args: argparse.Namespace) -> None:
    definition = slow_file_agent(args.steps, Path(args.effects), args.step_seconds)
    async with Runtime(
        f"sqlite:///{args.db}", agents=[definition], worker_id=args.worker_id, lease_ttl=args.lease_ttl
    ) as rt:
        for i in range(args.start):
            await rt.start(definition, f"agent-{i}", "count")
        await rt.serve(args.poll, max_agents=args.max_agents)
    print("drained", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument("--worker-id")
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--max-agents", type=int)
    anyio.run(main, parser.parse_args())
