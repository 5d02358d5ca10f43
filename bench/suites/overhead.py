"""overhead: the same agent loop with and without durably, per step.

Without durably: a plain in-memory loop (call the model, append its message,
run the tool, append the result) with the same scripted model and tools.
With durably: the Runtime on the store under test, and on ``memory://``
(what the runtime itself costs, without storage). The difference per step
is durably's overhead; the model and tools here take no time, so in a real
agent it is to be set against seconds of model latency. CPU per step is the
process's CPU time (``time.process_time``, all threads) over the run / steps:
unlike wall time, it does not grow when other work shares the cores.
Each variant first runs a short untimed warm-up, so what is paid once per
process (importing pydantic for the tools' schemas, loading the zstd
dictionary, compiling the redaction patterns) is not counted as per-step cost.

Beside them, the limit with encoding included, no runtime: the same steps'
records (``journal_entries``) redacted and encoded by the journal's own code
(``durably.bench.step_encoder``), each step then committed through
``GroupCommitter`` on ``memory://`` (``limit-encoded-memory``); the encoding
alone (``encode-only``) and without redaction (``encode-no-redaction``), so
redaction's share shows apart. durably on memory:// minus limit-encoded-memory
is the CPU per step that is the runtime's own.

Hops per step: a last, untimed run of the first steps counts the event loop's
callbacks (``loop_callbacks``): the task switches and thread hand-backs a step
makes, a figure the machine's load does not change.
"""

from __future__ import annotations

import time
from typing import Any

from durably._tools.tool import ToolContext
from durably.storage._group_commit import GroupCommitter
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

from ..agent import ScriptedModel, bench_tools, run_agents
from ..context import Bench
from ..loop_callbacks import counting_callbacks
from ..results import percentile
from ..step_encoder import DEFAULT_REDACTION, StepEncoder
from ..workload import Step, journal_entries

SUITE = "overhead"
WARM_UP_STEPS = 20
COUNTED_STEPS = 100


async def plain_loop(steps: list[Step]) -> ScriptedModel:
    """The agent loop with no durability at all; returns the model with its call stamps."""
    model = ScriptedModel(steps)
    tools = {t.name: t for t in bench_tools(steps)}
    specs = [t.spec() for t in tools.values()]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test in the standard library."}]
    while True:
        response = await model.respond(messages, specs)
        calls: list[dict[str, Any]] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
        ]
        messages.append({"role": "assistant", "content": response.text, "tool_calls": calls})
        if not calls:
            return model
        for call in calls:
            ctx = ToolContext(idempotency_key=call["id"], agent_id="plain", call_id=call["id"], attempt=1)
            result = await tools[call["name"]].fn(**call["arguments"], ctx=ctx)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


Entry = tuple[str, dict[str, Any]]
#: The limits with encoding: system -> (redaction policy, committed to memory:// or not).
LIMITS = {
    "limit-encoded-memory": (DEFAULT_REDACTION, True),
    "encode-only": (DEFAULT_REDACTION, False),
    "encode-no-redaction": (None, False),
}


def step_groups(steps: list[Step], namespace: str, agent_id: str) -> list[tuple[int, list[Entry]]]:
    """The records the journal appends for ``steps``, one group per step: ``(first seq, entries)``
    (``started`` goes with the first step)."""
    entries = journal_entries(steps, namespace, agent_id)
    groups = [(2 + 3 * i, entries[1 + 3 * i : 4 + 3 * i]) for i in range(len(steps))]
    return [(1, [entries[0], *groups[0][1]]), *groups[1:]] if groups else [(1, entries[:1])]


async def encoded_limit(url: str, namespace: str, steps: list[Step], system: str) -> float:
    """Process CPU seconds to encode (and, for the committed system, group-commit on a fresh
    ``url`` store) every step of ``steps`` as the journal would, one step at a time."""
    redaction, committed = LIMITS[system]
    stream = StreamId(namespace, "agent-0")
    groups = step_groups(steps, namespace, stream.agent_id)
    encoder = StepEncoder(stream, "bench-agent-0", redaction=redaction)
    async with open_store(url) as store:
        committer = GroupCommitter(store, tracer=None)
        cpu = time.process_time()
        for first, group in groups:
            frames = encoder.frames(group, first)
            if committed:
                await committer.append(stream, first - 1, frames)
        return time.process_time() - cpu


