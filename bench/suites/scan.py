"""scan: what finding the runnable agents costs when most agents are long finished.

Always on a scratch SQLite file (the targets name one SQLite store). The
finished agents are seeded straight through the SPI, not through full runs:
each gets the three records a one-turn agent leaves (``started``,
``model_responded``, ``finished``), encoded with the runtime's codec, and the
status index entry the runtime would commit with them (``entry_after``), in
group commits of 500 agents. Seeded the same way: ``RUNNABLE`` agents whose
journal ends in a tool intent (a crash mid-tool, policy ``retry``) and
``RUNNABLE`` waiting for an approval. Figures:

* ``resume_all``: ``Runtime.resume_all()`` on a fresh runtime (lease,
  restore and ``resumed`` append of each runnable agent included; their
  model then blocks, so nothing else runs), median of ``ROUNDS``, beside
  ``resume_floor``: two sequential fsynced commits on the same file (a
  resume's lease, then its ``resumed`` record; the leases and records of
  the ten share those commits);
  ``resume_all_idle``: the same with nothing runnable (the pure scan);
* ``agents_status_cli``: wall time of the ``durably agents --status
  waiting_approval --json`` process (interpreter start and imports
  included, from bytecode as the imports suite: one unmeasured run first
  may write it), median of 3, and ``agents_status``: ``describe_all(statuses=...)``
  in process;
* ``status_p95`` / ``status_p50``: ``Runtime.status()`` of random agents
  among 50 running concurrently in the process (scripted model, instant
  tools; live agents answer from their actor, finished ones are restored
  on the reader connection), ``thread_hop_p95`` (a bare thread hop timed
  between them: the loaded loop's own delay, the floor), and ``approve_p50``
  for agents parked meanwhile;
* ``idle_serve_cpu``: process CPU (every thread) over wall time of
  ``serve(poll_interval=1.0)`` with 1,000 finished agents and nothing
  runnable, in % of one core, in a fresh child process (the bench's own
  holds what earlier suites left running), and ``idle_serve_lease_calls``: lease
  transactions it made meanwhile (each is an fsynced write).
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._journal.records import RecordCodec
from durably._journal.status_index import entry_after
from durably._loop.state import AgentState
from durably.schemas._records import Kind, Record
from durably.storage._registry import open_store
from durably.storage._spi import AppendRequest, Lease, LeaseStore, StreamId

from ..context import Bench
from ..results import percentile
from .imports import bytecode_env

SUITE = "scan"
RUNNABLE = 10
ROUNDS = 5
_GROUP = 500  # agents per seeding group commit
_IDLE_AGENTS = 1_000
_IDLE_SECONDS = 10.0
_CONCURRENT = 50


class _Blocked:
    """A model that never answers: resumed agents wait in their first call."""

    name = "blocked"

    def __init__(self) -> None:
        self.never = anyio.Event()

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        await self.never.wait()
        raise AssertionError("unreachable")


def _definition(model: Any, name: str = "scan-agent") -> AgentDefinition:
    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int, *, ctx: Any) -> int:
        return n

    return AgentDefinition(name=name, model=model, tools=[effect])


def _journal(agent_id: str, namespace: str, definition: AgentDefinition, kind: str) -> list[Record]:
    started = {
        "namespace": namespace,
        "agent_id": agent_id,
        "run_id": uuid.uuid4().hex,
        "task": "seeded",
        "definition": {"name": definition.name, "version": definition.version, "digest": definition.digest()},
        "instructions": "",
        "budget": definition.budget.to_wire(),
        "worker": "bench",
    }
    call = {"id": "c1", "name": "effect", "arguments": {"n": 1}, "key": f"{agent_id}:c1"}
    usage = {"input_tokens": 10, "output_tokens": 10, "cost_usd": 0.0}
    at = time.time()
    records = [Record(1, Kind.STARTED, started, at)]
    if kind == "finished":
        records += [
            Record(2, Kind.MODEL_RESPONDED, {"text": "done", "tool_calls": [], "usage": usage}, at),
            Record(3, Kind.FINISHED, {"result": "done"}, at),
        ]
    elif kind == "runnable":
        records += [
            Record(2, Kind.MODEL_RESPONDED, {"text": "step", "tool_calls": [call], "usage": usage}, at),
            Record(3, Kind.TOOL_INTENT, {"key": call["key"], "call_id": "c1", "tool": "effect", "attempt": 1}, at),
        ]
    else:  # waiting for an approval of its call
        records += [
            Record(2, Kind.MODEL_RESPONDED, {"text": "step", "tool_calls": [call], "usage": usage}, at),
            Record(
                3,
                Kind.APPROVAL_REQUESTED,
                {
                    "approval_id": "ap-1",
                    "key": call["key"],
                    "call_id": "c1",
                    "tool": "effect",
                    "arguments": {"n": 1},
                    "reason": "asks",
                },
                at,
            ),
        ]
    return records


async def seed(
    url: str,
    namespace: str,
    definition: AgentDefinition,
    counts: dict[str, int],
    progress: Callable[[int], object] | None = None,
) -> None:
    """Write ``counts`` agents of each kind (finished, runnable, waiting) into ``namespace`` through the SPI."""
    codec = RecordCodec()
    plan = [(kind, i) for kind, n in counts.items() for i in range(n)]
    async with open_store(url) as store:
        for start in range(0, len(plan), _GROUP):
            requests = []
            for kind, i in plan[start : start + _GROUP]:
                stream = StreamId(namespace, f"{kind}-{i:06d}")
                records = _journal(stream.agent_id, namespace, definition, kind)
                index = entry_after(AgentState(), records)
                requests.append(AppendRequest(stream, 0, [codec.encode_record(r, stream) for r in records], index))
            await store.append_batch(requests)
            if progress is not None:
                progress(len(requests))


async def _resume_all_rounds(url: str, namespace: str, expected: int) -> list[float]:
    times = []
    for _ in range(ROUNDS):
        model = _Blocked()
        async with Runtime(url, agents=[_definition(model)], namespace=namespace, lease_ttl=30.0) as rt:
            t = time.perf_counter()
            handles = await rt.resume_all()
            times.append(time.perf_counter() - t)
            if len(handles) != expected:
                raise RuntimeError(f"resume_all resumed {len(handles)} agents, expected {expected}")
    return times


def _commit_floor(path: Path, commits: int = 2, rounds: int = ROUNDS) -> float:
    """Median seconds of ``commits`` sequential fsynced SQLite commits on ``path`` (WAL,
    synchronous=FULL, as the store): the floor of a resume, which must make its lease and
    its ``resumed`` record durable, one after the other. Blocking: run it in a thread."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE IF NOT EXISTS bench_floor (n INTEGER)")
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(commits):
                db.execute("INSERT INTO bench_floor VALUES (1)")
            times.append(time.perf_counter() - t)
        db.execute("DROP TABLE bench_floor")
    finally:
        db.close()
    return statistics.median(times)


