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

"LangGraph on DurablySaver" is the same graph and conversation again with one
line changed: ``checkpointer=DurablySaver.from_url("sqlite:///...")``. Its
figures beside AsyncSqliteSaver's: checkpoints/s (checkpoints stored / the
run's wall time), file bytes after close (the database and every file beside
it) and the cold ``aget_state`` restore; the ratios are DurablySaver /
AsyncSqliteSaver.
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
BRIDGE = "langgraph-DurablySaver"


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
    runs = {}
    for system in (SYSTEM, BRIDGE):
        path = bench.scratch / f"{system}-{bench.run_id}.db"
        task = bench.progress.start(f"LangGraph on {system.split('-', 1)[1]}, {steps:,} steps", 1)
        try:
            runs[system] = await peers.run_langgraph(path, bench.conversation(steps), saver=system,
                                                     restore_repeats=bench.sizes.restore_repeats)
        finally:
            # A LangGraph thread of 1,000 steps takes gigabytes: free them now (off the loop).
            await anyio.to_thread.run_sync(_remove, path)
        bench.progress.advance(task)
    lg = runs[SYSTEM]
    _bridge_figures(bench, runs[SYSTEM], runs[BRIDGE], steps)
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


def _bridge_figures(bench: Bench, lg: "peers.PeerRun", bridge: "peers.PeerRun", steps: int) -> None:
    """LangGraph on DurablySaver beside LangGraph on AsyncSqliteSaver: same graph, same conversation."""
    r = bench.results
    params = {"steps": steps}
    lg_store = "sqlite (LangGraph AsyncSqliteSaver, WAL, synchronous=FULL)"
    bridge_store = "sqlite (durably SQLiteStore, WAL, synchronous=FULL)"
    pair = {}
    for system, run, store in ((SYSTEM, lg, lg_store), (BRIDGE, bridge, bridge_store)):
        pair[system] = {
            "checkpoints_per_s": r.add(SUITE, "checkpoints_per_s", run.checkpoints / run.wall_s, "checkpoints/s",
                                       system=system, store=store, **params),
            "file_bytes": r.add(SUITE, "file_bytes_after_close", run.file_bytes, "B", system=system, store=store,
                                **params),
            "restore_cold": r.add(SUITE, "aget_state_cold", run.restore_cold_s * 1e3, "ms", system=system,
                                  store=store, **params),
            "restore_warm_p50": r.add(SUITE, "aget_state_warm_p50", percentile(run.restore_warm_s, 50) * 1e3, "ms",
                                      system=system, store=store, **params),
        }
        if system == BRIDGE:
            r.add(SUITE, "checkpoints", run.checkpoints, "count", system=system, store=store, **params)
            step_figures(bench, SUITE, run.latencies, system=system, store=store, **params)
    for name in pair[BRIDGE]:
        better = "higher" if name == "checkpoints_per_s" else "lower"
        r.ratio(SUITE, f"{name} DurablySaver/AsyncSqliteSaver", pair[BRIDGE][name], pair[SYSTEM][name],
                better=better, **params)
