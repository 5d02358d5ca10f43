"""One Pydantic AI agent, run durable by durably (``DurableAgent``) and by DBOS (``DBOSAgent``), for the frameworks suite.

The agent is the same for both: Pydantic AI's ``FunctionModel`` asks for
``charge(amount=5)`` (an effect: a ledger line), ``charges`` times in a row,
then (with ``approval``) for ``refund(amount=5)``, a ``requires_approval`` tool,
then answers with what the tools returned. Every model request is a line in a
request file (the logical call's number: tool results so far) and every effect
a ledger line, so a run's executions per logical call are counted across
processes. ``KILL`` (environment) names the boundary a process SIGKILLs itself
at, once: ``before_tool`` (in ``charge``, before its effect), ``in_tool``
(after its effect), ``after_tool`` (at the next model request, before it is
paid), ``before_answer`` (in the first request, paid, its answer not stored).

Each engine runs in child processes (DBOS is a process-wide singleton):
``python -m durably.bench.frameworks_pydantic_ai ENGINE DB WORK CHARGES`` runs
the agent to its end (deciding the refund's approval, and for durably an
``ask`` as a truthful operator) and writes its figures to ``WORK/figures.json``.
For DBOS, an approval means what its users do: a second workflow, started by
hand with the first one's messages and the approval as ``DeferredToolResults``.
Needs ``pydantic-ai-slim`` (and ``dbos`` for the DBOS side).
"""

# No ``from __future__ import annotations``: Pydantic AI reads the tools' annotations, imported inside build_agent.
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .framework_child import PROMPT, append_line, kill_here, lines, main


def build_agent(
    work: Path, *, key: Callable[[], str] | None = None, name: str = "refunds", charges: int = 1, approval: bool = True
) -> Any:
    """The agent, with its ledger at ``work/ledger`` and its request count at ``work/requests``.

    ``key`` gives the idempotency key written with each effect (None: the call's ``tool_call_id``).
    """
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    ledger, requests = work / "ledger", work / "requests"

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
        if len(done) == 1:
            kill_here("after_tool")  # charge's result is stored; this request is not sent (not paid) yet
        append_line(requests, str(len(done)))
        if not done:
            kill_here("before_answer")  # the first request is paid; its answer is not stored
        if len(done) < charges:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 5})])
        if approval and len(done) == charges:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5})])
        return ModelResponse(parts=[TextPart("done: " + "; ".join(str(part.content) for part in done[-2:]))])

    agent: Agent[None, str] = Agent(FunctionModel(script), name=name)

    def write(kind: str, ctx: RunContext[None], amount: int) -> str:
        append_line(ledger, f"{kind} {amount} {key() if key is not None else ctx.tool_call_id}")
        return f"{kind} {amount} ok"

    @agent.tool
    def charge(ctx: RunContext[None], amount: int) -> str:
        kill_here("before_tool")
        receipt = write("charge", ctx, amount)
        kill_here("in_tool")
        return receipt

    @agent.tool(requires_approval=True)
    def refund(ctx: RunContext[None], amount: int) -> str:
        return write("refund", ctx, amount)

    return agent


# -- durably -----------------------------------------------------------------------------------------------


def durable_agent(work: Path, *, charges: int = 1, approval: bool = True) -> Any:
    """The agent as a ``DurableAgent``; ``charge`` under ``reconcile`` (its hook reads the ledger for the key)."""
    import durably
    from durably.integrations.pydantic_ai import DurableAgent, ToolPolicy, tool_context

    async def find_charge(ctx: durably.ToolContext) -> durably.Reconciled | None:
        for line in lines(work / "ledger"):
            kind, amount, key = line.split()
            if kind == "charge" and key == ctx.idempotency_key:
                return durably.Reconciled(f"charge {amount} ok")
        return None

    from pydantic_ai.usage import UsageLimits

    agent = build_agent(work, key=lambda: tool_context().idempotency_key, charges=charges, approval=approval)
    policy = ToolPolicy("reconcile", reconcile=find_charge)
    # No request limit (Pydantic AI's default is 50): the throughput run makes as many requests as it has steps.
    return DurableAgent(agent, tools={"charge": policy}, usage_limits=UsageLimits(request_limit=None))


async def _run_durably(db: Path, work: Path, charges: int, approval: bool) -> tuple[Any, float]:
    import durably

    durable = durable_agent(work, charges=charges, approval=approval)
    url = f"sqlite:///{db}"
    async with durably.Runtime(url, agents=[durable]) as rt:
        start = time.perf_counter()
        result = await durable.run_in(rt, PROMPT, agent_id="run-1")
        for _ in range(4):
            if result.status != "waiting_approval":
                break
            for request in result.state.open_approvals():
                await rt.approve("run-1", request["approval_id"])
            result = await durable.run_in(rt, PROMPT, agent_id="run-1")
        wall = time.perf_counter() - start
    return result.output, wall


# -- DBOS --------------------------------------------------------------------------------------------------


async def _run_dbos(db: Path, work: Path, charges: int, approval: bool) -> tuple[Any, float]:
    import warnings

    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
    from pydantic_ai.usage import UsageLimits

    limits = UsageLimits(request_limit=None)  # as for durably: as many requests as the run has steps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DBOSAgent is deprecated in favour of DBOSDurability; it is what users run
        from pydantic_ai.durable_exec.dbos import DBOSAgent

        dbos_agent = DBOSAgent(build_agent(work, charges=charges, approval=approval))
    config: DBOSConfig = {"name": "durably-frameworks", "system_database_url": f"sqlite:///{db}", "log_level": "ERROR"}
    DBOS(config=config)
    DBOS.launch()
    try:
        start = time.perf_counter()
        # The same workflow id again: DBOS resumes the killed workflow from its recorded steps.
        with SetWorkflowID("run-1"):
            result: Any = await dbos_agent.run(PROMPT, output_type=[str, DeferredToolRequests], usage_limits=limits)
        if isinstance(result.output, DeferredToolRequests):
            answers = DeferredToolResults(approvals={call.tool_call_id: True for call in result.output.approvals})
            with SetWorkflowID("run-1-approved"):
                result = await dbos_agent.run(
                    message_history=result.all_messages(),
                    deferred_tool_results=answers,
                    output_type=str,
                    usage_limits=limits,
                )
        return result.output, time.perf_counter() - start
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main({"durably": _run_durably, "dbos": _run_dbos}, sys.argv[1:])
