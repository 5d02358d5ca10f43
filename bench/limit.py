"""The limit: the same bytes inserted with plain aiosqlite, no durably in between.

Same durability as durably's SQLite store: WAL journal mode, ``synchronous=FULL``
(every COMMIT fsyncs the WAL). The table is what any journal needs, a blob
keyed by (stream, seq). Two ways to insert:

* ``per_commit``: one row, one autocommitted INSERT (one hop to aiosqlite's
  thread, one fsync) per append: what a naive checkpointer does;
* ``group``: leader/follower group commit over one connection, as durably's
  ``GroupCommitter`` does: whoever takes the lock inserts every queued row
  with one multi-row INSERT, autocommitted: one hop and one fsync per batch,
  the fewest plain aiosqlite can get for closed-loop writers;
* ``group_rows``: the same, each append carrying several rows (an agent
  step's records): the floor of a durable step is one such commit.

``run_writers`` drives either with the same closed loop as durably's append
suite: each writer awaits its append before making the next.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

Sink = Callable[[int, int, Any], Awaitable[None]]  # (writer index + base, seq, item) -> durable

_SCHEMA = "CREATE TABLE IF NOT EXISTS journal (stream INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream, seq))"
_INSERT = "INSERT INTO journal (stream, seq, data) VALUES (?, ?, ?)"
_ROWS_PER_STATEMENT = 300  # 900 bound parameters, under SQLite's historic limit of 999


def _insert_many(rows: int) -> str:
    return "INSERT INTO journal (stream, seq, data) VALUES " + ", ".join(["(?, ?, ?)"] * rows)


class RawSQLite:
    """A plain aiosqlite journal at ``path`` (WAL, synchronous=FULL). Use ``async with``.

    ``per_commit`` and ``group`` are ``Sink``s: ``await sink(stream, seq, data)``
    returns once the row is committed (fsynced).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()
        self._queue: list[list[Any]] = []
        self.commits = 0

    async def __aenter__(self) -> RawSQLite:
        # isolation_level None: autocommit, so a lone INSERT is its own transaction.
        self._db = await aiosqlite.connect(self.path, isolation_level=None)
        await self._db.execute("PRAGMA journal_mode = WAL")
        await self._db.execute("PRAGMA synchronous = FULL")
        await self._db.execute(_SCHEMA)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None

    def _opened(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("RawSQLite used outside its async with block")
        return self._db

    async def per_commit(self, stream: int, seq: int, data: bytes) -> None:
        """Insert one row in its own transaction."""
        async with self._lock:
            await self._opened().execute(_INSERT, (stream, seq, data))
            self.commits += 1

    async def group(self, stream: int, seq: int, data: bytes) -> None:
        """Insert one row; rows queued meanwhile share the transaction (group commit)."""
        await self.group_rows(stream, seq, [data])

    async def group_rows(self, stream: int, seq: int, datas: Sequence[bytes]) -> None:
        """Insert ``datas`` as rows ``seq, seq + 1, ...`` of ``stream`` in one append: what
        one durable agent step needs (its records in one commit). Appends queued meanwhile
        share the transaction (group commit). A failed commit fails every append of its
        batch (``RuntimeError`` for the followers).
        """
        entry: list[Any] = [[(stream, seq + i, data) for i, data in enumerate(datas)], None]  # rows, outcome
        self._queue.append(entry)
        async with self._lock:
            if entry[1] is None:
                batch, self._queue = self._queue, []
                rows = [row for item in batch for row in item[0]]
                try:
                    many = len(rows) > _ROWS_PER_STATEMENT
                    if many:
                        await self._opened().execute("BEGIN")  # a batch too big for one statement
                    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
                        chunk = rows[start : start + _ROWS_PER_STATEMENT]
                        await self._opened().execute(_insert_many(len(chunk)), [v for row in chunk for v in row])
                    if many:
                        await self._opened().execute("COMMIT")
                except BaseException as exc:
                    for item in batch:
                        item[1] = exc
                    raise
                self.commits += 1
                for item in batch:
                    item[1] = True
        if entry[1] is not True:
            raise RuntimeError("the group commit holding this row failed") from entry[1]


async def run_writers(
    sink: Sink, items: Sequence[Sequence[Any]], *, stream_base: int = 0, on_done: Callable[[], None] = lambda: None
) -> tuple[float, list[float]]:
    """Closed-loop writers, one per ``items[i]`` (writer i appends its items in order,
    seq from 1, each awaited before the next).

    Returns ``(wall seconds, per-append seconds)``; ``on_done`` is called after each append.
    """
    latencies: list[float] = []

    async def writer(index: int, own: Sequence[Any]) -> None:
        for seq, item in enumerate(own, start=1):
            t = time.perf_counter()
            await sink(stream_base + index, seq, item)
            latencies.append(time.perf_counter() - t)
            on_done()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index, own in enumerate(items):
            tg.start_soon(writer, index, own)
    return time.perf_counter() - start, latencies
