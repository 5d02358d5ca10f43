"""The one-commit floor of an agent step: the same bytes, one plain commit per step.

durably's best case for a durable step is one commit holding the step's
records (model response, tool intent, tool result). The floor replays the
frames an agent run actually stored, grouped by step, through a plain
group-commit journal (``RawSQLite.group_rows``: aiosqlite, WAL,
``synchronous=FULL``; ``RawPostgres.group_rows`` on the same server when the
store is PostgreSQL), one closed-loop writer per agent: nothing of durably in
between, no codec, no runtime, no expected-seq check. ``durably / floor`` is
then what the whole runtime costs over the storage it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage._spi import Store, StreamId

from .context import Bench
from .limit import RawSQLite, run_writers

if TYPE_CHECKING:  # asyncpg is an extra: imported only for a PostgreSQL store
    from .limit_postgres import RawPostgres


@dataclass
class FloorRun:
    """The floor's closed loop: ``wall_s``, per-step seconds, steps and commits."""

    wall_s: float
    latencies: list[float]
    steps: int
    commits: int


def raw_limit(bench: Bench, label: str) -> tuple[RawSQLite | RawPostgres, str]:
    """A fresh plain journal and its description: plain asyncpg on the same server when the
    store is PostgreSQL (imported only then: asyncpg is an extra), else plain aiosqlite in
    the scratch folder (the disk of the store when it is SQLite)."""
    if bench.is_postgres:
        from durably.storage._url_redaction import redact_url

        from .limit_postgres import RawPostgres

        raw = RawPostgres(bench.store)
        return raw, f"{redact_url(bench.store)}, schema {raw.schema} (plain asyncpg)"
    path = bench.scratch / f"{label}-{bench.run_id}.db"
    return RawSQLite(path), f"sqlite:///{path} (plain aiosqlite)"


async def step_batches(store: Store, stream: StreamId) -> list[tuple[int, list[bytes]]]:
    """The stored frames of ``stream`` grouped by step: ``(first seq, frames)`` each.

    A step starts at a ``model_responded`` record; the records before the first
    one (``started``) go with the first step.
    """
    codec = RecordCodec()
    batches: list[tuple[int, list[bytes]]] = []
    seen_response = False
    async for stored in store.read(stream):
        response = codec.decode_record(stored, stream).kind == Kind.MODEL_RESPONDED
        if not batches or (response and seen_response):
            batches.append((stored.seq, []))
        seen_response = seen_response or response
        batches[-1][1].append(stored.data)
    return batches


async def run_floor(
    bench: Bench, store: Store, streams: list[StreamId], label: str, on_step: Callable[[], None] = lambda: None
) -> tuple[FloorRun, str]:
    """Replay ``streams``' frames per step through a fresh plain journal, one writer per stream.

    Returns the run and the limit's description (its URL, for the figures).
    """
    items = [await step_batches(store, stream) for stream in streams]
    limit, url = raw_limit(bench, label)

    async with limit as raw:

        async def sink(index: int, _: int, item: tuple[int, list[bytes]]) -> None:
            await raw.group_rows(index, item[0], item[1])

        wall, latencies = await run_writers(sink, items, on_done=on_step)
        commits = raw.commits
    if not bench.is_postgres:
        for file in bench.scratch.glob(f"{label}-{bench.run_id}.db*"):
            file.unlink()
    return FloorRun(wall, latencies, sum(map(len, items)), commits), url
