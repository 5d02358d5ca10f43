"""The ``many`` suite's child process: many agents in one fresh process, for honest RSS.

Peak RSS is a process's high-water mark: measured in the bench's own process
it would hold whatever earlier suites (a LangGraph thread of gigabytes) left.
So each part runs in a new interpreter, and reads its peak from ``VmHWM`` in
``/proc/self/status``, which starts afresh at ``exec``; ``ru_maxrss`` does not
(Linux keeps it across ``fork`` and ``exec``), so it reported the bench
process's own peak whenever that was larger than the child's:

* ``concurrent``: ``AGENTS`` agents started at once, each on its own seeded
  ``STEPS``-step conversation (the bench agent of ``durably.bench.agent``),
  through one ``Runtime``: wall time from the first start to the last finish,
  and peak RSS;
* ``parked``: ``AGENTS`` agents whose first tool call needs an approval, each
  started and left parked (status ``waiting_approval``; the bench keeps no
  handle, as a service would not). RSS before and after, per parked agent;
  then a new store handle and ``Runtime`` time ``resume_all()`` scanning them
  (cold, then again warm). Nothing is runnable, so it must resume none.

``python -m durably.bench.many_worker MODE STORE NAMESPACE AGENTS STEPS SEED OUT``
writes the figures as JSON to ``OUT``.
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:  # imported lazily below, after the RSS baseline
    from durably import AgentDefinition

PAGE = resource.getpagesize()
STARTING = 200  # agents being started at once in the parked part (each start is a few commits)


def rss_bytes() -> int:
    """This process's resident set size now, in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * PAGE


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far, in bytes (Linux ``VmHWM``, in KiB there)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmHWM line")


async def concurrent(url: str, namespace: str, agents: int, steps: int, seed: int) -> dict[str, Any]:
    """Run ``agents`` agents of ``steps`` steps at once; wall time and RSS."""
    from durably.storage._registry import open_store

    from .agent import run_agents
    from .workload import Workload

    workload = Workload(seed)
    conversations = [workload.conversation(steps, 10_000 + a) for a in range(agents)]
    gc.collect()
    baseline = rss_bytes()
    async with open_store(url) as store:
        run = await run_agents(store, namespace, conversations)
    return {
        "wall_s": run.wall_s,
        "steps": agents * steps,
        "rss_baseline": baseline,
        "rss_peak": peak_rss_bytes(),
        "latencies_p50": sorted(lat for own in run.latencies for lat in own)[agents * steps // 2],
    }


def parked_definition() -> AgentDefinition:
    """An agent whose model asks for an approval-gated tool at once, then finishes."""
    from durably import AgentDefinition, ModelResponse, ToolCall, Usage, tool

    class AsksFirst:
        name = "bench-approval"

        async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
            if messages[-1]["role"] == "tool":
                return ModelResponse("Deployed.", (), Usage(10, 2, 0.0), model=self.name)
            return ModelResponse(
                "Deploying needs a human.",
                (ToolCall("deploy-1", "deploy", {"version": "1.2"}),),
                Usage(10, 8, 0.0),
                model=self.name,
            )

    @tool(requires_approval=True, on_unknown_outcome="retry")
    async def deploy(version: str, *, ctx: object) -> str:
        """Deploy a version (needs an approval).

        Args:
            version: the version to deploy.
        """
        return f"deployed {version}"

    return AgentDefinition(
        name="bench-parked", model=AsksFirst(), tools=[deploy], instructions="You deploy when asked."
    )


async def parked(url: str, namespace: str, agents: int) -> dict[str, Any]:
    """Park ``agents`` agents; RSS per parked agent and the ``resume_all`` scan time."""
    from durably import Runtime
    from durably.storage._registry import open_store

    definition = parked_definition()
    statuses: dict[str, int] = {}
    limiter = anyio.CapacityLimiter(STARTING)
    async with open_store(url) as store:
        async with Runtime(store, namespace=namespace, agents=[definition]) as rt:
            await (await rt.start(definition, "warm-up", "Deploy 1.2.")).wait()  # imports and caches, not counted
            gc.collect()
            before = rss_bytes()
            start = time.perf_counter()

            async def park(i: int) -> None:
                async with limiter:
                    state = await (await rt.start(definition, f"agent-{i}", "Deploy 1.2.")).wait()
                statuses[state.status] = statuses.get(state.status, 0) + 1

            async with anyio.create_task_group() as tg:
                for i in range(agents):
                    tg.start_soon(park, i)
            park_s = time.perf_counter() - start
            gc.collect()
            after = rss_bytes()
    if statuses != {"waiting_approval": agents}:
        raise RuntimeError(f"parked agents ended {statuses}, expected {agents} waiting_approval")
    scans = []
    async with open_store(url) as store:
        async with Runtime(store, namespace=namespace, agents=[definition]) as rt:
            for _ in range(2):
                t = time.perf_counter()
                resumed = await rt.resume_all()
                scans.append(time.perf_counter() - t)
                if resumed:
                    raise RuntimeError(f"resume_all resumed {len(resumed)} parked agents")
    return {
        "agents": agents,
        "park_s": park_s,
        "rss_before": before,
        "rss_after": after,
        "rss_peak": peak_rss_bytes(),
        "scan_cold_s": scans[0],
        "scan_warm_s": scans[1],
    }


def main(argv: list[str]) -> None:
    mode, url, namespace, agents, steps, seed, out = argv
    if mode == "concurrent":
        doc = anyio.run(concurrent, url, namespace, int(agents), int(steps), int(seed))
    elif mode == "parked":
        doc = anyio.run(parked, url, namespace, int(agents))
    else:
        raise SystemExit(f"unknown mode {mode!r}: concurrent or parked")
    Path(out).write_text(json.dumps(doc), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
