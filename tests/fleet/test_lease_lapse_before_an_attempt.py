"""A lease that lapses just before a tool attempt stops the agent; it is never the tool's error.

A worker paused past its lease (a stall, a SIGSTOP) must run no side effect, so
every attempt checks the lease just before the tool body. Seen in a 20,000-agent
fleet run: that check, made inside a retried attempt, was treated as the attempt's
failure, journaled as the call's result ("AgentLeaseLostError: ...") under a fence
still valid in the store, and the agent finished with it instead of its effect.

The pause is made deterministic here: the lease's clock is declared lapsed by the
first attempt (as a worker stalled past its lease finds it on waking), and the
runtime must then stop the activation with ``AgentLeaseLostError`` before attempt 2.
A later runtime runs the attempt, and the effect happens once.
"""

from __future__ import annotations

from typing import Any

import pytest
from privacy_support import ScriptModel
from store_urls import leased_store_url  # noqa: F401 - the fixture: the store URL, as ``url``

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, ToolContext, ToolRetry, Usage, tool
from durably._journal.claim import LeaseClaim
from durably.errors import AgentLeaseLostError


def definition(effects: list[int], lapse: list[bool]) -> AgentDefinition:
    @tool(retry=ToolRetry(attempts=3, backoff=0.01, jitter=0.0), on_unknown_outcome="retry")
    async def pay(*, ctx: ToolContext) -> str:
        if ctx.attempt == 1 and lapse:
            lapse.clear()
            LeaseClaim.lapsed = True  # the worker "wakes" past its lease as this attempt fails
            raise RuntimeError("the payment service timed out")
        effects.append(ctx.attempt)
        return f"paid on attempt {ctx.attempt}"

    model = ScriptModel([ModelResponse("", (ToolCall("c1", "pay", {}),), Usage(1, 1, 0.0))])
    return AgentDefinition(name="payer", model=model, tools=[pay])


@pytest.fixture
def lapsing(monkeypatch):
    """``LeaseClaim.check`` sees the lease lapsed by its clock once a tool says so."""
    check = LeaseClaim.check

    def checked(self: LeaseClaim) -> None:
        if getattr(LeaseClaim, "lapsed", False) and self.lease is not None:
            raise self.lose(None)
        check(self)

    monkeypatch.setattr(LeaseClaim, "lapsed", False, raising=False)
    monkeypatch.setattr(LeaseClaim, "check", checked)


async def test_a_lease_lapsed_before_a_retry_stops_the_agent_and_is_never_the_result(url, lapsing) -> None:
    effects: list[int] = []
    agent = definition(effects, [True])
    async with Runtime(url, agents=[agent]) as rt:
        with pytest.raises(AgentLeaseLostError):
            await rt.run(agent, "a1", "pay the invoice")
        records: list[tuple[str, dict[str, Any]]] = [(e.kind, e.payload) async for e in rt.history("a1", payload=True)]
    assert effects == []  # attempt 2 never ran its body on the lapsed lease
    results = [d for k, d in records if k == "tool_result"]
    assert results == [], results  # main: the lease check's error journaled as the call's result
    LeaseClaim.lapsed = False  # type: ignore[attr-defined]
    async with Runtime(url, agents=[agent]) as rt:
        state = await rt.run(agent, "a1", "pay the invoice")
        records = [(e.kind, e.payload) async for e in rt.history("a1", payload=True)]
    assert state.status == "finished"
    # Once, as attempt 3: attempt 2's intent is journaled with no result, an unknown
    # outcome the "retry" policy runs again; its body never ran.
    assert effects == [3]
    [result] = [d for k, d in records if k == "tool_result"]
    assert result["result"] == "paid on attempt 3" and not result.get("error")
