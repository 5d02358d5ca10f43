"""The PostgreSQL adapter's tables, their version row and the forward migrations.

Everything lives in one schema of the user's choice (``?schema=``, default
``durably``). ``schema_version`` holds one row, the version of the layout;
``MIGRATIONS[n]`` lifts a schema at version ``n - 1`` to ``n`` (version 0 is
"no tables yet"), so a new schema runs every step and an old one only the
missing ones, as Flyway and Alembic do. ``open()`` applies them in one
transaction under a transaction-scoped advisory lock of the schema, so
processes opening the same new schema at once create it once; a schema of a
newer version than this build knows is refused (``UnknownSchemaVersionError``)
and left untouched. ``tests/golden/postgres-v1.sql`` is a dump of a version 1
schema with data, written by the first release of the adapter; the tests
migrate it.

Version 1: ``streams`` (one row per stream: its id and ``last_seq``, which
compaction never lowers), ``records``, ``snapshots``, ``blobs``, ``commits``
(the token and per-request results of each recent group commit, so an append
whose connection dropped is resolved by reading its token back) and the
function ``append_batch`` (below). Ids are ``COLLATE "C"``: comparison and
order by code point, whatever the database's collation, as the SPI's sorted
listing requires.

Version 2: ``leases`` and the sequence ``lease_tokens`` (``CAP_LEASES``).
Version 3: ``append_batch`` locks the batch's stream rows in id order first (no deadlocks).
Version 4: ``append_batch`` set-based for distinct existing streams (see ``_APPEND_BATCH_V4``).
Version 5: the status index, five columns of ``streams`` and ``streams_by_status`` (``status_index``).
Version 6: ``append_batch`` takes each request's fencing token (``p_fence``) and checks it against
``leases`` in its transaction (see ``_APPEND_BATCH_V6``).
"""

from __future__ import annotations

import asyncpg

from durably.errors import PostgresSetupError
from durably.storage._errors import UnknownSchemaVersionError

from . import _status_index as status_index

#: The layout version this build writes and reads.
SCHEMA_VERSION = 6

# One group commit is one call of this function: one round trip and one
# transaction for the whole batch. Per request, in order: advance the stream's
# last_seq from the expected seq (the UPDATE's row lock serialises racing
# writers; under READ COMMITTED a waiting writer re-checks the WHERE on the row
# the winner committed, so it finds last_seq moved and updates nothing), or
# create the stream when the expected seq is 0 (ON CONFLICT DO NOTHING: a racing
# creator wins, we conflict), then insert the records. A request that matched
# nothing is a conflict: its slot holds -1 - the stream's actual last seq and it
# wrote nothing. A later request of the same stream sees the earlier one's
# update. The results are stored under the caller's token in the same
# transaction, which is what makes an unknown outcome answerable.
_APPEND_BATCH = """
CREATE OR REPLACE FUNCTION {s}.append_batch(p_token uuid, p_namespace text[], p_agent_id text[], p_expected bigint[],
                                  p_count integer[], p_data bytea[])
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    results bigint[] := '{{}}';
    first_row integer := 0;
    stream bigint;
    actual bigint;
BEGIN{lock_in_order}
    FOR i IN 1 .. coalesce(array_length(p_namespace, 1), 0) LOOP
        stream := NULL;
        UPDATE {s}.streams SET last_seq = last_seq + p_count[i]
            WHERE namespace = p_namespace[i] AND agent_id = p_agent_id[i] AND last_seq = p_expected[i]
            RETURNING id INTO stream;
        IF stream IS NULL AND p_expected[i] = 0 THEN
            INSERT INTO {s}.streams (namespace, agent_id, last_seq) VALUES (p_namespace[i], p_agent_id[i], p_count[i])
                ON CONFLICT (namespace, agent_id) DO NOTHING RETURNING id INTO stream;
        END IF;
        IF stream IS NULL THEN
            SELECT last_seq INTO actual FROM {s}.streams WHERE namespace = p_namespace[i] AND agent_id = p_agent_id[i];
            results := results || (-1 - coalesce(actual, 0));
        ELSE
            INSERT INTO {s}.records (stream_id, seq, data)
                SELECT stream, p_expected[i] + k, p_data[first_row + k] FROM generate_series(1, p_count[i]) AS k;
            results := results || (p_expected[i] + p_count[i]);
        END IF;
        first_row := first_row + p_count[i];
    END LOOP;
    INSERT INTO {s}.commits (token, results) VALUES (p_token, results);
    -- Tokens are only read back within seconds of their commit; forget old ones now and then.
    IF random() < 0.01 THEN
        DELETE FROM {s}.commits WHERE committed_at < now() - interval '15 minutes';
    END IF;
    RETURN results;
END
$fn$"""

