"""One OpenAI Agents SDK agent, run durable by durably (``DurableRunner``) and by DBOS (``DBOSRunner``),
for the frameworks suite.

The agent is the same for both: a scripted SDK ``Model`` (the SDK's own model
interface, no network) asks for ``charge(amount=5)`` (an effect: a ledger
line), ``charges`` times in a row, then (with ``approval``) for
``refund(amount=5)``, a ``needs_approval`` tool, then answers with what the
tools returned. Every model request is a line in a request file (the logical
call's number: tool results so far) and every effect a ledger line, so
executions per logical call are counted across processes. ``KILL``
(environment) names the boundary a process SIGKILLs itself at, once:
``before_tool`` (in ``charge``, before its effect), ``in_tool`` (after its
effect), ``after_tool`` (at the next model request, before it is paid),
``before_answer`` (in the first request, paid, its answer not stored).

DBOS is set up as ``dbos-openai-agents`` documents it: ``DBOSRunner.run``
inside a ``@DBOS.workflow()``, the tools ``@DBOS.step()``s; its approval is a
``DBOS.recv`` in the workflow, sent by the driver. durably runs ``charge`` and
``refund`` under ``reconcile`` (the hook reads the ledger for the key).

Each engine runs in child processes (DBOS is a process-wide singleton):
``python -m durably.bench.frameworks_openai_agents ENGINE DB WORK CHARGES APPROVAL``
runs the agent to its end and writes its figures to ``WORK/figures.json``
(``framework_child``); ``durably bench --suite frameworks`` drives both engines
(throughput, bytes, and the crash test). Needs ``openai-agents`` (and
``dbos-openai-agents`` for the DBOS side).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .framework_child import PROMPT, Runner, append_line, kill_here, lines, main

RUN_ID = "run-1"


def scripted_model(work: Path, charges: int, approval: bool) -> Any:
    """The SDK ``Model`` both engines ask: its requests are lines of ``work/requests``."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    requests = work / "requests"

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            items = input if isinstance(input, list) else []
            done = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if len(done) == 1:
                kill_here("after_tool")  # charge's result is stored; this request is not paid yet
            append_line(requests, str(len(done)))
            if not done:
                kill_here("before_answer")  # the first request is paid; its answer is not stored
            usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
            if len(done) < charges or (approval and len(done) == charges):
                name = "charge" if len(done) < charges else "refund"
                call = ResponseFunctionToolCall(
                    type="function_call", call_id=f"call_{len(done)}", name=name, arguments='{"amount": 5}'
                )
                return ModelResponse(output=[call], usage=usage, response_id=None)
            text = "done: " + "; ".join(str(i.get("output")) for i in done[-2:])
            message = ResponseOutputMessage(
                type="message",
                id="msg",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
            return ModelResponse(output=[message], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            # The trials run Runner.run only; a streamed run would measure another path.
            raise RuntimeError("the bench's scripted model answers Runner.run, not streamed runs")

    return Scripted()


def build_agent(work: Path, key: Any, charges: int, approval: bool, step: Any = None) -> Any:
    """The agent; ``key(ctx)`` gives the idempotency key written with each effect; ``step`` wraps the tools (DBOS)."""
    from agents import Agent, function_tool
    from agents.tool_context import ToolContext

    ledger = work / "ledger"

    async def charge(ctx: ToolContext[Any], amount: int) -> str:
        """Charge the customer.

        Args:
            amount: In cents.
        """
        kill_here("before_tool")
        append_line(ledger, f"charge {amount} {key(ctx)}")
        kill_here("in_tool")
        return f"charge {amount} ok"

    async def refund(ctx: ToolContext[Any], amount: int) -> str:
        """Refund the customer.

        Args:
            amount: In cents.
        """
        append_line(ledger, f"refund {amount} {key(ctx)}")
        return f"refund {amount} ok"

    for tool in (charge, refund):  # real types: the SDK reads them (this module's annotations are strings)
        tool.__annotations__ = {"ctx": ToolContext, "amount": int, "return": str}
    wrap = step or (lambda fn: fn)
    tools: list[Any] = [function_tool(wrap(charge)), function_tool(wrap(refund), needs_approval=True)]
    return Agent(name="refunds", instructions="Refund.", model=scripted_model(work, charges, approval), tools=tools)


# -- durably -----------------------------------------------------------------------------------------------


async def _run_durably(db: Path, work: Path, charges: int, approval: bool) -> Any:
    import durably
    from durably.integrations.openai_agents import DurableRunner, current_call

    async def found(ctx: durably.ToolContext) -> durably.Reconciled | None:
        for line in lines(work / "ledger"):
            kind, amount, key = line.split()
            if key == ctx.idempotency_key:
                return durably.Reconciled(f"{kind} {amount} ok")
        return None

    agent = build_agent(work, lambda ctx: current_call().idempotency_key, charges, approval)
    policy = {"charge": "reconcile", "refund": "reconcile"}
    async with durably.Runtime(f"sqlite:///{db}") as rt:
        runner = DurableRunner(rt, on_unknown_outcome=policy, reconcile={"charge": found, "refund": found})
        result = await runner.run(agent, PROMPT, agent_id=RUN_ID, max_turns=charges + 4)
        for _ in range(4):
            if result.status != "waiting_approval":
                break
            for approval_id in result.approvals:
                await rt.approve(RUN_ID, approval_id)
            result = await runner.wait(agent, RUN_ID, timeout=120)
    return result.final_output


# -- DBOS --------------------------------------------------------------------------------------------------


async def _run_dbos(db: Path, work: Path, charges: int, approval: bool) -> Any:
    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from dbos_openai_agents import DBOSRunner

    config: DBOSConfig = {
        "name": "durably-frameworks-oa",
        "system_database_url": f"sqlite:///{db}",
        "log_level": "ERROR",
    }
    DBOS(config=config)
    agent = build_agent(work, lambda ctx: ctx.tool_call_id, charges, approval, step=DBOS.step())

    @DBOS.workflow()
    async def run_agent(prompt: str) -> str:
        result = await DBOSRunner.run(agent, prompt, max_turns=charges + 4)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                # The documented way to wait for a human in a workflow: a message, sent from outside.
                approved = await DBOS.recv_async("approval", timeout_seconds=120)
                state.approve(item) if approved else state.reject(item)
            result = await DBOSRunner.run(agent, state, max_turns=charges + 4)
        return str(result.final_output)

    DBOS.launch()
    try:
        with SetWorkflowID(RUN_ID):
            handle = await DBOS.start_workflow_async(run_agent, PROMPT)
        if approval:
            await DBOS.send_async(RUN_ID, True, "approval")  # durable: the workflow receives it when it gets there
        return await handle.get_result()
    finally:
        DBOS.destroy()


def _whole(run: Callable[[Path, Path, int, bool], Awaitable[Any]]) -> Runner:
    """``run`` timed as a whole: its wall time includes the engine's start and stop."""

    async def timed(db: Path, work: Path, charges: int, approval: bool) -> tuple[Any, float]:
        start = time.perf_counter()
        output = await run(db, work, charges, approval)
        return output, time.perf_counter() - start

    return timed


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    import agents  # noqa: F401  (imports are not the run's time)

    if sys.argv[1] == "durably":
        import durably.integrations.openai_agents
    else:
        import dbos_openai_agents  # noqa: F401
    main({"durably": _whole(_run_durably), "dbos": _whole(_run_dbos)}, sys.argv[1:])
