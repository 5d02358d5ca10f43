"""agent-steps: whole agent steps per second and per-step latency, through the real Runtime.

A step is a model response with one tool call, the tool intent and the tool
result (three durable appends). The model is scripted and the tool instant
(``durably.bench.agent``), so the time is durably's. Per-step latency is taken
in-process from the model's call times; "first" and "last" are the first and
last 10 % of the steps of one conversation: a cost that grows with history
shows as last/first above 1.

Also: 16 agents at once, each on its own conversation, to show group commit
across agents. The headline ratios are against the one-commit floor
(``durably.bench.floor``): the frames each run stored, replayed per step
through plain group commit right after the run, one writer per agent. One
agent: durably's step cost / the floor's (lower is better); 16 agents: steps/s
durably / floor. The record rate is also compared with the append suite's
one-row-per-append limit at the same concurrency, when that ran.

Beside the floor, the floor with encoding included (``floor-encoded``): the
same steps' records, redacted and encoded by the journal's own code in the
timed loop, then committed the same way, still no runtime. durably /
floor-encoded is the gap that is the runtime's own; floor-encoded / floor is
what encoding costs at the storage's pace.

With ``bench.requests`` (the bench's own S3 server, ``--local-s3``), the
requests each run sent are counted at the server: requests per step.
"""

from __future__ import annotations

from typing import Any

from durably.storage._registry import open_store
from durably.storage._spi import Store, StreamId

from ..agent import run_agents
from ..context import Bench
from ..conversation import conversation
from ..floor import FloorRun, run_floor
from ..results import percentile

SUITE = "agent-steps"