# Version 3 locks the batch's existing stream rows in id order before touching any:
# two group commits naming the same streams in different orders (two workers, or
# a worker and an operator's command) then wait for each other instead of
# deadlocking, which PostgreSQL would only break after deadlock_timeout (1 s).
_LOCK_IN_ORDER = """
    PERFORM 1 FROM {s}.streams AS st JOIN unnest(p_namespace, p_agent_id) AS k (namespace, agent_id)
        ON st.namespace = k.namespace AND st.agent_id = k.agent_id ORDER BY st.id FOR UPDATE OF st;"""

# Version 4: a group commit to distinct, existing streams (the steady state of a
# runtime) is three set-based statements whatever its size, instead of two
# statements per request: lock the rows in id order, advance every last_seq that
# matches its expected seq in one UPDATE, insert every record of those requests
# in one INSERT (each record names its request and its offset in it, so no array
# is subscripted in a loop). Batches with a repeated or a new stream take the
# per-request loop of version 3. The function is dropped and made anew: its
# arguments changed (p_request, p_offset).
_APPEND_BATCH_V4 = """
CREATE FUNCTION {s}.append_batch(p_token uuid, p_namespace text[], p_agent_id text[], p_expected bigint[],
                                  p_count integer[], p_request integer[], p_offset integer[], p_data bytea[])
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    results bigint[];
    stream bigint;
    actual bigint;
BEGIN
    PERFORM 1 FROM {s}.streams AS st JOIN unnest(p_namespace, p_agent_id) AS k (namespace, agent_id)
        ON st.namespace = k.namespace AND st.agent_id = k.agent_id ORDER BY st.id FOR UPDATE OF st;
    IF 0 < ALL (p_expected) AND cardinality(p_namespace) =
            (SELECT count(DISTINCT (k.namespace, k.agent_id)) FROM unnest(p_namespace, p_agent_id) AS k (namespace, agent_id)) THEN
        WITH req AS (
            SELECT * FROM unnest(p_namespace, p_agent_id, p_expected, p_count) WITH ORDINALITY
                AS r (namespace, agent_id, expected, n, i)
        ), moved AS (
            UPDATE {s}.streams AS st SET last_seq = st.last_seq + req.n FROM req
                WHERE st.namespace = req.namespace AND st.agent_id = req.agent_id AND st.last_seq = req.expected
                RETURNING req.i, st.id, req.expected
        ), written AS (
            INSERT INTO {s}.records (stream_id, seq, data)
                SELECT moved.id, moved.expected + rec.offs, rec.data
                FROM unnest(p_request, p_offset, p_data) AS rec (req, offs, data) JOIN moved ON moved.i = rec.req
        )
        SELECT array_agg(CASE WHEN moved.i IS NULL THEN -1 - coalesce(st.last_seq, 0) ELSE req.expected + req.n END
                         ORDER BY req.i)
            INTO results
            FROM req LEFT JOIN moved ON moved.i = req.i
            LEFT JOIN {s}.streams AS st ON st.namespace = req.namespace AND st.agent_id = req.agent_id;
    ELSE
        results := '{{}}';
        FOR req_no IN 1 .. cardinality(p_namespace) LOOP
            stream := NULL;
            UPDATE {s}.streams SET last_seq = last_seq + p_count[req_no]
                WHERE namespace = p_namespace[req_no] AND agent_id = p_agent_id[req_no] AND last_seq = p_expected[req_no]
                RETURNING id INTO stream;
            IF stream IS NULL AND p_expected[req_no] = 0 THEN
                INSERT INTO {s}.streams (namespace, agent_id, last_seq) VALUES (p_namespace[req_no], p_agent_id[req_no], p_count[req_no])
                    ON CONFLICT (namespace, agent_id) DO NOTHING RETURNING id INTO stream;
            END IF;
            IF stream IS NULL THEN
                SELECT last_seq INTO actual FROM {s}.streams WHERE namespace = p_namespace[req_no] AND agent_id = p_agent_id[req_no];
                results := results || (-1 - coalesce(actual, 0));
            ELSE
                INSERT INTO {s}.records (stream_id, seq, data)
                    SELECT stream, p_expected[req_no] + rec.offs, rec.data
                    FROM unnest(p_request, p_offset, p_data) AS rec (req, offs, data) WHERE rec.req = req_no;
                results := results || (p_expected[req_no] + p_count[req_no]);
            END IF;
        END LOOP;
    END IF;
    INSERT INTO {s}.commits (token, results) VALUES (p_token, results);
    -- Tokens are only read back within seconds of their commit; forget old ones now and then.
    IF random() < 0.01 THEN
        DELETE FROM {s}.commits WHERE committed_at < now() - interval '15 minutes';
    END IF;
    RETURN results;
END
$fn$"""

