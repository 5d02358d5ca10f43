"""A refusal is not a result: through the real OpenAI and Anthropic clients, a reply
the provider refused or filtered fails the agent with reason ``refused: <text>``,
runs none of its calls, and keeps the refusal in the journal and the history."""

from __future__ import annotations

from typing import Any

import pytest
from model_servers import ScriptedServer, anthropic_message, openai_completion, reply

from durably import AgentDefinition, RetryPolicy, Runtime, tool
from durably.models.anthropic import AnthropicModel
from durably.models.openai import OpenAIChatModel
from durably.schemas._records import Kind

ONCE = RetryPolicy(attempts=1, initial_s=0.01, jitter_s=0)
ran: list[int] = []


@tool
async def wire(amount: int) -> str:
    """Wire money.

    Args:
        amount: in cents.
    """
    ran.append(amount)
    return "wired"


def refused_completion(finish: str, refusal: str, calls: list[tuple[str, str, str]] = ()) -> dict[str, Any]:
    body = openai_completion(content=None, calls=calls, finish=finish)
    body["choices"][0]["message"]["refusal"] = refusal
    return body


async def run(model: Any, server: ScriptedServer) -> tuple[Any, list[Any], Any]:
    definition = AgentDefinition(name="bank", model=model, tools=[wire], retry=ONCE)
    async with Runtime("memory://", agents=[definition]) as rt:
        state = await rt.run("bank", "b1", "Wire 500 cents to an unknown account")
        entries = [e async for e in rt.history("b1", payload=True)]
        described = await rt.describe("b1")
    return state, entries, described


@pytest.mark.parametrize(
    "body",
    [
        refused_completion("content_filter", "I can't help with that."),
        refused_completion("stop", "I can't help with that."),
        refused_completion("content_filter", "I can't help with that.", calls=[("call_1", "wire", '{"amount": 5}')]),
    ],
    ids=["content-filter", "refusal-with-stop", "filtered-with-a-call"],
)
async def test_an_openai_refusal_fails_the_agent_and_keeps_the_refusal(body) -> None:
    ran.clear()
    async with ScriptedServer("/v1/chat/completions", [reply(body)]) as server:
        model = OpenAIChatModel("gpt-test", base_url=f"{server.url}/v1", api_key="sk-test")
        state, entries, described = await run(model, server)
    assert state.status == "failed" and state.result is None
    assert state.reason == "refused: I can't help with that."
    assert described.status == "failed" and described.reason == state.reason
    assert ran == []  # a filtered reply's calls are not made
    (responded,) = [e for e in entries if e.kind == Kind.MODEL_RESPONDED]
    assert responded.payload["stop_reason"] == "refused" and responded.payload["text"] == "I can't help with that."
    assert responded.payload["tool_calls"] == []
    assert "refused: I can't help with that." in responded.summary
    assert [e.kind for e in entries][-1] == Kind.FAILED


async def test_an_anthropic_refusal_fails_the_agent_and_keeps_the_refusal() -> None:
    body = anthropic_message(text="I won't do this.", stop="refusal")
    async with ScriptedServer("/v1/messages", [reply(body)]) as server:
        model = AnthropicModel("claude-test", base_url=server.url, api_key="sk-ant-test")
        state, entries, _ = await run(model, server)
    assert state.status == "failed" and state.reason == "refused: I won't do this."
    (responded,) = [e for e in entries if e.kind == Kind.MODEL_RESPONDED]
    assert responded.payload["stop_reason"] == "refused"
