"""Bursts: a serving worker resumes the agents a burst of commands wakes several at once.

On a real PostgreSQL server (LISTEN/NOTIFY wake-ups): agents parked at an
approval, a worker serving with a poll interval far longer than the test (so
only the wake-ups can resume them), an operator in another runtime approving
them all. The worker's store lets a resume take its lease only once at least
``TOGETHER`` resumes are taking theirs at the same time (or a few seconds
passed): a worker that resumes one woken agent after another never has two
there at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from pg_server import PostgresTestServer
from support_agents import gated_agent

from durably import Runtime
from durably._fleet import wakeups
from durably.adapters.postgres import PostgresStore
from durably.errors import InvalidArgumentError
from durably.storage import StreamId

pytestmark = pytest.mark.anyio

AGENTS = 8
TOGETHER = 4
#: How long a resume waits at the gate for the others before it goes on alone, seconds.
GATE_WAIT = 3.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Gate:
    """Holds each lease acquisition of a ``burst-`` agent until ``TOGETHER`` are held at once
    (or ``GATE_WAIT`` seconds passed); ``most``: the most held at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.full = anyio.Event()

    def wrap(self, acquire: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def gated(stream: StreamId, *args: Any, **kwargs: Any) -> Any:
            if not stream.agent_id.startswith("burst-"):
                return await acquire(stream, *args, **kwargs)  # renewals and heartbeats pass
            self.inside += 1
            self.most = max(self.most, self.inside)
            if self.inside >= TOGETHER:
                self.full.set()
            try:
                with anyio.move_on_after(GATE_WAIT):
                    await self.full.wait()
                return await acquire(stream, *args, **kwargs)
            finally:
                self.inside -= 1

        return gated


async def test_a_burst_of_approvals_is_resumed_several_agents_at_once(pg_server: PostgresTestServer) -> None:
    url = pg_server.url()
    definition = gated_agent([])
    async with Runtime(url, agents=[definition]) as starter:
        for n in range(AGENTS):
            assert (await starter.run(definition, f"burst-{n}", "task")).status == "waiting_approval"
    gate = Gate()
    async with PostgresStore(url) as store, Runtime(url) as operator:
        store.acquire_lease = gate.wrap(store.acquire_lease)  # type: ignore[method-assign]
        async with Runtime(store, agents=[definition]) as worker, anyio.create_task_group() as group:
            group.start_soon(worker.serve, 600.0)  # no poll within the test: only wake-ups resume
            with anyio.fail_after(20):
                while not _listening(pg_server, store):
                    await anyio.sleep(0.05)
            for n in range(AGENTS):
                await operator.approve(f"burst-{n}", "c1")
            with anyio.fail_after(60):
                for n in range(AGENTS):
                    while (await operator.status(f"burst-{n}")).status != "finished":
                        await anyio.sleep(0.05)
            group.cancel_scope.cancel()
    assert gate.most >= TOGETHER, f"at most {gate.most} woken agents were being resumed at once"


def _listening(pg_server: PostgresTestServer, store: PostgresStore) -> bool:
    """Whether the store's change feed has its listening connection up (approvals are heard)."""
    count = pg_server.psql(
        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{store._application_name}-listen'"
    )
    return count.strip() == "1"


async def test_wake_ups_refuse_a_concurrency_below_one() -> None:
    class Silent:
        async def wait(self) -> frozenset[StreamId] | None:
            await anyio.sleep_forever()
            return None

    async def resume(agent_id: str) -> None:
        raise AssertionError("nothing is woken")

    with pytest.raises(InvalidArgumentError, match="at least 1"):
        await wakeups.wait_and_resume(Silent(), 0.01, resume, concurrency=0)


async def test_a_resume_measures_its_approval_latencies_without_reading_the_journal_again(tmp_path) -> None:
    """The approve-to-resume measurement uses the records the restore decoded: the resume reads
    the agent's stream once (SQLite's one-read restore), not once more for the measurement."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    url = f"sqlite:///{tmp_path / 'a.db'}"
    definition = gated_agent([])
    async with Runtime(url, agents=[definition]) as starter:
        assert (await starter.run(definition, "burst-0", "task")).status == "waiting_approval"
    async with Runtime(url) as operator:
        await operator.approve("burst-0", "c1")
    reads: list[StreamId] = []
    store = _counting(url, reads)
    metrics = InMemoryMetricReader()
    async with store, Runtime(store, agents=[definition], meter_provider=MeterProvider([metrics])) as worker:
        (handle,) = await worker.resume_all()
        assert (await handle.wait()).status == "finished"
        await anyio.sleep(0.1)  # a measurement in the background would have read by now
    points = _points(metrics, "durably.approval.resume.duration")
    assert len(points) == 1 and points[0].count == 1 and points[0].sum >= 0
    assert reads == [], f"the journal was read again after its restore: {reads}"


async def test_a_resume_whose_restore_began_at_a_snapshot_reads_the_window_to_measure(tmp_path) -> None:
    """When a snapshot after the decision cut the restored tail short of the window, the
    measurement reads the records again, and still sees the decision."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from durably import SnapshotPolicy

    url = f"sqlite:///{tmp_path / 'a.db'}"
    definition = gated_agent([])
    every = SnapshotPolicy(every_records=1, every_bytes=1, tail_ratio=0.0)
    async with Runtime(url, agents=[definition], snapshot_policy=every) as starter:
        assert (await starter.run(definition, "burst-0", "task")).status == "waiting_approval"
    async with Runtime(url, snapshot_policy=every) as operator:
        await operator.approve("burst-0", "c1")
        await anyio.sleep(0.2)  # the snapshot after the decision is written in the background
    reads: list[StreamId] = []
    store = _counting(url, reads)
    metrics = InMemoryMetricReader()
    async with store, Runtime(store, agents=[definition], meter_provider=MeterProvider([metrics])) as worker:
        (handle,) = await worker.resume_all()
        assert (await handle.wait()).status == "finished"
        with anyio.fail_after(10):
            while not _points(metrics, "durably.approval.resume.duration"):
                await anyio.sleep(0.02)
    (point,) = _points(metrics, "durably.approval.resume.duration")
    assert point.count == 1 and point.sum >= 0
    assert StreamId("default", "burst-0") in reads  # the window was read again


def _counting(url: str, reads: list[StreamId]) -> Any:
    """A SQLite store that notes the stream of each ``read``."""
    from durably.adapters.sqlite import SQLiteStore

    store = SQLiteStore(url)
    read = store.read

    def counted(stream: StreamId, *args: Any, **kwargs: Any) -> Any:
        reads.append(stream)
        return read(stream, *args, **kwargs)

    store.read = counted  # type: ignore[method-assign]
    return store


def _points(reader: Any, name: str) -> list[Any]:
    return [
        point
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


async def test_commands_given_at_once_share_one_listing_of_the_workers_heartbeats(tmp_path) -> None:
    """Where each of a burst of approved agents will run is told from one read of the
    heartbeats, not one read per command."""
    from durably._fleet.workers import WORKERS_NAMESPACE

    url = f"sqlite:///{tmp_path / 'a.db'}"
    definition = gated_agent([])
    async with Runtime(url, agents=[definition]) as starter:
        for n in range(AGENTS):
            assert (await starter.run(definition, f"burst-{n}", "task")).status == "waiting_approval"
    listings: list[str] = []
    async with (
        Runtime(url, agents=[definition], worker_id="w1") as worker,
        Runtime(url) as operator,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.serve, 600.0)
        with anyio.fail_after(10):
            while not await operator._activations.leases.heartbeats.live_workers(operator.namespace):
                await anyio.sleep(0.02)
        list_streams = operator.store.list_streams

        def counted(namespace: str, *args: Any, **kwargs: Any) -> Any:
            if namespace == WORKERS_NAMESPACE:
                listings.append(namespace)
            return list_streams(namespace, *args, **kwargs)

        operator.store.list_streams = counted  # type: ignore[method-assign]
        placements: list[str] = []

        async def approve(n: int) -> None:
            placements.append((await operator.approve(f"burst-{n}", "c1")).placement.where)

        async with anyio.create_task_group() as approvals:
            for n in range(AGENTS):
                approvals.start_soon(approve, n)
        tg.cancel_scope.cancel()
    assert placements == ["queued"] * AGENTS  # each told a live worker will run it
    assert 1 <= len(listings) < AGENTS, f"{len(listings)} listings of the heartbeats for {AGENTS} approvals at once"
