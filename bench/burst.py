"""The burst and takeover measurements: many parked agents approved at once, and a killed worker's agents.

A burst, as an operator's morning looks: ``agents`` agents (the many suite's
``bench-parked`` definition: one approval-gated ``deploy`` call, then a final
answer) are parked at their approval by a runtime in this process, which then
leaves; ``workers`` worker processes (``durably worker``, the command a
deployment runs) serve the namespace; an operator runtime without the
definition approves every agent, all at once (``APPROVING`` at a time, so the
decisions share group commits). The times come from the journals afterwards,
not from polling: each agent's ``approval_decided`` record, its first
``resumed`` record after it and its ``finished`` record carry their own
timestamps (one clock: every process runs on this machine).

A takeover: ``agents`` agents held by worker A inside a tool that never
returns; worker B serves beside it; A is SIGKILLed. The time from the kill to
each agent's ``resumed`` record by B is the takeover latency (B notices A's
heartbeat stop after ``heartbeat_timeout`` seconds, or A's leases lapse).

Every worker's stderr goes to a file in the scratch folder; a worker that
exits early fails the measurement with its last lines.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.status_index import index_store
from durably.schemas._records import Kind
from durably.storage._registry import open_store
from durably.storage._spi import Store, StreamId

from .many_worker import parked_definition
from .results import percentile

#: Approvals in flight at once: enough to fill group commits, as an operator's script would.
APPROVING = 64
#: Agents being parked at once.
PARKING = 200
#: Longest a burst or a takeover may take before the measurement gives up, seconds.
DEADLINE = 300.0
#: How often the index is read while waiting for the agents, seconds.
LOOK_EVERY = 0.1
#: A worker's start (interpreter, imports, store) may take this long on a loaded machine, seconds.
WORKER_START = 120.0


@dataclass
class Burst:
    """The figures of one burst, seconds from the first approval sent.

    ``approved``: the last approval acknowledged; ``resumed``/``finished``: the
    last agent's ``resumed``/``finished`` record; ``lag``: each agent's time from
    its decision to its ``resumed`` record; ``by_worker``: resumes per worker id;
    ``cpu``: CPU seconds the worker processes used from the first approval to the
    last finish, and ``cpu_wait``: seconds their threads were runnable but waiting
    for a CPU meanwhile (both summed over workers; None where ``/proc`` does not
    tell): what bounds a burst on a loaded machine.
    """

    agents: int
    workers: int
    approved: float
    resumed: float
    finished: float
    lag: list[float]
    by_worker: dict[str, int] = field(default_factory=dict)
    cpu: float | None = None
    cpu_wait: float | None = None

    @property
    def lag_p50(self) -> float:
        """Median decision-to-resume time, seconds."""
        return statistics.median(self.lag)

    @property
    def lag_p95(self) -> float:
        """95th percentile decision-to-resume time, seconds."""
        return percentile(self.lag, 95)


@dataclass
class Takeover:
    """A takeover of ``agents`` agents: each one's seconds from the SIGKILL to its ``resumed`` record by the survivor."""

    agents: int
    heartbeat_timeout: float
    lag: list[float]


def held_definition() -> AgentDefinition:
    """An agent that calls ``hold``, a tool that never returns: it stays live in its worker until killed."""

    class Holds:
        name = "bench-holds"

        async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
            return ModelResponse("Holding.", (ToolCall("hold-1", "hold", {}),), Usage(10, 2, 0.0), model=self.name)

    @tool(on_unknown_outcome="retry")
    async def hold(*, ctx: object) -> str:
        """Wait until the process ends."""
        await anyio.sleep_forever()
        return "never"  # pragma: no cover

    return AgentDefinition(name="bench-held", model=Holds(), tools=[hold], instructions="You hold.")


@asynccontextmanager
async def workers(
    url: str,
    namespace: str,
    agents_spec: str,
    count: int,
    logs: Path,
    *,
    poll_interval: float,
    heartbeat_timeout: float | None = None,
) -> AsyncIterator[list[Process]]:
    """``count`` ``durably worker`` processes serving ``namespace``, each started and serving on entry.

    Drained by SIGTERM on exit (killed when they do not exit within their drain).
    Raises ``RuntimeError`` when one exits before it serves.
    """
    procs: list[Process] = []
    try:
        for n in range(count):
            procs.append(
                await start_worker(
                    url, namespace, agents_spec, logs / f"worker-{n}.log", poll_interval, n, heartbeat_timeout
                )
            )
        yield procs
    finally:
        with anyio.CancelScope(shield=True):
            for proc in procs:
                await stop(proc)


