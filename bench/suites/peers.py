"""peers: LangGraph's AsyncSqliteSaver on the same conversation, side by side.

durably's side is the single-agent conversation of agent-steps on the store
under test (run here if agent-steps did not); LangGraph's is the same steps
through its ordinary tool-calling graph (``durably.bench.peers``) on a fresh
SQLite file in the scratch folder. Ratios: steps/s (durably / LangGraph,
higher is better), stored bytes and restore latency (durably / LangGraph,
lower is better). Stored bytes are payload bytes on both sides: the frames
durably's store holds, and LangGraph's checkpoint, metadata and write blobs.
The same graph with no checkpointer is timed too, to separate LangGraph's own
cost per step from its checkpointer's.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from .. import peers
from ..context import Bench
from ..conversation import conversation
from ..results import percentile
from .agent_steps import step_figures

SUITE = "peers"
SYSTEM = "langgraph-AsyncSqliteSaver"


def _remove(path: Path) -> None:
    for file in path.parent.glob(path.name + "*"):
        file.unlink()


async def run(bench: Bench) -> None:
    """Run both sides and record the ratios; a note instead when LangGraph is missing."""
    r = bench.results
    if not peers.available():
        r.note("peers skipped: LangGraph is not installed (pip install 'durably[peers]')")
        return
    steps = bench.sizes.peer_steps
    conv = await conversation(bench, steps)
    if not bench.is_sqlite:
        r.note(f"peers: durably ran on {bench.store}, LangGraph on SQLite; the ratios compare different backends")
    path = bench.scratch / f"langgraph-{bench.run_id}.db"
    task = bench.progress.start(f"LangGraph, {steps:,} steps", 1)  # one ainvoke: no finer progress
    try:
        lg = await peers.run_langgraph(path, bench.conversation(steps), restore_repeats=bench.sizes.restore_repeats)
    finally:
        # A LangGraph thread of 1,000 steps takes gigabytes: free them now (off the loop).
        await anyio.to_thread.run_sync(_remove, path)
    bench.progress.advance(task)
    lg_store = "sqlite (LangGraph AsyncSqliteSaver, WAL, synchronous=FULL)"
    params = {"steps": steps}
    mine = {
        "steps_per_s": r.add(SUITE, "steps_per_s", steps / conv.run.wall_s, "steps/s", **params),
        "stored_bytes": r.add(SUITE, "stored_bytes", conv.stored.total, "B", **params),
        "restore_cold": r.add(SUITE, "restore_cold", conv.restore_cold_s * 1e3, "ms", **params),
        "restore_warm_p50": r.add(SUITE, "restore_warm_p50", percentile(conv.restore_warm_s, 50) * 1e3, "ms", **params),
    }
    theirs = {
        "steps_per_s": r.add(SUITE, "steps_per_s", steps / lg.wall_s, "steps/s", system=SYSTEM, store=lg_store, **params),
        "stored_bytes": r.add(SUITE, "stored_bytes", lg.payload_bytes, "B", system=SYSTEM, store=lg_store, **params),
        "restore_cold": r.add(SUITE, "restore_cold", lg.restore_cold_s * 1e3, "ms", system=SYSTEM, store=lg_store, **params),
        "restore_warm_p50": r.add(SUITE, "restore_warm_p50", percentile(lg.restore_warm_s, 50) * 1e3, "ms",
                                  system=SYSTEM, store=lg_store, **params),
    }
    bare = await peers.run_langgraph_in_memory(bench.conversation(steps))
    r.add(SUITE, "steps_per_s", steps / bare, "steps/s", system="langgraph-no-checkpointer", store="none", **params)
    latest = max(conv.stored.snapshot_sizes, default=(0, 0))[1]
    r.add(SUITE, "journal_bytes", conv.stored.record_bytes, "B", **params)
    r.add(SUITE, "journal_plus_latest_snapshot", conv.stored.record_bytes + latest, "B", **params)
    r.add(SUITE, "file_bytes", lg.file_bytes, "B", system=SYSTEM, store=lg_store, **params)
    r.add(SUITE, "checkpoints", lg.checkpoints, "count", system=SYSTEM, store=lg_store, **params)
    step_figures(bench, SUITE, conv.run.latencies[0], **params)
    step_figures(bench, SUITE, lg.latencies, system=SYSTEM, store=lg_store, **params)
    for name in mine:
        better = "higher" if name == "steps_per_s" else "lower"
        r.ratio(SUITE, f"{name} durably/langgraph", mine[name], theirs[name], better=better, **params)
