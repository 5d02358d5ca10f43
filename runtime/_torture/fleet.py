"""The fleet torture: K serving workers on one store, an operator approving, a chaos loop breaking things.

``run_fleet_torture(store_url, workers=K, agents=N)`` starts N agents (each
parks at once on an approval gate before its first side effect), then K >= 1
long-lived worker processes running ``Runtime.serve()`` on the store, an
operator (this process, through ``Runtime.approve``) approving every gate it
sees open, and a chaos loop that, until every agent finished, picks one of:
SIGKILL a worker (it is restarted), SIGSTOP one past the lease ttl and SIGCONT
it (its leases lapse and are taken over: it must be fenced and spend nothing),
SIGTERM one (it drains; it is restarted), and, with a ``restart_database``
callback, a database restart (``fast`` or ``immediate``). The judge
(``fleet_invariants``) then reads the external ledgers (acknowledged appends
with their fencing tokens, lease grants, effects, acknowledged approvals) and
the final states. Jepsen's approach (Kingsbury): real processes, faults from
outside, a verdict from what the clients were told.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from durably._journal.status_index import index_store
from durably._loop.state import FINISHED, TERMINAL, WAITING_APPROVAL, AgentState
from durably._runtime import Runtime
from durably._torture.fleet_agents import FLEET_NAMESPACE, fleet_definition, fleet_result
from durably._torture.fleet_invariants import check_activations, check_approvals, check_effects_once, check_finished
from durably._torture.fleet_worker import fleet_worker_main
from durably._torture.harness import WORKER_CONTEXT, exited
from durably.errors import DurablyError, InvalidArgumentError, TortureError
from durably.storage._errors import StoreUnavailableError
from durably.storage._registry import open_store
from durably.storage._spi import CAP_SINGLE_PROCESS, supports_leases
from durably.storage._torture import Ledger

#: The chaos loop's faults on any store; ``db-fast`` and ``db-immediate`` join them with ``restart_database``.
FAULTS = ("kill", "stop", "term")
#: Seconds at least between two database restarts: a restart on a loaded machine takes seconds itself.
DB_RESTART_GAP = 15.0
#: Agents started (or judged) at once by the harness.
CONCURRENCY = 16
#: Seconds a worker runs before it may get a fault, so a slot is not killed over and over
#: while it starts. A SIGTERM also waits for the worker's ``ready`` (its handler installed):
#: before that the OS default ends the process, which says nothing of the drain under test.
SETTLE = 2.0


@dataclass
class FleetReport:
    """What a fleet run did and found. ``violations`` empty: every invariant held."""

    store: str
    workers: int = 0
    agents: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    approvals: int = 0
    effects: int = 0
    appends: int = 0
    activations: int = 0
    takeovers: int = 0
    replays: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    @property
    def tested_nothing(self) -> bool:
        """True when the chaos loop dealt no fault: every agent finished first.

        Such a run is not a pass: invariants that held where nothing broke say
        nothing of recovery. As a Jepsen checker answers "unknown" rather than
        "valid" for a history that cannot decide, the summary calls it invalid
        and ``durably torture`` exits 1.
        """
        return not self.faults

    def summary(self) -> str:
        """One paragraph for a terminal; a second line when the run dealt no fault."""
        faults = ", ".join(f"{name} {count}" for name, count in sorted(self.faults.items())) or "none"
        verdict = "0 violations" if not self.violations else f"{len(self.violations)} VIOLATIONS"
        text = (
            f"fleet torture of {self.store}: {self.workers} workers, {self.agents} agents, faults: {faults}; "
            f"{self.approvals} approvals acknowledged, {self.effects} effects, {self.appends} acknowledged appends "
            f"by {self.activations} activations ({self.takeovers} agents ran under more than one), "
            f"{self.replays} effects made again by a worker paused past its lease (same idempotency key), "
            f"{self.seconds:.0f} s: {verdict}"
        )
        if self.tested_nothing:
            text += (
                "\nINVALID RUN: no fault was dealt, so it tested nothing (every agent finished before the first "
                f"fault; a worker gets one only after {SETTLE:.0f} s up, then about every chaos interval): "
                "run more agents or steps, or a shorter --chaos-interval"
            )
        return text


@dataclass
class _Worker:
    slot: int
    incarnation: int
    process: Any
    #: Set by the worker once its SIGTERM handler is installed (a multiprocessing Event).
    ready: Any
    born: float = field(default_factory=time.monotonic)
    #: The fault the chaos loop dealt this process, if any: its exit is then expected.
    fault: str | None = None
    #: Set once the slot has seen the process exit and closed its object: no signal goes to it after
    #: that (its pid may belong to another process by then), and ``process`` must not be read.
    exited: bool = False

    @property
    def pid(self) -> int:
        """The worker's pid, kept from its start: the process object cannot be read once closed."""
        return self._pid

    def __post_init__(self) -> None:
        self._pid: int = self.process.pid


