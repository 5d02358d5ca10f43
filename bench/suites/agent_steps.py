"""agent-steps: whole agent steps per second and per-step latency, through the real Runtime.

A step is a model response with one tool call, the tool intent and the tool
result (three durable appends). The model is scripted and the tool instant
(``durably.bench.agent``), so the time is durably's. Per-step latency is taken
in-process from the model's call times; "first" and "last" are the first and
last 10 % of the steps of one conversation: a cost that grows with history
shows as last/first above 1.

Also: 16 agents at once, each on its own conversation, to show group commit
across agents; its record rate is compared with the limit's group-commit
rate at the same concurrency from the append suite, when that ran.
"""

from __future__ import annotations

from durably.storage.registry import open_store

from ..agent import run_agents
from ..context import Bench
from ..conversation import conversation
from ..results import percentile

SUITE = "agent-steps"


def step_figures(bench: Bench, suite: str, latencies: list[float], system: str = "durably",
                 store: str | None = None, **params) -> None:
    """p50/p99 over all steps and over the first and last 10 %, the slowest step, in ms; last/first p50."""
    r = bench.results
    tenth = max(1, len(latencies) // 10)
    parts = {"all": latencies, "first10": latencies[:tenth], "last10": latencies[-tenth:]}
    for part, values in parts.items():
        for q in (50, 99):
            r.add(suite, f"step_p{q}_{part}", percentile(values, q) * 1e3, "ms", system=system, store=store, **params)
    # The worst step shows stalls the percentiles hide (e.g. a large snapshot encoded while the loop waits).
    r.add(suite, "step_max_all", max(latencies, default=0.0) * 1e3, "ms", system=system, store=store, **params)
    r.ratio(suite, "step_p50_last10/first10", r.find(suite, "step_p50_last10", system, **params),
            r.find(suite, "step_p50_first10", system, **params), better="lower", system=system, **params)


async def run(bench: Bench) -> None:
    """The single-agent conversations of ``sizes.conversations``, then the concurrent run."""
    r = bench.results
    for steps in bench.sizes.conversations:
        conv = await conversation(bench, steps)
        records = conv.stored.records
        r.add(SUITE, "steps_per_s", steps / conv.run.wall_s, "steps/s", agents=1, steps=steps)
        r.add(SUITE, "records_per_s", records / conv.run.wall_s, "records/s", agents=1, steps=steps)
        r.add(SUITE, "stored_bytes_per_step", conv.stored.total / steps, "B/step", agents=1, steps=steps)
        step_figures(bench, SUITE, conv.run.latencies[0], agents=1, steps=steps)
        limit = r.find("append", "records_per_s", "limit-group-commit", agents=1)
        r.ratio(SUITE, "durably/limit-group-commit", r.find(SUITE, "records_per_s", agents=1, steps=steps), limit,
                agents=1, steps=steps)

    agents, steps = bench.sizes.agents, bench.sizes.agent_steps
    task = bench.progress.start(f"{agents} agents x {steps} steps", agents * steps)
    conversations = [bench.conversation(steps, agent) for agent in range(1, agents + 1)]
    async with open_store(bench.store) as store:
        run_ = await run_agents(store, bench.namespace(SUITE, "concurrent"), conversations,
                                on_step=lambda: bench.progress.advance(task))
    total_steps = agents * steps
    total_records = agents * (3 * steps + 3)  # + started, the final response and finished
    r.add(SUITE, "steps_per_s", total_steps / run_.wall_s, "steps/s", agents=agents, steps=steps)
    rate = r.add(SUITE, "records_per_s", total_records / run_.wall_s, "records/s", agents=agents, steps=steps)
    all_latencies = [lat for own in run_.latencies for lat in own]
    for q in (50, 99):
        r.add(SUITE, f"step_p{q}_all", percentile(all_latencies, q) * 1e3, "ms", agents=agents, steps=steps)
    limit = r.find("append", "records_per_s", "limit-group-commit", agents=agents)
    r.ratio(SUITE, "durably/limit-group-commit", rate, limit, agents=agents, steps=steps)
