"""The torture harness: real workers SIGKILLed at random moments and at every journal boundary, restarted.

``run_torture(store_url, kills=N, workers=K)`` runs generations of agents
(half with a ``reconcile`` tool, half with a ``fail`` one) in K worker
processes on the store. Each worker incarnation gets a crash plan, cycling
through the journal boundaries (before an append, after its acknowledgement,
before and after a snapshot, before compaction, before and after a tool's
effect, at a random occurrence) and random moments (killed by the harness after
a random delay); when it dies, a new incarnation takes its place, and with K > 1
the others take its agents over (through the store's leases: a dead holder's
at once; on a store without leases the harness hands a dead worker's agents
to another worker, as an operator would, since nothing else could tell that a
worker is dead rather than slow). Once N workers died, a last worker
that is never killed must finish every agent in time (nothing stuck), and the
judge (``invariants``) reads the ledgers and the store. Jepsen's approach
(Kingsbury) with ALICE's boundary crashes (Pillai et al., OSDI 2014), on the
public API only.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from durably._runtime import Runtime
from durably._torture.agents import NAMESPACE, POLICIES
from durably._torture.invariants import check_acknowledged, check_effects, check_states, count_takeovers
from durably._torture.worker import process_main
from durably.errors import AgentNotFoundError, InvalidArgumentError, TortureError
from durably.storage._registry import open_store
from durably.storage._spi import CAP_SINGLE_PROCESS, Store, supports_leases
from durably.storage._torture import Ledger
from durably.storage._url_redaction import redact_url

#: Crash plans: a boundary and the highest occurrence it may be chosen at; None is a random moment.
#: Low occurrences on purpose: a worker dies soon after it starts, so most of a run's time is
#: restarts, restores and takeovers, the paths that crashes exercise.
BOUNDARIES: list[tuple[str | None, int]] = [
    ("before_append", 6),
    ("after_ack", 6),
    ("before_effect", 3),
    ("after_effect", 3),
    ("before_snapshot", 2),
    ("after_snapshot", 2),
    ("before_compact", 1),
    (None, 0),
]
#: Seconds a random-moment kill waits after the worker starts: up to this.
RANDOM_KILL_WINDOW = 1.0
#: Seconds a never-killed worker may take to finish its agents: a base, plus an allowance per agent,
#: because the final worker restores every agent of the run (about a thousand after 2,000 kills),
#: and on a remote store a restore is several round trips. A fixed budget made a long S3 run look stuck.
FINISH_TIMEOUT = 120.0
FINISH_SECONDS_PER_AGENT = 0.5


def finish_timeout(agents: int) -> float:
    """Seconds a worker running ``agents`` agents (int >= 0) may take before it counts as stuck."""
    return FINISH_TIMEOUT + FINISH_SECONDS_PER_AGENT * agents


#: Worker processes are forked from a server process that imported the worker and the adapters once,
#: and read botocore's models (``preload``).
WORKER_CONTEXT = multiprocessing.get_context("forkserver")
WORKER_CONTEXT.set_forkserver_preload(["durably._torture.preload"])


async def exited(process: multiprocessing.process.BaseProcess) -> None:
    """Wait, without blocking the event loop, until ``process`` has exited (and is reaped)."""
    while process.exitcode is None:
        await anyio.sleep(0.01)


@dataclass
class TortureReport:
    """What a run did and found. ``violations`` empty: every invariant held.

    ``store`` is the URL as shown (``redact_url``: no password)."""

    store: str
    kills: int = 0
    workers: int = 1
    agents: int = 0
    generations: int = 0
    effects: int = 0
    acknowledged: int = 0
    takeovers: int = 0
    boundaries: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One paragraph for a terminal."""
        kinds = ", ".join(f"{name} {count}" for name, count in sorted(self.boundaries.items()))
        verdict = "0 violations" if not self.violations else f"{len(self.violations)} VIOLATIONS"
        return (
            f"torture of {self.store}: {self.kills} SIGKILLs ({kinds}) of {self.workers} worker(s), "
            f"{self.agents} agents in {self.generations} generations, {self.effects} effects, "
            f"{self.acknowledged} acknowledged appends checked, {self.takeovers} takeovers, "
            f"{self.seconds:.0f} s: {verdict}"
        )