@dataclass
class _Fleet:
    store: str
    directory: Path
    steps: int
    lease_ttl: float
    poll_interval: float
    rng: random.Random
    report: FleetReport
    live: dict[int, _Worker] = field(default_factory=dict)
    stopped: set[int] = field(default_factory=set)
    done: anyio.Event = field(default_factory=anyio.Event)
    closing: bool = False

    def spawn(self, slot: int, incarnation: int) -> _Worker:
        spec = {
            "store": self.store,
            "ledger": str(self.directory),
            "worker": f"w{slot}.{incarnation}",
            "steps": self.steps,
            "lease_ttl": self.lease_ttl,
            "poll_interval": self.poll_interval,
            "drain_timeout": 5.0,
            "environ": dict(os.environ),
        }
        error_path = self.directory / f"error-w{slot}.{incarnation}.txt"
        ready = WORKER_CONTEXT.Event()
        process = WORKER_CONTEXT.Process(target=fleet_worker_main, args=(spec, str(error_path), ready), daemon=True)
        process.start()
        worker = _Worker(slot, incarnation, process, ready)
        self.live[slot] = worker
        return worker

    async def slot(self, slot: int) -> None:
        """Keep worker slot ``slot`` running: restart it after each fault; report any other exit."""
        incarnation = 0
        while True:
            incarnation += 1
            worker = self.spawn(slot, incarnation)
            await exited(worker.process)
            code = worker.process.exitcode
            expected = {"kill": -signal.SIGKILL, "term": 0, "end": 0}.get(worker.fault or "")
            if code != expected:
                name = f"w{slot}.{incarnation}"
                error = self.directory / f"error-{name}.txt"
                cause = error.read_text()[-2000:] if error.exists() else "(no traceback)"
                self.report.violations.append(f"worker {name} exited with {code} (fault {worker.fault}): {cause}")
            worker.exited = True
            worker.process.close()
            if self.closing:
                return

    async def chaos(self, interval: float, restart_database: Callable[[bool], None] | None) -> None:
        """Deal a fault every ``interval`` seconds or so until every agent is done.

        The faults come in rounds, each kind once per round in a random order, so a short
        run deals every kind (drawn independently, 9 faults of 5 kinds missed one often)."""
        faults = FAULTS + (("db-fast", "db-immediate") if restart_database is not None else ())
        last_restart = time.monotonic()
        deck: list[str] = []
        async with anyio.create_task_group() as group:
            while not self.done.is_set():
                with anyio.move_on_after(self.rng.uniform(0.5 * interval, 1.5 * interval)):
                    await self.done.wait()
                if self.done.is_set():
                    break
                if not deck:
                    deck = self.rng.sample(faults, len(faults))
                # The database gets time to serve between restarts: a restart drawn too soon waits in the deck.
                restart_due = time.monotonic() - last_restart >= DB_RESTART_GAP
                drawn = next((f for f in deck if restart_due or not f.startswith("db-")), None)
                if drawn is None:
                    fault = self.rng.choice(FAULTS)  # only restarts left in this round, and too soon
                else:
                    fault = drawn
                    deck.remove(fault)
                if restart_database is not None and fault.startswith("db-"):
                    await anyio.to_thread.run_sync(restart_database, fault == "db-immediate")
                    last_restart = time.monotonic()
                else:
                    settled = time.monotonic() - SETTLE
                    candidates = [
                        w
                        for s, w in self.live.items()
                        if s not in self.stopped
                        and w.fault is None
                        and w.born < settled
                        and not w.exited
                        and (fault != "term" or w.ready.is_set())
                    ]
                    if not candidates:
                        if drawn is not None:
                            deck.append(fault)  # not dealt: it stays due this round
                        continue
                    worker = self.rng.choice(candidates)
                    if fault == "stop":
                        self.stopped.add(worker.slot)
                        group.start_soon(self.pause, worker)
                    else:
                        worker.fault = fault
                        os.kill(worker.pid, signal.SIGKILL if fault == "kill" else signal.SIGTERM)
                self.report.faults[fault] = self.report.faults.get(fault, 0) + 1
                # The pid is read here, not in the thread: a killed worker's process object may be
                # closed (and replaced) by the time the thread runs.
                pid = worker.pid if fault in FAULTS else None
                await anyio.to_thread.run_sync(self.log_fault, fault, pid)

    def log_fault(self, fault: str, pid: int | None) -> None:
        """One line in the chaos ledger (``chaos.jsonl``): the fault, its target's pid (None for the database), the wall clock."""
        Ledger(self.directory / "chaos.jsonl").append({"fault": fault, "pid": pid, "at": time.time()})

    async def pause(self, worker: _Worker) -> None:
        """SIGSTOP ``worker`` past its lease ttl, then SIGCONT it: its agents were taken over meanwhile."""
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(self.lease_ttl * 1.5 + self.rng.uniform(0, 1))
        finally:
            os.kill(worker.pid, signal.SIGCONT)
            self.stopped.discard(worker.slot)

    async def operator(self, rt: Runtime, agents: list[str], approvals: Ledger, deadline: float) -> None:
        """Approve every open gate; set ``done`` once every agent is terminal (or at ``deadline``).

        Each round reads the status index, not every agent's journal: restoring
        thousands of agents twice a round would starve the workers of the CPU
        they share with this process. Agents with no index entry are restored.
        """
        wanted = set(agents)
        while time.monotonic() < deadline:
            try:
                requests, ended = await self.survey(rt, wanted)
                await _each(requests, lambda pair: self.approve(rt, pair[0], pair[1], approvals))
            except StoreUnavailableError:
                await anyio.sleep(0.2)
                continue
            if wanted <= ended:
                break
            await anyio.sleep(0.2)
        self.done.set()

    async def survey(self, rt: Runtime, wanted: set[str]) -> tuple[list[tuple[str, str]], set[str]]:
        """The open gates (agent, approval id) and the terminal agents among ``wanted``."""
        index = index_store(rt.store)
        if index is None:
            parked = await rt.agents(statuses=[WAITING_APPROVAL])
            requests = [
                (state.agent_id, request["approval_id"])
                for state in parked
                if state.agent_id in wanted
                for request in state.open_approvals()
            ]
            return requests, {state.agent_id for state in await rt.agents(statuses=TERMINAL)}
        requests, ended = [], set()
        async for row in index.list_index(FLEET_NAMESPACE, None):
            agent = row.stream.agent_id
            if agent not in wanted:
                continue
            if row.entry is None:  # no entry yet: only the journal can tell
                state = await rt.status(agent)
                status, gates = state.status, [request["approval_id"] for request in state.open_approvals()]
            else:
                status, gates = row.entry.status, list(row.entry.open_approvals)
            if status in TERMINAL:
                ended.add(agent)
            elif status == WAITING_APPROVAL:
                requests += [(agent, gate) for gate in gates]
        return requests, ended

    async def approve(self, rt: Runtime, agent_id: str, approval_id: str, approvals: Ledger) -> None:
        try:
            await rt.approve(agent_id, approval_id, by="fleet-torture operator")
        except (DurablyError, StoreUnavailableError):
            return  # not acknowledged (decided already, the store blinked, a conflict): nothing promised
        await anyio.to_thread.run_sync(approvals.append, {"agent": agent_id, "approval": approval_id})
        self.report.approvals += 1


