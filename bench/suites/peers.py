"""peers: durably, LangGraph and DBOS Transact on the same conversation, side by side.

Every system runs the same seeded conversation (``bench.conversation``), the
same step (a model answer with one tool call, then the tool's result: the
scripted model and instant tools of ``durably.bench.workload``), on a fresh
SQLite file in the scratch folder with WAL and ``synchronous=FULL``:

* ``durably``: the ``Runtime`` on its SQLite store;
* ``langgraph-AsyncSqliteSaver``: LangGraph's ordinary tool-calling graph
  (``durably.bench.peers``), ``durability="sync"``;
* ``dbos-sqlite``: DBOS Transact, the same loop as a workflow of a model step
  and a tool step (``durably.bench.dbos_peer``), SQLite system database;
* ``langgraph-DurablySaver`` (at ``sizes.peer_steps`` only): LangGraph's graph
  again with one line changed, ``checkpointer=DurablySaver.from_url(...)``.

Time is reported two ways: steps/s (wall) and CPU per step (the process's CPU
time over the run, every thread; DBOS's in its child process), which a loaded
machine does not inflate. Bytes are counted the same way for every system: every file of the database
after it was closed (the database, ``-wal``, ``-shm``, ``-journal``). Each
length of ``sizes.peer_series`` is run for every system in turn
(interleaved), for the bytes-vs-N and steps/s-vs-N charts; the ratios are
durably / peer at ``sizes.peer_steps``. Restore (LangGraph's ``aget_state``,
durably's ``Runtime.status``), cold and warm, at that length too; DBOS has no
state to restore apart from re-running the workflow, so it has no restore
figure. The graph with no checkpointer is timed too, to separate LangGraph's
own cost per step from its checkpointer's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio

from durably.storage._registry import open_store

from .. import dbos_peer, peers
from ..agent import run_agents
from ..context import Bench
from ..conversation import measure_restore
from ..results import percentile
from .agent_steps import step_figures

SUITE = "peers"
DURABLY = "durably"
SYSTEM = "langgraph-AsyncSqliteSaver"
BRIDGE = "langgraph-DurablySaver"
DBOS = "dbos-sqlite"
STORES = {
    DURABLY: "sqlite (durably SQLiteStore, WAL, synchronous=FULL)",
    SYSTEM: "sqlite (LangGraph AsyncSqliteSaver, WAL, synchronous=FULL)",
    BRIDGE: "sqlite (durably SQLiteStore under LangGraph, WAL, synchronous=FULL)",
    DBOS: "sqlite (DBOS Transact system database, WAL, synchronous=FULL)",
}


def _remove(path: Path) -> None:
    for file in path.parent.glob(path.name + "*"):
        file.unlink()


class _Run:
    """What every system reports for one length: wall, latencies, file bytes, restore (or None)."""

    def __init__(
        self,
        wall_s: float,
        cpu_s: float,
        latencies: list[float],
        file_bytes: int,
        restore_cold_s: float | None = None,
        restore_warm_s: list[float] | None = None,
        checkpoints: int | None = None,
    ) -> None:
        self.wall_s, self.cpu_s, self.latencies, self.file_bytes = wall_s, cpu_s, latencies, file_bytes
        self.restore_cold_s, self.restore_warm_s, self.checkpoints = restore_cold_s, restore_warm_s, checkpoints


async def _durably(bench: Bench, path: Path, steps: int, restore: bool) -> _Run:
    url = f"sqlite:///{path}"
    namespace = bench.namespace(SUITE, steps)
    async with open_store(url) as store:
        cpu = time.process_time()
        run = await run_agents(store, namespace, [bench.conversation(steps)])
        cpu = time.process_time() - cpu
    cold, warm = (
        await measure_restore(url, namespace, run.streams[0].agent_id, bench.sizes.restore_repeats)
        if restore
        else (None, None)
    )
    return _Run(run.wall_s, cpu, run.latencies[0], dbos_peer.file_bytes(path), cold, warm)


async def _langgraph(bench: Bench, path: Path, steps: int, saver: str) -> _Run:
    lg = await peers.run_langgraph(
        path, bench.conversation(steps), saver=saver, restore_repeats=bench.sizes.restore_repeats
    )
    return _Run(lg.wall_s, lg.cpu_s, lg.latencies, lg.file_bytes, lg.restore_cold_s, lg.restore_warm_s, lg.checkpoints)


async def _dbos(bench: Bench, path: Path, steps: int) -> _Run:
    run = await dbos_peer.run_dbos(path, steps, bench.workload.seed)
    return _Run(run.wall_s, run.cpu_s, run.latencies, dbos_peer.file_bytes(path), checkpoints=run.checkpoints)


async def _one(bench: Bench, system: str, steps: int, headline: bool) -> _Run:
    path = bench.scratch / f"{system}-{steps}-{bench.run_id}.db"
    task = bench.progress.start(f"{system}, {steps:,} steps", 1)
    try:
        if system == DURABLY:
            return await _durably(bench, path, steps, headline)
        if system == DBOS:
            return await _dbos(bench, path, steps)
        return await _langgraph(bench, path, steps, system)
    finally:
        # A LangGraph thread of 1,000 steps takes gigabytes: free them now (off the loop).
        await anyio.to_thread.run_sync(_remove, path)
        bench.progress.advance(task)


def _systems() -> tuple[list[str], list[str]]:
    """The systems that can run here, and notes for those that cannot."""
    systems, missing = [DURABLY], []
    if peers.available():
        systems.append(SYSTEM)
    else:
        missing.append("peers: LangGraph skipped, not installed (pip install 'durably[peers]')")
    if dbos_peer.available():
        systems.append(DBOS)
    else:
        missing.append("peers: DBOS Transact skipped, not installed (pip install 'durably[peers]')")
    return systems, missing


async def run(bench: Bench) -> None:
    """Run every system at every length of the series; ratios at ``sizes.peer_steps``."""
    r = bench.results
    systems, missing = _systems()
    for note in missing:
        r.note(note)
    if len(systems) == 1:
        r.note("peers skipped: neither LangGraph nor DBOS is installed (pip install 'durably[peers]')")
        return
    if not bench.is_sqlite:
        r.note(f"peers: every system runs on a SQLite file in the scratch folder, not on {bench.store}")
    headline = bench.sizes.peer_steps
    lengths = sorted(set(bench.sizes.peer_series) | {headline})
    runs: dict[str, _Run] = {}
    for steps in lengths:
        for system in systems:
            run_ = await _one(bench, system, steps, steps == headline)
            params: dict[str, Any] = {"steps": steps}
            r.add(SUITE, "steps_per_s", steps / run_.wall_s, "steps/s", system=system, store=STORES[system], **params)
            r.add(SUITE, "file_bytes", run_.file_bytes, "B", system=system, store=STORES[system], **params)
            r.add(SUITE, "cpu_per_step", run_.cpu_s / steps * 1e3, "ms", system=system, store=STORES[system], **params)
            if steps == headline:
                runs[system] = run_
    if SYSTEM in systems:
        runs[BRIDGE] = await _one(bench, BRIDGE, headline, True)
        await bare_langgraph(bench, headline)
    _headline(bench, runs, headline)


def _headline(bench: Bench, runs: dict[str, _Run], steps: int) -> None:
    """Latencies, restore, checkpoints and the durably / peer ratios at the headline length."""
    r = bench.results
    params: dict[str, Any] = {"steps": steps}
    for system, run_ in runs.items():
        store = STORES[system]
        step_figures(bench, SUITE, run_.latencies, system=system, store=store, **params)
        bench.series(SUITE, "step_latency", run_.latencies, system=system, **params)
        if system == BRIDGE:
            r.add(SUITE, "steps_per_s", steps / run_.wall_s, "steps/s", system=system, store=store, **params)
            r.add(SUITE, "file_bytes", run_.file_bytes, "B", system=system, store=store, **params)
            r.add(SUITE, "cpu_per_step", run_.cpu_s / steps * 1e3, "ms", system=system, store=store, **params)
        if run_.checkpoints is not None:
            r.add(SUITE, "checkpoints", run_.checkpoints, "count", system=system, store=store, **params)
            r.add(
                SUITE,
                "checkpoints_per_s",
                run_.checkpoints / run_.wall_s,
                "checkpoints/s",
                system=system,
                store=store,
                **params,
            )
        if run_.restore_cold_s is not None:
            r.add(SUITE, "restore_cold", run_.restore_cold_s * 1e3, "ms", system=system, store=store, **params)
            if run_.restore_warm_s is not None:
                r.add(
                    SUITE,
                    "restore_warm_p50",
                    percentile(run_.restore_warm_s, 50) * 1e3,
                    "ms",
                    system=system,
                    store=store,
                    **params,
                )
    for peer, short in ((SYSTEM, "langgraph"), (DBOS, "dbos")):
        if peer not in runs:
            continue
        for name, better in (
            ("steps_per_s", "higher"),
            ("cpu_per_step", "lower"),
            ("file_bytes", "lower"),
            ("restore_cold", "lower"),
            ("restore_warm_p50", "lower"),
        ):
            r.ratio(
                SUITE,
                f"{name} durably/{short}",
                r.find(SUITE, name, DURABLY, **params),
                r.find(SUITE, name, peer, **params),
                better=better,
                **params,
            )
    if BRIDGE in runs:
        for name, better in (
            ("checkpoints_per_s", "higher"),
            ("file_bytes", "lower"),
            ("restore_cold", "lower"),
            ("restore_warm_p50", "lower"),
        ):
            r.ratio(
                SUITE,
                f"{name} DurablySaver/AsyncSqliteSaver",
                r.find(SUITE, name, BRIDGE, **params),
                r.find(SUITE, name, SYSTEM, **params),
                better=better,
                **params,
            )


async def bare_langgraph(bench: Bench, steps: int) -> None:
    """LangGraph's graph with no checkpointer: its own cost per step."""
    wall = await peers.run_langgraph_in_memory(bench.conversation(steps))
    bench.results.add(
        SUITE, "steps_per_s", steps / wall, "steps/s", system="langgraph-no-checkpointer", store="none", steps=steps
    )
