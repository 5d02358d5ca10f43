"""The PostgreSQL adapter against a real PostgreSQL 15 server on 127.0.0.1 (``pg_server``):
the public conformance kit in full, leases included, then what is particular to it
(URL, schema versions and migrations from the golden dump, set-up errors)."""

from __future__ import annotations

import hashlib
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import asyncpg
import pytest
from pg_server import PostgresTestServer

from durably.adapters.postgres import PostgresSetupError, PostgresStore
from durably.adapters.postgres._options import PostgresOptions
from durably.adapters.postgres._schema import SCHEMA_VERSION
from durably.storage import InvalidRequestError, InvalidStoreURLError, StreamId, UnknownSchemaVersionError, open_store
from durably.storage._url_redaction import redact_url
from durably.storage.conformance import StoreConformance

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "postgres"


class TestPostgresConformance(StoreConformance):
    """The kit in full. Not given: ``stored_bytes``, since PostgreSQL does not overwrite deleted
    rows (their bytes stay in the table files until VACUUM reuses the space, and in WAL), so a
    purge cannot promise that nothing is readable on disk (docs/postgres.md says so)."""

    @pytest.fixture(autouse=True)
    def _server(self, pg_server: PostgresTestServer) -> None:
        self.server = pg_server

    def _schema(self, tmp_path) -> str:
        return "c_" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:20]

    def store_url(self, tmp_path):
        # One schema per test location. A 2 s retry deadline and a 0.3 s lock_timeout
        # keep the outage check short; no other check waits on a lock that long.
        return self.server.url(self._schema(tmp_path), deadline=2, options="-c%20lock_timeout%3D300")

    def make_store(self, tmp_path):
        return PostgresStore(self.store_url(tmp_path))

    @asynccontextmanager
    async def outage(self, tmp_path):
        # Another session holds every table of the schema in ACCESS EXCLUSIVE mode: each
        # statement of the store waits past its lock_timeout, is rolled back and retried
        # until the deadline, then raises StoreUnavailableError.
        schema = self._schema(tmp_path)
        blocker = await asyncpg.connect(self.server.dsn)
        try:
            transaction = blocker.transaction()
            await transaction.start()
            tables = ", ".join(
                f'"{schema}".{t}' for t in ("streams", "records", "snapshots", "blobs", "commits", "leases")
            )
            await blocker.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
            yield
            await transaction.rollback()
        finally:
            await blocker.close()

    def backend_server(self, tmp_path):
        return _KillablePostgres(self.server)


class _KillablePostgres:
    """The test server as the kit's ``ServerControl``: an immediate stop (a crash, WAL replay on start)."""

    def __init__(self, server: PostgresTestServer) -> None:
        self.server = server

    async def kill(self) -> None:
        await anyio.to_thread.run_sync(lambda: self.server.stop(immediate=True))

    async def restart(self) -> None:
        await anyio.to_thread.run_sync(self.server.start)


pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_url_options_and_redaction() -> None:
    options = PostgresOptions.from_url("postgresql://app:s3cret@db:5433/agents?schema=fleet&pool_max=4&sslmode=disable")
    assert (options.schema, options.pool_max) == ("fleet", 4)
    assert options.dsn == "postgresql://app:s3cret@db:5433/agents?sslmode=disable"  # libpq's own options pass
    assert (
        PostgresOptions.from_url("postgresql://db/agents?application_name=svc&target_session_attrs=read-write").dsn
        == "postgresql://db/agents?application_name=svc&target_session_attrs=read-write"
    )
    with pytest.raises(
        InvalidStoreURLError, match="unknown option.*pool_maxx"
    ) as caught:  # a typo of ours, not a server setting
        PostgresOptions.from_url("postgresql://app:s3cret@db/agents?pool_maxx=4")
    assert "s3cret" not in str(caught.value) and "s3cret" not in caught.value.url
    assert "s3cret" not in redact_url("postgresql://app:s3cret@db/agents") and "s3cret" not in repr(
        open_store("postgres://app:s3cret@db/agents")
    )
    assert (
        redact_url("postgresql://db/agents?password=s3cret&schema=x") == "postgresql://db/agents?password=***&schema=x"
    )
    for bad in (
        "postgresql://db/x?schema=Bad-Name",
        "postgresql://db/x?schema=a;drop",
        "postgresql://db/x?pool_max=0",
        "postgresql://db/x?statement_timeout=abc",
        "mysql://db/x",
    ):
        with pytest.raises(InvalidRequestError):
            PostgresOptions.from_url(bad)


