"""The SQLite adapter: ``sqlite:///path/to/agents.db``, on aiosqlite.

One database file holds every stream of a runtime. An append is durable when
acknowledged: WAL journal mode with ``synchronous=FULL`` (every COMMIT fsyncs the
WAL), one write transaction per group commit (``durably.storage._group_commit.GroupCommitter``).
The expected-seq check is made under the write lock, so it holds across processes
sharing the file: by the database itself on the fast path (below), after
``BEGIN IMMEDIATE`` on the slow one.

URL (SQLAlchemy's convention): ``sqlite:///relative/path.db`` or
``sqlite:////absolute/path.db`` (the path is what follows ``sqlite:///``), with
optional query options ``synchronous=FULL|NORMAL`` (default FULL; NORMAL may lose
the last commits on power loss, never on a process crash) and ``busy_timeout``
(milliseconds to wait for another process's write lock, default 10000), and
``create=1``: make the file's missing parent directories (owner-only); without
it a path whose folder does not exist is refused at ``open()``.
In-memory databases are not supported: they would not be durable.

Every call of the connection is a hop to aiosqlite's thread, so a group commit
of appends to existing streams is ONE of them: a single multi-row INSERT in
autocommit mode (atomic; it commits and fsyncs in the same call). Each row
continues its stream or the database aborts the whole statement: a BEFORE INSERT
trigger advances ``streams.last_seq`` only from ``seq - 1`` and raises otherwise
(``records_continue_stream``), and stream ids are looked up inside the statement,
so no cached id can point a write at a purged and re-created stream. When that
statement fails (a stale expected seq, an unknown stream) nothing was written,
and the batch goes the slow path: one ``BEGIN IMMEDIATE`` transaction that reads
every ``last_seq``, gives each conflicting request its ``ConflictError`` and
inserts the others (four hops). Batches with a new stream (expected seq 0) or
more than ``sqlite_layout.FAST_MAX_ROWS`` records go the slow path directly.
A request carrying a fencing token (``AppendRequest.fence``) is checked against
the ``leases`` table inside the same statement or transaction
(``durably.adapters.sqlite._fencing``): a stale token aborts the one statement,
and the slow path then gives that request its ``FencedError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Collection

import aiosqlite
import anyio

from durably.storage._base import StoreBase
from durably.storage._errors import (
    BlobNotFoundError,
    FencedError,
    InvalidRequestError,
    UnsafeCompactionError,
)
from durably.storage._index_rows import named_stream
from durably.storage._one_read import OneReadRestore, RestoreRead
from durably.storage._spi import (
    BlobDeleteStore,
    IndexStore,
    LeaseRenewStore,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_blob,
    check_blob_digests,
    check_fence,
)

from . import _fencing as fencing
from . import _layout as layout
from ._connection import READERS, SQLiteConnections
from ._file import _seq, path_from_url
from ._index import SQLiteStatusIndex
from ._journal import SQLiteJournal
from ._layout import SCHEMA_VERSION  # noqa: F401  # tests import it from here
from ._leases import SQLiteLeases


# connections: adapters/sqlite/_connection.py; appends and reads: adapters/sqlite/_journal.py;
# leases: adapters/sqlite/_leases.py; the status index: adapters/sqlite/_index.py
class SQLiteStore(
    SQLiteConnections,
    SQLiteJournal,
    SQLiteStatusIndex,
    SQLiteLeases,
    StoreBase,
    BlobDeleteStore,
    LeaseRenewStore,
    IndexStore,
    OneReadRestore,
):
    """A ``Store`` in one SQLite database file (see the module docstring for the URL and durability).

    Building the store does no I/O. ``1 + READERS`` connections per store, each used by one
    task at a time (an ``anyio.Lock`` each): the writer, and readers for the reads
    (``_fetch``), so a read never queues behind a write's fsync, nor much behind other
    reads (WAL lets readers see the last commit while a writer works). Several stores, in
    one process or many, may share the file.

    Errors of every data method: ``StoreUnavailableError`` (cause attached) for SQLite
    errors such as "database is locked" past the busy timeout, I/O errors or a full disk,
    the failed transaction rolled back first; ``CorruptRecordError`` when SQLite reports
    the file damaged (retrying cannot help), or for a seq cell that holds no integer (see
    ``_seq``); ``InvalidRequestError`` for a stream id
    SQLite cannot store as UTF-8 (a lone surrogate).

    Args:
        url: ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` with optional query
            options, e.g. ``sqlite:///agents.db?synchronous=FULL&busy_timeout=10000``
            (``busy_timeout`` in milliseconds; ``create=1`` makes missing parent directories).

    Raises:
        InvalidStoreURLError: A ``ValueError``, for a malformed URL; ``open`` raises it too
            for a missing parent directory without ``?create=1``.
        UnknownSchemaVersionError: From ``open``, for a file written by a newer durably
            (the file is left untouched). For a file that did not exist at ``open``, this and
            the next error come from the first call that connects to it.
        StoreUnavailableError: From ``open``, when the file cannot be created, opened or put
            in WAL mode, or this Python's SQLite is older than ``MIN_SQLITE``.
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        self.path, self.synchronous, self.busy_timeout_ms, self.create = path_from_url(url)
        self._db: aiosqlite.Connection | None = None
        # Reads only (WAL readers do not wait for the writer), each used by one task at a time.
        self._readers: list[aiosqlite.Connection] = []
        self._read_locks = [anyio.Lock() for _ in range(READERS)]
        self._next_reader = 0
        self._absent = False  # the file did not exist at open: the first write creates it
        self._lock = anyio.Lock()

    def _location(self) -> str:
        return str(self.path)

    # -- snapshots ---------------------------------------------------------------

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        """Store the snapshot of ``stream`` at ``seq``, overwriting one at the same seq.

        Without a fence, one autocommitted upsert, so the range check and the write see the
        same last seq. With one, a ``BEGIN IMMEDIATE`` transaction reads the stream's lease
        token and then upserts, so no lease can pass to another owner in between.

        Args:
            stream: The stream the snapshot belongs to.
            seq: The seq it covers (records 1..``seq`` folded in).
            data: The encoded snapshot frame.
            fence: The writer's lease token, checked as ``AppendRequest.fence``; None: no check.

        Raises:
            FencedError: When ``fence`` is not the stream's lease token (another owner took
                the lease, or the stream was purged); nothing stored.
            InvalidRequestError: When ``data`` is not ``bytes``, ``fence`` is malformed
                (``check_fence``), or ``seq`` is not within 1..``last_seq(stream)`` (also for an
                unknown stream).
        """
        self._check_open()
        check_fence(fence)
        if not isinstance(data, bytes):
            raise InvalidRequestError(f"snapshot data must be bytes, got {type(data).__name__}")
        params = (seq, data, stream.namespace, stream.agent_id, seq)
        if fence is None:
            # One autocommitted statement: the range check and the upsert see the same last_seq.
            changed = await self._write(_PUT_SNAPSHOT, params)
        else:
            async with self._transaction() as db:
                key = (stream.namespace, stream.agent_id)
                tokens = await fencing.admitted_tokens(db, [key]) if await self._has_leases_table(db) else {}
                if tokens.get(key) != fence:
                    rows = list(
                        await db.execute_fetchall(
                            "SELECT last_seq FROM streams WHERE namespace = ? AND agent_id = ?", key
                        )
                    )
                    last = max(_seq(rows[0][0], stream), 0) if rows else 0
                    raise FencedError(stream, last, last, fence=fence)
                changed = (await db.execute(_PUT_SNAPSHOT, params)).rowcount
        if changed != 1:
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
        bound = layout.MAX_SEQ if at_or_before is None else min(at_or_before, layout.MAX_SEQ)
        rows = await self._fetch(
            f"SELECT seq, {layout.SNAPSHOT_DATA} FROM snapshots WHERE stream_id = {layout.STREAM_ID} AND seq <= ? "
            "ORDER BY seq DESC LIMIT 1",
            (stream.namespace, stream.agent_id, bound),
        )
        return StoredSnapshot(_seq(rows[0][0], stream), rows[0][1]) if rows else None

    async def read_restore(
        self, stream: StreamId, at_or_before: int | None = None, page_size: int = 512
    ) -> RestoreRead:
        """What a restore of ``stream`` reads, in ONE statement on a reader connection (one hop).

        A restore otherwise waits for three reads in turn (the snapshot and the
        last seq, the ``started`` record, the records after the snapshot), and on
        a loaded event loop each read waits for the loop once more. One statement
        is also one read transaction: the four parts are of the same commit, so no
        compaction or purge can fall between them. ``durably``'s restore uses this when a store has it
        (``durably._journal.restore``), and reads the rest of the tail with ``read``.

        Args:
            stream: The stream to read.
            at_or_before: The highest snapshot seq wanted, as ``get_snapshot``; None:
                the latest snapshot.
            page_size: Most records in the tail, >= 1.

        Returns:
            ``(snapshot, last_seq, first, tail)``: the snapshot ``get_snapshot`` would
                return (or None), ``last_seq(stream)``, the record at seq 1 when there is a
                snapshot (else None: the tail begins with it), and up to ``page_size``
                records after the snapshot's seq (after 0 without one), in seq order: the
                caller reads on from the last one while it is below ``last_seq``.

        Raises:
            InvalidRequestError: When ``page_size`` < 1.
        """
        self._check_open()
        if page_size < 1:
            raise InvalidRequestError(f"page_size must be >= 1, got {page_size}")
        bound = layout.MAX_SEQ if at_or_before is None else min(at_or_before, layout.MAX_SEQ)
        rows = await self._fetch(layout.RESTORE_READ, (stream.namespace, stream.agent_id, bound, page_size))
        snapshot, last, first, tail = None, 0, None, []
        for part, cell, data in rows:
            seq = _seq(cell, stream)
            if part == 0:
                snapshot = StoredSnapshot(seq, data)
            elif part == 1:
                last = max(seq, 0)
            elif part == 2:
                first = StoredRecord(seq, data)
            else:
                tail.append(StoredRecord(seq, data))
        tail.sort(key=lambda stored: stored.seq)  # a compound SELECT promises no row order
        return snapshot, last, first, tail

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """Delete the snapshots of ``stream`` with seq < ``before_seq``, always keeping the latest one.

        One autocommitted DELETE. An unknown stream has nothing to delete.

        Args:
            stream: The stream whose snapshots go.
            before_seq: Snapshots below this seq are deleted, unless one is the latest.
        """
        self._check_open()
        await self._write(
            f"DELETE FROM snapshots WHERE stream_id = {layout.STREAM_ID} AND seq < ? "
            "AND seq < (SELECT max(seq) FROM snapshots AS s WHERE s.stream_id = snapshots.stream_id)",
            (stream.namespace, stream.agent_id, before_seq),
        )

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """Compaction: delete the records of ``stream`` with seq <= ``through_seq``.

        One ``BEGIN IMMEDIATE`` transaction checks for a covering snapshot and deletes, so no
        snapshot can go in between. ``last_seq`` is unchanged; an unknown stream is left alone.

        Args:
            stream: The stream to compact.
            through_seq: The highest seq to delete.

        Raises:
            UnsafeCompactionError: Unless a snapshot exists at a seq >= ``through_seq``.
        """
        self._check_open()
        async with self._transaction() as db:
            found = await db.execute_fetchall(
                "SELECT id, EXISTS (SELECT 1 FROM snapshots WHERE stream_id = streams.id AND seq >= ?) "
                "FROM streams WHERE namespace = ? AND agent_id = ?",
                (through_seq, stream.namespace, stream.agent_id),
            )
            if not found:
                return
            ((sid, covered),) = found
            if not covered:
                raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
            await db.execute("DELETE FROM records WHERE stream_id = ? AND seq <= ?", (sid, through_seq))

    # -- streams -----------------------------------------------------------------

    async def list_streams(self, namespace: str, prefix: str = "", *, page_size: int = 512) -> AsyncIterator[StreamId]:
        """Yield the streams of ``namespace`` whose agent id starts with ``prefix``, sorted by agent id.

        A range scan on the (namespace, agent_id) index, from ``prefix`` up to the prefix's
        successor (no LIKE, so '%' and '_' in ids are plain characters), ``page_size`` rows
        per query. A stream that holds only blobs is listed too (``put_blob`` creates its row).

        Args:
            namespace: The namespace to list; other namespaces' streams are never yielded.
            prefix: The agent-id prefix; ``""`` lists every stream of the namespace.
            page_size: Rows per query (this adapter's addition to the SPI's signature).

        Yields:
            Each ``StreamId``, in agent-id order (code points, SQLite's BINARY collation).

        Raises:
            InvalidRequestError: When ``page_size`` < 1 (raised at the first iteration).
        """
        self._check_open()
        if page_size < 1:
            raise InvalidRequestError(f"page_size must be >= 1, got {page_size}")
        upper = _prefix_successor(prefix)
        bound, bound_params = ("AND agent_id < ? ", (upper,)) if upper is not None else ("", ())
        first = f"SELECT agent_id FROM streams WHERE namespace = ? AND agent_id >= ? {bound}ORDER BY agent_id LIMIT ?"
        rest = first.replace("agent_id >= ?", "agent_id > ?")  # later pages resume after the last id seen
        rows = await self._fetch(first, (namespace, prefix, *bound_params, page_size))
        while True:
            for (agent_id,) in rows:
                if (stream := named_stream(namespace, agent_id)) is not None:  # else a foreign row
                    yield stream
            if len(rows) < page_size:
                return
            rows = await self._fetch(rest, (namespace, rows[-1][0], *bound_params, page_size))

    async def delete_stream(self, stream: StreamId) -> None:
        """Purge the stream's records, snapshots, blobs and last seq; an unknown stream is fine.

        Nothing readable is left in the files: ``secure_delete`` zeroed the freed pages, and a
        ``wal_checkpoint(TRUNCATE)`` then empties the WAL, whose older frames still hold the
        rows. (A reader of another connection holding an old snapshot past the busy timeout
        makes that checkpoint give up; the WAL is then emptied by a later purge or when the
        last connection closes.) The stream's lease ends in the same ``BEGIN IMMEDIATE``
        transaction as the rows go (``SQLiteLeases._end_lease``): from its commit on, no
        append or snapshot fenced with a token of the purged incarnation is accepted, and the
        token stays as the floor of the next one, so fencing tokens never decrease for a
        stream id.

        Args:
            stream: The stream to purge.
        """
        self._check_open()
        async with self._transaction() as db:
            await self._end_lease(db, stream)
            found = await db.execute_fetchall(
                "SELECT id FROM streams WHERE namespace = ? AND agent_id = ?", (stream.namespace, stream.agent_id)
            )
            if not found:
                return
            ((sid,),) = found
            for table in ("records", "snapshots", "blobs", "streams"):
                column = "id" if table == "streams" else "stream_id"
                await db.execute(f"DELETE FROM {table} WHERE {column} = ?", (sid,))
        await self._fetch("PRAGMA wal_checkpoint(TRUNCATE)", (), writer=True)

    async def erase_freed(self) -> str | None:
        """Leave no byte of deleted or overwritten rows in the files, if other connections allow.

        Deleted content is zeroed in its pages by ``secure_delete``, but the WAL still holds
        the old page images until a checkpoint copies the new ones over and truncates it.
        ``wal_checkpoint(TRUNCATE)`` waits up to the busy timeout for other connections'
        transactions; one still open then (a reader's snapshot of the old pages) makes it give
        up (``durably reencrypt`` reports why).

        Returns:
            None when done (also when the file does not exist yet), else the reason it could
                not be done, a sentence for the operator.
        """
        self._check_open()
        rows = await self._fetch("PRAGMA wal_checkpoint(TRUNCATE)", (), writer=True)
        if not rows:
            return None  # no file: no bytes
        ((busy, log_frames, checkpointed),) = rows
        if busy or log_frames != checkpointed:
            return (
                f"another connection to {self.path} holds an open transaction, so the write-ahead log "
                f"(which still holds the old bytes) could not be checkpointed and truncated "
                f"({checkpointed} of {log_frames} frames copied); close it and run again"
            )
        return None

    # -- blobs -------------------------------------------------------------------

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """Store ``data`` as a blob of ``stream`` under its SHA-256 hex digest; idempotent.

        One ``BEGIN IMMEDIATE`` transaction that also creates the stream's row (last seq 0)
        when missing, so the blob is purged with the stream (and the stream is listed). Data
        above 1 MiB is hashed in a worker thread, off the event loop.

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
        # hashlib releases the GIL on large inputs: hash big blobs off the event loop.
        if len(data) > 1 << 20:
            digest = await anyio.to_thread.run_sync(lambda: hashlib.sha256(data).hexdigest())
        else:
            digest = hashlib.sha256(data).hexdigest()
        async with self._transaction() as db:
            await db.execute(
                "INSERT INTO streams (namespace, agent_id, last_seq) VALUES (?, ?, 0) "
                "ON CONFLICT (namespace, agent_id) DO NOTHING",
                (stream.namespace, stream.agent_id),
            )
            await db.execute(
                f"INSERT OR IGNORE INTO blobs (stream_id, digest, data) VALUES ({layout.STREAM_ID}, ?, ?)",
                (stream.namespace, stream.agent_id, digest, data),
            )
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
        rows = await self._fetch(
            f"SELECT data FROM blobs WHERE stream_id = {layout.STREAM_ID} AND digest = ?",
            (stream.namespace, stream.agent_id, digest),
        )
        if not rows:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        data: bytes = rows[0][0]
        return data

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        """Delete the named blobs of ``stream`` in one ``BEGIN IMMEDIATE`` transaction; a missing one is skipped.

        Args:
            stream: The stream whose blobs to delete.
            digests: The digests ``put_blob`` returned.

        Raises:
            InvalidRequestError: Malformed arguments (``check_blob_digests``).
        """
        self._check_open()
        names = check_blob_digests(stream, digests)
        if not names:
            return
        async with self._transaction() as db:
            await db.executemany(
                f"DELETE FROM blobs WHERE stream_id = {layout.STREAM_ID} AND digest = ?",
                [(stream.namespace, stream.agent_id, digest) for digest in names],
            )


_PUT_SNAPSHOT = (
    "INSERT INTO snapshots (stream_id, seq, data) "
    "SELECT id, ?, ? FROM streams WHERE namespace = ? AND agent_id = ? AND ? BETWEEN 1 AND last_seq "
    "ON CONFLICT (stream_id, seq) DO UPDATE SET data = excluded.data"
)


def _prefix_successor(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: no bound).

    Code-point order, which is SQLite's BINARY order for UTF-8 text. Surrogates
    are skipped since they cannot be stored as UTF-8.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None
