"""One measured single-agent conversation through the Runtime, shared by the suites.

agent-steps, growth and peers all need "the 1,000-step conversation on the
store under test"; this runs it once per run and length (memoised on the
``Bench``), then measures what they report: step latencies, stored bytes and
restore latency, cold (a new store handle) and warm (the same handle again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from durably import Runtime
from durably.storage._registry import open_store

from .agent import AgentRun, StreamBytes, run_agents, stream_bytes
from .context import Bench


@dataclass
class Conversation:
    """A finished single-agent run: ``steps``, the run, its stored bytes and restore times (s).

    ``requests``: what the bench's S3 server answered during the run itself, by
    HTTP method (empty without one), not counting the reads that measure it after.
    """

    steps: int
    namespace: str
    run: AgentRun
    stored: StreamBytes
    restore_cold_s: float
    restore_warm_s: list[float]
    requests: dict[str, int]


async def measure_restore(url: str, namespace: str, agent_id: str, repeats: int) -> tuple[float, list[float]]:
    """Seconds to restore ``agent_id`` through ``Runtime.status``: once on a newly
    opened store handle (cold; the OS page cache stays warm), then ``repeats``
    times on the same handle (warm). Opening the handle is not timed."""
    async with open_store(url) as store:
        async with Runtime(store, namespace=namespace) as rt:
            t = time.perf_counter()
            await rt.status(agent_id)
            cold = time.perf_counter() - t
            warm = []
            for _ in range(repeats):
                t = time.perf_counter()
                await rt.status(agent_id)
                warm.append(time.perf_counter() - t)
    return cold, warm


async def conversation(bench: Bench, steps: int) -> Conversation:
    """The measured ``steps``-step conversation of agent 0 (run on first use)."""
    memo = bench.memo.get(("conversation", steps))
    if isinstance(memo, Conversation):
        return memo
    namespace = bench.namespace("conversation", steps)
    task = bench.progress.start(f"{steps:,}-step conversation", steps)
    before = bench.request_counts()
    async with open_store(bench.store) as store:
        run = await run_agents(
            store, namespace, [bench.conversation(steps)], on_step=lambda: bench.progress.advance(task)
        )
        requests = bench.requests_since(before)  # before stream_bytes and the restores read it all back
        stored = await stream_bytes(store, run.streams[0])
    cold, warm = await measure_restore(bench.store, namespace, run.streams[0].agent_id, bench.sizes.restore_repeats)
    result = Conversation(steps, namespace, run, stored, cold, warm, requests)
    bench.memo[("conversation", steps)] = result
    return result