# Fencing, in the append's own transaction, under READ COMMITTED (each statement sees what
# committed before it started, and a row lock waits for the holder's transaction to end):
#
# * The lease rows whose token a request's fence names are locked FOR SHARE, before any stream
#   row. acquire_lease (INSERT ... ON CONFLICT DO UPDATE), release and renewal update that row
#   and purge deletes it; each of these takes a row lock that conflicts with FOR SHARE. So
#   either the append locked the row first, and a takeover waits until the append has committed
#   (the new holder restores after its grant, so it reads the append), or the takeover changed
#   the row first, and the append's lock waits for it to commit and then re-checks the row as
#   committed (EvalPlanQual): its token no longer matches, the row is not locked, and the
#   request is fenced. A takeover committed before the statement began is simply seen.
# * Not FOR KEY SHARE: that lock does not conflict with the FOR NO KEY UPDATE an UPDATE of
#   non-key columns takes (token, owner, expires_at are not keys), so a takeover would commit
#   alongside the append and the new holder could restore before the append lands.
# * A row that does not match a fence now cannot match it later: tokens come from a sequence,
#   so no lease row is ever given a token it had before (a purge deletes the row; the next
#   grant is a new, greater token).
# * Lease rows before stream rows, in every writer: delete_stream deletes the lease row and then
#   locks the stream row, so an append holding a stream row never waits for a lease row a purge
#   holds while waiting for that stream row (no deadlock). FOR SHARE locks do not conflict with
#   each other, so appends naming the same leases in any order never wait for one another.
#
# A fenced request writes nothing (not even a new stream row); its slot holds -1 - the stream's
# last seq, like a conflict, and the request's number (from 1) is appended after the n slots,
# so a stored result of n + k entries names the k fenced requests. Batches with a new or a
# repeated stream come here; distinct existing streams go APPEND_FAST_FENCED (or APPEND_FAST).
_APPEND_BATCH_V6 = """
CREATE FUNCTION {s}.append_batch(p_token uuid, p_namespace text[], p_agent_id text[], p_expected bigint[],
                                  p_count integer[], p_request integer[], p_offset integer[], p_data bytea[],
                                  p_fence bigint[])
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    results bigint[] := '{{}}';
    fenced bigint[] := '{{}}';
    stream bigint;
    actual bigint;
BEGIN
    PERFORM 1 FROM {s}.leases AS l JOIN unnest(p_namespace, p_agent_id, p_fence) AS k (namespace, agent_id, fence)
        ON l.namespace = k.namespace AND l.agent_id = k.agent_id AND l.token = k.fence FOR SHARE OF l;
    PERFORM 1 FROM {s}.streams AS st JOIN unnest(p_namespace, p_agent_id) AS k (namespace, agent_id)
        ON st.namespace = k.namespace AND st.agent_id = k.agent_id ORDER BY st.id FOR UPDATE OF st;
    FOR req_no IN 1 .. cardinality(p_namespace) LOOP
        stream := NULL;
        IF p_fence[req_no] IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM {s}.leases WHERE namespace = p_namespace[req_no] AND agent_id = p_agent_id[req_no]
                AND token = p_fence[req_no]) THEN
            SELECT last_seq INTO actual FROM {s}.streams WHERE namespace = p_namespace[req_no] AND agent_id = p_agent_id[req_no];
            results := results || (-1 - coalesce(actual, 0));
            fenced := fenced || req_no::bigint;
            CONTINUE;
        END IF;
        UPDATE {s}.streams SET last_seq = last_seq + p_count[req_no]
            WHERE namespace = p_namespace[req_no] AND agent_id = p_agent_id[req_no] AND last_seq = p_expected[req_no]
            RETURNING id INTO stream;
        IF stream IS NULL AND p_expected[req_no] = 0 THEN
            INSERT INTO {s}.streams (namespace, agent_id, last_seq) VALUES (p_namespace[req_no], p_agent_id[req_no], p_count[req_no])
                ON CONFLICT (namespace, agent_id) DO NOTHING RETURNING id INTO stream;
        END IF;
        IF stream IS NULL THEN
            SELECT last_seq INTO actual FROM {s}.streams WHERE namespace = p_namespace[req_no] AND agent_id = p_agent_id[req_no];
            results := results || (-1 - coalesce(actual, 0));
        ELSE
            INSERT INTO {s}.records (stream_id, seq, data)
                SELECT stream, p_expected[req_no] + rec.offs, rec.data
                FROM unnest(p_request, p_offset, p_data) AS rec (req, offs, data) WHERE rec.req = req_no;
            results := results || (p_expected[req_no] + p_count[req_no]);
        END IF;
    END LOOP;
    results := results || fenced;
    INSERT INTO {s}.commits (token, results) VALUES (p_token, results);
    -- Tokens are only read back within seconds of their commit; forget old ones now and then.
    IF random() < 0.01 THEN
        DELETE FROM {s}.commits WHERE committed_at < now() - interval '15 minutes';
    END IF;
    RETURN results;
END
$fn$"""

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE {s}.schema_version (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), "
        "version integer NOT NULL)",
        """CREATE TABLE {s}.streams (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            namespace text COLLATE "C" NOT NULL,
            agent_id text COLLATE "C" NOT NULL,
            last_seq bigint NOT NULL DEFAULT 0,
            UNIQUE (namespace, agent_id)
        )""",
        """CREATE TABLE {s}.records (
            stream_id bigint NOT NULL, seq bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (stream_id, seq)
        )""",
        """CREATE TABLE {s}.snapshots (
            stream_id bigint NOT NULL, seq bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (stream_id, seq)
        )""",
        """CREATE TABLE {s}.blobs (
            stream_id bigint NOT NULL, digest text NOT NULL, data bytea NOT NULL, PRIMARY KEY (stream_id, digest)
        )""",
        """CREATE TABLE {s}.commits (
            token uuid PRIMARY KEY, results bigint[] NOT NULL, committed_at timestamptz NOT NULL DEFAULT now()
        )""",
        "CREATE INDEX commits_by_age ON {s}.commits (committed_at)",
        _APPEND_BATCH.replace("{lock_in_order}", ""),
    ),
    2: (
        # Leases (durably.adapters.postgres._leases); tokens from a sequence, so they only grow.
        "CREATE SEQUENCE {s}.lease_tokens AS bigint",
        """CREATE TABLE {s}.leases (
            namespace text COLLATE "C" NOT NULL,
            agent_id text COLLATE "C" NOT NULL,
            owner text NOT NULL,
            token bigint NOT NULL,
            expires_at double precision NOT NULL,
            PRIMARY KEY (namespace, agent_id)
        )""",
    ),
    3: (_APPEND_BATCH.replace("{lock_in_order}", _LOCK_IN_ORDER),),
    4: ("DROP FUNCTION {s}.append_batch(uuid, text[], text[], bigint[], integer[], bytea[])", _APPEND_BATCH_V4),
    5: status_index.MIGRATION,
    6: (
        "DROP FUNCTION {s}.append_batch(uuid, text[], text[], bigint[], integer[], integer[], integer[], bytea[])",
        _APPEND_BATCH_V6,
    ),
}


