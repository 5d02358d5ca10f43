"""many: a thousand agents at once, and ten thousand parked ones, in one process.

Two parts, each in a fresh child process (``durably.bench.many_worker``) so
that RSS is the agents', not what earlier suites left in the bench's process:

* ``sizes.many_agents`` agents x ``sizes.many_steps`` steps at once on the
  store under test: steps/s and peak RSS (and the RSS above the process's
  baseline per agent); steps/s is compared with agent-steps' 16-agent run of
  the same bench run, when that ran;
* ``sizes.parked_agents`` agents parked on an approval: RSS per parked agent
  (a parked agent should hold no memory), and the time ``resume_all()`` of a
  new ``Runtime`` takes to scan them (it resumes none).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from ..context import Bench

SUITE = "many"


async def _child(bench: Bench, mode: str, agents: int, steps: int) -> dict[str, Any]:
    out = bench.scratch / f"many-{mode}-{bench.run_id}.json"
    namespace = bench.namespace(SUITE, mode)
    argv = [
        sys.executable,
        "-m",
        "durably.bench.many_worker",
        mode,
        bench.store,
        namespace,
        str(agents),
        str(steps),
        str(bench.workload.seed),
        str(out),
    ]
    proc = await anyio.run_process(argv, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"many ({mode}) failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-2000:]}")
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    return doc


async def run(bench: Bench) -> None:
    """The concurrent part, then the parked part."""
    r, sizes = bench.results, bench.sizes
    if bench.store.startswith("memory://"):
        r.note("many: memory:// runs in the child process's own memory (a store of its own)")
    agents, steps = sizes.many_agents, sizes.many_steps
    task = bench.progress.start(f"many: {agents:,} agents x {steps} steps, then {sizes.parked_agents:,} parked", 2)
    doc = await _child(bench, "concurrent", agents, steps)
    bench.progress.advance(task)
    params: dict[str, Any] = {"agents": agents, "steps": steps}
    rate = r.add(SUITE, "steps_per_s", doc["steps"] / doc["wall_s"], "steps/s", **params)
    r.add(SUITE, "step_p50_all", doc["latencies_p50"] * 1e3, "ms", **params)
    r.add(SUITE, "peak_rss", doc["rss_peak"], "B", **params)
    r.add(SUITE, "rss_per_agent", (doc["rss_peak"] - doc["rss_baseline"]) / agents, "B/agent", **params)
    sixteen = r.find("agent-steps", "steps_per_s", agents=sizes.agents, steps=sizes.agent_steps)
    r.ratio(SUITE, f"steps_per_s {agents} agents/{sizes.agents} agents", rate, sixteen, agents=agents)

    doc = await _child(bench, "parked", sizes.parked_agents, 0)
    bench.progress.advance(task)
    params = {"agents": sizes.parked_agents}
    r.add(SUITE, "park_per_s", doc["agents"] / doc["park_s"], "agents/s", **params)
    r.add(SUITE, "rss_parked", doc["rss_after"] - doc["rss_before"], "B", **params)
    r.add(SUITE, "rss_per_parked_agent", (doc["rss_after"] - doc["rss_before"]) / doc["agents"], "B/agent", **params)
    r.add(SUITE, "peak_rss", doc["rss_peak"], "B", part="parked", **params)
    r.add(SUITE, "resume_all_scan_cold", doc["scan_cold_s"] * 1e3, "ms", **params)
    r.add(SUITE, "resume_all_scan_warm", doc["scan_warm_s"] * 1e3, "ms", **params)