async def run(bench: Bench) -> None:
    """Per-step time of the plain loop, durably on memory:// and durably on the store."""
    steps = bench.conversation(bench.sizes.overhead_steps)
    r = bench.results
    task = bench.progress.start("overhead", 3 * len(steps))
    stores = {"durably-memory": f"memory://bench-{bench.run_id}-overhead", "durably": bench.store}
    warm_up = steps[:WARM_UP_STEPS]
    await plain_loop(warm_up)
    for system, url in stores.items():
        async with open_store(url) as store:
            await run_agents(store, bench.namespace(SUITE, system, "warm-up"), [warm_up])
    t, cpu = time.perf_counter(), time.process_time()
    model = await plain_loop(steps)
    wall = time.perf_counter() - t
    cpus = {"plain-loop": time.process_time() - cpu}
    bench.progress.advance(task, len(steps))
    variants = {"plain-loop": (model.step_latencies(), wall, "none (a list in memory)")}
    for system, url in stores.items():
        async with open_store(url) as store:
            cpu = time.process_time()
            run_ = await run_agents(
                store, bench.namespace(SUITE, system), [steps], on_step=lambda: bench.progress.advance(task)
            )
            cpus[system] = time.process_time() - cpu
        variants[system] = (run_.latencies[0], run_.wall_s, url)
    for system, (latencies, wall, url) in variants.items():
        params = {"steps": len(steps)}
        r.add(SUITE, "step_mean", wall / len(steps) * 1e3, "ms", system=system, store=url, **params)
        r.add(SUITE, "step_p50", percentile(latencies, 50) * 1e3, "ms", system=system, store=url, **params)
        # CPU time of the whole process (every thread) per step: what load on the machine does not inflate.
        r.add(SUITE, "cpu_per_step", cpus[system] / len(steps) * 1e3, "ms", system=system, store=url, **params)
    counted = steps[:COUNTED_STEPS]
    for system, url in stores.items():
        async with open_store(url) as store:
            with counting_callbacks() as count:
                await run_agents(store, bench.namespace(SUITE, system, "counted"), [counted])
        # Starting and finishing the agent are spread over its steps: a short run reads a little high.
        r.add(SUITE, "loop_callbacks_per_step", count.total / len(counted), "callbacks", system=system, store=url)
    plain = r.find(SUITE, "step_mean", "plain-loop")
    for system in stores:
        durably = r.find(SUITE, "step_mean", system)
        if durably is None or plain is None:
            continue  # a system that did not run
        r.add(
            SUITE,
            "overhead_per_step",
            durably.value - plain.value,
            "ms",
            system=system,
            store=durably.store,
            steps=len(steps),
        )
    await _limit_figures(bench, steps, steps[:WARM_UP_STEPS])


async def _limit_figures(bench: Bench, steps: list[Step], warm_up: list[Step]) -> None:
    """CPU per step of every limit with encoding, and durably's on memory:// against the committed one."""
    r = bench.results
    memory = f"memory://bench-{bench.run_id}-overhead-limit"
    for system in LIMITS:
        await encoded_limit(memory, bench.namespace(SUITE, system, "warm-up"), warm_up, system)
        cpu = await encoded_limit(memory, bench.namespace(SUITE, system), steps, system)
        r.add(SUITE, "cpu_per_step", cpu / len(steps) * 1e3, "ms", system=system, store=memory, steps=len(steps))
    own = r.find(SUITE, "cpu_per_step", "durably-memory")
    limit = r.find(SUITE, "cpu_per_step", "limit-encoded-memory")
    if own is not None and limit is not None:
        # What no encoding change can take away: the runtime's own CPU per step.
        r.add(
            SUITE,
            "runtime_own_cpu_per_step",
            own.value - limit.value,
            "ms",
            system="durably-memory",
            store=own.store,
            steps=len(steps),
        )
        r.ratio(SUITE, "cpu_per_step durably-memory/limit-encoded-memory", own, limit, better="lower")
