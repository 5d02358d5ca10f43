"""The PostgreSQL adapter's status index (``CAP_STATUS_INDEX``): five columns of the ``streams`` row.

Schema version 5 adds them and ``streams_by_status`` (namespace, status,
agent_id). An append that carries entries runs in one transaction: the
append statement, then one ``UPDATE ... FROM unnest`` setting the entries of
the requests that did not conflict. The batch's token is stored by the same
transaction, so an append whose connection dropped is resolved as before:
found, both the records and the entries committed; not found, neither.
A purge deletes the row and the entry with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from typing import TYPE_CHECKING, Any

from durably.storage._index_rows import FIELDS, Scan, entry_columns, entry_from_row, list_rows
from durably.storage._spi import AppendRequest, IndexedStream, IndexEntry, StreamId

#: Schema version 5 (``schema.MIGRATIONS[5]``).
MIGRATION = (
    'ALTER TABLE {s}.streams ADD COLUMN status text COLLATE "C", ADD COLUMN definition text, '
    "ADD COLUMN index_seq bigint, ADD COLUMN updated_at double precision, ADD COLUMN approvals text",
    "CREATE INDEX streams_by_status ON {s}.streams (namespace, status, agent_id)",
)


def index_sql(s: str) -> dict[str, str]:
    """The statements of this module for schema ``s`` (quoted)."""
    return {
        "set_entries": f"UPDATE {s}.streams AS st SET status = e.status, definition = e.definition, "
        "index_seq = e.seq, updated_at = e.updated_at, approvals = e.approvals "
        "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::float8[], "
        "$7::text[]) AS e (namespace, agent_id, status, definition, seq, updated_at, approvals) "
        "WHERE st.namespace = e.namespace AND st.agent_id = e.agent_id",
        "list_index_all": f"SELECT {FIELDS} FROM {s}.streams WHERE namespace = $1 AND agent_id > $2 "
        "AND last_seq > 0 ORDER BY agent_id LIMIT $3",
        "list_index_null": f"SELECT {FIELDS} FROM {s}.streams WHERE namespace = $1 AND status IS NULL "
        "AND agent_id > $2 AND last_seq > 0 ORDER BY agent_id LIMIT $3",
        "list_index_status": f"SELECT {FIELDS} FROM {s}.streams WHERE namespace = $1 AND status = $4 "
        "AND agent_id > $2 AND last_seq > 0 ORDER BY agent_id LIMIT $3",
        "get_index": f"SELECT {FIELDS} FROM {s}.streams WHERE namespace = $1 AND agent_id = $2",
        "put_index": f"UPDATE {s}.streams SET status = $4, definition = $5, index_seq = $6, updated_at = $7, "
        "approvals = $8 WHERE namespace = $1 AND agent_id = $2 AND last_seq = $3 AND last_seq > 0",
    }


def entry_rows(requests: Sequence[AppendRequest], results: Sequence[int]) -> tuple[list[object], ...] | None:
    """The ``set_entries`` arguments for the requests that carry an entry and did not conflict
    (``results[i] >= 0``); the last one of a stream wins. None when there are none."""
    last: dict[tuple[str, str], IndexEntry] = {}
    for request, result in zip(requests, results, strict=True):
        if request.index is not None and result >= 0:
            last[(request.stream.namespace, request.stream.agent_id)] = request.index
    if not last:
        return None
    columns = [entry_columns(entry) for entry in last.values()]
    return ([k[0] for k in last], [k[1] for k in last], *map(list, zip(*columns, strict=True)))


def check_entries(requests: Sequence[AppendRequest]) -> None:
    """Refuse a malformed entry before any I/O (``InvalidRequestError``)."""
    for request in requests:
        if request.index is not None:
            entry_columns(request.index)


class PostgresStatusIndex:
    """Mixin giving ``PostgresStore`` the ``IndexStore`` reads and ``put_index``.

    Relies on the host's ``_check_open()``, ``_fetch(what, sql, *args)``,
    ``_execute(what, sql, *args)`` and ``_sql`` (with ``index_sql``'s statements).
    """

    if TYPE_CHECKING:  # the host's (PostgresStore), declared for the type checker
        _sql: dict[str, str]

        def _check_open(self) -> None: ...

        async def _fetch(self, what: str, sql: str, *args: Any) -> list[Any]: ...  # asyncpg Records

        async def _execute(self, what: str, sql: str, *args: Any) -> str: ...

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
        names = {"all": "list_index_all", "null": "list_index_null", "status": "list_index_status"}

        async def fetch(scan: Scan, after: str, limit: int) -> Sequence[Sequence[Any]]:
            kind, status = scan
            extra = () if status is None else (status,)
            rows: Sequence[Sequence[Any]] = await self._fetch(
                "list_index", self._sql[names[kind]], namespace, after, limit, *extra
            )
            return rows

        async for row in list_rows(namespace, statuses, page_size, fetch):
            yield row

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """The status index entry of ``stream``: one query of its ``streams`` row; see ``IndexStore.get_index``.

        Args:
            stream: The stream to look up.

        Returns:
            The entry, or None for an unknown stream or one without an entry.
        """
        self._check_open()
        rows = await self._fetch("get_index", self._sql["get_index"], stream.namespace, stream.agent_id)
        if not rows:
            return None
        _, status, definition, seq, updated_at, approvals = tuple(rows[0])
        return entry_from_row(status, definition, seq, updated_at, approvals)

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """Set (None: remove) the entry of ``stream`` if its last seq is still ``at_seq``; see ``IndexStore.put_index``.

        One ``UPDATE ... WHERE last_seq = at_seq``: the compare-and-set. An unknown stream
        (``at_seq`` 0 included) is never given an entry.

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
        done = await self._execute(
            "put_index", self._sql["put_index"], stream.namespace, stream.agent_id, at_seq, *entry_columns(entry)
        )
        return bool(done == "UPDATE 1")
