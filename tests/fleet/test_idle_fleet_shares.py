"""An idle fleet splits a burst of submitted agents: no worker takes them all.

Two (then three) runtimes serve one SQLite file with nothing to run, long
enough for each to have scanned; then a burst of agents is submitted. Each
worker's share counts the live workers its heartbeat listing shows, not only
the lease holders it met (an idle fleet holds no leases): before, the first
worker to scan after the burst took every agent.
"""

from __future__ import annotations

import math
from collections import Counter
from contextlib import AsyncExitStack

import anyio
import pytest

from durably import FunctionAgent, Run, Runtime, ToolContext
from durably._fleet import serving
from durably._fleet.scan import ScanResult, scan
from durably._fleet.workers import list_workers

pytestmark = pytest.mark.anyio

POLL = 0.5  # seconds between a worker's scans


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _held(release: anyio.Event) -> FunctionAgent:
    async def hold(task: str, ctx: ToolContext) -> str:
        await release.wait()  # stays live where it runs until the test has counted
        return task

    async def body(run: Run, task: str) -> str:
        done: str = await run.call(hold, task, on_unknown_outcome="retry")
        return done

    return FunctionAgent("held", body)


@pytest.mark.parametrize(("workers", "agents"), [(2, 7), (3, 10)])
async def test_an_idle_fleet_splits_a_burst(tmp_path, monkeypatch, workers: int, agents: int) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    taken: list[int] = []  # how many agents each scan took

    async def counted(*args: object, **kwargs: object) -> ScanResult:
        result = await scan(*args, **kwargs)  # type: ignore[arg-type]
        taken.append(len(result.handles))
        return result

    monkeypatch.setattr(serving, "scan", counted)
    release = anyio.Event()
    definition = _held(release)
    async with AsyncExitStack() as stack:
        submitter = await stack.enter_async_context(Runtime(url, agents=[definition], worker_id="submitter"))
        runtimes = [
            await stack.enter_async_context(Runtime(url, agents=[definition], worker_id=f"w{i}"))
            for i in range(workers)
        ]
        async with anyio.create_task_group() as tg:
            for rt in runtimes:
                tg.start_soon(rt.serve, POLL)
            try:
                with anyio.fail_after(30):  # every worker heartbeats ...
                    while len([b for b in await list_workers(submitter.store) if b.state == "serving"]) < workers:
                        await anyio.sleep(0.05)
                await anyio.sleep(3 * POLL)  # ... and has scanned an empty store: the fleet is idle
                for i in range(agents):
                    await submitter.submit(definition, f"agent-{i}", "work")
                holders: dict[str, str] = {}
                with anyio.fail_after(60):
                    while len(holders) < agents:
                        for i in range(agents):
                            holder = await submitter.lease_holder(f"agent-{i}")
                            if holder is not None:
                                holders[f"agent-{i}"] = holder.worker_id
                        await anyio.sleep(0.05)
                per_worker = Counter(holders.values())
                # A worker takes at most ceil(N/k) in its first scan after the burst; at its share
                # it takes one more only for an agent that no peer took through a whole poll of its
                # own (the guard against starving an agent), i.e. when a peer was a poll late on
                # a loaded machine: one such late poll is the slack allowed here.
                assert max(per_worker.values()) <= math.ceil(agents / workers) + 1, per_worker
                assert sum(per_worker.values()) == agents
                # Taken in shares, not one agent per poll: some scan took several at once.
                assert max(taken) >= 2, taken
            finally:
                release.set()
                tg.cancel_scope.cancel()
