"""``DurableRunner``: the SDK's own ``Runner`` loop and ``AsyncOpenAI`` client against a local
Chat Completions server, its model requests and function tools journaled in a durably
function agent: replayed from the journal by another runtime, handoffs (a cycle too),
a guardrail that asks a model, ``needs_approval`` across a restart (approve and reject),
structured output, errors and bad input; ``durably worker`` serving the runs."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agents import Agent, GuardrailFunctionOutput, Runner, function_tool, input_guardrail
from agents.tool import default_tool_error_function
from openai_agents_support import ChatServer, completion, said, sdk_model
from pydantic import BaseModel

import durably
from durably.errors import ArgumentTypeError, InvalidArgumentError, UnencodableValueError
from durably.integrations.openai_agents import AgentRunFailedError, DurableRunner

SUPPORT = Path(__file__).resolve().parents[2] / "support"
ran: list[str] = []


@function_tool
def charge(amount: int) -> str:
    """Charge the customer.

    Args:
        amount: In cents.
    """
    ran.append(f"charge {amount}")
    return f"charged {amount}"


@function_tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund the customer (a human approves).

    Args:
        amount: In cents.
    """
    ran.append(f"refund {amount}")
    return f"refunded {amount}"


@function_tool
def broken(amount: int) -> str:
    """A tool that fails.

    Args:
        amount: In cents.
    """
    ran.append("broken")
    raise RuntimeError("card declined")


@function_tool(name_override="broken", failure_error_function=None)
def strict_broken(amount: int) -> str:
    """A tool that fails, its error raised to the run.

    Args:
        amount: In cents.
    """
    ran.append("broken")
    raise RuntimeError("card declined")


@pytest.fixture(autouse=True)
def _clean() -> None:
    ran.clear()


def tool_names(tools) -> set[str]:
    return {t["function"]["name"] for t in tools}


def results(messages) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


ids = itertools.count()


def call(name: str, **arguments) -> dict:
    return completion(None, [(f"call_{next(ids)}", name, arguments)])


def ledger_names(state) -> list[str]:
    return [entry["tool"] for entry in state.ledger.values()]


async def test_a_finished_run_is_replayed_from_the_journal_by_another_runtime(tmp_path):
    def answer(messages, tools):
        return completion("done: " + results(messages)[-1]) if results(messages) else call("charge", amount=5)

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with ChatServer(answer) as server:
        agent = Agent(name="payer", instructions="Charge.", model=sdk_model(server.url), tools=[charge])
        async with durably.Runtime(url) as rt:
            result = await DurableRunner(rt).run(agent, "charge 5", agent_id="pay-1")
        assert (result.status, result.final_output, result.last_agent) == ("finished", "done: charged 5", "payer")
        assert sorted(ledger_names(result.state)) == ["charge", "model", "model"]
        async with durably.Runtime(url) as rt:  # a new process's runtime: the same answer, nothing asked or run
            again = await DurableRunner(rt).run(agent, "charge 5", agent_id="pay-1")
        assert again.final_output == "done: charged 5"
        assert len(server.requests) == 2 and ran == ["charge 5"]


async def test_handoffs_with_a_cycle_run_the_specialists_tools_journaled(tmp_path):
    def answer(messages, tools):
        names = tool_names(tools)
        if "transfer_to_billing" in names and not results(messages):
            return call("transfer_to_billing")
        if "charge" in names and len(results(messages)) == 1:
            return call("charge", amount=7)
        return completion("billing done: " + results(messages)[-1])

    async with ChatServer(answer) as server:
        model = sdk_model(server.url)
        billing = Agent(name="billing", instructions="Bill.", model=model, tools=[charge])
        triage = Agent(name="triage", instructions="Route.", model=model, handoffs=[billing])
        billing.handoffs = [triage]  # a cycle: each agent is cloned once
        async with durably.Runtime(f"sqlite:///{tmp_path / 'runs.db'}") as rt:
            result = await DurableRunner(rt).run(triage, "bill me", agent_id="route-1")
    assert (result.last_agent, result.final_output) == ("billing", "billing done: charged 7")
    assert ran == ["charge 7"]
    assert sorted(ledger_names(result.state)) == ["charge", "model", "model", "model"]
    assert billing.handoffs == [triage] and charge in billing.tools  # the user's agents are untouched


def _guarded(server_url: str, tripped: list[bool]) -> Agent:
    guard = Agent(name="guard", instructions="Is it about money?", model=sdk_model(server_url))

    @input_guardrail
    async def money_only(ctx, agent, input):
        verdict = await Runner.run(guard, input, context=ctx.context)
        tripped.append(verdict.final_output == "off-topic")
        return GuardrailFunctionOutput(output_info={"verdict": verdict.final_output}, tripwire_triggered=tripped[-1])

    return Agent(
        name="refunder",
        instructions="Refund.",
        model=sdk_model(server_url),
        tools=[refund],
        input_guardrails=[money_only],
    )


