"""A resume begun by a wake-up is finished, however long it takes: the end of the wait between two
scans (the poll interval, or a timer coming due) stops the listening, never a resume under way.

On a real PostgreSQL server (LISTEN/NOTIFY wake-ups): agents parked at an
approval, a worker serving with a short poll interval, an operator in another
runtime approving them. The worker's store holds each agent's first append
there (its ``resumed`` record, durable by then) for several poll intervals
before acknowledging it, as a loaded store may. A resume cut short there would
give its lease back with its ``resumed`` record durable, and the next scan
would take the lease again and journal a second ``resumed`` record: two
activations begun by one worker with nothing between them. Each agent must
show exactly one ``resumed`` record, by the worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import pytest
from support_agents import gated_agent

from durably import Runtime
from durably._fleet import wakeups
from durably.adapters.postgres import PostgresStore
from durably.storage import AppendRequest, StreamId

try:
    from .pg_server import PostgresTestServer
except ImportError:
    from pg_server import PostgresTestServer

pytestmark = pytest.mark.anyio

AGENTS = 3
POLL = 0.2
#: How long the worker's store holds an agent's first append, in poll intervals.
HELD = 4


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _slow_first_append(
    append_batch: Callable[[Sequence[AppendRequest]], Awaitable[list[Any]]], held: list[str]
) -> Callable[[Sequence[AppendRequest]], Awaitable[list[Any]]]:
    """``append_batch`` that, once per agent, waits ``HELD`` poll intervals after the store took its records."""

    async def slow(requests: Sequence[AppendRequest]) -> list[Any]:
        results = await append_batch(requests)
        first = [r.stream.agent_id for r in requests if r.stream.agent_id.startswith("woken-")]
        first = [agent_id for agent_id in first if agent_id not in held]
        if first:
            held.extend(first)
            await anyio.sleep(HELD * POLL)
        return results

    return slow


async def test_a_woken_resume_is_not_cut_short_by_the_end_of_the_wait(pg_server: PostgresTestServer) -> None:
    url = pg_server.url(schema=f"woken_resume_{uuid.uuid4().hex[:8]}")
    definition = gated_agent([])
    ids = [f"woken-{n}" for n in range(AGENTS)]
    async with Runtime(url, agents=[definition]) as starter:
        for agent_id in ids:
            assert (await starter.run(definition, agent_id, "task")).status == "waiting_approval"
    held: list[str] = []
    async with PostgresStore(url) as store, Runtime(url) as operator:
        store.append_batch = _slow_first_append(store.append_batch, held)  # type: ignore[method-assign]
        async with Runtime(store, agents=[definition]) as worker, anyio.create_task_group() as group:
            group.start_soon(worker.serve, POLL)
            with anyio.fail_after(20):
                while not _listening(pg_server, store):
                    await anyio.sleep(0.05)
            for agent_id in ids:
                await operator.approve(agent_id, "c1")
            with anyio.fail_after(60):
                for agent_id in ids:
                    while (await operator.status(agent_id)).status != "finished":
                        await anyio.sleep(0.05)
            group.cancel_scope.cancel()
        assert sorted(held) == ids  # every resume's append was held past the end of the wait
        for agent_id in ids:
            history = operator.history(agent_id, kinds=["resumed"], payload=True)
            workers = [entry.payload["worker"] async for entry in history if entry.payload is not None]
            assert workers == [worker.worker_id], f"{agent_id} resumed {len(workers)} times: {workers}"


def _listening(pg_server: PostgresTestServer, store: PostgresStore) -> bool:
    """Whether the store's change feed has its listening connection up (approvals are heard)."""
    count = pg_server.psql(
        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{store._application_name}-listen'"
    )
    return count.strip() == "1"


async def test_a_timer_coming_due_stops_the_listening_and_lets_the_resume_under_way_finish() -> None:
    """``until`` (the earliest timer of ``serve()``) ends the wait long before the poll interval;
    the resume the feed began meanwhile runs to its end all the same."""

    class OneChange:
        def __init__(self) -> None:
            self.sent = False

        async def wait(self) -> frozenset[StreamId] | None:
            if not self.sent:
                self.sent = True
                return frozenset({StreamId("default", "woken-0")})
            await anyio.sleep_forever()
            return None

    timer_due = anyio.Event()
    finished: list[str] = []

    async def resume(agent_id: str) -> None:
        timer_due.set()  # the timer comes due while this resume is under way
        await anyio.sleep(HELD * POLL)
        finished.append(agent_id)

    async def until() -> None:
        await timer_due.wait()

    with anyio.fail_after(30):  # far below the poll interval: the timer ended the listening
        await wakeups.wait_and_resume(OneChange(), 600.0, resume, until=until)
    assert finished == ["woken-0"]
