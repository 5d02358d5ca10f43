"""The one-commit floor of an agent step: the same bytes, one plain commit per step.

durably's best case for a durable step is one commit holding the step's
records (model response, tool intent, tool result). The floor replays the
frames an agent run actually stored, grouped by step, through a plain
group-commit journal (``RawSQLite.group_rows``: aiosqlite, WAL,
``synchronous=FULL``; ``RawPostgres.group_rows`` on the same server when the
store is PostgreSQL), one closed-loop writer per agent: nothing of durably in
between, no codec, no runtime, no expected-seq check. ``durably / floor`` is
then what the whole runtime costs over the storage it needs.

The floor with encoding (``encoded=True``) replays the same steps' records,
each step's redacted and encoded in the timed loop by the journal's own code
(``durably.bench.step_encoder``) before its commit: what any durable step
must pay with this codec and no runtime. ``durably / floor with encoding`` is
then the runtime's own share, and ``floor with encoding / floor`` the codec's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind, Record
from durably.storage._spi import Store, StreamId

from .context import Bench
from .limit import RawSQLite, run_writers
from .step_encoder import StepEncoder

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


async def _steps(store: Store, stream: StreamId) -> list[tuple[int, list[bytes], list[Record]]]:
    """The stored records of ``stream`` grouped by step: ``(first seq, frames, records)`` each.

    A step starts at a ``model_responded`` record; the records before the first
    one (``started``) go with the first step.
    """
    steps: list[tuple[int, list[bytes], list[Record]]] = []
    seen_response = False
    async for stored, record in JournalReader(store, RecordCodec(), stream).rows():
        response = record.kind == Kind.MODEL_RESPONDED
        if not steps or (response and seen_response):
            steps.append((stored.seq, [], []))
        seen_response = seen_response or response
        steps[-1][1].append(stored.data)
        steps[-1][2].append(record)
    return steps


async def step_batches(store: Store, stream: StreamId) -> list[tuple[int, list[bytes]]]:
    """The stored frames of ``stream`` grouped by step: ``(first seq, frames)`` each (see ``_steps``)."""
    return [(first, frames) for first, frames, _ in await _steps(store, stream)]


async def step_entries(store: Store, stream: StreamId) -> list[tuple[int, list[tuple[str, dict[str, Any]]]]]:
    """The records of ``stream`` grouped by step as the journal was given them:
    ``(first seq, [(kind, data), ...])`` each (see ``_steps``)."""
    return [(first, [(r.kind, r.data) for r in records]) for first, _, records in await _steps(store, stream)]


def _agent_name(steps: list[tuple[int, list[tuple[str, dict[str, Any]]]]]) -> str:
    """The definition name in the stream's ``started`` record (what redaction rules match on)."""
    for kind, data in steps[0][1] if steps else []:
        if kind == Kind.STARTED:
            return str(data.get("definition", {}).get("name", ""))
    return ""


async def run_floor(
    bench: Bench,
    store: Store,
    streams: list[StreamId],
    label: str,
    on_step: Callable[[], None] = lambda: None,
    *,
    encoded: bool = False,
) -> tuple[FloorRun, str]:
    """Replay ``streams``' frames per step through a fresh plain journal, one writer per stream;
    with ``encoded``, their records instead, each step encoded as the journal does, in the timed loop.

    Returns the run and the limit's description (its URL, for the figures).
    """
    items: list[list[tuple[int, list[Any]]]]
    encoders: list[StepEncoder] = []
    if encoded:
        entries = [await step_entries(store, stream) for stream in streams]
        encoders = [StepEncoder(stream, _agent_name(own)) for stream, own in zip(streams, entries, strict=True)]
        items = list(entries)
    else:
        items = [await step_batches(store, stream) for stream in streams]
    limit, url = raw_limit(bench, label)

    async def sink(index: int, _: int, item: tuple[int, list[Any]]) -> None:
        first, batch = item
        frames = encoders[index].frames(batch, first) if encoders else batch  # timed: the step's encoding
        await limit.group_rows(index, first, frames)

    async with limit:
        wall, latencies = await run_writers(sink, items, on_done=on_step)
        commits = limit.commits
    if not bench.is_postgres:
        for file in bench.scratch.glob(f"{label}-{bench.run_id}.db*"):
            file.unlink()
    return FloorRun(wall, latencies, sum(map(len, items)), commits), url