def _refund_answer(guard_says: str):
    def answer(messages, tools):
        if said(messages, "system") == ["Is it about money?"]:
            return completion(guard_says)
        return completion("refund step: " + results(messages)[-1]) if results(messages) else call("refund", amount=3)

    return answer


async def test_needs_approval_parks_across_a_restart_and_the_guardrail_model_is_asked_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tripped: list[bool] = []
    async with ChatServer(_refund_answer("on-topic")) as server:
        agent = _guarded(server.url, tripped)
        async with durably.Runtime(url) as rt:
            parked = await DurableRunner(rt).run(agent, "refund 3", agent_id="refund-1")
        assert parked.status == "waiting_approval" and ran == []
        [(approval_id, request)] = parked.approvals.items()
        assert request["arguments"]["tool"] == "refund" and json.loads(request["arguments"]["arguments"]) == {
            "amount": 3
        }
        async with durably.Runtime(url) as rt:  # another process decides and runs it
            runner = DurableRunner(rt)
            rt.register(runner.definition(agent))
            await rt.approve("refund-1", approval_id, approved=True, by="ops")
            result = await runner.wait(agent, "refund-1", timeout=60)
        assert (result.status, result.final_output) == ("finished", "refund step: refunded 3")
        assert ran == ["refund 3"]
        guard_requests = [r for r in server.requests if said(r["messages"], "system") == ["Is it about money?"]]
        assert len(guard_requests) == 1 and tripped == [False]  # the replay took the stored verdict
        assert len(server.requests) == 3  # guard, turn 1, turn 2: nothing paid twice
        assert "guardrail money_only" in ledger_names(result.state)