# A group commit to distinct streams that all exist, as one statement the client sends (no
# function call): the steps of append_batch's set-based branch. ``locked``
# takes the stream rows in id order (no deadlock between batches naming the same streams in
# other orders; the UPDATE reads locked, so it runs after); ``moved`` advances each last_seq
# that still equals its expected seq (under READ COMMITTED re-checked on the row a concurrent
# writer committed); ``written`` inserts the records of the moved requests; ``outcome`` is the
# new last seq per request, or -1 - the actual one for a conflict; ``saved`` stores it under
# the token for read-back. 1% of the statements also forget tokens older than 15 minutes.
APPEND_FAST = """WITH req AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::integer[]) WITH ORDINALITY
        AS r (namespace, agent_id, expected, n, i)
), locked AS (
    SELECT st.id, st.last_seq, req.i, req.expected, req.n FROM {s}.streams AS st
        JOIN req ON st.namespace = req.namespace AND st.agent_id = req.agent_id ORDER BY st.id FOR UPDATE OF st
), moved AS (
    UPDATE {s}.streams AS st SET last_seq = st.last_seq + locked.n FROM locked
        WHERE st.id = locked.id AND st.last_seq = locked.expected RETURNING locked.i, st.id, locked.expected
), written AS (
    INSERT INTO {s}.records (stream_id, seq, data)
        SELECT moved.id, moved.expected + rec.offs, rec.data
        FROM unnest($6::integer[], $7::integer[], $8::bytea[]) AS rec (req, offs, data) JOIN moved ON moved.i = rec.req
), outcome AS (
    SELECT array_agg(CASE WHEN moved.i IS NULL THEN -1 - coalesce(locked.last_seq, 0) ELSE req.expected + req.n END
                     ORDER BY req.i) AS results
        FROM req LEFT JOIN moved ON moved.i = req.i LEFT JOIN locked ON locked.i = req.i
), saved AS (
    INSERT INTO {s}.commits (token, results) SELECT $1, results FROM outcome
), forgotten AS (
    DELETE FROM {s}.commits WHERE committed_at < now() - interval '15 minutes' AND (SELECT random()) < 0.01
)
SELECT results FROM outcome"""

