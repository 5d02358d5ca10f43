"""Every billed reply counts: a model reply refused as malformed still spends tokens and money.

The OpenAI adapter talks to a local server speaking the Chat Completions wire
format (``support/model_servers.py``) that answers with tool-call arguments
that are not JSON, usage included: the provider bills such a reply, so its
usage goes into the failed attempt's record, the agent's ``usage`` and its
budgets.
"""

from __future__ import annotations

import pytest
from model_servers import ScriptedServer, openai_completion, reply

from durably import AgentDefinition, Budget, ModelResponse, RetryPolicy, Runtime, ToolCall, Usage, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.models import Price
from durably.models.openai import OpenAIChatModel
from durably.schemas._records import Kind

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(attempts=6, initial_s=0.01, max_s=0.02, jitter_s=0.0)
BAD_JSON = [("call_1", "lookup", '{"q": "wea')]


@tool
async def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def malformed(prompt: int, completion: int) -> object:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return reply(openai_completion(calls=BAD_JSON, finish="tool_calls", usage=usage))


async def journal(rt: Runtime, agent_id: str) -> list[tuple[str, dict]]:
    codec, stream = RecordCodec(), rt.stream(agent_id)
    return [(r.kind, r.data) for r in [record async for record in JournalReader(rt.store, codec, stream).records()]]


def agent(url: str, **kw) -> AgentDefinition:
    model = OpenAIChatModel("gpt-test", base_url=f"{url}/v1", api_key="sk-test", price=Price(1.0, 4.0))
    return AgentDefinition(name="billed", model=model, tools=[lookup], retry=FAST, **kw)


async def test_a_refused_malformed_reply_is_counted_in_usage(tmp_path):
    steps = [malformed(150, 50), reply(openai_completion(content="It is sunny."))]
    async with ScriptedServer("/v1/chat/completions", steps) as server:
        async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[agent(server.url)]) as rt:
            state = await rt.run("billed", "a", "weather?")
            records = await journal(rt, "a")
        async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
            restored = await rt.status("a")  # the fold of the journal, not this activation's memory
    assert state.status == "finished"
    failed = [d for k, d in records if k == Kind.MODEL_FAILED]
    assert [d["error"].rsplit(".", 1)[-1] for d in failed] == ["MalformedToolCallError"]
    assert failed[0]["usage"] == {"input_tokens": 150, "output_tokens": 50, "cost_usd": pytest.approx(350 / 1e6)}
    for seen in (state, restored):
        assert seen.usage["input_tokens"] == 150 + 12 and seen.usage["output_tokens"] == 50 + 5
        assert seen.usage["cost_usd"] == pytest.approx((150 + 50 * 4 + 12 + 5 * 4) / 1e6)
        assert seen.usage["steps"] == 1  # a refused reply decided nothing: not a step


async def test_a_token_budget_stops_retries_of_billed_malformed_replies():
    steps = [malformed(150, 50), malformed(150, 50), reply(openai_completion(content="never asked"))]
    async with ScriptedServer("/v1/chat/completions", steps) as server:
        async with Runtime("memory://", agents=[agent(server.url, budget=Budget(tokens=300))]) as rt:
            state = await rt.run("billed", "a", "weather?")
            records = await journal(rt, "a")
        asked = len(server.requests)
    assert state.status == "suspended" and "tokens limit 300" in state.reason
    assert asked == 2  # the third call would have gone past the budget: never made
    assert state.usage["input_tokens"] + state.usage["output_tokens"] == 400
    assert [k for k, _ in records][-1] == Kind.BUDGET_EXCEEDED


async def test_a_reply_the_runtime_refuses_counts_its_valid_usage():
    class Nameless:
        """A reply whose tool call has no name: ``check_reply`` refuses it (not retried), billed all the same."""

        name = "nameless"

        async def respond(self, messages, tools):
            return ModelResponse("", (ToolCall("c1", "", {}),), Usage(70, 30, 0.5))

    definition = AgentDefinition(name="refused", model=Nameless(), retry=FAST)
    async with Runtime("memory://", agents=[definition]) as rt:
        state = await rt.run(definition, "a", "go")
    assert state.status == "failed" and "ModelReplyError" in state.reason
    assert (state.usage["input_tokens"], state.usage["output_tokens"], state.usage["cost_usd"]) == (70, 30, 0.5)
