"""A worker process for the console test: ``serve()`` the survey agents of namespace ``demo``
until agent ``--until`` finishes, then print its state as JSON and exit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import anyio

from durably import Runtime
from durably._cli.demo.survey import survey_agent


async def main(args: argparse.Namespace) -> None:
    agent = survey_agent(Path(args.workdir), latency=0)
    async with Runtime(args.store, agents=[agent], namespace="demo") as rt:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.serve, 0.1)
            print("serving", flush=True)
            state = await rt.wait(args.until, until="finished", timeout=args.timeout)
            tg.cancel_scope.cancel()
    print(json.dumps({"status": state.status, "result": state.result}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--until", required=True)
    parser.add_argument("--timeout", type=float, default=120)
    anyio.run(main, parser.parse_args())