async def _each(items: list[Any], action: Callable[[Any], Any]) -> None:
    """Run ``action`` on every item, ``CONCURRENCY`` at a time."""
    pending = iter(items)

    async def lane() -> None:
        for item in pending:
            await action(item)

    async with anyio.create_task_group() as group:
        for _ in range(CONCURRENCY):
            group.start_soon(lane)


async def run_fleet_torture(
    store: str,
    *,
    workers: int = 4,
    agents: int = 200,
    steps: int = 2,
    seed: int | None = None,
    ledger: Path | None = None,
    lease_ttl: float = 3.0,
    poll_interval: float = 0.5,
    chaos_interval: float = 1.0,
    restart_database: Callable[[bool], None] | None = None,
    timeout: float = 600.0,
) -> FleetReport:
    """Run ``agents`` gated agents on ``workers`` serving processes under chaos, then judge the run.

    In: a store URL with leases (SQLite file, PostgreSQL), ``workers`` >= 1,
    ``agents`` >= 1, ``steps`` gated effects per agent, a ``seed`` (None:
    random), a ``ledger`` directory (None: a temporary one), the workers'
    ``lease_ttl`` and ``poll_interval`` seconds, a fault about every
    ``chaos_interval`` seconds, ``restart_database(immediate)`` (blocking; None:
    no database restarts), and ``timeout`` seconds for every agent to finish
    (past it, the unfinished ones are reported stuck).
    Out: a ``FleetReport``; ``violations`` lists every broken invariant.
    Raises ``InvalidArgumentError`` for counts below 1; ``TortureError`` for a
    single-process store or one without leases (workers would run agents twice
    by design); the store's errors when it is unreachable at the start.
    """
    if workers < 1 or agents < 1 or steps < 1:
        raise InvalidArgumentError("workers, agents and steps must each be at least 1")
    probe = open_store(store)
    if CAP_SINGLE_PROCESS in probe.capabilities or not supports_leases(probe):
        raise TortureError(f"{store}: fleet torture needs a store with leases shared by processes")
    started = time.monotonic()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="durably-fleet-") as scratch:
        directory = Path(ledger) if ledger is not None else Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        report = FleetReport(store=store, workers=workers, agents=agents)
        fleet = _Fleet(store, directory, steps, lease_ttl, poll_interval, rng, report)
        run_id = f"{rng.getrandbits(32):08x}"
        ids = [f"f{run_id}-{n}" for n in range(agents)]
        effects = Ledger(directory / "effects.jsonl")
        async with probe, Runtime(probe, agents=[fleet_definition(steps, effects)], namespace=FLEET_NAMESPACE) as rt:

            async def seed_one(agent_id: str) -> None:
                state = await (await rt.start(fleet_definition(steps, effects).name, agent_id, "gated effects")).wait()
                if state.status != WAITING_APPROVAL:
                    raise TortureError(f"{agent_id} did not park on its first gate: {state.status} {state.reason}")

            await _each(ids, seed_one)
        async with open_store(store) as operator_store, Runtime(operator_store, namespace=FLEET_NAMESPACE) as rt:
            async with anyio.create_task_group() as group:
                for slot in range(workers):
                    group.start_soon(fleet.slot, slot)
                group.start_soon(fleet.chaos, chaos_interval, restart_database)
                await fleet.operator(rt, ids, Ledger(directory / "approvals.jsonl"), started + timeout)
                # Every agent ended (or the time is up): stop the fleet, draining each worker.
                fleet.closing = True
                while fleet.stopped:
                    await anyio.sleep(0.1)
                for worker in list(fleet.live.values()):
                    await anyio.sleep(max(0.0, worker.born + SETTLE - time.monotonic()))
                    # Before its handler is installed, a SIGTERM would kill the worker by the OS default.
                    await anyio.to_thread.run_sync(worker.ready.wait, SETTLE * 10)
                    # A worker killed by a late fault may have exited (and been closed) meanwhile: it
                    # keeps its fault, and gets no signal.
                    if not worker.exited and worker.fault is None:
                        worker.fault = "end"
                        os.kill(worker.pid, signal.SIGTERM)
            states = await _final_states(rt, ids)
        _judge(directory, ids, states, steps, report)
    report.seconds = time.monotonic() - started
    return report


