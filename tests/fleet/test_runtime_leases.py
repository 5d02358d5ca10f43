"""Several runtimes on one store: leases decide who runs an agent, so live agents
are not taken from each other, and a dead runtime's agents are taken over."""

from __future__ import annotations

import anyio
import pytest
from support_agents import gated_agent

from durably import AgentDefinition, AgentExistsError, AgentLeasedError, ModelResponse, Runtime, ToolCall, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store


def slow_agent(calls: list, effects: list, steps: int = 4) -> AgentDefinition:
    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int, *, ctx) -> int:
        effects.append(ctx.idempotency_key)
        return n

    class Slow:
        name = "slow"

        async def respond(self, messages, tools):
            calls.append(len(messages))
            await anyio.sleep(0.05)
            done = sum(m["role"] == "tool" for m in messages)
            if done < steps:
                return ModelResponse("", (ToolCall(f"c{done}", "effect", {"n": done}),))
            return ModelResponse("done")

    return AgentDefinition(name="slow", model=Slow(), tools=[effect])


async def journal_kinds(url: str, agent_id: str) -> list[str]:
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId("default", agent_id)
        return [record.kind async for record in JournalReader(store, codec, stream).records()]


async def test_two_serving_runtimes_never_take_live_agents_from_each_other(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    calls: list = []
    effects: list = []
    definition = slow_agent(calls, effects)
    async with (
        Runtime(url, agents=[definition], lease_ttl=1.0) as a,
        Runtime(url, agents=[definition], lease_ttl=1.0) as b,
    ):
        handles = [await a.start(definition, f"agent-{i}", "task") for i in range(4)]
        async with anyio.create_task_group() as tg:
            tg.start_soon(b.serve, 0.02)  # polls all the time; must find nothing to take
            for handle in handles:
                assert (await handle.wait()).status == "finished"
            tg.cancel_scope.cancel()
        with pytest.raises(AgentLeasedError):
            blocker = await a.start(definition, "busy", "task")
            await b.resume("busy")
        await blocker.wait()
    assert len(effects) == len(set(effects)) == 5 * 4
    for i in range(4):
        assert Kind.RESUMED not in await journal_kinds(url, f"agent-{i}")


async def test_parked_agent_is_run_by_whichever_runtime_polls_after_the_decision(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    ran: list = []

    definition = gated_agent(ran)
    async with Runtime(url, agents=[definition]) as a:
        state = await a.run(definition, "a1", "task")
        assert state.status == "waiting_approval"
    async with Runtime(url) as operator:  # no definitions: the decision is only recorded
        await operator.approve("a1", "c1")
    async with Runtime(url, agents=[definition]) as b:
        (handle,) = await b.resume_all()  # the lease was released when the agent parked
        assert (await handle.wait()).status == "finished"
    assert ran == [1]


async def test_run_after_an_in_process_approval_waits_for_the_end_and_keeps_the_lease(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    ran: list = []
    gate = anyio.Event()

    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx) -> int:
        await gate.wait()
        ran.append(n)
        return n

    class OneCall:
        name = "one"

        async def respond(self, messages, tools):
            if messages[-1]["role"] == "tool":
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "effect", {"n": 1}),))

    definition = AgentDefinition(name="gated", model=OneCall(), tools=[effect])
    async with Runtime(url, agents=[definition]) as rt, Runtime(url, agents=[definition]) as other:
        assert (await rt.run(definition, "a1", "task")).status == "waiting_approval"
        await rt.approve("a1", "c1")  # resumes here, in the background
        with pytest.raises(AgentExistsError):
            await rt.start(definition, "a1", "task")  # must not give the live agent's lease away
        with pytest.raises(AgentLeasedError):
            await other.resume("a1")
        gate.set()
        state = await rt.run(definition, "a1", "task")
    assert state.status == "finished" and ran == [1]


async def test_a_dead_local_holder_is_taken_over_at_once_by_exactly_one_of_two_serving_runtimes(tmp_path):
    # Automatic resumes do not wait out a dead holder's lease: the store arbitrates
    # the takeover (release of the dead holder's exact lease, then an atomic
    # acquire), so exactly one runtime wins.
    import socket
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/a.db"
    calls: list = []
    effects: list = []
    definition = slow_agent(calls, effects, steps=1)
    async with Runtime(url) as first:  # starts it, then stops at once: runnable, and nobody runs it
        await first.start(definition, "a1", "task")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_owner = f"{socket.gethostname()}:{dead.stdout.strip()}/cafe"
    async with Runtime(url, agents=[definition]) as a, Runtime(url, agents=[definition]) as b:
        assert await a.store.acquire_lease(a.stream("a1"), dead_owner, 30.0) is not None  # a crashed holder
        found: list = []

        async def scan(rt: Runtime) -> None:
            found.extend(await rt.resume_all())

        async with anyio.create_task_group() as tg:
            tg.start_soon(scan, a)
            tg.start_soon(scan, b)
        assert len(found) == 1
        assert (await found[0].wait()).status == "finished"
    assert (await journal_kinds(url, "a1")).count(Kind.RESUMED) == 1


class _CountsLeaseReads(MemoryStore):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.lease_reads: list[str] = []

    async def acquire_lease(self, stream, owner, ttl):
        self.lease_reads.append("acquire_lease")
        return await super().acquire_lease(stream, owner, ttl)

    async def get_lease(self, stream):
        self.lease_reads.append("get_lease")
        return await super().get_lease(stream)


async def test_a_refused_resume_names_the_live_holder_from_the_lease_it_read():
    """A claim refused by a live holder already read that holder's lease: ``AgentLeasedError`` names it
    from that read, with no third lease read (on S3 each is a GET; a waiting worker makes many)."""
    release = anyio.Event()

    @tool(name="effect")
    async def effect(n: int) -> int:
        await release.wait()
        return n

    class OneCall:
        name = "one-call"

        async def respond(self, messages, tools):
            if any(m["role"] == "tool" for m in messages):
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "effect", {"n": 1}),))

    definition = AgentDefinition(name="held", model=OneCall(), tools=[effect])
    holder_store, other_store = _CountsLeaseReads("memory://refused-claim"), _CountsLeaseReads("memory://refused-claim")
    async with (
        holder_store,
        other_store,
        Runtime(holder_store, agents=[definition]) as holder,
        Runtime(other_store, agents=[definition]) as other,
    ):
        handle = await holder.start(definition, "a1", "hold it")
        with pytest.raises(AgentLeasedError) as refused:
            await other.resume("a1")
        assert refused.value.owner == holder._activations.leases.owner
        assert other_store.lease_reads == ["acquire_lease", "get_lease"]
        release.set()
        assert (await handle.wait()).status == "finished"
