"""peers-growing: LangGraph's savers and DurablySaver on a graph whose message list grows.

``durably.bench.growing``'s graph (one message appended per super-step,
``sizes.growing_supersteps`` of them) on SQLite always (LangGraph's
``AsyncSqliteSaver`` against ``DurablySaver`` on durably's SQLite store, both
WAL and ``synchronous=FULL``) and, when the store under test is PostgreSQL,
there too (``AsyncPostgresSaver`` against ``DurablySaver`` on that server).
Figures: super-steps/s (wall), CPU ms per super-step and stored bytes; ratios
DurablySaver / peer. The peers suite's figures are for its own workload (a
tool-calling conversation, two super-steps per step): these are the other shape.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import anyio

from .. import growing
from ..context import Bench

SUITE = "peers-growing"
STORES = {
    growing.SQLITE_PEER: "sqlite (LangGraph AsyncSqliteSaver, WAL, synchronous=FULL)",
    growing.SQLITE_DURABLY: "sqlite (durably SQLiteStore under LangGraph, WAL, synchronous=FULL)",
    growing.POSTGRES_PEER: "postgresql (LangGraph AsyncPostgresSaver)",
    growing.POSTGRES_DURABLY: "postgresql (durably PostgresStore under LangGraph)",
}


def _remove(path: str) -> None:
    from pathlib import Path

    for file in Path(path).parent.glob(Path(path).name + "*"):
        file.unlink()


async def run(bench: Bench) -> None:
    """Each saver that can run here, one after the other, at ``sizes.growing_supersteps``."""
    r = bench.results
    supersteps = bench.sizes.growing_supersteps
    pairs = [(growing.SQLITE_PEER, growing.SQLITE_DURABLY)]
    if bench.is_postgres:
        pairs.append((growing.POSTGRES_PEER, growing.POSTGRES_DURABLY))
    for peer, ours in pairs:
        if not (growing.available(peer) and growing.available(ours)):
            r.note(
                f"{SUITE}: {peer} skipped, not installed (pip install 'durably[peers]' langgraph-checkpoint-postgres)"
            )
            continue
        for saver in (peer, ours):
            task = bench.progress.start(f"{saver}, {supersteps:,} growing super-steps", 1)
            if saver in (growing.SQLITE_PEER, growing.SQLITE_DURABLY):
                where = str(bench.scratch / f"{saver}-growing-{bench.run_id}.db")
            else:
                parts = urlsplit(bench.store)
                where = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))  # the server's DSN
            try:
                run_ = await growing.run_growing(saver, where, supersteps)
            finally:
                if saver in (growing.SQLITE_PEER, growing.SQLITE_DURABLY):
                    await anyio.to_thread.run_sync(_remove, where)
                bench.progress.advance(task)
            params = {"steps": supersteps}
            store = STORES[saver]
            r.add(SUITE, "steps_per_s", supersteps / run_.wall_s, "super-steps/s", system=saver, store=store, **params)
            r.add(SUITE, "cpu_per_step", run_.cpu_s / supersteps * 1e3, "ms", system=saver, store=store, **params)
            r.add(SUITE, "stored_bytes", run_.bytes, "B", system=saver, store=store, **params)
        for name, better in (("steps_per_s", "higher"), ("cpu_per_step", "lower"), ("stored_bytes", "lower")):
            r.ratio(
                SUITE,
                f"{name} {ours}/{peer}",
                r.find(SUITE, name, ours, steps=supersteps),
                r.find(SUITE, name, peer, steps=supersteps),
                better=better,
                steps=supersteps,
            )
