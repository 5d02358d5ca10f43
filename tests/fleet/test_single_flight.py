"""Inside one runtime, resuming an agent is single-flight.

An embedding web service has one ``Runtime``, a background ``serve()`` and
approvals arriving over HTTP: ``approve()`` resumes the agent inline while the
scan resumes it too. Whoever gets there first runs it; every other path gets
the live handle (or nothing to do), never a second copy.
"""

from __future__ import annotations

import anyio
import pytest

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store


def gated_agent(ran: list, policy: str) -> AgentDefinition:
    @tool(name="effect", requires_approval=True, on_unknown_outcome=policy)
    async def effect(n: int, *, ctx) -> int:
        ran.append(ctx.idempotency_key)
        await anyio.sleep(0.05)  # long enough for a second copy to reach its own intent
        return n

    class OneCall:
        name = "one"

        async def respond(self, messages, tools):
            await anyio.sleep(0)
            if messages[-1]["role"] == "tool":
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "effect", {"n": 1}),))

    return AgentDefinition(name="gated", model=OneCall(), tools=[effect])


async def kinds(url: str, agent_id: str) -> list[str]:
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId("default", agent_id)
        return [record.kind async for record in JournalReader(store, codec, stream).records()]


@pytest.mark.parametrize("scheme", ["sqlite", "memory"])
@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_approve_racing_resume_all_runs_one_copy(tmp_path, scheme, policy):
    url = f"sqlite:///{tmp_path}/a.db" if scheme == "sqlite" else "memory://"
    ran: list = []
    definition = gated_agent(ran, policy)
    async with Runtime(url, agents=[definition]) as rt:
        agents = [f"a{i}" for i in range(10)]
        for agent_id in agents:
            assert (await rt.run(definition, agent_id, "task")).status == "waiting_approval"
        async with anyio.create_task_group() as tg:
            for agent_id in agents:
                tg.start_soon(rt.approve, agent_id, "c1")
            tg.start_soon(rt.resume_all)
            for agent_id in agents:
                tg.start_soon(rt.resume, agent_id)
        for agent_id in agents:
            handle = await rt.resume(agent_id)
            state = await handle.wait() if handle is not None else await rt.status(agent_id)
            assert state.status == "finished", state.reason
        if scheme == "sqlite":
            for agent_id in agents:
                assert (await kinds(url, agent_id)).count(Kind.RESUMED) == 1
    assert len(ran) == len(set(ran)) == 10
