"""Run the chosen suites against one store and check the issue's targets.

    results = anyio.run(run_bench, "sqlite:///bench.db", ["append"], QUICK)

The library entry point behind ``durably bench``; the CLI adds the progress
bar, the table and the JSON file.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from .context import Bench, NoProgress, Progress, Sizes, shareable_url
from .results import Results
from .suites import SUITES
from .workload import Workload


def _scratch_for(store: str) -> Path:
    """A new scratch folder, beside the store's file when it is SQLite (same disk as the
    store under test, so the limit and the peers meet the same fsync)."""
    parts = urlsplit(store)
    parent = None
    if parts.scheme == "sqlite" and len(parts.path) > 1:
        parent = Path(parts.path[1:]).absolute().parent
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="durably-bench-", dir=parent))


async def run_bench(store: str | None, suites: Iterable[str], sizes: Sizes, *, mode: str = "custom", seed: int = 0,
                    progress: Progress | None = None, argv: list[str] | None = None) -> Results:
    """Run ``suites`` (names of ``SUITES``) on ``store`` (a URL; None: a temporary SQLite file).

    Returns the ``Results`` with figures, ratios and target checks. Raises
    ``KeyError`` for an unknown suite name and whatever the store raises.
    Temporary files (the default store, the limit's and LangGraph's databases)
    are removed at the end.
    """
    names = list(suites)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise KeyError(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    temporary = store is None
    scratch = Path(tempfile.mkdtemp(prefix="durably-bench-")) if temporary else _scratch_for(store)
    url = f"sqlite:///{scratch / 'durably-bench.db'}" if temporary else store
    try:
        results = Results(store=url, mode=mode, seed=seed, argv=argv)
        workload = await anyio.to_thread.run_sync(Workload, seed)  # reads the corpus files
        bench = Bench(store=url, scratch=scratch, sizes=sizes, results=results, workload=workload,
                      progress=progress or NoProgress())
        bench.store = results.store = shareable_url(url, bench.run_id)
        if bench.is_postgres:
            from durably.adapters.postgres.options import redacted

            results.store = redacted(bench.store)  # a password in the URL never reaches the report
            results.note("the limit is plain asyncpg on the same PostgreSQL server (durably.bench.limit_postgres)")
        elif not bench.is_sqlite:
            results.note(f"the limit is plain aiosqlite on {scratch}; durably runs on {bench.store}")
        for name in names:
            await SUITES[name](bench)
        check_targets(results)
        return results
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(scratch, ignore_errors=True))


def check_targets(results: Results) -> None:
    """The issue's targets, each from the figures that measure it (skipped with a note when absent)."""
    by_name = {}
    for ratio in results.ratios:
        by_name.setdefault((ratio.suite, ratio.name), []).append(ratio)

    def pick(suite: str, name: str, **params):
        for ratio in reversed(by_name.get((suite, name), [])):
            if all(ratio.params.get(k) == v for k, v in params.items()):
                return ratio
        return None

    peers = pick("peers", "steps_per_s durably/langgraph")
    basis = f"peers, {peers.params['steps']}-step conversation" if peers else "the peers suite"
    results.target("agent steps/s >= 50x LangGraph AsyncSqliteSaver (sync)", peers and peers.value, ">=", 50, basis)
    stored = pick("peers", "stored_bytes durably/langgraph")
    results.target("stored bytes <= 1/1,000 of LangGraph's", stored and stored.value, "<=", 0.001, basis)
    bridge_bytes = pick("peers", "file_bytes DurablySaver/AsyncSqliteSaver")
    bridge_basis = f"peers, LangGraph on both savers, {bridge_bytes.params['steps']}-step conversation" \
        if bridge_bytes else "the peers suite"
    results.target("LangGraph on DurablySaver: file bytes <= 1/200 of AsyncSqliteSaver's",
                   bridge_bytes and bridge_bytes.value, "<=", 1 / 200, bridge_basis)
    bridge_rate = pick("peers", "checkpoints_per_s DurablySaver/AsyncSqliteSaver")
    results.target("LangGraph on DurablySaver: checkpoints/s >= 3x AsyncSqliteSaver's",
                   bridge_rate and bridge_rate.value, ">=", 3, bridge_basis)
    for ratio in by_name.get(("agent-steps", "step_p50_last10/first10"), []):
        steps = ratio.params.get("steps")
        results.target(f"step p50, last 10% / first 10% <= 1.3 ({steps:,} steps)", ratio.value, "<=", 1.3,
                       f"agent-steps, {steps}-step conversation, 1 agent")
    if not by_name.get(("agent-steps", "step_p50_last10/first10")):
        results.target("step p50, last 10% / first 10% <= 1.3", None, "<=", 1.3, "the agent-steps suite")
    for label, what in (("window-200", "conversation bounded by a HistoryPolicy"), ("full", "whole conversation in the state")):
        restore = next((r for (suite, name), found in by_name.items() for r in found
                        if suite == "restore" and name.startswith("restore_warm_p50 ") and name.endswith(f"({label})")), None)
        basis = f"restore suite, warm p50, {restore.name.split()[1]} records" if restore else "the restore suite"
        note = "" if restore is None or " 100000/100 " in restore.name else "the full run restores 100,000 records"
        results.target(f"restore of 100,000 records <= 2x restore of 100 ({what})", restore and restore.value, "<=", 2,
                       basis, note)
    if urlsplit(results.store).scheme in ("postgresql", "postgres"):
        runtime = pick("agent-steps", "durably/limit-group-commit", agents=16)
        results.target("16 agents, full runtime: >= 60% of raw asyncpg group-commit rate", runtime and runtime.value,
                       ">=", 0.6, "agent-steps, 16 concurrent agents vs the append suite's limit, records/s")
        return
    group = pick("append", "durably/limit-group-commit", agents=16)
    results.target("16 agents: >= 70% of raw aiosqlite group-commit rate", group and group.value, ">=", 0.7,
                   "append suite, 16 concurrent agents, records/s")