def _cli_times(url: str, namespace: str) -> tuple[list[float], int]:
    durably = Path(sys.executable).parent / "durably"
    command = [
        str(durably),
        "agents",
        "--store",
        url,
        "--namespace",
        namespace,
        "--status",
        "waiting_approval",
        "--json",
    ]
    subprocess.run(command, capture_output=True, timeout=300, env=bytecode_env())  # durably's bytecode, untimed
    times, found = [], 0
    for _ in range(3):
        t = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - t)
        if done.returncode != 0:
            raise RuntimeError(f"durably agents failed: {done.stderr[-500:]}")
        found = done.stdout.count('"agent_id"')
    return times, found


class _StepModel:
    """``steps`` tool calls then an answer; every ``ask_every``-th agent asks for approval instead."""

    name = "bench-step"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        await anyio.sleep(0.002)  # a model call's wait, so agents interleave
        done = sum(1 for m in messages if m["role"] == "tool")
        usage = Usage(10, 10, 0.0)
        if done < self.steps:
            return ModelResponse(f"step {done}", (ToolCall(f"c{done}", "effect", {"n": done}),), usage)
        return ModelResponse("done", (), usage)


def _nothing() -> None:
    return None


async def _status_latency(url: str, steps: int) -> tuple[list[float], list[float], list[float]]:
    """status() latencies of random agents while ``_CONCURRENT`` agents run, the latencies of a
    bare thread hop measured between them (the loop's own delay: a floor), approve() latencies."""
    definition = _definition(_StepModel(steps))
    asking = AgentDefinition(
        name="asking", model=_StepModel(1), tools=[tool(name="effect", requires_approval=True)(_approved_effect)]
    )
    ids = [f"busy-{i}" for i in range(_CONCURRENT)]
    statuses: list[float] = []
    hops: list[float] = []
    approvals: list[float] = []
    async with Runtime(url, agents=[definition, asking], namespace="status") as rt:
        handles = [await rt.start(definition, agent_id, "task") for agent_id in ids]
        for i in range(5):
            await rt.start(asking, f"asks-{i}", "task")

        async def poll() -> None:
            rng = random.Random(7)
            while not all(h._actor.done.is_set() for h in handles):
                t = time.perf_counter()
                await rt.status(rng.choice(ids))
                statuses.append(time.perf_counter() - t)
                t = time.perf_counter()
                await anyio.to_thread.run_sync(_nothing)  # the floor: one thread hop, same loop, same moment
                hops.append(time.perf_counter() - t)
                await anyio.sleep(0.005)

        async def approve() -> None:
            for i in range(5):
                agent_id = f"asks-{i}"
                while not (state := await rt.status(agent_id)).open_approvals():
                    await anyio.sleep(0.01)
                t = time.perf_counter()
                await rt.approve(agent_id, state.open_approvals()[0]["approval_id"])
                approvals.append(time.perf_counter() - t)

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            tg.start_soon(approve)
        for handle in handles:
            await handle.wait()
    return statuses, hops, approvals


