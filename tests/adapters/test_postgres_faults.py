"""Faults on a real PostgreSQL server: a dropped connection (before and after the commit of an
append), a server restart under load, a statement timeout, serialization failures. Each maps
onto the SPI's typed errors, and nothing acknowledged is ever lost or written twice.

The server here is this module's own (restarting the session's would disturb other tests);
connections are cut by a TCP proxy on 127.0.0.1 between the adapter and the server.
"""

from __future__ import annotations

import time

import anyio
import asyncpg
import pytest
from pg_server import (
    PostgresTestServer,
    own_server,  # noqa: F401 - the fixture: the module's own server, as ``server``
)
from retry_controllers import count_controllers

from durably.adapters.postgres import PostgresStore
from durably.storage import ConflictError, StoreUnavailableError, StreamId, open_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CuttingProxy:
    """A TCP proxy to the server that, when armed, lets the next request through and then
    closes the client's connection instead of passing the server's answer back. With
    ``arm_on`` set, it arms itself once, at the first request holding those bytes."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.armed = False
        self.arm_on: bytes | None = None
        self.cut_answers: list[bytes] = []

    async def serve(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        await listener.serve(self._pipe)

    async def _pipe(self, client) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
            async with anyio.create_task_group() as group:

                async def up() -> None:
                    async for chunk in client:
                        if self.arm_on is not None and self.arm_on in chunk:
                            self.arm_on, self.armed = None, True
                        await upstream.send(chunk)

                async def down() -> None:
                    async for chunk in upstream:
                        if self.armed:
                            self.armed = False
                            self.cut_answers.append(chunk)
                            group.cancel_scope.cancel()  # the answer never reaches the client
                            return
                        await client.send(chunk)

                group.start_soon(up)
                group.start_soon(down)


def _answered_after_commit(answer: bytes) -> bool:
    """Whether a cut answer of the server ends in ReadyForQuery (idle): the statement had
    finished and its implicit transaction committed before the cut."""
    return answer.endswith(b"Z\x00\x00\x00\x05I")


async def test_an_open_cut_while_preparing_the_schema_is_retried(server: PostgresTestServer) -> None:
    async with anyio.create_task_group() as group:
        proxy = CuttingProxy(server.port)
        await group.start(proxy.serve)
        proxy.arm_on = b"to_regclass"  # the schema's preparation asks whether its tables exist
        url = server.url(pool_min=1, pool_max=1).replace(f":{server.port}/", f":{proxy.port}/")
        stream = StreamId("faults", "cut-while-opening")
        async with PostgresStore(url) as store:
            assert await store.append(stream, 0, [b"r1"]) == 1
        assert proxy.cut_answers, "the preparation's answer was cut"
        group.cancel_scope.cancel()


async def test_append_committed_then_cut_is_resolved_by_read_back(server: PostgresTestServer) -> None:
    async with anyio.create_task_group() as group:
        proxy = CuttingProxy(server.port)
        await group.start(proxy.serve)
        url = server.url(pool_min=1, pool_max=1).replace(f":{server.port}/", f":{proxy.port}/")
        stream = StreamId("faults", "cut-after-commit")
        async with PostgresStore(url) as store:
            assert await store.append(stream, 0, [b"new stream"]) == 1
            assert await store.append(stream, 1, [b"warm-up"]) == 2  # prepares the statement on the connection
            proxy.armed = True
            assert await store.append(stream, 2, [b"r3", b"r4"]) == 4  # not a ConflictError with itself
            assert proxy.cut_answers and _answered_after_commit(proxy.cut_answers[0]), proxy.cut_answers
            assert [r.data async for r in store.read(stream)] == [b"new stream", b"warm-up", b"r3", b"r4"]
            assert await store.append(stream, 4, [b"r5"]) == 5
        group.cancel_scope.cancel()


async def test_append_cut_before_commit_is_sent_again_once(server: PostgresTestServer) -> None:
    """The append's backend is terminated while it waits for a row lock: it never committed,
    the adapter learns that (its token is absent, its backend gone) and sends it again."""
    url = server.url()
    stream = StreamId("faults", "cut-before-commit")
    async with PostgresStore(url) as store:
        await store.append(stream, 0, [b"r1"])
        blocker = await asyncpg.connect(server.dsn)
        try:
            schema = store.options.schema
            async with anyio.create_task_group() as group:
                tx = blocker.transaction()
                await tx.start()
                await blocker.execute(f"SELECT 1 FROM {schema}.streams WHERE agent_id = $1 FOR UPDATE", stream.agent_id)
                outcome = {}

                async def append() -> None:
                    outcome["seq"] = await store.append(stream, 1, [b"r2"])

                group.start_soon(append)
                with anyio.fail_after(10):
                    while not (
                        pids := await blocker.fetch(
                            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                            store._application_name,
                        )
                    ):
                        await anyio.sleep(0.01)
                await blocker.execute("SELECT pg_terminate_backend($1)", pids[0]["pid"])
                await anyio.sleep(0.3)  # the adapter resolves, then re-sends: it waits on the lock again
                await tx.rollback()
        finally:
            await blocker.close()
        assert outcome["seq"] == 2
        assert [r.data async for r in store.read(stream)] == [b"r1", b"r2"]


async def test_statement_timeout_is_retried_then_store_unavailable_and_writes_nothing(server) -> None:
    url = server.url(statement_timeout=0.3, deadline=1)
    stream = StreamId("faults", "timeout")
    async with PostgresStore(url) as store:
        await store.append(stream, 0, [b"r1"])
        blocker = await asyncpg.connect(server.dsn)
        try:
            async with blocker.transaction():
                await blocker.execute(
                    f"SELECT 1 FROM {store.options.schema}.streams WHERE agent_id = $1 FOR UPDATE", stream.agent_id
                )
                started = time.perf_counter()
                with pytest.raises(StoreUnavailableError) as caught:
                    await store.append(stream, 1, [b"never"])
                assert isinstance(caught.value.__cause__, asyncpg.QueryCanceledError)
                assert time.perf_counter() - started >= 0.9, "retried until the deadline"
        finally:
            await blocker.close()
        assert [r.data async for r in store.read(stream)] == [b"r1"]
        assert await store.append(stream, 1, [b"r2"]) == 2  # the same expected seq works once the lock is gone


async def test_serialization_failures_are_retried_and_one_writer_wins_each_seq(server) -> None:
    """On a database whose default isolation is SERIALIZABLE, racing appends fail with 40001
    inside PostgreSQL; the adapter retries them, so callers see successes and conflicts only."""
    url = server.url(options="-c%20default_transaction_isolation%3Dserializable")
    stream = StreamId("faults", "serializable")
    async with PostgresStore(url) as first, PostgresStore(url) as second:
        await first.append(stream, 0, [b"r1"])
        assert await first._fetch("isolation", "SHOW transaction_isolation") == [("serializable",)]
        outcomes: list[object] = []

        async def writer(store: PostgresStore, name: str) -> None:
            for n in range(20):
                expected = await store.last_seq(stream)
                try:
                    outcomes.append(await store.append(stream, expected, [f"{name}{n}".encode()]))
                except ConflictError as conflict:
                    outcomes.append(conflict)

        async with anyio.create_task_group() as group:
            for index in range(4):
                group.start_soon(writer, first if index % 2 else second, f"w{index}-")
        wins = [o for o in outcomes if isinstance(o, int)]
        assert len(outcomes) == 80 and len(set(wins)) == len(wins)
        assert [r.seq async for r in first.read(stream)] == list(range(1, len(wins) + 2))


async def test_nothing_acknowledged_is_lost_across_a_server_restart(server: PostgresTestServer) -> None:
    """Writers append in a loop while the server is killed (pg_ctl -m immediate: no shutdown
    checkpoint) and started again; each acknowledged record is there afterwards, byte for byte."""
    url = server.url(deadline=30)
    acknowledged: dict[StreamId, list[bytes]] = {}
    failures: list[BaseException] = []

    async def writer(agent: int, stop: anyio.Event) -> None:
        stream = StreamId("faults", f"restart-{agent}")
        acknowledged[stream] = []
        async with PostgresStore(url) as store:
            seq = 0
            while not stop.is_set():
                data = f"{agent}:{seq + 1}".encode()
                try:
                    seq = await store.append(stream, seq, [data])
                    acknowledged[stream].append(data)
                except StoreUnavailableError as exc:  # outcome unknown past the deadline: re-read
                    failures.append(exc)
                    seq = await store.last_seq(stream)

    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        for agent in range(8):
            group.start_soon(writer, agent, stop)
        await anyio.sleep(1.0)
        before = sum(map(len, acknowledged.values()))
        await anyio.to_thread.run_sync(server.restart)
        await anyio.sleep(1.5)
        stop.set()
    after = sum(map(len, acknowledged.values()))
    assert before > 0 and after > before, (before, after)
    assert not failures, failures
    async with PostgresStore(url) as store:
        for stream, data in acknowledged.items():
            stored = [r async for r in store.read(stream)]
            assert [r.seq for r in stored] == list(range(1, len(stored) + 1))
            assert [r.data for r in stored] == data  # every acknowledged record, nothing else, no gap


async def test_a_connection_left_mid_operation_is_dropped_and_the_call_retried(server: PostgresTestServer) -> None:
    # After a server restart asyncpg can hand out a connection whose protocol is still mid-operation:
    # it raises InternalClientError. That connection must leave the pool and the call run again.
    async with open_store(server.url()) as store:
        used: list[asyncpg.Connection] = []

        async def work(conn: asyncpg.Connection) -> int:
            used.append(conn._con)  # the connection itself: the pool's proxy is detached on release
            if len(used) == 1:
                raise asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress")
            return await conn.fetchval("SELECT 1")

        assert await store._call("probe", work) == 1
        assert len(used) == 2 and used[0].is_closed()


async def test_calls_go_through_the_shared_retry_helper(
    server: PostgresTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper itself is tested in tests/storage/test_retried.py; here, only that the adapter uses it."""
    built = count_controllers(monkeypatch)
    stream = StreamId("faults", "no-controller")
    url = server.url(pool_min=1, pool_max=1)
    async with PostgresStore(url) as store:
        built.clear()  # opening the store may have retried a refused connection
        for seq in range(3):
            assert await store.append(stream, seq, [b"r%d" % seq]) == seq + 1
        assert [r.seq async for r in store.read(stream)] == [1, 2, 3]
        assert await store.last_seq(stream) == 3
        assert built == [], "a call that succeeds first time pays no retry controller"

        proxy = CuttingProxy(server.port)
        async with anyio.create_task_group() as group:
            await group.start(proxy.serve)
            async with PostgresStore(url.replace(f":{server.port}/", f":{proxy.port}/")) as cut:
                assert await cut.append(stream, 3, [b"warm-up"]) == 4  # prepares the statement
                built.clear()
                proxy.armed = True  # the next answer never arrives: the append's outcome is unknown
                assert await cut.append(stream, 4, [b"after a cut"]) == 5
                assert len(built) == 1, "the failed call was retried under one controller"
            group.cancel_scope.cancel()
        assert [r.data async for r in store.read(stream, after_seq=3)] == [b"warm-up", b"after a cut"]
