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

import json
from collections.abc import AsyncIterator, Collection

import aiosqlite

from durably.storage.errors import InvalidRequestError
from durably.storage.spi import IndexedStream, IndexEntry, StreamId

#: Columns added to ``streams`` by schema version 3 (``ALTER TABLE``: a v2 file keeps its rows, entries NULL).
COLUMNS = (("status", "TEXT"), ("definition", "TEXT"), ("index_seq", "INTEGER"), ("updated_at", "REAL"),
           ("approvals", "TEXT"))
CREATE_INDEX = "CREATE INDEX IF NOT EXISTS streams_by_status ON streams (namespace, status, agent_id)"
#: The slow append path's statement for a request that carries an entry (``SET`` by the row's id).
SET_ENTRY = ("UPDATE streams SET status = ?, definition = ?, index_seq = ?, updated_at = ?, approvals = ? "
             "WHERE id = ?")
_FIELDS = "agent_id, status, definition, index_seq, updated_at, approvals"


def entry_params(entry: IndexEntry | None) -> tuple[object, ...]:
    """The five column values of ``entry`` (all NULL for None)."""
    if entry is None:
        return (None, None, None, None, None)
    if not isinstance(entry, IndexEntry):
        raise InvalidRequestError(f"an index entry must be an IndexEntry, got {type(entry).__name__}")
    return (entry.status, entry.definition, entry.seq, entry.updated_at, json.dumps(list(entry.open_approvals)))


def _entry(status: str | None, definition: str, seq: int, updated_at: float, approvals: str) -> IndexEntry | None:
    if status is None:
        return None
    return IndexEntry(status=status, definition=definition, seq=seq, updated_at=updated_at,
                      open_approvals=tuple(json.loads(approvals)))


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

    async def list_index(self, namespace: str, statuses: Collection[str] | None = None, *,
                         page_size: int = 512) -> AsyncIterator[IndexedStream]:
        """See ``IndexStore.list_index``: one keyset-paged range scan per status asked for, and one for NULL."""
        self._check_open()  # type: ignore[attr-defined]
        if page_size < 1:
            raise InvalidRequestError(f"page_size must be >= 1, got {page_size}")
        if statuses is None:
            wheres: list[tuple[str, tuple[object, ...]]] = [("", ())]
        else:
            wheres = [("AND status IS NULL ", ())] + [("AND status = ? ", (s,)) for s in sorted(set(statuses))]
        for where, params in wheres:
            sql = (f"SELECT {_FIELDS} FROM streams WHERE namespace = ? {where}AND agent_id > ? AND last_seq > 0 "
                   "ORDER BY agent_id LIMIT ?")
            after = ""
            while True:
                rows = await self._fetch(sql, (namespace, *params, after, page_size))  # type: ignore[attr-defined]
                for agent_id, status, definition, seq, updated_at, approvals in rows:
                    yield IndexedStream(StreamId(namespace, agent_id), _entry(status, definition, seq, updated_at, approvals))
                if len(rows) < page_size:
                    break
                after = rows[-1][0]

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """See ``IndexStore.get_index``."""
        self._check_open()  # type: ignore[attr-defined]
        rows = await self._fetch(  # type: ignore[attr-defined]
            f"SELECT {_FIELDS} FROM streams WHERE namespace = ? AND agent_id = ?", (stream.namespace, stream.agent_id))
        if not rows:
            return None
        _, status, definition, seq, updated_at, approvals = rows[0]
        return _entry(status, definition, seq, updated_at, approvals)

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """See ``IndexStore.put_index``: one ``UPDATE ... WHERE last_seq = at_seq`` (the compare-and-set)."""
        self._check_open()  # type: ignore[attr-defined]
        changed = await self._write(  # type: ignore[attr-defined]
            "UPDATE streams SET status = ?, definition = ?, index_seq = ?, updated_at = ?, approvals = ? "
            "WHERE namespace = ? AND agent_id = ? AND last_seq = ? AND last_seq > 0",
            (*entry_params(entry), stream.namespace, stream.agent_id, at_seq))
        return bool(changed == 1)
