"""Racing commands are re-validated after a conflict.

Two processes (here two runtimes on one SQLite file, each with its own
connection) decide the same approval at the same moment: exactly one is
acknowledged, the other gets ``ApprovalAlreadyDecidedError``, and one decision is
journaled. Budget extensions commute: two ``extend --steps 10`` on 5 give 25.
"""

from __future__ import annotations

import anyio
import pytest

from durably import AgentDefinition, Budget, InvalidCommandError, ModelResponse, Runtime, ToolCall, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store


def gated() -> AgentDefinition:
    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx) -> int:
        return n

    class OneCall:
        name = "one"

        async def respond(self, messages, tools):
            if messages[-1]["role"] == "tool":
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "effect", {"n": 1}),))

    return AgentDefinition(name="gated", model=OneCall(), tools=[effect])


async def records(url: str, agent_id: str):
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId("default", agent_id)
        return [record async for record in JournalReader(store, codec, stream).records()]


@pytest.mark.parametrize("second", [True, False], ids=["approve-vs-approve", "approve-vs-deny"])
async def test_of_two_racing_decisions_exactly_one_is_acknowledged(tmp_path, second):
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[gated()]) as setup:
        for i in range(6):
            assert (await setup.run("gated", f"a{i}", "task")).status == "waiting_approval"
    # Neither runtime registers the definition: the decision is all each one does.
    async with Runtime(url) as p1, Runtime(url) as p2:
        outcomes: dict = {}

        async def decide(rt: Runtime, name: str, agent_id: str, approved: bool) -> None:
            try:
                await rt.approve(agent_id, "c1", approved=approved, by=name)
                outcomes[(agent_id, name)] = "ok"
            except InvalidCommandError as exc:
                outcomes[(agent_id, name)] = exc

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(decide, p1, "p1", f"a{i}", True)
                tg.start_soon(decide, p2, "p2", f"a{i}", second)
    for i in range(6):
        decided = [r for r in await records(url, f"a{i}") if r.kind == Kind.APPROVAL_DECIDED]
        assert len(decided) == 1  # main: two, the last silently winning
    from durably.errors import ApprovalAlreadyDecidedError

    for i in range(6):
        mine = [outcomes[(f"a{i}", name)] for name in ("p1", "p2")]
        assert mine.count("ok") == 1, mine
        (lost,) = [o for o in mine if o != "ok"]
        assert isinstance(lost, ApprovalAlreadyDecidedError) and "already decided" in str(lost)


async def test_racing_budget_extensions_both_take_effect(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[gated()]) as setup:
        for i in range(6):
            await setup.run("gated", f"a{i}", "task", budget=Budget(steps=5))
    async with Runtime(url) as p1, Runtime(url) as p2:
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(lambda a: p1.extend_budget(a, steps=10), f"a{i}")
                tg.start_soon(lambda a: p2.extend_budget(a, steps=10), f"a{i}")
        for i in range(6):
            assert (await p1.status(f"a{i}")).budget["steps"] == 25