async def _final_states(rt: Runtime, ids: list[str]) -> dict[str, AgentState]:
    states: dict[str, AgentState] = {}

    async def read(agent_id: str) -> None:
        for _ in range(50):
            try:
                states[agent_id] = await rt.status(agent_id)
                return
            except StoreUnavailableError:
                await anyio.sleep(0.2)
            except DurablyError:
                return  # reported by check_finished

    await _each(ids, read)
    return states


def _judge(directory: Path, ids: list[str], states: dict[str, AgentState], steps: int, report: FleetReport) -> None:
    fleet = set(ids)  # the workers' own streams (their heartbeats, durably.workers) are not the fleet's agents
    acks = [a for a in Ledger(directory / "acks.jsonl").entries() if a["agent"] in fleet]
    grants = [g for g in Ledger(directory / "grants.jsonl").entries() if g["agent"] in fleet]
    effects = Ledger(directory / "effects.jsonl").entries()
    approvals = Ledger(directory / "approvals.jsonl").entries()
    report.effects, report.appends = len(effects), len(acks)
    tokens: dict[str, set[int]] = {}
    for grant in grants:
        if grant["kind"] == "grant":
            tokens.setdefault(grant["agent"], set()).add(grant["token"])
    report.activations = sum(len(t) for t in tokens.values())
    report.takeovers = sum(1 for t in tokens.values() if len(t) > 1)
    report.violations += check_activations(acks, grants)
    stops = [c for c in Ledger(directory / "chaos.jsonl").entries() if c.get("fault") == "stop"]
    violations, report.replays = check_effects_once(effects, states, steps, stops)
    report.violations += violations
    report.violations += check_approvals(approvals, states)
    report.violations += check_finished(states, ids, fleet_result(steps))
    if not any(state.status == FINISHED for state in states.values()):
        report.violations.append("no agent finished: the fleet did no work")
