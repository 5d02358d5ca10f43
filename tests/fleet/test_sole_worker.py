"""serve() on a store without leases (file://) refuses to run beside another live worker.

Such a store cannot keep two workers from running one agent's tools twice; the
workers' heartbeats (which every store holds) tell a second worker that the
first one is alive. A predecessor that died without saying so (its heartbeat
written, then silent) does not keep a new worker from serving.
"""

from __future__ import annotations

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, WorkerExistsError, tool
from durably._fleet.workers import list_workers

pytestmark = pytest.mark.anyio

TIMEOUT = 1.0  # heartbeat timeout: seconds of silence after which a worker is dead


def _definition(ran: list[int]) -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int, *, ctx: object) -> int:
        ran.append(n)
        return n

    return AgentDefinition(name="effects", model=StepModel(1), tools=[effect])


async def test_a_second_worker_on_a_store_without_leases_refuses_to_serve(tmp_path) -> None:
    url = f"file://{tmp_path}/agents"
    ran: list[int] = []
    definition = _definition(ran)
    async with (
        Runtime(url, agents=[definition], heartbeat_timeout=TIMEOUT, worker_id="first") as first,
        Runtime(url, agents=[definition], heartbeat_timeout=TIMEOUT, worker_id="second") as second,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(first.serve, 0.05)
        await first.submit(definition, "a1", "task")
        with anyio.fail_after(10):  # the first worker serves (it looked for others, found none)
            while (await first.status("a1")).status != "finished":
                await anyio.sleep(0.02)
        with pytest.raises(WorkerExistsError) as refused, anyio.fail_after(10):
            await second.serve(0.05)
        assert refused.value.worker_id == "first" and "no leases" in str(refused.value)
        assert second.draining  # resumes nothing from now on
        await second.submit(definition, "a2", "task")
        with anyio.fail_after(10):
            while (await first.status("a2")).status != "finished":
                await anyio.sleep(0.02)
        assert [w.worker_id for w in await list_workers(first.store, first.namespace) if w.state == "serving"] == [
            "first"
        ]
        tg.cancel_scope.cancel()
    assert ran == [1, 1]  # each agent once, by the one worker serving


async def test_a_dead_predecessors_silent_heartbeat_does_not_keep_a_worker_from_serving(tmp_path) -> None:
    url = f"file://{tmp_path}/agents"
    ran: list[int] = []
    definition = _definition(ran)
    async with Runtime(url, agents=[definition], heartbeat_timeout=TIMEOUT, worker_id="crashed") as ghost:
        # One serving beat, never followed by another nor by "stopped": a worker SIGKILLed just now.
        heartbeats = ghost._activations.leases.heartbeats
        assert heartbeats is not None and await heartbeats.write(heartbeats.beat(ghost._activations))
    async with (
        Runtime(url, agents=[definition], heartbeat_timeout=TIMEOUT) as rt,
        anyio.create_task_group() as tg,
    ):
        assert [w.worker_id for w in await list_workers(rt.store, rt.namespace)] == ["crashed"]
        await rt.submit(definition, "a1", "task")
        tg.start_soon(rt.serve, 0.05)
        with anyio.fail_after(10):
            while (await rt.status("a1")).status != "finished":
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert ran == [1]
