"""The SQLite adapter's journal: ``append_batch`` (its fast and slow paths), ``last_seq`` and ``read``.

How an append is made durable, and when it takes which path: the module
docstring of ``durably.adapters.sqlite._store`` (the adapter's overview).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal

import anyio

from durably.storage._errors import ConflictError, FencedError, InvalidRequestError
from durably.storage._spi import AppendRequest, StoredRecord, StreamId, check_append

from . import _fencing as fencing
from . import _index as sqlite_index
from . import _layout as layout
from ._file import _seq, translate

if TYPE_CHECKING:
    import aiosqlite


class SQLiteJournal:
    """Mixin giving ``SQLiteStore`` the journal methods: ``append_batch``, ``last_seq`` and ``read``.

    Relies on the host's ``_check_open()``, ``_lock`` with ``_ready(create=True)``
    (the writer connection, for the fast path's one statement), ``_transaction()``
    (the slow path's ``BEGIN IMMEDIATE`` transaction) and ``_fetch(sql, params)``
    (a read on a reader connection); see ``SQLiteConnections``.
    """

    if TYPE_CHECKING:  # the host's (SQLiteStore), declared for the type checker
        _lock: anyio.Lock
        _leases_checked_on: object | None

        def _check_open(self) -> None: ...

        async def _fetch(self, sql: str, params: Sequence[object], *, writer: bool = False) -> list[Any]: ...

        async def _ready(self, *, create: Literal[True]) -> aiosqlite.Connection: ...

        def _transaction(self, *, fsync: bool = True) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches in one group commit; see ``Store.append_batch``.

        The fast path, for requests to existing streams (expected seq > 0) without index
        entries and with at most ``FAST_MAX_ROWS`` records in all, is one multi-row INSERT in
        autocommit mode: one hop to aiosqlite's thread. Otherwise, or when the database refuses
        that statement (a stale expected seq, an unknown stream), the batch goes the slow path:
        one ``BEGIN IMMEDIATE`` transaction that reads every ``last_seq`` first and also writes
        the requests' index entries. Either way the expected-seq check is made under the write
        lock, so it holds across processes, and so is the check of a request's ``fence``
        against the ``leases`` table (``durably.adapters.sqlite._fencing``). Successful requests
        are durable (committed, and fsynced with ``synchronous=FULL``) when this returns.

        Args:
            requests: The appends, in order; a repeated stream's later request sees the
                earlier one's records.

        Returns:
            One entry per request, in order: the stream's new last seq, a ``FencedError`` (returned,
                not raised) when its ``fence`` is not the stream's lease token (checked first), or a
                ``ConflictError`` (returned) when its expected seq was stale; that request writes nothing.

        Raises:
            InvalidRequestError: For a malformed request (``check_append``), before any I/O.
            StoreUnavailableError: For a SQLite error (locked past the busy timeout, I/O); the
                transaction was rolled back and nothing of the call is acknowledged.
        """
        self._check_open()
        for request in requests:
            check_append(request)
        if not requests:
            return []
        # An index entry must commit with its records: such (rare) batches take the slow path.
        if all(request.expected_seq > 0 and request.index is None for request in requests):
            fenced = any(request.fence is not None for request in requests)
            limit = fencing.FAST_MAX_FENCED_ROWS if fenced else layout.FAST_MAX_ROWS
            if sum(len(request.records) for request in requests) <= limit:
                results = await self._append_fast(requests, fenced=fenced)
                if results is not None:
                    return results
        return await self._append_slow(requests)

    async def _append_fast(
        self, requests: Sequence[AppendRequest], *, fenced: bool = False
    ) -> list[int | Exception] | None:
        """Every request in one autocommitted INSERT (one hop); None when the
        database refused it (a conflict, an unknown stream, a stale fence, or anything
        else the slow path will name): then nothing was written. ``fenced``: some
        request carries a fence (``fencing.fast_insert_fenced_sql``)."""
        params: list[object] = []
        results: list[int | Exception] = []
        for request in requests:
            namespace, agent_id = request.stream.namespace, request.stream.agent_id
            seq = request.expected_seq
            for data in request.records:
                seq += 1
                params += (
                    (namespace, agent_id, request.fence, seq, data) if fenced else (namespace, agent_id, seq, data)
                )
            results.append(seq)
        width, pad = (5, fencing.FAST_FENCED_PAD) if fenced else (4, layout.FAST_PAD)
        rows = len(params) // width
        padded = layout.fast_bucket(rows)
        params += pad * (padded - rows)
        sql = fencing.fast_insert_fenced_sql(padded) if fenced else layout.fast_insert_sql(padded)
        # A free lock is taken without a checkpoint (two event-loop round trips per commit).
        try:
            self._lock.acquire_nowait()
        except anyio.WouldBlock:
            await self._lock.acquire()
        try:
            db = await self._ready(create=True)
            if fenced and self._leases_checked_on is not db:
                return None  # the leases table may not exist: the slow path looks first
            with anyio.CancelScope(shield=True):  # the caller learns the outcome, always
                try:
                    await db.execute(sql, params)
                except sqlite3.IntegrityError:
                    return None  # the trigger (or a constraint) aborted the statement: rolled back
                except (sqlite3.Error, UnicodeEncodeError) as exc:
                    raise translate(exc) from exc
        finally:
            self._lock.release()
        return results

    async def _append_slow(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """The batch in one ``BEGIN IMMEDIATE`` transaction that reads every stream's
        ``last_seq`` and the fenced streams' lease tokens first, so each fenced or
        conflicting request is told apart and skipped."""
        keys = list(dict.fromkeys((r.stream.namespace, r.stream.agent_id) for r in requests))
        entries = [sqlite_index.entry_params(r.index) if r.index is not None else None for r in requests]
        results: list[int | Exception] = []
        indexed: list[tuple[object, ...]] = []
        async with self._transaction() as db:
            streams: dict[tuple[str, str], list[int]] = {}  # key -> [stream id, last seq]
            for start in range(0, len(keys), layout.KEYS_PER_STATEMENT):
                chunk = keys[start : start + layout.KEYS_PER_STATEMENT]
                padded = layout.bucket(len(chunk))
                params = [part for key in chunk for part in key]
                params += params[-2:] * (padded - len(chunk))  # a repeated key is harmless in the upsert
                for sid, namespace, agent_id, last in await db.execute_fetchall(
                    layout.lock_streams_sql(padded), params
                ):
                    streams[(namespace, agent_id)] = [sid, last]
            fenced = list(
                dict.fromkeys((r.stream.namespace, r.stream.agent_id) for r in requests if r.fence is not None)
            )
            tokens: dict[tuple[str, str], int] = {}
            if fenced and await self._has_leases_table(db):
                tokens = await fencing.admitted_tokens(db, fenced)
            rows: list[tuple[int, int, bytes]] = []
            for request, index in zip(requests, entries, strict=True):
                key = (request.stream.namespace, request.stream.agent_id)
                entry = streams[key]
                actual = max(entry[1], 0)
                if request.fence is not None and tokens.get(key) != request.fence:
                    results.append(FencedError(request.stream, request.expected_seq, actual, fence=request.fence))
                    continue
                if actual != request.expected_seq:
                    results.append(ConflictError(request.stream, request.expected_seq, actual))
                    continue
                sid = entry[0]
                if index is not None:
                    indexed.append((*index, sid))  # a later request of the same stream wins: set in order
                rows.extend((sid, actual + offset, data) for offset, data in enumerate(request.records, start=1))
                entry[1] = actual + len(request.records)
                results.append(entry[1])
            if not rows:
                # Every request conflicted or was fenced: undo the lock statement, skip the fsync.
                await db.rollback()
                return results
            orphans = [(sid,) for sid, last in streams.values() if last == layout.NEW_STREAM]
            if orphans:  # unknown streams whose every request conflicted: leave no trace
                await db.executemany("DELETE FROM streams WHERE id = ?", orphans)
            await db.executemany(layout.INSERT_RECORD, rows)
            if indexed:
                await db.executemany(sqlite_index.SET_ENTRY, indexed)
        return results

    async def _has_leases_table(self, db: aiosqlite.Connection) -> bool:
        """Whether the file has the ``leases`` table, read on the writer ``db`` in its transaction
        and remembered once true (the table is never dropped): no table, no lease ever granted."""
        if self._leases_checked_on is db:
            return True
        if not await fencing.has_leases_table(db):
            return False
        self._leases_checked_on = db
        return True

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to ``stream``: one read of its ``streams`` row.

        It never decreases, also after ``delete_records`` removed every record.

        Args:
            stream: The stream to look up.

        Returns:
            The last seq; 0 for an unknown stream.
        """
        self._check_open()
        rows = await self._fetch(
            "SELECT last_seq FROM streams WHERE namespace = ? AND agent_id = ?", (stream.namespace, stream.agent_id)
        )
        return max(_seq(rows[0][0], stream), 0) if rows else 0

    async def read(
        self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512
    ) -> AsyncGenerator[StoredRecord, None]:
        """Yield the records of ``stream`` with seq > ``after_seq``, in seq order.

        One query of ``page_size`` rows per page on a reader connection, which is held for one
        page at a time, never across a yield. Records deleted by compaction are not yielded;
        an unknown stream yields nothing.

        Args:
            stream: The stream to read.
            after_seq: Yield the records after this seq; 0 reads from the start.
            page_size: Records per query, >= 1.

        Yields:
            Each ``StoredRecord`` (seq and frame), in seq order.

        Raises:
            InvalidRequestError: When ``page_size`` < 1.
        """
        self._check_open()
        if page_size < 1:
            raise InvalidRequestError(f"page_size must be >= 1, got {page_size}")
        sql = f"SELECT seq, data FROM records WHERE stream_id = {layout.STREAM_ID} AND seq > ? ORDER BY seq LIMIT ?"
        while True:
            page = await self._fetch(sql, (stream.namespace, stream.agent_id, after_seq, page_size))
            for seq, data in page:
                yield StoredRecord(_seq(seq, stream), data)
            if len(page) < page_size:
                return
            after_seq = page[-1][0]