async def start_worker(
    url: str,
    namespace: str,
    agents_spec: str,
    log: Path,
    poll_interval: float,
    n: int,
    heartbeat_timeout: float | None = None,
) -> Process:
    """One ``durably worker`` process, returned once it says it serves (stderr to ``log``)."""
    argv = [
        sys.executable,
        "-m",
        "durably",
        "worker",
        "--agents",
        agents_spec,
        "--store",
        url,
        "--namespace",
        namespace,
        "--worker-id",
        f"bench-{n}",
        "--poll-interval",
        str(poll_interval),
        "--drain-timeout",
        "1",
    ]
    if heartbeat_timeout is not None:
        argv += ["--heartbeat-timeout", str(heartbeat_timeout)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as err:
        proc = await anyio.open_process(argv, stdout=subprocess.PIPE, stderr=err, env=env)
    assert proc.stdout is not None
    seen = b""
    with anyio.move_on_after(WORKER_START):
        async for chunk in proc.stdout:
            seen += chunk
            if b"serving namespace" in seen:
                return proc
    await stop(proc)
    tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
    raise RuntimeError(f"worker {n} did not start serving: {seen.decode(errors='replace')}\n{tail}")


async def stop(proc: Process) -> None:
    """Drain a worker (SIGTERM), kill it if it has not exited a few seconds later."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(15):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await proc.aclose()


def cpu_use(procs: Sequence[Process]) -> tuple[float, float] | None:
    """CPU seconds the live ``procs`` used so far (user + system, every thread) and seconds
    their threads spent runnable but waiting for a CPU (Linux ``/proc/<pid>/stat`` and
    ``schedstat``); None where ``/proc`` does not tell (another OS, a process gone)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = waited = 0.0
    try:
        for proc in procs:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            used += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
            for task in Path(f"/proc/{proc.pid}/task").iterdir():
                waited += int((task / "schedstat").read_text().split()[1]) / 1e9  # run-queue ns
    except (OSError, IndexError, ValueError):
        return None
    return used, waited


async def park(url: str, namespace: str, definition: AgentDefinition, agents: int) -> dict[str, str]:
    """Start ``agents`` agents of ``definition`` and let each park at its approval; agent id -> approval id."""
    approvals: dict[str, str] = {}
    limiter = anyio.CapacityLimiter(PARKING)
    async with open_store(url) as store, Runtime(store, namespace=namespace, agents=[definition]) as rt:

        async def one(i: int) -> None:
            agent_id = f"agent-{i:05d}"
            async with limiter:
                state = await (await rt.start(definition, agent_id, "Deploy 1.2.")).wait()
            (request,) = state.open_approvals()
            approvals[agent_id] = request["approval_id"]

        async with anyio.create_task_group() as tg:
            for i in range(agents):
                tg.start_soon(one, i)
    return approvals


async def approve_all(rt: Runtime, approvals: dict[str, str]) -> None:
    """Approve every agent's approval, ``APPROVING`` at a time."""
    limiter = anyio.CapacityLimiter(APPROVING)

    async def one(agent_id: str, approval_id: str) -> None:
        async with limiter:
            await rt.approve(agent_id, approval_id, by="bench")

    async with anyio.create_task_group() as tg:
        for agent_id, approval_id in approvals.items():
            tg.start_soon(one, agent_id, approval_id)


async def wait_for(store: Store, namespace: str, agents: int, status: str, procs: Sequence[Process]) -> None:
    """Until the status index says ``agents`` agents of ``namespace`` have ``status``.

    Raises ``RuntimeError`` when a worker exits meanwhile, ``TimeoutError`` after ``DEADLINE`` seconds.
    """
    index = index_store(store)
    if index is None:
        raise RuntimeError("the burst needs a store with a status index (sqlite, postgresql)")
    with anyio.fail_after(DEADLINE):
        while True:
            done = 0
            async for row in index.list_index(namespace, None):
                done += row.entry is not None and row.entry.status == status
            if done >= agents:
                return
            for proc in procs:
                if proc.returncode is not None:
                    raise RuntimeError(f"a worker exited ({proc.returncode}) during the burst")
            await anyio.sleep(LOOK_EVERY)


async def records_of(store: Store, stream: StreamId) -> list[tuple[str, float, dict[str, Any]]]:
    """``(kind, at, data)`` of every record of ``stream``."""
    return [(r.kind, r.at, r.data) async for r in JournalReader(store, RecordCodec(), stream).records()]


async def burst(url: str, namespace: str, agents: int, count: int, logs: Path, *, poll_interval: float) -> Burst:
    """Park ``agents`` agents, serve them with ``count`` workers, approve them all; the figures."""
    approvals = await park(url, namespace, parked_definition(), agents)
    async with (
        workers(
            url, namespace, "durably.bench.many_worker:parked_definition", count, logs, poll_interval=poll_interval
        ) as procs,
        open_store(url) as store,
        Runtime(store, namespace=namespace) as operator,
    ):
        before = cpu_use(procs)
        start = time.time()
        await approve_all(operator, approvals)
        approved = time.time() - start
        await wait_for(store, namespace, agents, "finished", procs)
        after = cpu_use(procs)
        lag, last_resumed, last_finished, by_worker = [], 0.0, 0.0, dict[str, int]()
        for agent_id in approvals:
            decided = resumed = finished = None
            for kind, at, data in await records_of(store, StreamId(namespace, agent_id)):
                if kind == Kind.APPROVAL_DECIDED:
                    decided = at
                elif kind == Kind.RESUMED and decided is not None and resumed is None:
                    resumed = at
                    by_worker[data.get("worker", "?")] = by_worker.get(data.get("worker", "?"), 0) + 1
                elif kind == Kind.FINISHED:
                    finished = at
            if decided is None or resumed is None or finished is None:
                raise RuntimeError(f"agent {agent_id} has no decision, resume or finish in its journal")
            lag.append(resumed - decided)
            last_resumed, last_finished = max(last_resumed, resumed - start), max(last_finished, finished - start)
    cpu = cpu_wait = None
    if before is not None and after is not None:
        cpu, cpu_wait = after[0] - before[0], after[1] - before[1]
    return Burst(agents, count, approved, last_resumed, last_finished, lag, by_worker, cpu, cpu_wait)


async def takeover(
    url: str, namespace: str, agents: int, logs: Path, *, poll_interval: float, heartbeat_timeout: float
) -> Takeover:
    """Worker A holds ``agents`` agents inside a tool; worker B serves beside it; A is SIGKILLed: B's takeover times."""
    spec = "durably.bench.burst:held_definition"
    definition = held_definition()
    async with open_store(url) as store:
        async with Runtime(store, namespace=namespace, agents=[definition]) as rt:
            for i in range(agents):
                await rt.submit(definition, f"held-{i:05d}", "Hold.")
        first = await start_worker(url, namespace, spec, logs / "holder.log", poll_interval, 0, heartbeat_timeout)
        try:
            await _wait_held(store, namespace, agents, "bench-0", first)
            async with workers(
                url, namespace, spec, 1, logs, poll_interval=poll_interval, heartbeat_timeout=heartbeat_timeout
            ):
                await anyio.sleep(max(poll_interval, 0.5) * 2)  # B scans and sees every agent held
                first.kill()
                killed = time.time()
                await first.wait()
                with anyio.fail_after(DEADLINE):
                    lag = await _taken(store, namespace, agents, killed)
        finally:
            with anyio.CancelScope(shield=True):
                await stop(first)
    return Takeover(agents, heartbeat_timeout, lag)


async def _wait_held(store: Store, namespace: str, agents: int, worker: str, proc: Process) -> None:
    """Until each agent's journal shows ``worker``'s activation and its ``hold`` call's intent."""
    with anyio.fail_after(DEADLINE):
        for i in range(agents):
            stream = StreamId(namespace, f"held-{i:05d}")
            while not any(kind == Kind.TOOL_INTENT for kind, _, _ in await records_of(store, stream)):
                if proc.returncode is not None:
                    raise RuntimeError(f"the holding worker exited ({proc.returncode})")
                await anyio.sleep(LOOK_EVERY)


async def _taken(store: Store, namespace: str, agents: int, killed: float) -> list[float]:
    """Each agent's seconds from ``killed`` to its first ``resumed`` record after it, once every one has one."""
    lag: dict[int, float] = {}
    while len(lag) < agents:
        for i in range(agents):
            if i in lag:
                continue
            for kind, at, _ in await records_of(store, StreamId(namespace, f"held-{i:05d}")):
                if kind == Kind.RESUMED and at > killed:
                    lag[i] = at - killed
                    break
        if len(lag) < agents:
            await anyio.sleep(LOOK_EVERY)
    return list(lag.values())
