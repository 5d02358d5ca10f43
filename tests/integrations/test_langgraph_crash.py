"""SIGKILL mid-superstep, resume in a new process: DurablySaver against AsyncSqliteSaver.

The agent (tests/support/langgraph_agent.py) asks for two tool calls per step, each
its own task in one superstep; the tool's side effect is a line in a file.
Twenty kills in a row, two per step, each in a new child process:

1. ``sibling``: call c1 is killed before its side effect, once call c0's
   writes are stored. LangGraph resumes from c0's pending writes: c0 is NOT
   run again, c1 runs (once).
2. ``after``: c1 is killed after its side effect, before LangGraph stored its
   writes. LangGraph runs c1 again: its effect happens twice.

That is exactly what LangGraph re-runs: a task whose side effect happened but
whose writes were not yet durable (no checkpointer can know of an effect the
graph never reported); a task with stored writes is never re-run, whichever
saver stores them. The same kills run on both savers in this test and the
counts are compared: equal, and as stated. Then the final state must equal an
uninterrupted run's.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_agent import ScriptedChatModel, build_agent
from langgraph_worker import THREAD, run_once

STEPS = 10
KILLS = [kill for step in range(STEPS) for kill in (f"sibling:s{step}c1", f"after:s{step}c1")]


def _child(kind: str, db: Path, kill: str, effects: Path, approval: bool = False) -> int:
    # fork: a new process that starts in a few milliseconds (langgraph is already imported).
    process = multiprocessing.get_context("fork").Process(
        target=run_once, args=(kind, str(db), kill, STEPS, str(effects), approval)
    )
    process.start()
    process.join(120)
    if process.is_alive():
        process.kill()
        pytest.fail(f"{kind} child with kill {kill!r} hung")
    return process.exitcode


def _messages(values: dict) -> list[tuple[str, str, str | None]]:
    return [(m.type, m.content, getattr(m, "tool_call_id", None)) for m in values["messages"]]


async def _final_state(kind: str, db: Path) -> dict:
    from langgraph_worker import _open

    saver, close = await _open(kind, str(db))
    try:
        graph = build_agent(ScriptedChatModel(steps=STEPS)).compile(checkpointer=saver)
        return (await graph.aget_state({"configurable": {"thread_id": THREAD}})).values
    finally:
        await close()


def _reference() -> dict:
    graph = build_agent(ScriptedChatModel(steps=STEPS)).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ref"}, "recursion_limit": 200}
    return asyncio.run(graph.ainvoke({"messages": [HumanMessage("go")]}, config))


def test_twenty_sigkills_mid_superstep_then_resume(tmp_path) -> None:
    reference = _messages(_reference())
    effects: dict[str, Counter] = {}
    for kind in ("durably", "sqlite"):
        db, log = tmp_path / f"{kind}.db", tmp_path / f"{kind}.effects"
        for number, kill in enumerate(KILLS, 1):
            code = _child(kind, db, kill, log)
            assert code == -9, f"{kind}: kill {number} ({kill}) ended with exit code {code}, not SIGKILL"
        assert _child(kind, db, "", log) == 0, f"{kind}: the final resume failed"
        effects[kind] = Counter(log.read_text().split())
        assert _messages(asyncio.run(_final_state(kind, db))) == reference, kind

    rerun = {call: n for call, n in effects["durably"].items() if n > 1}
    # The cases LangGraph re-runs: only the calls killed after their effect, before their writes were stored.
    assert rerun == {f"s{step}c1": 2 for step in range(STEPS)}
    # Calls whose writes were stored before the kill (c0, killed beside) ran once.
    assert all(effects["durably"][f"s{step}c0"] == 1 for step in range(STEPS))
    # And AsyncSqliteSaver, under the same kills, re-runs exactly the same.
    assert effects["durably"] == effects["sqlite"]
    print(
        f"\n20 SIGKILLs each: tool executions durably={sum(effects['durably'].values())} "
        f"AsyncSqliteSaver={sum(effects['sqlite'].values())} for {2 * STEPS} calls; "
        f"re-run (effect then kill before its writes): {sorted(rerun)}"
    )


def test_an_interrupt_is_resumed_from_another_process(tmp_path) -> None:
    db, log = tmp_path / "hitl.db", tmp_path / "hitl.effects"
    assert _child("durably", db, "interrupt", log, approval=True) == 0
    assert not log.exists()  # the tools wait for the approval

    async def pending() -> tuple:
        from durably.integrations.langgraph import DurablySaver

        async with DurablySaver.from_url(f"sqlite:///{db}") as saver:
            graph = build_agent(ScriptedChatModel(steps=STEPS), approval=True).compile(checkpointer=saver)
            state = await graph.aget_state({"configurable": {"thread_id": THREAD}})
            return state.next, [i.value for task in state.tasks for i in task.interrupts]

    nxt, interrupts = asyncio.run(pending())
    assert nxt == ("approve",)
    assert interrupts == [{"question": "run these tools?", "calls": ["s0c0", "s0c1"]}]
    assert _child("durably", db, "resume:yes", log, approval=True) == 0  # a third process approves
    assert Counter(log.read_text().split()) == {"s0c0": 1, "s0c1": 1}
    nxt, interrupts = asyncio.run(pending())
    assert nxt == ("approve",) and interrupts[0]["calls"] == ["s1c0", "s1c1"]  # parked at the next approval
