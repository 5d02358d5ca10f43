"""Function agents in the fleet and under budgets: served by ``durably worker``, model
calls counted and suspended by the ``Budget``, a model call with an unknown outcome
asked again, and a stale lease holder refused before it runs a call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fleet_processes import spawn_worker, stop, wait_for
from lease_partition import lease_partitionable
from support_agents import read_lines

from durably import Budget, FunctionAgent, Run, Runtime, ToolContext, Usage
from durably.errors import AgentLeaseLostError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_durably_worker_serves_submitted_function_agent_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    effects = tmp_path / "effects.jsonl"
    monkeypatch.setenv("WORKER_EFFECTS", str(effects))  # the submitting process imports the same module
    from function_agents import agents

    async def submit() -> None:
        async with Runtime(url, agents=agents) as rt:
            for agent_id in ("s-1", "s-2"):
                await rt.submit(agents[0], agent_id, f"hello {agent_id}")

    anyio.run(submit)
    worker = spawn_worker(url, tmp_path, "w1", agents="function_agents:agents")

    async def results() -> dict[str, Any]:
        async with Runtime(url, agents=agents) as rt:
            return {a: (await rt.status(a)).result for a in ("s-1", "s-2")}

    try:
        found = wait_for(lambda: anyio.run(results), 60, "the worker runs both", done=lambda r: all(r.values()))
    finally:
        stop(worker)
    assert found == {"s-1": "HELLO S-1", "s-2": "HELLO S-2"}
    assert sorted(line["agent"] for line in read_lines(effects)) == ["s-1", "s-2"]


async def test_model_calls_count_against_the_budget_and_suspend_it(tmp_path: Path) -> None:
    asked: list[int] = []

    async def ask_model(turn: int) -> dict[str, Any]:
        asked.append(turn)
        return {"text": f"answer {turn}", "tokens": 10}

    def cost(reply: dict[str, Any]) -> Usage:
        return Usage(input_tokens=reply["tokens"], output_tokens=1, cost_usd=0.5)

    async def body(run: Run, task: str) -> list[str]:
        answers = []
        for turn in range(3):
            reply = await run.call(ask_model, turn, name="chat", kind="model", usage=cost)
            answers.append(reply["text"])
        return answers

    definition = FunctionAgent("chatty", body, budget=Budget(steps=2))
    async with Runtime(f"sqlite:///{tmp_path / 'j.db'}", agents=[definition]) as rt:
        state = await rt.run(definition, "c-1", "")
        assert state.status == "suspended" and "steps" in state.reason
        assert state.usage == {"steps": 2, "input_tokens": 20, "output_tokens": 2, "cost_usd": 1.0}
        assert asked == [0, 1]  # the third request was not made
        await rt.extend_budget("c-1", steps=5)
        state = await rt.wait("c-1", timeout=30)
    assert state.status == "finished", state.reason
    assert state.result == ["answer 0", "answer 1", "answer 2"]
    assert asked == [0, 1, 2]  # the first two replayed from the journal, not paid again
    assert state.usage["steps"] == 3 and state.usage["input_tokens"] == 30


async def test_a_model_call_with_an_unknown_outcome_is_asked_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    asked: list[int] = []
    in_flight = anyio.Event()

    async def ask_model() -> str:
        asked.append(1)
        if len(asked) == 1:
            in_flight.set()
            await anyio.sleep_forever()  # the process goes away while the request is out
        return "answer"

    async def body(run: Run, task: str) -> str:
        # "ask" would make an approval for a tool; a model request is simply asked again.
        reply: str = await run.call(ask_model, kind="model", on_unknown_outcome="ask")
        return reply

    definition = FunctionAgent("asker", body)
    async with Runtime(url, agents=[definition]) as rt:
        await rt.start(definition, "q-1", "")
        await in_flight.wait()
    async with Runtime(url, agents=[definition]) as rt:
        handle = await rt.resume("q-1")
        assert handle is not None
        state = await handle.wait()
    assert state.status == "finished" and state.result == "answer"
    assert len(asked) == 2 and not state.approvals
    (entry,) = state.ledger.values()
    assert entry["attempts"] == 2


async def test_a_worker_past_its_lease_runs_no_call_after_the_takeover(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    paid: list[tuple[str, int]] = []
    order, started = anyio.Event(), anyio.Event()

    async def pay(item: str, ctx: ToolContext) -> str:
        paid.append((item, ctx.attempt))
        if len(paid) == 1:  # A's first call hangs while A is cut off from the lease
            started.set()
            await order.wait()
        return f"paid {item}"

    async def body(run: Run, task: str) -> list[str]:
        first = await run.call(pay, "one", on_unknown_outcome="retry")
        second = await run.call(pay, "two", on_unknown_outcome="retry")
        return [first, second]

    definition = FunctionAgent("payer", body)
    a_store = lease_partitionable(url)
    # A's lease must outlive A's start: on a loaded machine the lease's acquire and the start's
    # commit can take over half a second, and A, rightly, starts nothing past its lease. Once A
    # is cut off, B waits for this lease to lapse.
    async with a_store, Runtime(a_store, agents=[definition], worker_id="a", lease_ttl=4.0) as a:
        handle = await a.start(definition, "p-1", "")
        await started.wait()
        a_store.cut = True  # A renews no more
        async with Runtime(url, agents=[definition], worker_id="b") as b:
            resumed = await b.resume("p-1", force=True)  # once A's lease lapsed
            assert resumed is not None
            state = await resumed.wait()
        assert state.status == "finished" and state.result == ["paid one", "paid two"]
        assert paid == [("one", 1), ("one", 2), ("two", 1)]
        a_store.cut = False
        order.set()  # A's first call returns: A must not journal it nor start the second
        with pytest.raises(AgentLeaseLostError):
            await handle.wait()
    assert paid == [("one", 1), ("one", 2), ("two", 1)]
    async with Runtime(url, agents=[definition]) as rt:
        final = await rt.status("p-1")
    assert final.result == ["paid one", "paid two"]
