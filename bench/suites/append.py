"""append: records/s, MB/s and per-append latency for 1, 4, 16, 64 concurrent agents.

Each agent appends its journal (the records of a seeded conversation) one
record per append, waiting for each to be durable before the next: a closed
loop, as an agent's step loop is. durably's path is the runtime's: encode the
record (``RecordCodec``: CBOR, zstd, checksum) and ``GroupCommitter.append``
with the expected seq, on the store under test. The limit (``durably.bench.limit``)
inserts the same frames with plain aiosqlite (plain asyncpg on the same server
when the store is PostgreSQL: ``durably.bench.limit_postgres``), one row per
commit and with group commit, at the same concurrency; ratios are durably / limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durably._journal.records import RecordCodec
from durably.schemas._records import Record
from durably.storage._group_commit import GroupCommitter
from durably.storage._registry import open_store
from durably.storage._spi import Store, StreamId

from ..context import Bench
from ..limit import RawSQLite, run_writers

if TYPE_CHECKING:  # asyncpg is an extra: imported only for a PostgreSQL store
    from ..limit_postgres import RawPostgres

from ..results import percentile
from ..workload import journal_entries

SUITE = "append"
MIN_PER_AGENT = 32  # records each agent appends at least, so every level runs long enough to measure
LIMITS = ("limit-per-commit", "limit-group-commit")


def _entries(bench: Bench, namespace: str, agents: int, per_agent: int) -> list[list[tuple[str, dict[str, Any]]]]:
    steps = per_agent // 3 + 1
    return [journal_entries(bench.conversation(steps, a), namespace, f"agent-{a}")[:per_agent] for a in range(agents)]


def _report(
    bench: Bench, system: str, agents: int, wall: float, latencies: list[float], stored: int, store: str
) -> None:
    r, params = bench.results, {"agents": agents, "records": len(latencies)}
    r.add(SUITE, "records_per_s", len(latencies) / wall, "records/s", system=system, store=store, **params)
    r.add(SUITE, "mb_per_s", stored / wall / 1e6, "MB/s", system=system, store=store, **params)
    r.add(SUITE, "append_p50", percentile(latencies, 50) * 1e3, "ms", system=system, store=store, **params)
    r.add(SUITE, "append_p99", percentile(latencies, 99) * 1e3, "ms", system=system, store=store, **params)


async def _durably(
    store: Store, namespace: str, entries: list[list[tuple[str, dict[str, Any]]]], on_done: Callable[[], None]
) -> tuple[float, list[float], int, int]:
    """durably's writers: ``(wall s, per-append s, stored bytes, commits)``."""
    codec, committer, stored = RecordCodec(), GroupCommitter(store), 0

    async def sink(index: int, seq: int, entry: tuple[str, dict[str, Any]]) -> None:
        nonlocal stored
        frame = codec.encode_record(Record(seq, entry[0], entry[1], time.time()))  # timed: durably encodes per append
        await committer.append(StreamId(namespace, f"agent-{index}"), seq - 1, [frame])
        stored += len(frame)

    wall, latencies = await run_writers(sink, entries, on_done=on_done)
    return wall, latencies, stored, committer.batches


def _raw_limit(bench: Bench) -> tuple[RawSQLite | RawPostgres, str]:
    """The limit's journal and its description: plain asyncpg on the same server when the
    store is PostgreSQL (imported only then: asyncpg is an extra), else plain aiosqlite."""
    if bench.is_postgres:
        from durably.storage._url_redaction import redact_url

        from ..limit_postgres import RawPostgres

        raw = RawPostgres(bench.store)
        return raw, f"{redact_url(bench.store)}, schema {raw.schema} (plain asyncpg)"
    limit_path = bench.scratch / f"limit-{bench.run_id}.db"
    return RawSQLite(limit_path), f"sqlite:///{limit_path} (plain aiosqlite)"


async def run(bench: Bench) -> None:
    """Measure every concurrency level of ``bench.sizes.append_concurrency``."""
    sizes, r = bench.sizes, bench.results
    levels = sizes.append_concurrency
    task = bench.progress.start("append", 3 * sum(max(MIN_PER_AGENT, sizes.append_records // n) * n for n in levels))
    advance = lambda: bench.progress.advance(task)  # noqa: E731
    codec = RecordCodec()
    raw_limit, limit_url = _raw_limit(bench)
    async with open_store(bench.store) as store, raw_limit as raw:
        for level, agents in enumerate(levels):
            namespace = bench.namespace(SUITE, agents)
            entries = _entries(bench, namespace, agents, max(MIN_PER_AGENT, sizes.append_records // agents))
            wall, latencies, stored, commits = await _durably(store, namespace, entries, advance)
            _report(bench, "durably", agents, wall, latencies, stored, bench.store)
            r.add(
                SUITE,
                "appends_per_commit",
                len(latencies) / max(1, commits),
                "appends/commit",
                agents=agents,
                records=len(latencies),
            )
            # The limit gets the same bytes, encoded up front: it pays no codec.
            frames = [
                [codec.encode_record(Record(seq, k, d, time.time())) for seq, (k, d) in enumerate(own, start=1)]
                for own in entries
            ]
            limit_bytes = sum(len(f) for own in frames for f in own)
            for offset, (system, sink) in enumerate(zip(LIMITS, (raw.per_commit, raw.group), strict=False)):
                wall, latencies = await run_writers(
                    sink, frames, stream_base=(2 * level + offset) * 1000, on_done=advance
                )
                _report(bench, system, agents, wall, latencies, limit_bytes, limit_url)
            durably = r.find(SUITE, "records_per_s", agents=agents)
            for system in LIMITS:
                r.ratio(
                    SUITE,
                    f"durably/{system}",
                    durably,
                    r.find(SUITE, "records_per_s", system, agents=agents),
                    agents=agents,
                )