async def test_golden_v1_schema_is_migrated_forward_and_reads_back(pg_server: PostgresTestServer) -> None:
    """The dump written by the adapter's first release opens with this build: migrated, every byte back."""
    import sys

    sys.path.insert(0, str(GOLDEN))
    from make_golden import BLOB, COMPACTED_THROUGH, NAMESPACE, SNAPSHOT, STREAMS

    database = pg_server.new_database()
    pg_server.psql_file(GOLDEN / "postgres-v1.sql", database=database)
    url = pg_server.url("durably", database=database)
    assert pg_server.psql("SELECT version FROM durably.schema_version", database=database).strip() == "1"
    async with PostgresStore(url) as store:
        for agent_id, records in STREAMS.items():
            stream = StreamId(NAMESPACE, agent_id)
            first = COMPACTED_THROUGH[1] + 1 if agent_id == COMPACTED_THROUGH[0] else 1
            assert [(r.seq, r.data) async for r in store.read(stream)] == list(enumerate(records, 1))[first - 1 :]
            assert await store.last_seq(stream) == len(records)
            assert await store.append(stream, len(records), [b"after-migration"]) == len(records) + 1
        snapshot = await store.get_snapshot(StreamId(NAMESPACE, SNAPSHOT[0]))
        assert (snapshot.seq, snapshot.data) == SNAPSHOT[1:]
        blob_stream = StreamId(NAMESPACE, BLOB[0])
        assert await store.get_blob(blob_stream, hashlib.sha256(BLOB[1]).hexdigest()) == BLOB[1]
        # What version 2 added works on the migrated schema.
        lease = await store.acquire_lease(blob_stream, "worker", 30)
        assert lease is not None and lease.token >= 1
        assert [s.agent_id async for s in store.list_streams(NAMESPACE)] == sorted(STREAMS)
        for bad in (0, -1):  # a typed error, not an IndexError after an empty page
            with pytest.raises(InvalidRequestError, match="page_size"):
                [s async for s in store.list_streams(NAMESPACE, page_size=bad)]
    assert pg_server.psql("SELECT version FROM durably.schema_version", database=database).strip() == str(
        SCHEMA_VERSION
    )


async def test_migrated_schema_equals_a_new_one(pg_server: PostgresTestServer) -> None:
    """Migrating v1 forward gives exactly the tables, columns and functions a new schema gets."""
    database = pg_server.new_database()
    pg_server.psql_file(GOLDEN / "postgres-v1.sql", database=database)
    async with PostgresStore(pg_server.url("durably", database=database)):
        pass
    async with PostgresStore(pg_server.url("fresh", database=database)):
        pass
    shape = (
        "SELECT table_name, column_name, data_type, collation_name, is_nullable FROM information_schema.columns "
        "WHERE table_schema = '{}' ORDER BY 1, 2"
    )
    functions = "SELECT routine_name FROM information_schema.routines WHERE routine_schema = '{}' ORDER BY 1"
    bodies = (
        "SELECT p.proname, replace(p.prosrc, '\"{0}\"', 'S') FROM pg_proc AS p JOIN pg_namespace AS n "
        "ON n.oid = p.pronamespace WHERE n.nspname = '{0}' ORDER BY 1"
    )
    for query in (shape, functions, bodies):
        assert pg_server.psql(query.format("durably"), database=database) == pg_server.psql(
            query.format("fresh"), database=database
        )


async def test_newer_schema_version_is_refused_and_left_untouched(pg_server: PostgresTestServer) -> None:
    newer = f"newer_{uuid.uuid4().hex[:8]}"
    url = pg_server.url(newer)
    async with PostgresStore(url) as store:
        await store.append(StreamId("ns", "a"), 0, [b"kept"])
    pg_server.psql(f"UPDATE {newer}.schema_version SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UnknownSchemaVersionError):
        await PostgresStore(url).open()
    assert pg_server.psql(f"SELECT count(*) FROM {newer}.records").strip() == "1"


async def test_processes_opening_a_new_schema_at_once_create_it_once(pg_server: PostgresTestServer) -> None:
    url = pg_server.url()
    stores = [PostgresStore(url) for _ in range(6)]
    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(store.open)
    for store in stores:
        await store.close()


async def test_read_only_server_is_refused_clearly(pg_server: PostgresTestServer) -> None:
    url = pg_server.url() + "&options=-c%20default_transaction_read_only%3Don"
    with pytest.raises(PostgresSetupError, match="read-only"):
        await PostgresStore(url).open()


async def test_open_inside_a_callers_transaction_on_the_schema_fails_clearly(pg_server: PostgresTestServer) -> None:
    """A transaction still open on the schema (here an upgrade's lock) makes open() fail after
    lock_timeout with the reason, instead of hanging."""
    import asyncpg

    held = f"held_{uuid.uuid4().hex[:8]}"
    url = pg_server.url(held, lock_timeout=0.5)
    async with PostgresStore(url):
        pass
    pg_server.psql(f"UPDATE {held}.schema_version SET version = 1")  # as if an older build made it
    conn = await asyncpg.connect(pg_server.dsn)
    try:
        async with conn.transaction():
            await conn.execute(f"SELECT pg_advisory_xact_lock(hashtextextended('durably.schema.{held}', 0))")
            with pytest.raises(PostgresSetupError, match="lock"):
                await PostgresStore(url).open()
    finally:
        await conn.close()


async def test_unreachable_server_is_store_unavailable() -> None:
    from durably.storage import StoreUnavailableError

    with pytest.raises(StoreUnavailableError):
        await PostgresStore("postgresql://nobody@127.0.0.1:1/db?connect_timeout=1&deadline=1").open()
