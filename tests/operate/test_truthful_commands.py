"""Commands and activations tell the truth about where an agent runs.

A command answers the state *and* whether and where the agent will run now
(``CommandResult.placement``); an activation that lost its lease to another
runtime does not return "running" as if all were well: ``wait()`` (and so
``run()``) raises ``AgentLeaseLostError``.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import anyio
import pytest
from support_agents import gated_agent as gated

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, tool


def dead_owner() -> str:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return f"{socket.gethostname()}:{dead.stdout.strip()}/cafe"


async def test_after_a_restart_an_approval_runs_the_agent_now_and_says_so(tmp_path):
    """The restarted service's agent parked; the dead predecessor's lease is still in the store."""
    url = f"sqlite:///{tmp_path}/a.db"
    ran: list = []
    definition = gated(ran)
    async with Runtime(url, agents=[definition]) as rt:
        assert (await rt.run(definition, "a1", "task")).status == "waiting_approval"
        assert await rt.store.acquire_lease(rt.stream("a1"), dead_owner(), 30.0) is not None
        result = await rt.approve("a1", "c1")
        with anyio.fail_after(2):  # main: nothing ran until the dead lease lapsed, 30 s later
            while (await rt.status("a1")).status != "finished":
                await anyio.sleep(0.02)
        from durably._operate.placement import Where

        assert result.status == "running" and result.placement.where is Where.HERE
        assert (await result.placement.handle.wait()).status == "finished"
    assert ran == [1]


async def test_an_approval_while_a_remote_worker_holds_the_lease_names_it_and_its_expiry(tmp_path):
    from durably._operate.placement import Where

    url = f"sqlite:///{tmp_path}/a.db"
    definition = gated([])
    async with Runtime(url, agents=[definition]) as rt:
        await rt.run(definition, "a1", "task")
        far = "w7/x@far-host:12:99:abc:1"
        lease = await rt.store.acquire_lease(rt.stream("a1"), far, 30.0)
        assert lease is not None  # run() returned after the parked activation gave its lease back
        result = await rt.approve("a1", "c1")
        assert result.status == "running" and result.placement.where is Where.AFTER_LEASE
        assert result.placement.holder.owner == far and result.placement.holder.expires_at == lease.expires_at
        assert "far-host" not in result.placement.reason or "w7" in result.placement.reason
    async with Runtime(url) as bare:  # no definition registered: nobody here will run it
        result = await bare.send("a1", "hello")
        assert result.placement.where is Where.AFTER_LEASE
        await bare.store.release_lease(lease)
        result = await bare.send("a1", "hello again")
        assert result.placement.where is Where.UNASSIGNED and "only recorded the command" in result.placement.reason


async def test_a_command_on_a_parked_agent_says_it_does_not_run(tmp_path):
    from durably._operate.placement import Where

    url = f"sqlite:///{tmp_path}/a.db"
    definition = gated([])
    async with Runtime(url, agents=[definition]) as rt:
        await rt.run(definition, "a1", "task")
        result = await rt.send("a1", "any news?")
        assert result.status == "waiting_approval" and result.placement.where is Where.NOT_RUNNING
        assert "waiting_approval" in result.placement.reason


async def test_an_activation_that_lost_its_lease_raises_instead_of_returning_running(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"

    @tool(name="effect")
    async def effect(n: int, *, ctx) -> int:
        await anyio.sleep(0.05)
        return n

    class Forever:
        name = "forever"

        async def respond(self, messages, tools):
            return ModelResponse("", (ToolCall(f"c{len(messages)}", "effect", {"n": 1}),))

    definition = AgentDefinition(name="forever", model=Forever(), tools=[effect])
    # A ttl long enough that a loaded machine's stalls do not lapse the lease by the clock first.
    async with Runtime(url, agents=[definition], lease_ttl=1.5) as rt:
        handle = await rt.start(definition, "a1", "task")
        # Another worker takes the lease, as after this one paused past its TTL.
        held = await rt.store.get_lease(rt.stream("a1"))
        await rt.store.release_lease(held)
        assert await rt.store.acquire_lease(rt.stream("a1"), "w2/n@far-host:1:2:3:4", 30.0) is not None
        from durably import AgentLeaseLostError

        with anyio.fail_after(5), pytest.raises(AgentLeaseLostError) as lost:
            await handle.wait()  # main: returned a state with status "running"
        assert lost.value.owner == "w2/n@far-host:1:2:3:4"
