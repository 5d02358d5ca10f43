"""A Pydantic AI agent with a side-effecting tool and an approval, for the bridge's tests and the bench.

The model is Pydantic AI's own ``FunctionModel``: it asks for ``charge(amount=5)``,
then for ``refund(amount=5)`` (a tool with ``requires_approval=True``), then
answers with what the tools returned. Every model request is counted in a file
(one line per request: the logical call's number) and every effect of ``charge``
and ``refund`` is a line in a ledger file holding the call's idempotency key, so
a test counts executions per logical call across processes.

``KILL`` (an environment variable, read once per process) names a boundary at
which the process SIGKILLs itself, once:

* ``before_tool``: inside ``charge``, before its effect.
* ``in_tool``: inside ``charge``, after its effect, before it returns.
* ``after_tool``: at the next model request (before it is paid), once ``charge``'s result is stored.
* ``before_answer``: inside the first model request, after it was paid (counted),
  before its answer is stored.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

BOUNDARIES = ("before_tool", "in_tool", "after_tool", "before_answer")


def _kill_here(boundary: str) -> None:
    if os.environ.get("KILL") == boundary:
        os.kill(os.getpid(), signal.SIGKILL)


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]


def lines(path: Path) -> list[str]:
    """The lines of a ledger or request-count file (none if it does not exist)."""
    return path.read_text().splitlines() if path.exists() else []


def build_agent(work: Path, *, key: Any = None, name: str = "refunds") -> Agent[None, str]:
    """The agent: its ledger is ``work/ledger``, its request count ``work/requests``.

    ``key`` returns the idempotency key the tools write in the ledger (None: the
    call's tool_call_id), so the same agent runs under durably and under other engines.
    """
    ledger, requests = work / "ledger", work / "requests"

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = _returns(messages)
        if len(done) == 1:
            _kill_here("after_tool")  # charge's result is stored; this request is not sent (not paid) yet
        with requests.open("a") as out:
            out.write(f"{len(done)}\n")
            out.flush()
            os.fsync(out.fileno())
        if not done:
            _kill_here("before_answer")  # the first request is paid; its answer is not stored
        if not done:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 5})])
        if len(done) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5})])
        return ModelResponse(parts=[TextPart("done: " + "; ".join(str(part.content) for part in done))])

    agent: Agent[None, str] = Agent(FunctionModel(script), name=name)

    def write(kind: str, ctx: RunContext[None], amount: int) -> str:
        idem = key() if key is not None else ctx.tool_call_id
        with ledger.open("a") as out:
            out.write(f"{kind} {amount} {idem}\n")
            out.flush()
            os.fsync(out.fileno())
        return f"{kind} {amount} ok"

    @agent.tool
    def charge(ctx: RunContext[None], amount: int) -> str:
        _kill_here("before_tool")
        receipt = write("charge", ctx, amount)
        _kill_here("in_tool")
        return receipt

    @agent.tool(requires_approval=True)
    def refund(ctx: RunContext[None], amount: int) -> str:
        return write("refund", ctx, amount)

    return agent
