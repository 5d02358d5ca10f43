"""``PostgresStore``: the storage SPI on PostgreSQL through asyncpg.

Layout and the append function are in ``schema``; URL options in ``options``;
fault mapping and retries in ``faults``; leases in ``leases``; change
notifications (LISTEN/NOTIFY) in ``changes``.

Appends. ``append_batch`` is one statement: one round trip, one transaction,
one WAL flush for the whole group commit. To streams that all exist and are
distinct (the steady state) it is ``schema.APPEND_FAST``; a batch that creates a
stream or names one twice calls the schema's function ``append_batch`` (see
``schema``), which goes request by request. Either way the expected-seq check
is an ``UPDATE ... WHERE last_seq = expected``, atomic in the database, never
a read-then-write in the client. Each call carries a random token that the
function stores with its per-request results in the same transaction. When
the connection fails while the call is in flight (dropped, server restarted,
client-side timeout), the outcome is unknown: ``_resolve`` makes sure the
backend that ran it is gone (``pg_terminate_backend``, then waits until it is
no longer in ``pg_stat_activity``: after that its transaction can no longer
commit) and reads the token back. Found: the stored results are the answer
(the batch committed). Not found: it did not commit and is sent again. Only
when the database stays unreachable past the deadline does the caller get
``StoreUnavailableError`` with the outcome unknown, as the SPI allows.

Durability: an append returns once PostgreSQL committed it, with the server's
``synchronous_commit`` (on by default: the commit record is flushed to the
WAL first), so it survives a server crash or restart.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import anyio
import asyncpg

from durably.storage._base import StoreBase
from durably.storage._errors import (
    BlobNotFoundError,
    ConflictError,
    FencedError,
    InvalidRequestError,
    StoreClosedError,
    UnsafeCompactionError,
)
from durably.storage._spi import (
    AppendRequest,
    BlobDeleteStore,
    ChangeStore,
    IndexStore,
    LeaseRenewStore,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_append,
    check_blob,
    check_blob_digests,
    check_fence,
)
from durably.storage._url_redaction import redact_url

from . import _schema as layout
from ._changes import PostgresChanges
from ._faults import CLIENT_FAILURES, OutcomeUnknown, broken, connection_lost, retried, translate, with_retries
from ._leases import PostgresLeases
from ._options import PostgresOptions
from ._status_index import PostgresStatusIndex, check_entries, entry_rows, index_sql

T = TypeVar("T")

if TYPE_CHECKING:
    #: What the pool hands out: a proxy with every method of ``asyncpg.Connection``.
    PooledConnection: TypeAlias = asyncpg.pool.PoolConnectionProxy[asyncpg.Record]
log = logging.getLogger("durably.adapters.postgres")

_MAX_SEQ = (1 << 63) - 1


class PostgresStore(
    PostgresStatusIndex,
    PostgresLeases,
    PostgresChanges,
    StoreBase,
    BlobDeleteStore,
    LeaseRenewStore,
    ChangeStore,
    IndexStore,
):
    """A ``Store`` in a PostgreSQL schema, shared by any number of processes on any hosts.

    Building the store does no I/O. ``open`` makes the connection pool and creates or
    migrates the schema. Capabilities: blobs, leases (fencing tokens from a database
    sequence, the database's clock), changes (LISTEN/NOTIFY) and the status index. Runs on
    asyncio (anyio's asyncio backend), as asyncpg does. Idea: event-store tables as in
    Marten and Message DB, a stream row per stream carrying its version.

    Errors of every data method: transient failures are retried up to the URL's
    ``deadline`` (seconds) and then raise ``StoreUnavailableError`` (see ``faults``); a
    value PostgreSQL cannot store raises ``InvalidRequestError``; missing privileges or a
    damaged schema (a dropped table) raise ``PostgresSetupError``.

    Args:
        url: ``postgresql://user@host:port/db?schema=durably`` and libpq's own options (see
            ``durably.adapters.postgres._options`` for durably's query parameters).

    Raises:
        InvalidStoreURLError: An ``InvalidRequestError``, for a malformed URL: another
            scheme, a schema name that is not a plain identifier, or an option out of range.
        StoreUnavailableError: From ``open``, when the server cannot be reached.
        PostgresSetupError: From ``open``, on a read-only server, for missing privileges or
            a schema lock held past ``lock_timeout``.
        UnknownSchemaVersionError: From ``open``, for a schema of a newer durably.
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        self.options = PostgresOptions.from_url(url)
        self._url = redact_url(url)
        self._pool: asyncpg.Pool | None = None
        # Names this store's connections in pg_stat_activity, so _resolve only ever
        # terminates a backend of this store (a pid alone may be reused).
        self._application_name = f"durably-{uuid.uuid4().hex[:12]}"
        s = f'"{self.options.schema}"'
        self._sql: dict[str, str] = {
            "append": f"SELECT {s}.append_batch($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            "append_fast": layout.APPEND_FAST.format(s=s),
            "append_fast_fenced": layout.APPEND_FAST_FENCED.format(s=s),
            "commit": f"SELECT results FROM {s}.commits WHERE token = $1",
            "last_seq": f"SELECT last_seq FROM {s}.streams WHERE namespace = $1 AND agent_id = $2",
            "read": f"SELECT r.seq, r.data FROM {s}.records AS r JOIN {s}.streams AS st ON st.id = r.stream_id "
            "WHERE st.namespace = $1 AND st.agent_id = $2 AND r.seq > $3 ORDER BY r.seq LIMIT $4",
            "lease_token_for_share": f"SELECT token FROM {s}.leases WHERE namespace = $1 AND agent_id = $2 "
            "AND token = $3 FOR SHARE",
            "put_snapshot": f"INSERT INTO {s}.snapshots (stream_id, seq, data) SELECT id, $3::bigint, $4::bytea "
            f"FROM {s}.streams WHERE namespace = $1 AND agent_id = $2 AND $3::bigint BETWEEN 1 AND last_seq "
            "ON CONFLICT (stream_id, seq) DO UPDATE SET data = excluded.data",
            "get_snapshot": f"SELECT sn.seq, sn.data FROM {s}.snapshots AS sn JOIN {s}.streams AS st ON st.id = sn.stream_id "
            "WHERE st.namespace = $1 AND st.agent_id = $2 AND sn.seq <= $3 ORDER BY sn.seq DESC LIMIT 1",
            "delete_snapshots": f"DELETE FROM {s}.snapshots AS sn USING {s}.streams AS st WHERE st.id = sn.stream_id "
            "AND st.namespace = $1 AND st.agent_id = $2 AND sn.seq < $3 AND sn.seq < "
            f"(SELECT max(seq) FROM {s}.snapshots AS k WHERE k.stream_id = st.id)",
            # One statement, so the covering-snapshot check and the deletion see the same snapshots.
            "delete_records": f"WITH st AS (SELECT id, EXISTS (SELECT 1 FROM {s}.snapshots AS sn WHERE sn.stream_id = streams.id "
            f"AND sn.seq >= $3) AS covered FROM {s}.streams WHERE namespace = $1 AND agent_id = $2), "
            f"gone AS (DELETE FROM {s}.records WHERE stream_id = (SELECT id FROM st WHERE covered) "
            "AND seq <= $3) SELECT covered FROM st",
            "list_first": f"SELECT agent_id FROM {s}.streams WHERE namespace = $1 AND agent_id >= $2 "
            "AND ($3::text IS NULL OR agent_id < $3) ORDER BY agent_id LIMIT $4",
            "list_next": f"SELECT agent_id FROM {s}.streams WHERE namespace = $1 AND agent_id > $2 "
            "AND ($3::text IS NULL OR agent_id < $3) ORDER BY agent_id LIMIT $4",
            "lock_stream": f"SELECT id FROM {s}.streams WHERE namespace = $1 AND agent_id = $2 FOR UPDATE",
            "ensure_stream": f"INSERT INTO {s}.streams (namespace, agent_id) VALUES ($1, $2) "
            "ON CONFLICT (namespace, agent_id) DO NOTHING",
            "put_blob": f"INSERT INTO {s}.blobs (stream_id, digest, data) SELECT id, $3::text, $4::bytea "
            f"FROM {s}.streams WHERE namespace = $1 AND agent_id = $2 ON CONFLICT (stream_id, digest) DO NOTHING",
            "get_blob": f"SELECT b.data FROM {s}.blobs AS b JOIN {s}.streams AS st ON st.id = b.stream_id "
            "WHERE st.namespace = $1 AND st.agent_id = $2 AND b.digest = $3",
            "delete_blobs": f"DELETE FROM {s}.blobs WHERE stream_id = (SELECT id FROM {s}.streams "
            "WHERE namespace = $1 AND agent_id = $2) AND digest = ANY($3::text[])",
        }
        self._sql.update(self._lease_sql(s))
        self._sql.update(index_sql(s))
        # delete_stream's statements, in order: the stream's rows, then the stream.
        self._purge_sql = [
            f"DELETE FROM {s}.{table} WHERE stream_id = $1" for table in ("records", "snapshots", "blobs")
        ] + [f"DELETE FROM {s}.streams WHERE id = $1"]

    def _location(self) -> str:
        return self._url  # the password, if any, replaced by ***

    # -- lifecycle ---------------------------------------------------------------

    async def _open(self) -> None:
        opts = self.options

        async def connect() -> asyncpg.Pool:
            return await asyncpg.create_pool(
                opts.dsn,
                min_size=opts.pool_min,
                max_size=opts.pool_max,
                timeout=opts.connect_timeout,
                # Client-side bound a little past the server's: catches a dead link the server cannot report.
                command_timeout=opts.statement_timeout + 5,
                server_settings={
                    "application_name": self._application_name,
                    "statement_timeout": str(int(opts.statement_timeout * 1000)),
                    "idle_in_transaction_session_timeout": str(math.ceil(opts.idle_in_transaction_timeout * 1000)),
                },
                reset=_end_transaction,
            )

        async def connect_and_prepare() -> asyncpg.Pool:
            pool = await connect()
            try:
                async with pool.acquire() as conn:
                    await layout.prepare(conn, opts.schema, opts.lock_timeout)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    pool.terminate()
                raise
            return pool

        # The schema's preparation is retried with the connection: a server restarting while a
        # store opens may drop the connection mid-prepare (the prepare is idempotent).
        self._pool = await with_retries(min(opts.deadline, 10.0), f"opening {self._url}", connect_and_prepare)

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(10):
                    await pool.close()  # waits for connections in use to be released
                    return
                pool.terminate()

    # -- connection access -------------------------------------------------------

    def _connections(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreClosedError("PostgresStore is not open")
        return self._pool

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PooledConnection]:
        """A pooled connection for the block. A failure to give it back (the server went away
        after the block's work was done) is not the block's failure: once a statement
        returned, its outcome is known, and the pool replaces the broken connection."""
        pool = self._connections()
        conn = await pool.acquire()
        try:
            yield conn
        except BaseException as exc:
            if broken(exc):
                # Mid-exchange or dead: reused, it would fail the next call ("another operation is
                # in progress"). Terminated, the pool opens a fresh one in its place.
                conn.terminate()
            raise
        finally:
            try:
                await pool.release(conn)
            except _RELEASE_FAILURES as exc:
                log.debug("a pooled connection broke on release (the pool drops it): %s", exc)

    async def _call(self, what: str, work: Callable[[PooledConnection], Awaitable[T]]) -> T:
        """Run ``work(connection)`` (idempotent), retrying transient failures; errors translated."""
        self._connections()

        async def attempt() -> T:
            async with self._connection() as conn:
                return await work(conn)

        return await with_retries(self.options.deadline, what, attempt)

    async def _fetch(self, what: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._call(what, lambda conn: conn.fetch(sql, *args))

    async def _execute(self, what: str, sql: str, *args: Any) -> str:
        return await self._call(what, lambda conn: conn.execute(sql, *args))

    # -- journal -----------------------------------------------------------------

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches in one database call: a group commit; see ``Store.append_batch``.

        Without index entries, one statement: one round trip, one transaction, one WAL flush
        for the whole batch (``schema.APPEND_FAST`` to distinct existing streams, else the
        schema's ``append_batch`` function); requests with index entries add an ``UPDATE`` of
        them in the same transaction. The expected-seq check is an ``UPDATE ... WHERE last_seq = expected`` in the database. When
        the connection fails mid-call, the outcome is read back by the call's token before
        anything is re-sent (see the module docstring). Successful requests are committed,
        with the server's ``synchronous_commit``, when this returns.

        Args:
            requests: The appends, in order; a repeated stream's later request sees the
                earlier one's records.

        Returns:
            One entry per request, in order: the stream's new last seq, a ``FencedError``
                (returned, not raised) when its ``fence`` is not the stream's lease token (checked
                first, in the same transaction: ``schema._APPEND_BATCH_V6``), or a ``ConflictError``
                (returned) when its expected seq was stale; that request writes nothing.

        Raises:
            InvalidRequestError: For a malformed request or index entry, before any I/O, or for
                a value PostgreSQL cannot store.
            StoreUnavailableError: When the database stays unreachable past the ``deadline``: the
                outcome is unknown, re-read before retrying.
        """
        self._check_open()
        for request in requests:
            check_append(request)
        check_entries(requests)
        if not requests:
            return []
        indexed = any(r.index is not None for r in requests)
        fences = [r.fence for r in requests]
        args: tuple[Any, ...] = (
            uuid.uuid4(),
            [r.stream.namespace for r in requests],
            [r.stream.agent_id for r in requests],
            [r.expected_seq for r in requests],
            [len(r.records) for r in requests],
            [index for index, r in enumerate(requests, start=1) for _ in r.records],  # each record's request
            [offset for r in requests for offset in range(1, len(r.records) + 1)],  # and its place in it
            [data for r in requests for data in r.records],
            fences,
        )
        # Distinct streams that all exist (the steady state of a runtime): one statement; else the function.
        keys = {(r.stream.namespace, r.stream.agent_id) for r in requests}
        if len(keys) == len(requests) and all(r.expected_seq > 0 for r in requests):
            if any(fence is not None for fence in fences):
                sql = self._sql["append_fast_fenced"]
            else:
                sql, args = self._sql["append_fast"], args[:8]  # no fence: no lease is read or locked
        else:
            sql = self._sql["append"]
        unknown: OutcomeUnknown | None = None  # an attempt whose outcome must be read back before any re-send

        async def attempt() -> list[int]:
            nonlocal unknown
            found = None if unknown is None else await self._resolve(args[0], unknown)
            if found is not None:
                return found
            unknown = None  # never sent, or known not to have committed: (re)send
            try:
                return await self._append_once(sql, args, requests if indexed else None)
            except OutcomeUnknown as exc:
                unknown = exc
                raise

        try:
            results = await retried(self.options.deadline, attempt)
        except Exception as exc:
            translated = translate(exc, "append")
            if translated is exc:
                raise
            raise translated from exc
        return _outcomes(requests, results)

    async def _append_once(
        self, sql: str, args: tuple[Any, ...], indexed: Sequence[AppendRequest] | None = None
    ) -> list[int]:
        """One append statement (with ``indexed``, the requests, in one transaction with their
        index entries: ``status_index``). Raises ``OutcomeUnknown`` when the connection failed mid-call."""
        async with self._connection() as conn:
            pid = conn.get_server_pid()
            try:
                if indexed is None:
                    return list(await conn.fetchval(sql, *args))
                async with conn.transaction():
                    results = list(await conn.fetchval(sql, *args))
                    if (rows := entry_rows(indexed, results[: len(indexed)])) is not None:
                        await conn.execute(self._sql["set_entries"], *rows)
                return results
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name != "commits_pkey":
                    raise
                # Our token is stored: an earlier attempt committed after all. Read it back.
                raise OutcomeUnknown(exc, None) from exc
            except Exception as exc:
                if connection_lost(exc):
                    raise OutcomeUnknown(exc, pid) from exc
                raise

    async def _resolve(self, token: uuid.UUID, unknown: OutcomeUnknown) -> list[int] | None:
        """Decide an append whose connection failed mid-call: its stored results when it
        committed, None when it surely did not (its backend is gone and left no token).
        Database errors propagate (the caller retries the resolution, never a blind re-send)."""
        async with self._connection() as conn:
            if unknown.backend_pid is not None:
                await self._end_backend(conn, unknown.backend_pid)
            found = await conn.fetchval(self._sql["commit"], token)
        return None if found is None else list(found)

    async def _end_backend(self, conn: PooledConnection, pid: int) -> None:
        """Terminate this store's backend ``pid`` if it still runs, and wait until it is gone."""
        sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2"
        with anyio.fail_after(self.options.statement_timeout + 5):
            while await conn.fetch(sql, pid, self._application_name):
                await anyio.sleep(0.01)

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to ``stream``: one query of its ``streams`` row.

        It never decreases, also after ``delete_records`` removed every record.

        Args:
            stream: The stream to look up.

        Returns:
            The last seq; 0 for an unknown stream.
        """
        self._check_open()
        rows = await self._fetch("last_seq", self._sql["last_seq"], stream.namespace, stream.agent_id)
        return rows[0][0] if rows else 0

    async def read(
        self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512
    ) -> AsyncGenerator[StoredRecord, None]:
        """Yield the records of ``stream`` with seq > ``after_seq``, in seq order.

        One query of ``page_size`` rows per page; a pooled connection is held for one page at
        a time, never across a yield. Records deleted by compaction are not yielded; an
        unknown stream yields nothing.

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
        while True:
            page = await self._fetch("read", self._sql["read"], stream.namespace, stream.agent_id, after_seq, page_size)
            for seq, data in page:
                yield StoredRecord(seq, data)
            if len(page) < page_size:
                return
            after_seq = page[-1][0]

    # -- snapshots ---------------------------------------------------------------

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        """Store the snapshot of ``stream`` at ``seq``, overwriting one at the same seq.

        Without a fence, one upsert statement, so the range check and the write see the same
        last seq. With one, a transaction first locks the stream's lease row FOR SHARE if it
        still holds that token (a takeover or purge then waits for this transaction, or was
        seen: see ``schema._APPEND_BATCH_V6``), then upserts.

        Args:
            stream: The stream the snapshot belongs to.
            seq: The seq it covers (records 1..``seq`` folded in).
            data: The encoded snapshot frame.
            fence: The writer's lease token, checked as ``AppendRequest.fence``; None: no check.

        Raises:
            FencedError: When ``fence`` is not the stream's lease token (another owner took the
                lease, or the stream was purged); nothing stored.
            InvalidRequestError: When ``data`` is not ``bytes``, ``fence`` is malformed
                (``check_fence``), or ``seq`` is not within 1..``last_seq(stream)`` (also for an
                unknown stream).
        """
        self._check_open()
        check_fence(fence)
        if not isinstance(data, bytes):
            raise InvalidRequestError(f"snapshot data must be bytes, got {type(data).__name__}")
        if not 1 <= seq <= _MAX_SEQ:
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        key = (stream.namespace, stream.agent_id)
        if fence is None:
            status = await self._execute("put_snapshot", self._sql["put_snapshot"], *key, seq, data)
        else:

            async def put(conn: PooledConnection) -> str | FencedError:
                async with conn.transaction():
                    if await conn.fetchval(self._sql["lease_token_for_share"], *key, fence) is None:
                        last = await conn.fetchval(self._sql["last_seq"], *key) or 0
                        return FencedError(stream, last, last, fence=fence)
                    return await conn.execute(self._sql["put_snapshot"], *key, seq, data)

            outcome = await self._call("put_snapshot", put)  # idempotent: an upsert of the same bytes
            if isinstance(outcome, FencedError):
                raise outcome
            status = outcome
        if status != "INSERT 0 1":
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        """The snapshot of ``stream`` with the highest seq <= ``at_or_before``: one indexed query.

        Args:
            stream: The stream to look in.
            at_or_before: The highest seq wanted; None: the latest snapshot.

        Returns:
            The snapshot, or None when the stream has none at or before that seq.
        """
        self._check_open()
        bound = _MAX_SEQ if at_or_before is None else max(min(at_or_before, _MAX_SEQ), -1)
        rows = await self._fetch("get_snapshot", self._sql["get_snapshot"], stream.namespace, stream.agent_id, bound)
        return StoredSnapshot(rows[0][0], rows[0][1]) if rows else None

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """Delete the snapshots of ``stream`` with seq < ``before_seq``, always keeping the latest one.

        One DELETE statement. An unknown stream has nothing to delete.

        Args:
            stream: The stream whose snapshots go.
            before_seq: Snapshots below this seq are deleted, unless one is the latest.
        """
        self._check_open()
        bound = max(min(before_seq, _MAX_SEQ), -1)
        await self._execute("delete_snapshots", self._sql["delete_snapshots"], stream.namespace, stream.agent_id, bound)

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """Compaction: delete the records of ``stream`` with seq <= ``through_seq``.

        One statement, so the covering-snapshot check and the deletion see the same
        snapshots. ``last_seq`` is unchanged; an unknown stream is left alone.

        Args:
            stream: The stream to compact.
            through_seq: The highest seq to delete.

        Raises:
            UnsafeCompactionError: Unless a snapshot exists at a seq >= ``through_seq``.
        """
        self._check_open()
        bound = max(min(through_seq, _MAX_SEQ), -1)
        rows = await self._fetch(
            "delete_records", self._sql["delete_records"], stream.namespace, stream.agent_id, bound
        )
        if rows and not rows[0][0]:
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")

    # -- streams -----------------------------------------------------------------

    async def list_streams(self, namespace: str, prefix: str = "", *, page_size: int = 512) -> AsyncIterator[StreamId]:
        """Yield the streams of ``namespace`` whose agent id starts with ``prefix``, sorted by agent id.

        A keyset-paged range scan from ``prefix`` up to its successor, ``page_size`` rows per
        query. A stream that holds only blobs is listed too (``put_blob`` creates its row).

        Args:
            namespace: The namespace to list; other namespaces' streams are never yielded.
            prefix: The agent-id prefix; ``""`` lists every stream of the namespace.
            page_size: Rows per query (this adapter's addition to the SPI's signature).

        Yields:
            Each ``StreamId``, in agent-id order (code points: the columns are ``COLLATE "C"``).

        Raises:
            InvalidRequestError: When ``page_size`` < 1 (raised at the first iteration).
        """
        self._check_open()
        if page_size < 1:
            raise InvalidRequestError(f"page_size must be >= 1, got {page_size}")
        upper = _prefix_successor(prefix)
        rows = await self._fetch("list_streams", self._sql["list_first"], namespace, prefix, upper, page_size)
        while True:
            for (agent_id,) in rows:
                yield StreamId(namespace, agent_id)
            if len(rows) < page_size:
                return
            rows = await self._fetch("list_streams", self._sql["list_next"], namespace, rows[-1][0], upper, page_size)

    async def delete_stream(self, stream: StreamId) -> None:
        """Purge the stream's records, snapshots, blobs, lease and last seq; an unknown stream is fine.

        One transaction that first locks the stream's row (waiting for an append in flight to
        commit), so every record committed before the purge goes with it. The lease row is
        deleted; fencing tokens still never decrease for a stream id, since every token comes
        from the ``lease_tokens`` sequence.

        Args:
            stream: The stream to purge.
        """
        self._check_open()

        async def purge(conn: PooledConnection) -> None:
            async with conn.transaction():
                await conn.execute(self._sql["delete_lease"], stream.namespace, stream.agent_id)
                sid = await conn.fetchval(self._sql["lock_stream"], stream.namespace, stream.agent_id)
                if sid is not None:
                    for sql in self._purge_sql:
                        await conn.execute(sql, sid)

        await self._call("delete_stream", purge)

    # -- blobs -------------------------------------------------------------------

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """Store ``data`` as a blob of ``stream`` under its SHA-256 hex digest; idempotent.

        One transaction that also creates the stream's row (last seq 0) when missing, so the
        blob is purged with the stream (and the stream is listed). Data above 1 MiB is hashed
        in a worker thread, off the event loop.

        Args:
            stream: The stream the blob belongs to.
            data: The bytes to store.

        Returns:
            The SHA-256 hex digest of ``data`` (64 lowercase hex characters), its name for
                ``get_blob``.

        Raises:
            InvalidRequestError: When ``data`` is not ``bytes``.
        """
        self._check_open()
        check_blob(stream, data)
        if len(data) > 1 << 20:  # hashlib releases the GIL: hash big blobs off the event loop
            digest = await anyio.to_thread.run_sync(lambda: hashlib.sha256(data).hexdigest())
        else:
            digest = hashlib.sha256(data).hexdigest()

        async def put(conn: PooledConnection) -> None:
            async with conn.transaction():
                await conn.execute(self._sql["ensure_stream"], stream.namespace, stream.agent_id)
                await conn.execute(self._sql["put_blob"], stream.namespace, stream.agent_id, digest, data)

        await self._call("put_blob", put)
        return digest

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        """The bytes of blob ``digest`` of ``stream``: one indexed query.

        Args:
            stream: The stream the blob belongs to.
            digest: The SHA-256 hex digest ``put_blob`` returned.

        Returns:
            The blob's bytes.

        Raises:
            BlobNotFoundError: When the stream holds no blob with that digest (a malformed
                digest matches none).
        """
        self._check_open()
        rows = await self._fetch("get_blob", self._sql["get_blob"], stream.namespace, stream.agent_id, str(digest))
        if not rows:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        data: bytes = rows[0][0]
        return data

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        """Delete the named blobs of ``stream`` in one statement; a missing one is skipped.

        Idempotent, so a transient failure is retried like a read.

        Args:
            stream: The stream whose blobs to delete.
            digests: The digests ``put_blob`` returned.

        Raises:
            InvalidRequestError: Malformed arguments (``check_blob_digests``).
            StoreUnavailableError: When the database stays unreachable.
        """
        self._check_open()
        names = check_blob_digests(stream, digests)
        if names:
            await self._execute("delete_blobs", self._sql["delete_blobs"], stream.namespace, stream.agent_id, names)


def _outcomes(requests: Sequence[AppendRequest], results: Sequence[int]) -> list[int | Exception]:
    """Each request's outcome from an append's stored results: n slots (the new last seq, or
    -1 - the actual one), then the numbers (from 1) of the fenced requests."""
    fenced = set(results[len(requests) :])
    outcomes: list[int | Exception] = []
    for number, (request, result) in enumerate(zip(requests, results, strict=False), start=1):
        if number in fenced and request.fence is not None:
            outcomes.append(FencedError(request.stream, request.expected_seq, -1 - result, fence=request.fence))
        elif result < 0:
            outcomes.append(ConflictError(request.stream, request.expected_seq, -1 - result))
        else:
            outcomes.append(result)
    return outcomes


#: What giving a broken connection back to the pool may raise (the pool drops it then).
_RELEASE_FAILURES: tuple[type[BaseException], ...] = (asyncpg.PostgresError, *CLIENT_FAILURES)


async def _end_transaction(conn: asyncpg.Connection) -> None:
    """What the pool does with a connection given back: roll back a transaction left open
    (a cancelled block), nothing else. The adapter changes no session state (no SET, LISTEN,
    cursors or session advisory locks), so asyncpg's default reset query would only add a
    round trip to every call (measured: about 2 ms of a 16-stream group commit on a busy host)."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def _prefix_successor(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: no bound),
    in code-point order; surrogates are skipped since they cannot be stored as UTF-8."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None
