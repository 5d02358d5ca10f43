"""A serving worker for the PostgreSQL wake-up tests: starts agent ``a1`` (its tool needs an
approval), then runs ``Runtime.serve(poll_interval)`` until the agent finishes.

It prints ``PARKED`` once the agent waits for its approval, and a JSON line with
the final state when it is done. The poll interval is long (60 s by default), so
an agent that resumes sooner was woken by a change notification.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool


async def main(args: argparse.Namespace) -> None:
    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx) -> int:
        return n * 10

    definition = AgentDefinition(name="gated", model=StepModel(1), tools=[effect])
    async with Runtime(args.store, agents=[definition]) as rt:
        handle = await rt.start(definition, "a1", "task")
        state = await handle.wait()
        assert state.status == "waiting_approval", state.status
        async with anyio.create_task_group() as group:
            group.start_soon(rt.serve, args.poll_interval)
            await anyio.sleep(0.3)  # serve() subscribed and made its first pass
            print("PARKED", flush=True)
            with anyio.fail_after(120):
                while (state := await rt.status("a1")).status != "finished":
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()
    print(json.dumps({"status": state.status, "result": state.result}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--poll-interval", type=float, default=60.0)
    anyio.run(main, parser.parse_args())
