"""A scan claims no agent that another worker finished after the scan listed it.

A scan lists the runnable rows first and claims them afterwards; over a scan
of many agents that list goes stale, as other workers resume and finish what
it holds. Each such claim costs a lease, a full restore and a release for
nothing. Here, on one real SQLite file, a second runtime (another worker)
finishes every listed agent between the first worker's listing and its
claims; the first worker's lease acquisitions are counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably.adapters.sqlite import SQLiteStore
from durably.storage import StreamId

pytestmark = pytest.mark.anyio

AGENTS = 6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _gated(effects: list[str]) -> AgentDefinition:
    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx: Any) -> int:
        effects.append(ctx.agent_id)
        return n * 10

    return AgentDefinition(name="gated", model=StepModel(1), tools=[effect])


async def _parked_and_approved(url: str, definition: AgentDefinition) -> list[str]:
    ids = [f"stale-{n}" for n in range(AGENTS)]
    async with Runtime(url, agents=[definition]) as starter:
        for agent_id in ids:
            assert (await starter.run(definition, agent_id, "task")).status == "waiting_approval"
    async with Runtime(url) as operator:
        for agent_id in ids:
            await operator.approve(agent_id, "c1")
    return ids


async def test_a_scan_claims_none_of_the_agents_another_worker_finished_after_its_listing(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    effects: list[str] = []
    definition = _gated(effects)
    ids = await _parked_and_approved(url, definition)

    store = SQLiteStore(url)
    listed: list[StreamId] = []
    claimed: list[str] = []
    list_index = store.list_index
    acquire = store.acquire_lease

    async def listing_then_other_worker(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for row in list_index(*args, **kwargs):
            listed.append(row.stream)
            yield row
        # The listing is complete and nothing is claimed yet: the other worker runs every agent to its end.
        async with Runtime(url, agents=[definition]) as other:
            handles = await other.resume_all()
            assert len(handles) == AGENTS
            for handle in handles:
                assert (await handle.wait()).status == "finished"

    async def counted(stream: StreamId, *args: Any, **kwargs: Any) -> Any:
        if stream.agent_id.startswith("stale-"):
            claimed.append(stream.agent_id)
        return await acquire(stream, *args, **kwargs)

    store.list_index = listing_then_other_worker  # type: ignore[method-assign]
    store.acquire_lease = counted  # type: ignore[method-assign]
    async with store, Runtime(store, agents=[definition]) as worker:
        with anyio.fail_after(60):
            handles = await worker.resume_all()
    assert sorted(stream.agent_id for stream in listed) == ids, "the scan listed the approved agents"
    assert handles == []
    assert claimed == [], f"agents finished elsewhere were claimed again: {claimed}"
    assert sorted(effects) == ids, "every effect ran once"
    async with Runtime(url) as reader:
        for agent_id in ids:
            assert (await reader.status(agent_id)).status == "finished"
