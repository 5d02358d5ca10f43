"""The SQLite adapter's status index (``CAP_STATUS_INDEX``): five columns of the ``streams`` row.

The entry lives on the row every append already updates (``last_seq``), so an
append that carries one writes it in the same transaction (``SQLiteStore``'s
slow path: one ``UPDATE`` by primary key after the records), and a purge,
which deletes the row, deletes the entry with it. ``streams_by_status``
(namespace, status, agent_id) makes "which streams have status S" a range
scan of what it returns, however many finished streams the namespace holds;
streams without an entry have a NULL status and are found the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from typing import TYPE_CHECKING, Any

import aiosqlite

from durably.storage._index_rows import FIELDS, Scan, entry_columns, entry_from_row, list_rows
from durably.storage._spi import IndexedStream, IndexEntry, StreamId

#: Columns added to ``streams`` by schema version 3 (``ALTER TABLE``: a v2 file keeps its rows, entries NULL).
COLUMNS = (
    ("status", "TEXT"),
    ("definition", "TEXT"),
    ("index_seq", "INTEGER"),
    ("updated_at", "REAL"),
    ("approvals", "TEXT"),
)
CREATE_INDEX = "CREATE INDEX IF NOT EXISTS streams_by_status ON streams (namespace, status, agent_id)"
#: The slow append path's statement for a request that carries an entry (``SET`` by the row's id).
SET_ENTRY = "UPDATE streams SET status = ?, definition = ?, index_seq = ?, updated_at = ?, approvals = ? WHERE id = ?"


#: The five column values of an entry (all NULL for None), as the append statements bind them.
entry_params = entry_columns


async def upgrade(db: aiosqlite.Connection) -> None:
    """Add the index columns and their index to a file's ``streams`` table (inside ``open``'s transaction)."""
    have = {row[1] for row in await db.execute_fetchall("PRAGMA table_info(streams)")}
    for name, kind in COLUMNS:
        if name not in have:
            await db.execute(f"ALTER TABLE streams ADD COLUMN {name} {kind}")
    await db.execute(CREATE_INDEX)


class SQLiteStatusIndex:
    """Mixin giving ``SQLiteStore`` the ``IndexStore`` reads and ``put_index``.

    Relies on the host's ``_check_open()``, ``_fetch(sql, params)`` (a read on
    the reader connection) and ``_write(sql, params)`` (one autocommitted
    statement; returns the rows changed).
    """

    if TYPE_CHECKING:  # the host's (SQLiteStore), declared for the type checker

        def _check_open(self) -> None: ...

        async def _fetch(self, sql: str, params: Sequence[object], *, writer: bool = False) -> list[Any]: ...

        async def _write(self, sql: str, params: Sequence[object]) -> int: ...

    async def list_index(
        self, namespace: str, statuses: Collection[str] | None = None, *, page_size: int = 512
    ) -> AsyncIterator[IndexedStream]:
        """Yield the streams of ``namespace`` whose entry's status is in ``statuses``; see ``IndexStore.list_index``.

        One keyset-paged range scan of ``streams_by_status`` per status asked for, and one for
        the streams without an entry (NULL status), which are yielded whatever ``statuses``
        says. Streams without records (only blobs) are never yielded.

        Args:
            namespace: The namespace to list; other namespaces' streams are never yielded.
            statuses: The statuses wanted; None: every stream with records.
            page_size: Rows per query, >= 1.

        Yields:
            An ``IndexedStream`` per stream, with ``entry`` None for a stream that has records
                but no entry; in agent-id order within each scan, in no order across them.

        Raises:
            InvalidRequestError: When ``page_size`` < 1.
        """
        self._check_open()
        where = {"all": "", "null": "AND status IS NULL ", "status": "AND status = ? "}

        async def fetch(scan: Scan, after: str, limit: int) -> Sequence[Sequence[Any]]:
            kind, status = scan
            sql = (
                f"SELECT {FIELDS} FROM streams WHERE namespace = ? {where[kind]}AND agent_id > ? AND last_seq > 0 "
                "ORDER BY agent_id LIMIT ?"
            )
            params = (namespace, after, limit) if status is None else (namespace, status, after, limit)
            rows: Sequence[Sequence[Any]] = await self._fetch(sql, params)
            return rows

        async for row in list_rows(namespace, statuses, page_size, fetch):
            yield row

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """The status index entry of ``stream``: one read of its ``streams`` row; see ``IndexStore.get_index``.

        Args:
            stream: The stream to look up.

        Returns:
            The entry, or None for an unknown stream or one without an entry.
        """
        self._check_open()
        rows = await self._fetch(
            f"SELECT {FIELDS} FROM streams WHERE namespace = ? AND agent_id = ?", (stream.namespace, stream.agent_id)
        )
        if not rows:
            return None
        _, status, definition, seq, updated_at, approvals = rows[0]
        return entry_from_row(status, definition, seq, updated_at, approvals)

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """Set (None: remove) the entry of ``stream`` if its last seq is still ``at_seq``; see ``IndexStore.put_index``.

        One autocommitted ``UPDATE ... WHERE last_seq = at_seq``: the compare-and-set. An
        unknown stream (``at_seq`` 0 included) is never given an entry.

        Args:
            stream: The stream whose entry to set.
            entry: The new entry, computed from the journal read up to ``at_seq``; None
                removes it.
            at_seq: The last seq the entry was computed at.

        Returns:
            True if written; False when a record was appended meanwhile (or the stream is
                unknown), and nothing changed.

        Raises:
            InvalidRequestError: When ``entry`` is neither an ``IndexEntry`` nor None.
        """
        self._check_open()
        changed = await self._write(
            "UPDATE streams SET status = ?, definition = ?, index_seq = ?, updated_at = ?, approvals = ? "
            "WHERE namespace = ? AND agent_id = ? AND last_seq = ? AND last_seq > 0",
            (*entry_params(entry), stream.namespace, stream.agent_id, at_seq),
        )
        return bool(changed == 1)
