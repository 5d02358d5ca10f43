"""One demo worker process: start or resume the survey agent, run it until it
stops or parks, print its state as JSON. ``--crash-at N:POINT`` makes the
process SIGKILL itself at POINT after the N-th model call of this process
(POINT: model:before_call, tool:before_effect, tool:after_effect)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from durably import Runtime, SnapshotPolicy
from durably._cli.demo.survey import survey_agent, survey_task


class CrashPlan:
    """Kills this process with SIGKILL at ``point`` once ``model_calls`` model calls began."""

    def __init__(self, spec: str | None) -> None:
        self.calls = 0
        self.at: int | None = int(spec.split(":", 1)[0]) if spec else None
        self.point: str | None = spec.split(":", 1)[1] if spec else None

    def __call__(self, point: str) -> None:
        if point == "model:before_call":
            self.calls += 1
        if self.at is not None and self.calls >= self.at and point == self.point:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)


async def work(args: argparse.Namespace) -> dict[str, Any]:
    definition = survey_agent(Path(args.workdir), CrashPlan(args.crash_at), model=args.model)
    policy = SnapshotPolicy(every_records=args.snapshot_every)
    async with Runtime(args.store, agents=[definition], namespace=args.namespace, snapshot_policy=policy) as rt:
        if args.modules:
            state = await rt.run(definition, args.agent_id, survey_task(args.modules.split(",")))
        else:
            handle = await rt.resume(args.agent_id)
            state = await handle.wait() if handle else await rt.status(args.agent_id)
        return {
            "status": state.status,
            "reason": state.reason,
            "last_seq": state.last_seq,
            "approvals": [a["approval_id"] for a in state.open_approvals()],
            "result": state.result,
            "pid": os.getpid(),
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="durably-demo-worker")
    parser.add_argument("--store", required=True)
    parser.add_argument("--namespace", default="demo")
    parser.add_argument("--agent-id", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--modules", help="comma-separated: start a new run on these modules")
    parser.add_argument("--crash-at")
    parser.add_argument("--snapshot-every", type=int, default=40)
    parser.add_argument("--model", help="provider:model of a real LLM (default: the scripted policy)")
    args = parser.parse_args(argv)
    print(json.dumps(anyio.run(work, args)), flush=True)


if __name__ == "__main__":
    main()
