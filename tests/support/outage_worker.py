"""A serving worker for the database-restart tests: starts ``--agents`` agents whose tool
appends one fsynced line per call to ``--effects`` (the ledger), then ``Runtime.serve`` until
SIGTERM (a drain).

It prints ``STARTED`` once every agent is started and ``DONE`` once every agent is
finished (read through the runtime, retried while the store is out); it goes on serving
after that, so the test can check that the worker outlived the restarts and then drain it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import file_agent

from durably import Runtime
from durably.storage import StoreError


async def all_finished(rt: Runtime, ids: list[str]) -> bool:
    try:
        return all([(await rt.status(agent_id)).status == "finished" for agent_id in ids])
    except StoreError:
        return False  # the database is out: ask again later


async def main(args: argparse.Namespace) -> None:
    definition = file_agent(args.steps, Path(args.effects), name="outage", think_s=args.think)
    ids = [f"a{i}" for i in range(args.agents)]
    async with Runtime(args.store, agents=[definition], lease_ttl=args.lease_ttl) as rt:
        for agent_id in ids:
            await rt.start(definition, agent_id, "task")
        print("STARTED", flush=True)

        async def watch() -> None:
            while not await all_finished(rt, ids):
                await anyio.sleep(0.1)
            print("DONE", flush=True)

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            await rt.serve(0.2)  # returns after a SIGTERM's drain
            group.cancel_scope.cancel()
    print("EXITED", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--think", type=float, default=0.2)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    anyio.run(main, parser.parse_args())