# APPEND_FAST for a batch in which some request carries a fence ($9, NULL for the others), with
# the lease check of _APPEND_BATCH_V6 (read the reasoning there). ``admitted`` locks the lease
# rows matching the fences FOR SHARE; ``fenced`` (the requests whose fence matched none) is
# evaluated when ``locked`` computes its rows, which happens before the sort under its FOR
# UPDATE, so every lease row is locked before the first stream row. A fenced request does not
# move; the outcome's n slots are followed by the fenced requests' numbers.
APPEND_FAST_FENCED = """WITH req AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::integer[], $9::bigint[]) WITH ORDINALITY
        AS r (namespace, agent_id, expected, n, fence, i)
), admitted AS (
    SELECT req.i FROM req JOIN {s}.leases AS l
        ON l.namespace = req.namespace AND l.agent_id = req.agent_id AND l.token = req.fence FOR SHARE OF l
), fenced AS (
    SELECT req.i FROM req WHERE req.fence IS NOT NULL AND req.i NOT IN (SELECT admitted.i FROM admitted)
), locked AS (
    SELECT st.id, st.last_seq, req.i, req.expected, req.n, req.i IN (SELECT fenced.i FROM fenced) AS refused
        FROM {s}.streams AS st JOIN req ON st.namespace = req.namespace AND st.agent_id = req.agent_id
        ORDER BY st.id FOR UPDATE OF st
), moved AS (
    UPDATE {s}.streams AS st SET last_seq = st.last_seq + locked.n FROM locked
        WHERE st.id = locked.id AND st.last_seq = locked.expected AND NOT locked.refused
        RETURNING locked.i, st.id, locked.expected
), written AS (
    INSERT INTO {s}.records (stream_id, seq, data)
        SELECT moved.id, moved.expected + rec.offs, rec.data
        FROM unnest($6::integer[], $7::integer[], $8::bytea[]) AS rec (req, offs, data) JOIN moved ON moved.i = rec.req
), outcome AS (
    SELECT array_agg(CASE WHEN moved.i IS NULL THEN -1 - coalesce(locked.last_seq, 0) ELSE req.expected + req.n END
                     ORDER BY req.i) || ARRAY(SELECT fenced.i FROM fenced ORDER BY fenced.i) AS results
        FROM req LEFT JOIN moved ON moved.i = req.i LEFT JOIN locked ON locked.i = req.i
), saved AS (
    INSERT INTO {s}.commits (token, results) SELECT $1, results FROM outcome
), forgotten AS (
    DELETE FROM {s}.commits WHERE committed_at < now() - interval '15 minutes' AND (SELECT random()) < 0.01
)
SELECT results FROM outcome"""