def step_figures(
    bench: Bench, suite: str, latencies: list[float], system: str = "durably", store: str | None = None, **params: Any
) -> None:
    """p50/p99 over all steps and over the first and last 10 %, the slowest step, in ms; last/first p50."""
    r = bench.results
    tenth = max(1, len(latencies) // 10)
    parts = {"all": latencies, "first10": latencies[:tenth], "last10": latencies[-tenth:]}
    for part, values in parts.items():
        for q in (50, 99):
            r.add(suite, f"step_p{q}_{part}", percentile(values, q) * 1e3, "ms", system=system, store=store, **params)
    # The worst step shows stalls the percentiles hide (e.g. a large snapshot encoded while the loop waits).
    r.add(suite, "step_max_all", max(latencies, default=0.0) * 1e3, "ms", system=system, store=store, **params)
    r.ratio(
        suite,
        "step_p50_last10/first10",
        r.find(suite, "step_p50_last10", system, **params),
        r.find(suite, "step_p50_first10", system, **params),
        better="lower",
        system=system,
        **params,
    )


FLOOR, ENCODED = "floor-step-commit", "floor-encoded"


def _floor_figures(
    bench: Bench, run_wall: float, floors: dict[str, tuple[FloorRun, str]], agents: int, steps: int
) -> None:
    """The floors' figures (``floors``: system -> run, URL) beside durably's, and the headline ratios."""
    r = bench.results
    params: dict[str, Any] = {"agents": agents, "steps": steps}
    total = agents * steps
    mine = (
        r.add(SUITE, "steps_per_s", total / run_wall, "steps/s", **params)
        if agents > 1
        else r.find(SUITE, "steps_per_s", agents=1, steps=steps)
    )
    mean = r.add(SUITE, "step_mean", run_wall / steps * 1e3, "ms", **params) if agents == 1 else None
    for system, (floor, url) in floors.items():
        rate = r.add(SUITE, "steps_per_s", floor.steps / floor.wall_s, "steps/s", system=system, store=url, **params)
        r.add(SUITE, "commits", floor.commits, "count", system=system, store=url, **params)
        name = "floor" if system == FLOOR else system
        if mean is not None:
            floor_mean = r.add(
                SUITE, "step_mean", floor.wall_s / floor.steps * 1e3, "ms", system=system, store=url, **params
            )
            r.ratio(SUITE, f"step_mean durably/{name}", mean, floor_mean, better="lower", **params)
        r.ratio(SUITE, f"steps_per_s durably/{name}", mine, rate, **params)
    r.ratio(
        SUITE,
        f"steps_per_s {ENCODED}/floor",
        r.find(SUITE, "steps_per_s", ENCODED, **params),
        r.find(SUITE, "steps_per_s", FLOOR, **params),
        **params,
    )


async def _floors(
    bench: Bench, store: Store, streams: list[StreamId], label: str, description: str, count: int
) -> dict[str, tuple[FloorRun, str]]:
    """The floor, then the floor with encoding, of ``streams`` (``count`` steps in all, for the progress bar)."""
    floors = {}
    for system, encoded in ((FLOOR, False), (ENCODED, True)):
        what = "encoded then one commit each" if encoded else "one commit each"
        task = bench.progress.start(f"{system}: {description}, {what}", count)
        floors[system] = await run_floor(
            bench,
            store,
            streams,
            f"{label}-encoded" if encoded else label,
            on_step=lambda: bench.progress.advance(task),
            encoded=encoded,
        )
    return floors


def _request_figures(bench: Bench, spent: dict[str, int], total_steps: int, **params: Any) -> None:
    """The requests of a ``total_steps`` run (``spent``: by method), per step."""
    if bench.requests is None:
        return
    total = sum(spent.values())
    r = bench.results
    r.add(SUITE, "requests_per_step", total / total_steps, "requests/step", counted="at the server", **params)
    for method, count in sorted(spent.items()):
        if count:
            r.add(
                SUITE,
                f"{method.lower()}_per_step",
                count / total_steps,
                "requests/step",
                counted="at the server",
                **params,
            )


async def run(bench: Bench) -> None:
    """The single-agent conversations of ``sizes.conversations``, then the concurrent run, each with its floor."""
    r = bench.results
    for steps in bench.sizes.conversations:
        conv = await conversation(bench, steps)
        _request_figures(bench, conv.requests, steps, agents=1, steps=steps)
        records = conv.stored.records
        r.add(SUITE, "steps_per_s", steps / conv.run.wall_s, "steps/s", agents=1, steps=steps)
        r.add(SUITE, "records_per_s", records / conv.run.wall_s, "records/s", agents=1, steps=steps)
        r.add(SUITE, "stored_bytes_per_step", conv.stored.total / steps, "B/step", agents=1, steps=steps)
        step_figures(bench, SUITE, conv.run.latencies[0], agents=1, steps=steps)
        bench.series(SUITE, "step_latency", conv.run.latencies[0], "ms", scale=1e3, agents=1, steps=steps)
        limit = r.find("append", "records_per_s", "limit-group-commit", agents=1)
        r.ratio(
            SUITE,
            "durably/limit-group-commit",
            r.find(SUITE, "records_per_s", agents=1, steps=steps),
            limit,
            agents=1,
            steps=steps,
        )
        async with open_store(bench.store) as store:
            floors = await _floors(bench, store, conv.run.streams, "floor-1", f"{steps:,} steps", steps + 1)
        _floor_figures(bench, conv.run.wall_s, floors, 1, steps)

    agents, steps = bench.sizes.agents, bench.sizes.agent_steps
    task = bench.progress.start(f"{agents} agents x {steps} steps", agents * steps)
    conversations = [bench.conversation(steps, agent) for agent in range(1, agents + 1)]
    before = bench.request_counts()
    async with open_store(bench.store) as store:
        run_ = await run_agents(
            store, bench.namespace(SUITE, "concurrent"), conversations, on_step=lambda: bench.progress.advance(task)
        )
        _request_figures(bench, bench.requests_since(before), agents * steps, agents=agents, steps=steps)
        floors = await _floors(
            bench, store, run_.streams, f"floor-{agents}", f"{agents} writers x {steps} steps", agents * (steps + 1)
        )
    total_records = agents * (3 * steps + 3)  # + started, the final response and finished
    _floor_figures(bench, run_.wall_s, floors, agents, steps)
    rate = r.add(SUITE, "records_per_s", total_records / run_.wall_s, "records/s", agents=agents, steps=steps)
    all_latencies = [lat for own in run_.latencies for lat in own]
    for q in (50, 99):
        r.add(SUITE, f"step_p{q}_all", percentile(all_latencies, q) * 1e3, "ms", agents=agents, steps=steps)
    limit = r.find("append", "records_per_s", "limit-group-commit", agents=agents)
    r.ratio(SUITE, "durably/limit-group-commit", rate, limit, agents=agents, steps=steps)
