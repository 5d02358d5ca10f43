"""The limit on PostgreSQL: the same bytes inserted with plain asyncpg, no durably in between.

Used by the append suite when the store under test is ``postgresql://``: the
limit then meets the same server, the same WAL flush per commit and the same
network hop as durably's adapter, in a schema of its own (``<schema>_limit``,
dropped at the end). The table is what any journal needs, a ``bytea`` keyed by
(stream, seq). Two ways to insert, as ``durably.bench.limit.RawSQLite``:

* ``per_commit``: one row, one autocommitted INSERT (one round trip, one WAL
  flush) per append;
* ``group``: leader/follower group commit over one connection: whoever takes
  the lock inserts every queued row with one ``INSERT ... SELECT FROM unnest``
  (one round trip and one WAL flush per batch), the fewest plain asyncpg can
  get for closed-loop writers. No expected-seq check, no conflict detection,
  no read-back token: that is what the limit leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import asyncpg

from durably.adapters.postgres._options import PostgresOptions


class RawPostgres:
    """A plain asyncpg journal on the server of ``url`` (a ``postgresql://`` store URL). Use ``async with``.

    ``per_commit`` and ``group`` are ``durably.bench.limit.Sink``s: ``await sink(stream, seq, data)``
    returns once the row is committed.
    """

    def __init__(self, url: str) -> None:
        options = PostgresOptions.from_url(url)
        self._dsn = options.dsn
        self.schema = f"{options.schema}_limit"[:63]
        self._conn: asyncpg.Connection | None = None
        self._lock = anyio.Lock()
        self._queue: list[list[Any]] = []
        self.commits = 0

    async def __aenter__(self) -> RawPostgres:
        self._conn = await asyncpg.connect(self._dsn)
        await self._conn.execute(
            f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE; CREATE SCHEMA "{self.schema}"; '
            f'CREATE TABLE "{self.schema}".journal (stream bigint NOT NULL, seq bigint NOT NULL, '
            "data bytea NOT NULL, PRIMARY KEY (stream, seq))"
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._conn is not None:
            with anyio.CancelScope(shield=True):
                await self._conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
                await self._conn.close()
            self._conn = None

    def _opened(self) -> asyncpg.Connection:
        if self._conn is None:
            raise RuntimeError("RawPostgres used outside its async with block")
        return self._conn

    async def per_commit(self, stream: int, seq: int, data: bytes) -> None:
        """Insert one row in its own transaction."""
        async with self._lock:
            await self._opened().execute(f'INSERT INTO "{self.schema}".journal VALUES ($1, $2, $3)', stream, seq, data)
            self.commits += 1

    async def group(self, stream: int, seq: int, data: bytes) -> None:
        """Insert one row; rows queued meanwhile share the statement and its transaction (group commit)."""
        await self.group_rows(stream, seq, [data])

    async def group_rows(self, stream: int, seq: int, datas: Sequence[bytes]) -> None:
        """Insert ``datas`` as rows ``seq, seq + 1, ...`` of ``stream`` in one append (an agent
        step's records); appends queued meanwhile share the statement and its transaction.
        A failed commit fails every append of its batch (``RuntimeError`` for the followers).
        """
        entry: list[Any] = [[(stream, seq + i, data) for i, data in enumerate(datas)], None]  # rows, outcome
        self._queue.append(entry)
        async with self._lock:
            if entry[1] is None:
                batch, self._queue = self._queue, []
                rows = [row for item in batch for row in item[0]]
                try:
                    await self._opened().execute(
                        f'INSERT INTO "{self.schema}".journal SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])',
                        [r[0] for r in rows],
                        [r[1] for r in rows],
                        [r[2] for r in rows],
                    )
                except BaseException as exc:
                    for item in batch:
                        item[1] = exc
                    raise
                self.commits += 1
                for item in batch:
                    item[1] = True
        if entry[1] is not True:
            raise RuntimeError("the group commit holding this row failed") from entry[1]
