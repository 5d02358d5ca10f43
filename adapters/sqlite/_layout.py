"""The SQLite adapter's file layout: the schema, its version, and the SQL the
append path runs (built once per size and cached, so SQLite's statement cache
serves every batch). See ``durably.adapters.sqlite`` for how they are used.
"""

from __future__ import annotations

import functools

#: The layout below, stored in ``PRAGMA user_version``. A file with a higher
#: number was written by a newer durably and is refused, never modified.
#: Versions: 1, an AFTER INSERT trigger advanced ``last_seq``; 2, the BEFORE INSERT
#: trigger ``records_continue_stream`` also checks each seq continues its stream
#: (what the one-statement fast path relies on). ``open`` upgrades a v1 file in
#: place (same tables and rows; the trigger is swapped) in one transaction.
#: 3, the status index: five columns on ``streams`` and the index ``streams_by_status``
#: (``sqlite_index.upgrade``, also in ``open``'s transaction; a v2 file's entries start NULL).
SCHEMA_VERSION = 3

#: The whole schema, applied in one transaction by ``open`` to a file of a lower
#: version: every statement is idempotent, so it creates a new file and upgrades a v1 one.
SCHEMA = (
    # last_seq is the highest seq ever appended; it outlives compaction. A stream
    # row also exists for a stream that only holds blobs (last_seq 0).
    """CREATE TABLE IF NOT EXISTS streams (
        id INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        UNIQUE (namespace, agent_id)
    )""",
    # A rowid table: SQLite advises WITHOUT ROWID only for rows under ~1/20 of a
    # page, and with frames of a few hundred bytes it measured ~1.5x slower here.
    """CREATE TABLE IF NOT EXISTS records (
        stream_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (stream_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS snapshots (
        stream_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (stream_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS blobs (
        stream_id INTEGER NOT NULL,
        digest TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (stream_id, digest)
    )""",
    # v1's trigger: it advanced last_seq without checking; records_continue_stream does both.
    "DROP TRIGGER IF EXISTS records_advance_last_seq",
    # Per row, in one UPDATE by primary key: advance last_seq to NEW.seq only from
    # NEW.seq - 1 (max(.., 0): the slow path marks a stream it just created with -1),
    # else abort the statement, which rolls back every row of it. An unknown stream
    # (a NULL stream_id) updates nothing, so it aborts too. A row whose seq is NULL
    # is padding of the fast path (FAST_PAD, see fast_bucket) and is skipped.
    """CREATE TRIGGER IF NOT EXISTS records_continue_stream BEFORE INSERT ON records
    BEGIN
        SELECT RAISE(IGNORE) WHERE NEW.seq IS NULL;
        UPDATE streams SET last_seq = NEW.seq WHERE id = NEW.stream_id AND max(last_seq, 0) = NEW.seq - 1;
        SELECT RAISE(ABORT, 'durably: a record must continue its stream') WHERE changes() = 0;
    END""",
)

MIN_SQLITE = (3, 35, 0)  # RETURNING (upsert needs 3.24, row values 3.15)
SYNCHRONOUS = frozenset({"FULL", "NORMAL"})
KEYS_PER_STATEMENT = 248  # 496 bound parameters: under SQLite's historic limit of 999
MAX_SEQ = (1 << 63) - 1  # SQLite's largest INTEGER
NEW_STREAM = -1  # last_seq of a stream row created by the current append, until its records land

INSERT_RECORD = "INSERT INTO records (stream_id, seq, data) VALUES (?, ?, ?)"
STREAM_ID = "(SELECT id FROM streams WHERE namespace = ? AND agent_id = ?)"
# The fast path's rows: 4 parameters each, so 240 rows (its largest bucket) bind
# 960, under SQLite's historic limit of 999. Bigger batches amortise the slow
# path's extra hops over at least as many records.
FAST_MAX_ROWS = 240
FAST_PAD = (None, None, None, None)  # a row the trigger skips (NULL seq)


#: A snapshot's frame as read: a cell that is not a BLOB reads as the name of its type (a str,
#: which the codec refuses like any foreign value, so restore skips it for an older snapshot).
#: Read as it is, a TEXT cell that is not UTF-8 failed the whole statement ("Could not decode
#: to UTF-8"), and restore skipped every snapshot, also those a compacted journal needs.
SNAPSHOT_DATA = "iif(typeof(data) = 'blob', data, typeof(data))"

#: ``SQLiteStore.read_restore``'s one statement (one read transaction): part 0 the latest snapshot
#: at or before a seq, 1 the stream's last seq, 2 its record at seq 1 (only with a snapshot: the
#: run id check), 3 the first page of records after the snapshot. Binds namespace, agent id,
#: the snapshot bound and the page size.
RESTORE_READ = (
    "WITH s AS (SELECT id, last_seq FROM streams WHERE namespace = ? AND agent_id = ?), "
    "snap AS (SELECT seq, data FROM snapshots WHERE stream_id = (SELECT id FROM s) AND seq <= ? "
    "ORDER BY seq DESC LIMIT 1) "
    f"SELECT 0, seq, {SNAPSHOT_DATA} FROM snap "
    "UNION ALL SELECT 1, last_seq, NULL FROM s "
    "UNION ALL SELECT 2, seq, data FROM records WHERE stream_id = (SELECT id FROM s) AND seq = 1 "
    "AND EXISTS (SELECT 1 FROM snap) "
    "UNION ALL SELECT * FROM (SELECT 3, seq, data FROM records WHERE stream_id = (SELECT id FROM s) "
    "AND seq > coalesce((SELECT seq FROM snap), 0) ORDER BY seq LIMIT ?)"
)


def lock_streams_sql(count: int) -> str:
    """One statement of the slow path (inside its ``BEGIN IMMEDIATE``) that
    returns every stream's row, creating the unknown ones.

    Unknown streams are created with last_seq -1 so the caller can tell them
    apart from known empty ones (and drop those that end up with no record).
    """
    values = ", ".join(["(?, ?, -1)"] * count)
    return (
        f"INSERT INTO streams (namespace, agent_id, last_seq) VALUES {values} "
        "ON CONFLICT (namespace, agent_id) DO UPDATE SET last_seq = last_seq "
        "RETURNING id, namespace, agent_id, last_seq"
    )


@functools.cache
def fast_insert_sql(rows: int) -> str:
    """The fast path's statement for ``rows`` rows (a bucket size, see ``fast_bucket``).

    Each row is ``(stream id looked up by namespace and agent id, seq, data)``.
    A multi-row VALUES is one statement, so in autocommit mode it is one atomic
    transaction; executemany would commit (and fsync) once per row.
    """
    return "INSERT INTO records (stream_id, seq, data) VALUES " + ", ".join([f"({STREAM_ID}, ?, ?)"] * rows)


def fast_bucket(rows: int) -> int:
    """Rows of the statement that carries ``rows`` records: exact up to 16, then
    rounded up so padding stays under 1/8 (17 -> 18, 100 -> 104, 240 -> 240).

    Few distinct SQL texts (about 50 up to ``FAST_MAX_ROWS``) keep every batch
    size in the connection's statement cache, prepared once.
    """
    if rows <= 16:
        return rows
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


def bucket(count: int) -> int:
    """Round a stream count up to a multiple of 8, so few distinct SQL texts are
    prepared (the connection's statement cache then serves every batch size)
    while padding stays under 8 rows."""
    return -(-count // 8) * 8
