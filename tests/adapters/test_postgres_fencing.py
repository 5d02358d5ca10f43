"""PostgreSQL fencing beyond the kit: the lease row is locked FOR SHARE in the append's (or the
snapshot's) transaction, so a takeover in flight makes the write wait and then refuses it."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg
import pytest
from pg_server import PostgresTestServer

from durably.adapters.postgres import PostgresStore
from durably.storage._errors import FencedError
from durably.storage._spi import AppendRequest, StreamId

pytestmark = pytest.mark.anyio

S, OTHER = StreamId("t", "held"), StreamId("t", "other")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def waiting_on_a_lock(conn: asyncpg.Connection, application_name: str) -> bool:
    """Whether a backend of the store is blocked on a lock now."""
    rows = await conn.fetch(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", application_name
    )
    return bool(rows)


WRITES: dict[str, Callable[[PostgresStore, int], Awaitable[Any]]] = {
    # distinct existing streams: the client-sent statement
    "one statement": lambda store, token: store.append_batch(
        [AppendRequest(S, 1, [b"stale"], fence=token), AppendRequest(OTHER, 1, [b"other"])]
    ),
    # a repeated stream: the append_batch function
    "function": lambda store, token: store.append_batch(
        [
            AppendRequest(S, 1, [b"stale"], fence=token),
            AppendRequest(OTHER, 1, [b"o2"]),
            AppendRequest(OTHER, 2, [b"o3"]),
        ]
    ),
    "snapshot": lambda store, token: store.put_snapshot(S, 1, b"stale state", fence=token),
}


@pytest.mark.parametrize("write", sorted(WRITES))
async def test_a_takeover_in_flight_makes_a_stale_write_wait_then_fences_it(
    pg_server: PostgresTestServer, write: str
) -> None:
    schema = "f_" + uuid.uuid4().hex[:12]
    async with PostgresStore(pg_server.url(schema)) as store:
        old = await store.acquire_lease(S, "old", 60)
        assert old is not None
        await store.append(S, 0, [b"s1"], fence=old.token)
        await store.append(OTHER, 0, [b"o1"])
        taker = await asyncpg.connect(pg_server.dsn)
        watcher = await asyncpg.connect(pg_server.dsn)
        try:
            # Another worker's takeover, not yet committed: what acquire_lease does to the row.
            takeover = taker.transaction()
            await takeover.start()
            await taker.execute(
                f'UPDATE "{schema}".leases SET owner = $3, token = nextval(\'"{schema}".lease_tokens\') '
                "WHERE namespace = $1 AND agent_id = $2",
                S.namespace,
                S.agent_id,
                "new",
            )
            outcome: list[Any] = []

            async def stale_write() -> None:
                try:
                    outcome.append(await WRITES[write](store, old.token))
                except FencedError as fenced:
                    outcome.append(fenced)

            async with anyio.create_task_group() as group:
                group.start_soon(stale_write)
                with anyio.fail_after(30):
                    while not await waiting_on_a_lock(watcher, store._application_name):
                        await anyio.sleep(0.01)
                assert outcome == [], "the stale write waits for the takeover's transaction"
                await takeover.commit()
            (result,) = outcome
            fenced = result[0] if isinstance(result, list) else result
            assert isinstance(fenced, FencedError), f"the write is re-checked on the committed lease: {result}"
            if isinstance(result, list):
                assert result[1:] == ([2] if write == "one statement" else [2, 3]), "the other requests land"
        finally:
            await taker.close()
            await watcher.close()
        assert [r.data async for r in store.read(S)] == [b"s1"]
        assert await store.get_snapshot(S) is None


async def test_the_migration_adds_the_fence_to_append_batch(pg_server: PostgresTestServer) -> None:
    """A schema of the previous version is lifted: its old append function is replaced."""
    schema = "m_" + uuid.uuid4().hex[:12]
    async with PostgresStore(pg_server.url(schema)) as store:
        lease = await store.acquire_lease(S, "w", 60)
        assert lease is not None
        results = await store.append_batch(
            [AppendRequest(S, 0, [b"a"], fence=lease.token + 1), AppendRequest(S, 0, [b"b"], fence=lease.token)]
        )
        assert isinstance(results[0], FencedError) and results[1] == 1
    functions = pg_server.psql(
        f"SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        f"WHERE n.nspname = '{schema}' AND p.proname = 'append_batch'"
    )
    assert functions.strip() == "1", "one append_batch function: the fenced one"
