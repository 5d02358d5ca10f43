"""The step loop with real-model failure modes:
parallel tool calls, the ``ask`` default for unknown outcomes, model retries, replies
validated before they are journaled, a total fold and no NaN anywhere."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest
from privacy_support import ScriptModel
from support_agents import list_agent, read_lines

from durably import (
    AgentDefinition,
    Budget,
    InvalidCommandError,
    ModelResponse,
    RetryPolicy,
    Runtime,
    SnapshotPolicy,
    ToolCall,
    Usage,
    tool,
)
from durably._loop.agent import HistoryPolicy
from durably.schemas._records import Kind, Record
from durably.storage._errors import CorruptRecordError

FAST = RetryPolicy(initial_s=0.01, max_s=0.05, jitter_s=0.0)


def three_calls(*names: str) -> ScriptModel:
    return ScriptModel([ModelResponse("", tuple(ToolCall(f"c{i}", name, {"i": i}) for i, name in enumerate(names)))])


async def test_three_half_second_calls_of_one_turn_run_together_in_call_order() -> None:
    finished: list[int] = []

    @tool
    async def slow(i: int) -> int:
        await anyio.sleep(0.5 - i * 0.1)  # the last call finishes first
        finished.append(i)
        return i

    definition = AgentDefinition(name="par", model=three_calls("slow", "slow", "slow"), tools=[slow])
    async with Runtime("memory://", agents=[definition]) as rt:
        started = time.monotonic()
        state = await rt.run("par", "p1", "task")
        took = time.monotonic() - started
    assert state.status == "finished" and took < 0.8, took
    assert finished == [2, 1, 0]
    assert [m["tool_call_id"] for m in state.messages if m["role"] == "tool"] == ["c0", "c1", "c2"]


async def test_sequential_tools_and_the_concurrency_cap_are_kept() -> None:
    running, peak = [0], {"seq": 0, "par": 0}

    def counted(kind: str):
        async def body(i: int) -> int:
            running[0] += 1
            peak[kind] = max(peak[kind], running[0])
            await anyio.sleep(0.05)
            running[0] -= 1
            return i

        return body

    alone = tool("alone", sequential=True)(counted("seq"))
    wide = tool("wide")(counted("par"))
    definition = AgentDefinition(
        name="cap",
        model=three_calls("alone", "alone", "wide", "wide", "wide", "wide"),
        tools=[alone, wide],
        max_parallel_tools=2,
    )
    async with Runtime("memory://", agents=[definition]) as rt:
        state = await rt.run("cap", "c1", "task")
    assert state.status == "finished"
    assert peak == {"seq": 1, "par": 2}
    assert [m["tool_call_id"] for m in state.messages if m["role"] == "tool"] == [f"c{i}" for i in range(6)]


def test_sigkill_while_parallel_calls_run_resumes_each_effect_at_most_once(tmp_path: Path) -> None:
    worker = Path(__file__).resolve().parents[1] / "support" / "crash_worker.py"
    cmd = [
        sys.executable,
        str(worker),
        "--db",
        str(tmp_path / "a.db"),
        "--effects",
        str(tmp_path / "effects.jsonl"),
        "--acks",
        str(tmp_path / "acks.jsonl"),
        "--agents",
        "2",
        "--steps",
        "6",
        "--per-turn",
        "3",
    ]
    crashed = subprocess.run(
        [*cmd, "--crash", "after_effect", "--at", "2"], capture_output=True, text=True, timeout=120
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    states = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert {s["status"] for s in states.values()} == {"finished"}, states
    assert all(s["result"] == f"done {[n * 10 for n in range(1, 7)]}" for s in states.values())
    effects = read_lines(tmp_path / "effects.jsonl")
    assert max(Counter(e["key"] for e in effects).values()) == 1  # reconcile: never twice
    assert sorted(e["n"] for e in effects) == sorted(list(range(1, 7)) * 2)


async def test_an_unknown_outcome_asks_by_default_with_rerun_and_skip(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    effects: list[int] = []
    gate = anyio.Event()

    def agent(block: bool) -> AgentDefinition:
        @tool  # no policy given: "ask"
        async def charge(i: int) -> str:
            effects.append(i)
            if block:
                gate.set()
                await anyio.sleep_forever()  # the process "dies" in the middle
            return f"charged {i}"

        return AgentDefinition(name="pay", model=three_calls("charge", "charge"), tools=[charge])

    async with Runtime(url, agents=[agent(True)]) as rt:
        await rt.start("pay", "p1", "task")
        await gate.wait()
    async with Runtime(url, agents=[agent(False)]) as rt:
        (handle,) = await rt.resume_all()
        state = await handle.wait()
        assert state.status == "waiting_approval"
        (asked,) = state.open_approvals()  # one question at a time, in call order
        assert asked["call_id"] == "c0" and "approve to run it again, deny to skip it" in asked["reason"]
        await rt.approve("p1", asked["approval_id"])  # re-run
        state = await settled(rt, "p1")
        (asked,) = state.open_approvals()
        assert asked["call_id"] == "c1"
        await rt.approve("p1", asked["approval_id"], approved=False, by="ops")  # skip
        state = await settled(rt, "p1")
    assert state.status == "finished"
    told = {m["tool_call_id"]: m["content"] for m in state.messages if m["role"] == "tool"}
    assert told["c0"] == "charged 0" and "ops chose to skip this call, so it did not happen" in told["c1"]
    assert sorted(effects) == [0, 0, 1]  # twice the first time (both started), once more for the re-run


async def settled(rt: Runtime, agent_id: str):
    """The agent's state once it is no longer running (it was resumed in the background)."""
    with anyio.fail_after(10):
        while (state := await rt.status(agent_id)).status == "running":
            await anyio.sleep(0.01)
    return state


