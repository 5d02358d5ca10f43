"""A worker process for the timer crash tests.

``python timer_worker.py --db FILE --effects FILE [--start N] [--nap S] [--die-awake]``
starts agents ``nap-0 .. nap-{N-1}`` (``timer_agents.nap_agent``: nap S seconds,
then one effect) if ``--start``, prints ``parked`` once they all sleep, then
serves the store. With ``--die-awake`` the worker SIGKILLs itself at the first
model call after a timer fired (the ``timer_fired`` record is durable, the
effect has not run), as a crash at the firing would.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from timer_agents import NapModel, nap_agent

from durably import ModelResponse, Runtime


class DieAwake(NapModel):
    """``NapModel`` that kills its process when asked for the step after the nap."""

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        if sum(1 for m in messages if m["role"] == "tool") == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().respond(messages, tools)


async def main(args: argparse.Namespace) -> None:
    model = DieAwake(args.nap) if args.die_awake else None
    definition = nap_agent(Path(args.effects), args.nap, model=model)
    async with Runtime(f"sqlite:///{args.db}", agents=[definition], worker_id=args.worker_id) as rt:
        for i in range(args.start):
            state = await rt.run(definition, f"nap-{i}", "nap, then act")
            assert state.status == "sleeping", state.status
        if args.start:
            print("parked", flush=True)
        await rt.serve(args.poll)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--nap", type=float, default=1.0)
    parser.add_argument("--worker-id")
    parser.add_argument("--poll", type=float, default=30.0)
    parser.add_argument("--die-awake", action="store_true")
    anyio.run(main, parser.parse_args())
