"""Failed agents brought back (``Runtime.retry``), unknown outcomes answered with
"it happened, here is the result", and results that survive a SIGKILL exactly."""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import anyio
import pytest
from privacy_support import ScriptModel

from durably import (
    AgentDefinition,
    InvalidCommandError,
    ModelResponse,
    RetryPolicy,
    Runtime,
    ToolCall,
    TransientModelError,
    tool,
)
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage._errors import UnencodableValueError

FAST = RetryPolicy(initial_s=0.01, max_s=0.02, jitter_s=0.0)
WORKER = Path(__file__).resolve().parents[1] / "support" / "lossless_worker.py"


async def kinds_of(rt: Runtime, agent_id: str) -> list[tuple[str, dict]]:
    codec, stream = RecordCodec(), rt.stream(agent_id)
    return [(r.kind, r.data) for r in [record async for record in JournalReader(rt.store, codec, stream).records()]]


class Switchable:
    """Raises a transient error until ``fixed``; then answers."""

    name = "switchable"

    def __init__(self) -> None:
        self.fixed, self.calls = False, 0

    async def respond(self, messages, tools):
        self.calls += 1
        if not self.fixed:
            raise TransientModelError("secret prompt text must not be journaled", status=503)
        return ModelResponse("answered")


async def test_each_failed_attempt_is_journaled_without_content_and_retry_finishes_the_run(tmp_path) -> None:
    model = Switchable()
    definition = AgentDefinition(name="s", model=model, retry=FAST)
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[definition]) as rt:
        state = await rt.run("s", "a1", "task")
        assert state.status == "failed" and model.calls == 4
        with pytest.raises(InvalidCommandError, match="is failed"):
            await rt.send("a1", "hello?")
        failures = [d for k, d in await kinds_of(rt, "a1") if k == Kind.MODEL_FAILED]
        assert [f["attempt"] for f in failures] == [1, 2, 3, 4]
        assert all(f["transient"] and f["error"].endswith("TransientModelError") for f in failures)
        assert [f["retry_in"] is None for f in failures] == [False, False, False, True]
        assert "secret prompt" not in json.dumps(failures)
    model.fixed = True  # the operator fixed the cause; a new process retries the agent
    async with Runtime(url, agents=[definition]) as rt:
        handle = await rt.retry("a1")
        state = await handle.wait()
        assert state.status == "finished" and state.result == "answered"
        with pytest.raises(InvalidCommandError, match="not failed"):
            await rt.retry("a1")


async def test_a_failed_unknown_outcome_is_retried_as_a_question_answered_with_its_result(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    ran: list[int] = []
    gate = anyio.Event()

    def agent(block: bool) -> AgentDefinition:
        @tool(on_unknown_outcome="fail")
        async def charge(amount: int) -> dict:
            ran.append(amount)
            if block:
                gate.set()
                await anyio.sleep_forever()
            return {"charged": amount}

        script = [ModelResponse("", (ToolCall("c1", "charge", {"amount": 5}),))]
        return AgentDefinition(name="pay", model=ScriptModel(script), tools=[charge])

    async with Runtime(url, agents=[agent(True)]) as rt:
        await rt.start("pay", "p1", "task")
        await gate.wait()  # the intent is durable and the process "dies"
    async with Runtime(url, agents=[agent(False)]) as rt:
        (handle,) = await rt.resume_all()
        state = await handle.wait()
        assert state.status == "failed" and "policy fail" in state.reason
        assert await rt.retry("p1") is None  # parked: a human must say what happened
        (question,) = (await rt.status("p1")).open_approvals()
        assert "report that it happened with its result" in question["reason"]
        with pytest.raises(InvalidCommandError, match="cannot come with approved=False"):
            await rt.approve("p1", question["approval_id"], approved=False, result={"charged": 5})
        with pytest.raises(UnencodableValueError, match="result.when"):
            await rt.approve("p1", question["approval_id"], result={"when": object()})
        when = dt.datetime(2025, 5, 1, 9, 0, tzinfo=dt.UTC)
        await rt.approve("p1", question["approval_id"], by="ops", result={"charged": 5, "at": when})
        with anyio.fail_after(10):
            while (state := await rt.status("p1")).status == "running":
                await anyio.sleep(0.01)
    assert state.status == "finished" and ran == [5]  # never run again
    (entry,) = state.ledger.values()
    assert entry["result"] == {"charged": 5, "at": when}


def test_every_result_type_round_trips_through_a_sigkill_and_a_resume_in_a_new_process(tmp_path) -> None:
    db = str(tmp_path / "l.db")
    crashed = subprocess.run([sys.executable, str(WORKER), db, "crash"], capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    resumed = subprocess.run([sys.executable, str(WORKER), db, "resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert report.pop("status") == "finished"
    assert len(report) == 15
    assert all(r["equal"] and r["same_type"] for r in report.values()), report
    # The standard library's types come back exactly from the journal itself; the user's
    # own classes are stored as their data and rebuilt from the tool's return annotation.
    plain = {"enum": "str", "int_enum": "int", "dataclass": "dict", "model": "dict"}
    assert {n: r["stored"] for n, r in report.items() if r["stored"] != r["type"]} == plain


async def test_a_decimal_nan_result_is_refused_with_its_path_not_stored() -> None:
    @tool
    async def price() -> dict:
        return {"amount": Decimal("NaN")}

    script = [ModelResponse("", (ToolCall("c1", "price", {}),))]
    async with Runtime("memory://", agents=[AgentDefinition(name="n", model=ScriptModel(script), tools=[price])]) as rt:
        state = await rt.run("n", "a1", "task")
    assert state.status == "failed" and "tool_result.data.result.amount: Decimal NaN is not finite" in state.reason


async def test_durably_retry_from_the_command_line_lets_a_serving_worker_finish_the_run(tmp_path) -> None:
    model = Switchable()
    definition = AgentDefinition(name="s", model=model, retry=FAST)
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[definition]) as rt:
        assert (await rt.run("s", "a1", "task")).status == "failed"
    cli = [sys.executable, "-m", "durably._cli", "retry", "a1", "--store", url]
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(cli, capture_output=True, text=True, timeout=120))
    assert done.returncode == 0, done.stdout + done.stderr
    model.fixed = True
    async with Runtime(url, agents=[definition]) as rt:
        (handle,) = await rt.resume_all()
        state = await handle.wait()
    assert state.status == "finished" and state.result == "answered"
