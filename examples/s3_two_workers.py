"""Two worker processes serve one S3 bucket; each agent runs in exactly one of them.

Two workers, separate OS processes, both try to start the same six jobs and
then serve the same ``s3://`` URL. A conditional write (``If-None-Match``) of
each agent's first record lets exactly one start it; leases decide which
worker runs which agent from then on, and the expected seq keeps a stale one
from acting twice. Every agent finishes and every tool call runs once.

    python examples/s3_two_workers.py S3_URL [DIRECTORY]

``S3_URL`` names a bucket and prefix, e.g. for a local S3-compatible server
(moto, MinIO) with credentials in the environment::

    s3://my-bucket/agents?endpoint_url=http://127.0.0.1:9000&region=us-east-1&path_style=1

Needs the ``s3`` extra: ``pip install -e '.[s3]'`` in durably's clone.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

import durably

JOBS = [f"job-{n}" for n in range(6)]


def batch_agent(effects: Path) -> durably.AgentDefinition:
    @durably.tool(on_unknown_outcome="retry")
    def process(job: str, *, ctx: durably.ToolContext) -> str:
        """Process one job (a plain def: it runs in a worker thread).

        Args:
            job: the job id.
        """
        time.sleep(0.2)  # some work, so both workers get a share
        with effects.open("a") as out:  # one short line per write: appends do not interleave
            out.write(f"{ctx.idempotency_key} {job} {os.getpid()}\n")
        return f"{job} done by pid {os.getpid()}"

    return durably.AgentDefinition(name="batch", model=BatchModel(), tools=[process])


class BatchModel:
    """Scripted: process the job named in the task, then report."""

    name = "scripted-batch"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        if messages[-1]["role"] == "tool":
            return durably.ModelResponse(messages[-1]["content"])
        job = messages[-1]["content"].split()[-1]
        return durably.ModelResponse("", (durably.ToolCall("c1", "process", {"job": job}),))


async def worker(url: str, effects: Path) -> None:
    """Start whichever jobs nobody started yet, then serve until every job's agent finished."""
    async with durably.Runtime(url, agents=[batch_agent(effects)], lease_ttl=5.0) as rt:
        for job in JOBS:
            try:
                await rt.start("batch", job, f"Process {job}")
            except durably.AgentExistsError:
                pass  # the other worker's conditional write of its first record won: it runs the job
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.serve(poll_interval=0.1, drain_signals=()))
            with anyio.fail_after(120):
                while any(state.status != "finished" for state in await rt.agents()) or len(await rt.agents()) < len(
                    JOBS
                ):
                    await anyio.sleep(0.2)
            tg.cancel_scope.cancel()


async def main(url: str, workdir: Path) -> int:
    effects = workdir / "effects.log"
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(anyio.run_process, [sys.executable, __file__, "--worker", url, str(workdir)])
    lines = [line.split() for line in effects.read_text().splitlines()] if effects.exists() else []
    keys = [key for key, _, _ in lines]
    by_worker: dict[str, list[str]] = {}
    for _, job, pid in lines:
        by_worker.setdefault(pid, []).append(job)
    async with durably.Runtime(url) as rt:
        statuses = {state.agent_id: state.status for state in await rt.agents()}
    print(f"agents: {statuses}")
    print(f"tool calls: {len(keys)}, distinct keys: {len(set(keys))}, by worker pid: {by_worker}")
    ok = statuses == {job: "finished" for job in JOBS} and sorted(keys) == sorted(set(keys)) and len(keys) >= len(JOBS)
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        anyio.run(worker, sys.argv[2], Path(sys.argv[3]) / "effects.log")
        sys.exit(0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    directory = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="durably-s3-"))
    sys.exit(anyio.run(main, sys.argv[1], directory))