@dataclass
class _Run:
    store: str
    ledger: Path
    workers: int
    steps: int
    lease_ttl: float
    rng: random.Random
    report: TortureReport
    store_class: list[str] | None = None
    #: With leases every worker runs every agent and the store's leases decide who does; without
    #: them, each agent is given to one worker slot at a time (``owner``), and a dead worker's
    #: agents go to another slot: a takeover an operator would do, never two runners at once.
    leases: bool = True
    owner: dict[str, int] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    plan_index: int = 0

    def spec(self, worker: str, agents: dict[str, str], crash: bool) -> tuple[dict[str, Any], str]:
        spec: dict[str, Any] = {
            "store": self.store,
            "ledger": str(self.ledger),
            "worker": worker,
            "agents": agents,
            "steps": self.steps,
            "snapshot_every": 3,
            "compact": self.rng.random() < 0.5,
            "lease_ttl": self.lease_ttl,
            "store_class": self.store_class,
            "environ": dict(os.environ),
        }
        kind = "none"
        if crash:
            boundary, highest = BOUNDARIES[self.plan_index % len(BOUNDARIES)]
            self.plan_index += 1
            kind = boundary or "random_moment"
            if boundary is not None:
                spec.update(boundary=boundary, at=self.rng.randint(1, highest))
        return spec, kind

    async def incarnation(self, worker: str, agents: dict[str, str], crash: bool) -> bool:
        """One worker process; True if it was SIGKILLed (counted), False if it finished its agents."""
        spec, kind = self.spec(worker, agents, crash)
        error_path = self.ledger / f"error-{worker}.txt"
        # Forked from a server that imported durably once: a worker starts in milliseconds.
        process = WORKER_CONTEXT.Process(target=process_main, args=(spec, str(error_path)), daemon=True)
        process.start()
        try:
            budget = finish_timeout(len(agents))
            with anyio.fail_after(budget):
                if kind == "random_moment":
                    with anyio.move_on_after(self.rng.uniform(0.05, RANDOM_KILL_WINDOW)):
                        await exited(process)
                    if process.exitcode is None:
                        process.kill()
                await exited(process)
        except TimeoutError:
            raise TortureError(
                f"worker {worker} ({kind}) did not finish its {len(agents)} agents within {budget:.0f} s: stuck"
            ) from None
        finally:
            if process.exitcode is None:
                process.kill()
                await exited(process)
            code = process.exitcode  # negative: the signal that ended it
            process.close()
        if code == -signal.SIGKILL:
            self.report.kills += 1
            self.report.boundaries[kind] = self.report.boundaries.get(kind, 0) + 1
            return True
        if code != 0:
            errors = error_path.read_text() if error_path.exists() else "(no traceback)"
            raise TortureError(f"worker {worker} exited with {code}: {errors[-3000:]}")
        return False

    async def slot(self, slot: int, generation: dict[str, str], kills: int) -> None:
        """Worker slot ``slot``: incarnations until the generation's agents are all done."""
        incarnation = 0
        while True:
            agents = (
                generation
                if self.leases
                else {
                    agent: policy
                    for agent, policy in generation.items()
                    if agent not in self.done and self.owner.get(agent) == slot
                }
            )
            if not agents:
                if self.done >= set(generation):
                    return
                await anyio.sleep(0.05)  # this slot's agents were handed to another: wait for more, or the end
                continue
            incarnation += 1
            crash = self.report.kills < kills
            if await self.incarnation(f"w{slot}.{incarnation}", agents, crash):
                if not self.leases:
                    for agent in agents:  # the dead worker's agents go to the next slot
                        self.owner[agent] = (slot + 1) % self.workers
            elif self.leases:
                return
            else:
                self.done |= set(agents)