class Flaky:
    """Fails ``failures`` times with an HTTP 429 carrying Retry-After, then answers."""

    name = "flaky"

    def __init__(self, failures: int, answer: str = "done") -> None:
        self.failures, self.answer, self.calls = failures, answer, 0

    async def respond(self, messages, tools):
        self.calls += 1
        if self.calls <= self.failures:
            raise RateLimited()
        return ModelResponse(self.answer, (), Usage(1, 1))


class RateLimited(Exception):
    status_code = 429

    class response:
        headers = {"retry-after": "0.05"}


async def test_a_model_failing_twice_with_429_then_answering_finishes() -> None:
    model = Flaky(2)
    async with Runtime("memory://", agents=[AgentDefinition(name="f", model=model, retry=FAST)]) as rt:
        started = time.monotonic()
        state = await rt.run("f", "a1", "task")
    assert state.status == "finished" and model.calls == 3
    assert time.monotonic() - started >= 0.1  # Retry-After honoured twice


async def test_one_timeout_from_the_model_no_longer_fails_the_agent() -> None:
    class TimesOutOnce:
        name = "slowpoke"
        calls = 0

        async def respond(self, messages, tools):
            self.calls += 1
            if self.calls == 1:
                raise TimeoutError("the provider did not answer in time")
            return ModelResponse("answered")

    async with Runtime("memory://", agents=[AgentDefinition(name="t", model=TimesOutOnce(), retry=FAST)]) as rt:
        state = await rt.run("t", "a1", "task")
    assert state.status == "finished" and state.result == "answered"


async def test_a_model_that_always_fails_leaves_a_failed_agent_with_the_reason() -> None:
    model = Flaky(100)
    async with Runtime("memory://", agents=[AgentDefinition(name="f", model=model, retry=FAST)]) as rt:
        state = await rt.run("f", "a1", "task")
    assert state.status == "failed" and "RateLimited" in state.reason and model.calls == 4


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        (Usage(None, 1, 0.0), "usage.input_tokens"),
        (Usage(1, 1, "0.01"), "usage.cost_usd"),
        (Usage(1, 1, math.nan), "usage.cost_usd"),
        (Usage(1, -5, 0.0), "usage.output_tokens"),
    ],
)
async def test_a_bad_model_reply_is_refused_before_the_journal_and_the_namespace_lives_on(usage, field, tmp_path):
    class Bad:
        name = "bad"

        async def respond(self, messages, tools):
            return ModelResponse("hi", (), usage)

    url = f"sqlite:///{tmp_path}/a.db"
    definitions = [AgentDefinition(name="bad", model=Bad(), retry=FAST), list_agent(1, [])]
    async with Runtime(url, agents=definitions) as rt:
        state = await rt.run("bad", "a1", "task")
        assert state.status == "failed" and field in state.reason and "ModelReplyError" in state.reason
        await rt.run("list-agent", "a2", "task")
    async with Runtime(url, agents=definitions) as rt:
        assert {s.agent_id: s.status for s in await rt.agents()} == {"a1": "failed", "a2": "finished"}


async def test_a_committed_record_that_does_not_fold_marks_only_its_agent_unreadable(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[list_agent(1, [])]) as rt:
        await rt.run("list-agent", "good", "task")
        await rt.run("list-agent", "bad", "task")
        stream = rt.stream("bad")
        last = await rt.store.last_seq(stream)
        # What an older build let through: a usage figure the fold cannot add.
        forged = Record(
            last + 1,
            Kind.MODEL_RESPONDED,
            {
                "text": "",
                "tool_calls": [],
                "plan": None,
                "model": "m",
                "usage": {"input_tokens": None, "output_tokens": 1, "cost_usd": 0.0},
            },
            1.0,
        )
        await rt.store.append(stream, last, [rt.codec.encode_record(forged, stream)])
    async with Runtime(url, agents=[list_agent(1, [])]) as rt:
        with pytest.raises(CorruptRecordError, match="does not fold"):
            await rt.status("bad")
        listed = {s.agent_id: s.status for s in await rt.agents()}
        assert listed == {"good": "finished", "bad": "unreadable"}
        assert await rt.resume_all() == []


def test_nan_and_negative_figures_are_refused_wherever_they_enter() -> None:
    for make in (
        lambda: Budget(cost_usd=math.nan),
        lambda: Budget(steps=-1),
        lambda: Budget(tokens=1.5),
        lambda: RetryPolicy(initial_s=math.inf),
        lambda: RetryPolicy(attempts=0),
        lambda: SnapshotPolicy(tail_ratio=math.nan),
        lambda: HistoryPolicy(max_messages=math.nan),
        lambda: Runtime("memory://", lease_ttl=math.nan),
    ):
        with pytest.raises(ValueError):
            make()


async def test_a_nan_budget_extension_is_refused() -> None:
    async with Runtime("memory://", agents=[list_agent(5, [])]) as rt:
        await rt.run("list-agent", "a1", "task", budget=Budget(steps=1, cost_usd=1.0))
        for bad in ({"cost_usd": math.nan}, {"cost_usd": math.inf}, {"steps": -1}):
            with pytest.raises(InvalidCommandError, match="finite and not negative"):
                await rt.extend_budget("a1", **bad)