async def _approved_effect(n: int, *, ctx: Any) -> int:
    return n


async def _idle_serve_in_child(url: str, namespace: str) -> tuple[float, int]:
    """``_idle_serve`` in a fresh interpreter: process CPU time counts every thread, and the
    bench's own process holds those earlier suites left (DBOS's and LangGraph's threads,
    gigabytes of heap for the collector, the progress display): measured there, an idle
    serve() cost 1.46% of a core in a ``--full`` run against 0.12% alone."""
    code = (
        "import anyio, json, sys\nfrom durably.bench.suites.scan import _idle_serve\n"
        "print(json.dumps(anyio.run(_idle_serve, sys.argv[1], sys.argv[2])))"
    )
    done = await anyio.run_process([sys.executable, "-c", code, url, namespace], check=True)
    cpu, calls = json.loads(done.stdout.decode().splitlines()[-1])
    return float(cpu), int(calls)


async def _idle_serve(url: str, namespace: str) -> tuple[float, int]:
    """(% of one core, lease calls) of ``serve()`` over ``_IDLE_SECONDS`` with nothing runnable."""
    async with Runtime(url, agents=[_definition(_Blocked())], namespace=namespace) as rt:
        calls = 0
        store = cast(LeaseStore, rt.store)
        acquire = store.acquire_lease

        async def counted(stream: StreamId, owner: str, ttl: float) -> Lease | None:
            nonlocal calls
            calls += 1
            return await acquire(stream, owner, ttl)

        store.acquire_lease = counted  # type: ignore[method-assign]  # counting the lease transactions
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.serve(1.0, drain_signals=()))
            await anyio.sleep(1.5)  # the first scans (startup) are not the idle cost
            cpu, wall = time.process_time(), time.perf_counter()
            calls = 0
            await anyio.sleep(_IDLE_SECONDS)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            tg.cancel_scope.cancel()
    return 100.0 * cpu / wall, calls


async def run(bench: Bench) -> None:
    """Seed, then measure each figure of the module docstring."""
    r = bench.results
    finished = bench.sizes.scan_agents
    path = bench.scratch / f"scan-{bench.run_id}.db"
    url = f"sqlite:///{path}"
    definition = _definition(_Blocked())
    task = bench.progress.start(f"scan: seed {finished:,} agents", finished + 2 * RUNNABLE + _IDLE_AGENTS)
    await seed(
        url,
        "scan",
        definition,
        {"finished": finished, "runnable": RUNNABLE, "waiting": RUNNABLE},
        lambda n: bench.progress.advance(task, n),
    )
    await seed(url, "idle", definition, {"finished": _IDLE_AGENTS}, lambda n: bench.progress.advance(task, n))
    params: dict[str, Any] = {"agents": finished, "runnable": RUNNABLE}
    times = await _resume_all_rounds(url, "scan", RUNNABLE)
    resumed = r.add(SUITE, "resume_all", statistics.median(times) * 1e3, "ms", **params)
    floor = r.add(SUITE, "resume_floor", await anyio.to_thread.run_sync(_commit_floor, path) * 1e3, "ms", commits=2)
    r.ratio(SUITE, "resume_all / two fsynced commits", resumed, floor, better="lower")
    idle = await _resume_all_rounds(url, "idle", 0)
    r.add(SUITE, "resume_all_idle", statistics.median(idle) * 1e3, "ms", agents=_IDLE_AGENTS, runnable=0)
    async with Runtime(url, namespace="scan") as rt:
        t = time.perf_counter()
        described = await rt.describe_all(statuses=["waiting_approval"])
        r.add(SUITE, "agents_status", (time.perf_counter() - t) * 1e3, "ms", found=len(described), **params)
    cli, found = await anyio.to_thread.run_sync(_cli_times, url, "scan")
    r.add(SUITE, "agents_status_cli", statistics.median(cli) * 1e3, "ms", found=found, **params)
    statuses, hops, approvals = await _status_latency(url, steps=20)
    r.add(SUITE, "status_p50", percentile(statuses, 50) * 1e3, "ms", agents=_CONCURRENT, calls=len(statuses))
    status_p95 = r.add(
        SUITE, "status_p95", percentile(statuses, 95) * 1e3, "ms", agents=_CONCURRENT, calls=len(statuses)
    )
    hop_p95 = r.add(SUITE, "thread_hop_p95", percentile(hops, 95) * 1e3, "ms", agents=_CONCURRENT, calls=len(hops))
    r.ratio(SUITE, "status_p95 / thread_hop_p95", status_p95, hop_p95, better="lower")
    r.add(SUITE, "approve_p50", percentile(approvals, 50) * 1e3, "ms", agents=_CONCURRENT)
    cpu, calls = await _idle_serve_in_child(url, "idle")
    r.add(SUITE, "idle_serve_cpu", cpu, "%", agents=_IDLE_AGENTS, poll_interval=1.0)
    r.add(SUITE, "idle_serve_lease_calls", calls, "calls", agents=_IDLE_AGENTS, seconds=_IDLE_SECONDS)