def statements(schema: str, from_version: int, to_version: int = SCHEMA_VERSION) -> list[str]:
    """The DDL that lifts ``schema`` from ``from_version`` to ``to_version``, in order."""
    quoted = f'"{schema}"'
    return [sql.format(s=quoted) for version in range(from_version + 1, to_version + 1) for sql in MIGRATIONS[version]]


async def prepare(
    conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy[asyncpg.Record], schema: str, lock_timeout: float
) -> int:
    """Check the server can hold a store and bring ``schema`` to ``SCHEMA_VERSION``; returns the version found.

    In: an asyncpg connection outside any transaction. Raises
    ``PostgresSetupError`` on a read-only server (a hot standby, or
    ``default_transaction_read_only``) and when another transaction holds the
    schema's lock past ``lock_timeout`` seconds (for instance the caller's own,
    still open, which touched these tables), ``UnknownSchemaVersionError`` for
    a schema written by a newer durably (nothing is changed), and asyncpg's
    errors for the rest (the caller translates them).
    """
    row = await conn.fetchrow("SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'")
    assert row is not None, "a SELECT without FROM returns one row"
    in_recovery, read_only = row
    if in_recovery or read_only:
        where = "a hot standby (read-only replica)" if in_recovery else "read-only (default_transaction_read_only)"
        raise PostgresSetupError(f"the database is {where}: a durably store needs the primary, writable")
    found = await _version(conn, schema)
    if found == SCHEMA_VERSION:
        return found  # the common case: no lock, no transaction
    if found > SCHEMA_VERSION:
        raise UnknownSchemaVersionError(f"durably postgres schema {schema!r}", found, SCHEMA_VERSION)
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout * 1000)}")
            # One opener at a time per schema; the others then find it done.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"durably.schema.{schema}")
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            found = await _version(conn, schema)
            if found > SCHEMA_VERSION:
                raise UnknownSchemaVersionError(f"durably postgres schema {schema!r}", found, SCHEMA_VERSION)
            for sql in statements(schema, found):
                await conn.execute(sql)
            await conn.execute(
                f'INSERT INTO "{schema}".schema_version (version) VALUES ($1) '
                "ON CONFLICT (only_row) DO UPDATE SET version = excluded.version",
                SCHEMA_VERSION,
            )
    except asyncpg.LockNotAvailableError as exc:
        raise PostgresSetupError(
            f"open() waited more than {lock_timeout:g} s for a lock on schema {schema!r}: another transaction "
            "holds it (a transaction of the caller's own, still open on these tables?)"
        ) from exc
    return found


async def _version(conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy[asyncpg.Record], schema: str) -> int:
    """The schema's recorded version; 0 when it has no ``schema_version`` table yet."""
    if await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".schema_version') is None:
        return 0
    version: int = await conn.fetchval(f'SELECT coalesce(max(version), 0) FROM "{schema}".schema_version')
    return version