async def test_a_rejected_tool_is_not_run_and_the_model_is_told(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with ChatServer(_refund_answer("on-topic")) as server:
        agent = _guarded(server.url, [])
        async with durably.Runtime(url) as rt:
            runner = DurableRunner(rt)
            parked = await runner.run(agent, "refund 3", agent_id="refund-2")
            [approval_id] = parked.approvals
            await rt.approve("refund-2", approval_id, approved=False, note="not this customer")
            result = await runner.wait(agent, "refund-2", timeout=60)
    assert result.final_output == "refund step: not this customer" and ran == []


async def test_a_tripped_guardrail_fails_the_run_with_a_typed_error(tmp_path):
    async with ChatServer(_refund_answer("off-topic")) as server:
        agent = _guarded(server.url, [])
        async with durably.Runtime(f"sqlite:///{tmp_path / 'runs.db'}") as rt:
            with pytest.raises(AgentRunFailedError, match="InputGuardrailTripwireTriggered") as failed:
                await DurableRunner(rt).run(agent, "tell me a joke", agent_id="joke")
            assert failed.value.agent_id == "joke"
            assert (await rt.status("joke")).status == "failed"
    assert ran == []


class Invoice(BaseModel):
    amount: int
    paid: bool


async def test_structured_output_comes_back_as_the_output_type(tmp_path):
    def answer(messages, tools):
        return completion(json.dumps({"amount": 5, "paid": True}))

    async with ChatServer(answer) as server:
        agent = Agent(name="invoicer", instructions="Invoice.", model=sdk_model(server.url), output_type=Invoice)
        async with durably.Runtime(f"sqlite:///{tmp_path / 'runs.db'}") as rt:
            result = await DurableRunner(rt).run(agent, "invoice", agent_id="inv-1")
            assert result.final_output == Invoice(amount=5, paid=True)
            assert result.state.result["final_output"] == {"amount": 5, "paid": True}


async def test_a_failing_tool_is_journaled_as_the_sdk_reports_it_and_runs_once(tmp_path):
    def answer(messages, tools):
        return completion("model saw: " + results(messages)[-1]) if results(messages) else call("broken", amount=1)

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with ChatServer(answer) as server:
        agent = Agent(name="b", instructions="x", model=sdk_model(server.url), tools=[broken])
        async with durably.Runtime(url) as rt:
            result = await DurableRunner(rt).run(agent, "go", agent_id="broken-1")
        # The SDK's default failure_error_function tells the model; that text (its wording varies between the SDK's
        # releases) is the call's journaled result.
        told = default_tool_error_function(None, RuntimeError("card declined"))
        assert result.final_output == "model saw: " + told
        assert ran == ["broken"]
        strict = Agent(name="s", instructions="x", model=sdk_model(server.url), tools=[strict_broken])
        async with durably.Runtime(url) as rt:
            with pytest.raises(AgentRunFailedError, match="card declined"):
                await DurableRunner(rt).run(strict, "go", agent_id="broken-2")
        async with durably.Runtime(url) as rt:  # the stored failure is replayed, not the tool
            with pytest.raises(AgentRunFailedError, match="card declined"):
                await DurableRunner(rt).run(strict, "go", agent_id="broken-2")
        assert ran == ["broken", "broken"]


async def test_a_model_error_fails_the_run_and_bad_input_is_refused(tmp_path):
    def answer(messages, tools):
        raise ValueError("the server refuses")

    async with ChatServer(answer) as server:
        agent = Agent(name="m", instructions="x", model=sdk_model(server.url))
        async with durably.Runtime(f"sqlite:///{tmp_path / 'runs.db'}") as rt:
            runner = DurableRunner(rt)
            with pytest.raises(AgentRunFailedError, match="the server refuses"):
                await runner.run(agent, "go", agent_id="m-1")
            with pytest.raises(UnencodableValueError, match="context"):
                await runner.run(agent, "go", agent_id="m-2", context=object())
            with pytest.raises(InvalidArgumentError, match="max_turns"):
                await runner.run(agent, "go", agent_id="m-3", max_turns=0)
            with pytest.raises(ArgumentTypeError):
                await runner.run("not an agent", "go", agent_id="m-4")
            assert [a.agent_id for a in await rt.agents()] == ["m-1"]  # nothing started for bad input
    with pytest.raises(InvalidArgumentError, match="not a policy"):
        DurableRunner(on_unknown_outcome="sometimes")
    with pytest.raises(InvalidArgumentError, match="no hook"):
        DurableRunner(on_unknown_outcome={"charge": "reconcile"})
    with pytest.raises(InvalidArgumentError, match="whose policy is not reconcile"):

        async def hook(ctx):
            return None

        DurableRunner(reconcile={"charge": hook})
    with pytest.raises(ArgumentTypeError):
        DurableRunner(run_config={"model": "x"})


async def test_durably_worker_serves_submitted_runs_and_their_approvals(tmp_path):
    script = {"notify": 0}

    def answer(messages, tools):
        done = results(messages)
        if not done:
            return call("charge", amount=5)
        if len(done) == 1:
            script["notify"] += 1
            return call("notify", message="billed")
        return completion("all done: " + " / ".join(done))

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with ChatServer(answer) as server:
        env = {
            **os.environ,
            "OA_MODEL_URL": server.url,
            "OA_LEDGER": str(tmp_path / "ledger"),
            "PYTHONPATH": str(SUPPORT),
        }
        from openai_agents_worker import build

        runner, agent = build(server.url, "ask")
        async with durably.Runtime(url) as rt:
            runner.runtime = rt
            await runner.submit(agent, "bill 5 cents", agent_id="queued-1")
        worker = subprocess.Popen(
            [sys.executable, "-m", "durably", "worker", "--agents", "openai_agents_worker:definitions"]
            + ["--store", url, "--poll-interval", "0.2"],
            cwd=SUPPORT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "worker.err").open("w"),
        )
        try:
            async with durably.Runtime(url) as rt:  # an operator's runtime: it runs nothing itself
                parked = await rt.wait("queued-1", "waiting_approval", timeout=60)
                [approval_id] = [k for k, v in parked.approvals.items() if v["decision"] is None]
                await rt.approve("queued-1", approval_id, approved=True)
                runner.runtime = rt
                done = await runner.wait(agent, "queued-1", timeout=60)
        finally:
            worker.kill()  # its draining is the worker tests' subject, not this one's
            await asyncio.to_thread(worker.wait, 30)
    assert done.final_output == "all done: charge done: 5 / notify done: billed"
    assert (tmp_path / "ledger").read_text().count("\n") == 2
    assert len(server.requests) == 3


async def test_parallel_tool_calls_and_an_output_guardrail_are_journaled_by_call_id(tmp_path):
    from agents import output_guardrail

    checks: list[str] = []

    @output_guardrail
    async def no_secrets(ctx, agent, output):
        checks.append(output)
        return GuardrailFunctionOutput(output_info={"length": len(output)}, tripwire_triggered="secret" in output)

    def answer(messages, tools):
        if not results(messages):
            return completion(None, [("call_a", "charge", {"amount": 1}), ("call_b", "charge", {"amount": 2})])
        return completion("both: " + " / ".join(sorted(results(messages))))

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with ChatServer(answer) as server:
        agent = Agent(
            name="p", instructions="x", model=sdk_model(server.url), tools=[charge], output_guardrails=[no_secrets]
        )
        async with durably.Runtime(url) as rt:
            result = await DurableRunner(rt).run(agent, "charge twice", agent_id="par-1")
    assert result.final_output == "both: charged 1 / charged 2"
    assert sorted(ran) == ["charge 1", "charge 2"] and checks == ["both: charged 1 / charged 2"]
    calls = {entry["call_id"]: entry["tool"] for entry in result.state.ledger.values()}
    assert {"tool:1:call_a", "tool:1:call_b", "guardrail:output:no_secrets:1"} <= set(calls), calls