async def run_torture(
    store: str,
    *,
    kills: int = 200,
    workers: int = 1,
    agents: int = 4,
    steps: int = 5,
    seed: int | None = None,
    ledger: Path | None = None,
    lease_ttl: float = 10.0,
    store_class: type | None = None,
) -> TortureReport:
    """SIGKILL ``workers`` worker processes on ``store`` ``kills`` times in all, then judge the run.

    In: a store URL (not ``CAP_SINGLE_PROCESS``: workers are processes),
    ``kills`` >= 1, ``workers`` >= 1 (K > 1: takeovers between workers),
    ``agents`` per generation and ``steps`` per agent, a ``seed`` (None: random),
    a ``ledger`` directory (None: a temporary one), ``lease_ttl`` seconds (a
    dead worker's leases are taken at once; the ttl only bounds a live worker
    too slow to renew: keep it well above the machine's worst stall, since a
    takeover from a live worker mid-effect is the duplicate leases cannot stop),
    ``store_class`` (the adapter class the workers build as ``store_class(store)``,
    imported by module and name; None: ``open_store(store)``).
    Out: a ``TortureReport``; ``violations`` lists every broken invariant.
    Raises ``TortureError`` for a single-process store, a worker that exits
    otherwise than by finishing or SIGKILL (its stderr in the message), or a
    final worker that cannot finish in ``finish_timeout(agents)`` seconds (stuck agents);
    ``ValueError`` for counts below 1; the store's errors when it is unreachable.
    """
    if kills < 1 or workers < 1 or agents < 1 or steps < 1:
        raise InvalidArgumentError("kills, workers, agents and steps must each be at least 1")
    probe = store_class(store) if store_class is not None else open_store(store)
    if CAP_SINGLE_PROCESS in probe.capabilities:
        raise TortureError(
            f"{redact_url(store)} is a single-process store: torture needs worker processes sharing one store"
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="durably-torture-") as scratch:
        directory = Path(ledger) if ledger is not None else Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        report = TortureReport(store=redact_url(store), workers=workers)
        run = _Run(
            store,
            directory,
            workers,
            steps,
            lease_ttl,
            random.Random(seed),
            report,
            [store_class.__module__, store_class.__qualname__] if store_class is not None else None,
            leases=supports_leases(probe),
        )
        policies: dict[str, str] = {}
        run_id = f"{run.rng.getrandbits(32):08x}"
        while report.kills < kills:
            generation = {f"g{run_id}-{report.generations}-{n}": POLICIES[n % len(POLICIES)] for n in range(agents)}
            policies.update(generation)
            run.owner.update({agent: n % workers for n, agent in enumerate(generation)})
            report.generations += 1
            async with anyio.create_task_group() as group:
                for slot in range(workers):
                    group.start_soon(run.slot, slot, generation, kills)
        # Nothing stuck: a worker that is never killed finishes every agent of the run.
        await run.incarnation("final", policies, crash=False)
        report.agents = len(policies)
        await _judge(probe, directory, policies, steps, report)
    report.seconds = time.monotonic() - started
    return report


async def _judge(store: Store, directory: Path, policies: dict[str, str], steps: int, report: TortureReport) -> None:
    effects = Ledger(directory / "effects.jsonl").entries()
    acks = Ledger(directory / "acks.jsonl").entries()
    report.effects, report.acknowledged, report.takeovers = len(effects), len(acks), count_takeovers(acks)
    async with store:
        async with Runtime(store, namespace=NAMESPACE) as rt:
            states = {}
            for agent_id in policies:
                try:
                    states[agent_id] = await rt.status(agent_id)
                except AgentNotFoundError:
                    continue  # reported by check_states
        report.violations += check_states(states, policies, steps)
        report.violations += check_effects(effects, states, steps)
        report.violations += await check_acknowledged(store, NAMESPACE, acks)
