"""The real model adapters: the vendors' official async clients over
real HTTP to local servers on 127.0.0.1 that speak each wire format, through a whole
agent run: tool specs, tool calls, usage, stop reasons, and the transient failures a
provider really has (429 with Retry-After, 500, a dropped connection, a malformed
tool-call JSON), each journaled as a failed attempt and retried."""

from __future__ import annotations

import json
import time

import pytest
from model_servers import (
    ScriptedServer,
    anthropic_message,
    drop,
    fail,
    openai_completion,
    reply,
)

from durably import AgentDefinition, RetryPolicy, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.models import Price, from_spec
from durably.models.anthropic import AnthropicModel
from durably.models.openai import OpenAIChatModel
from durably.schemas._records import Kind

FAST = RetryPolicy(attempts=6, initial_s=0.01, max_s=0.02, jitter_s=0.0)
charged: list[int] = []


@tool
async def charge(amount: int, currency: str = "EUR") -> dict:
    """Charge the customer.

    Args:
        amount: in cents.
        currency: ISO 4217 code.
    """
    charged.append(amount)
    return {"charged": amount, "currency": currency}


async def journal(rt: Runtime, agent_id: str) -> list[tuple[str, dict]]:
    codec, stream = RecordCodec(), rt.stream(agent_id)
    return [(r.kind, r.data) for r in [record async for record in JournalReader(rt.store, codec, stream).records()]]


def failures(records) -> list[str]:
    return [d["error"].rsplit(".", 1)[-1] for k, d in records if k == Kind.MODEL_FAILED]


async def test_openai_adapter_runs_an_agent_through_every_transient_failure() -> None:
    charged.clear()
    steps = [
        fail(429, {"retry-after": "0.2"}, "rate_limit_error"),
        fail(500),
        drop(),
        reply(openai_completion(calls=[("call_1", "charge", '{"amount": 5')], finish="tool_calls")),  # malformed
        reply(
            openai_completion(
                calls=[("call_1", "charge", '{"amount": "500"}')],
                finish="tool_calls",
                usage={"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50, "cost": 0.0021},
            )
        ),
        reply(openai_completion(content="Charged 500 cents.")),
    ]
    async with ScriptedServer("/v1/chat/completions", steps) as server:
        model = OpenAIChatModel(
            "gpt-test", base_url=f"{server.url}/v1", api_key="sk-test", price=Price(1.0, 4.0), temperature=0
        )
        definition = AgentDefinition(
            name="billing", model=model, tools=[charge], retry=FAST, instructions="You bill customers."
        )
        async with Runtime("memory://", agents=[definition]) as rt:
            started = time.monotonic()
            state = await rt.run("billing", "b1", "Charge 500 cents")
            took = time.monotonic() - started
            records = await journal(rt, "b1")
    assert state.status == "finished" and state.result == "Charged 500 cents."
    assert charged == [500] and took >= 0.2  # the tool ran once, with coerced arguments; Retry-After honoured
    assert failures(records) == [
        "TransientModelError",
        "TransientModelError",
        "TransientModelError",
        "MalformedToolCallError",
    ]
    responded = [d for k, d in records if k == Kind.MODEL_RESPONDED]
    assert [d["stop_reason"] for d in responded] == ["tool_use", "end"]
    assert responded[0]["usage"] == {"input_tokens": 40, "output_tokens": 10, "cost_usd": 0.0021}  # reported cost
    assert responded[1]["usage"]["cost_usd"] == pytest.approx((12 * 1.0 + 5 * 4.0) / 1e6)  # priced
    first, last = server.requests[0], server.requests[-1]
    assert server.headers[0]["authorization"] == "Bearer sk-test" and first["temperature"] == 0
    assert first["tools"] == [{"type": "function", "function": charge.spec()}]
    assert first["tools"][0]["function"]["parameters"]["properties"]["amount"] == {
        "description": "in cents.",
        "title": "Amount",
        "type": "integer",
    }
    assert [m["role"] for m in last["messages"]] == ["system", "user", "assistant", "tool"]
    assert last["messages"][2]["tool_calls"][0]["function"] == {"name": "charge", "arguments": '{"amount":"500"}'}
    assert json.loads(last["messages"][3]["content"]) == {"charged": 500, "currency": "EUR"}


async def test_anthropic_adapter_runs_an_agent_through_every_transient_failure() -> None:
    charged.clear()
    steps = [
        fail(429, {"retry-after": "0.2"}, "rate_limit_error"),
        fail(529, error="overloaded_error"),
        drop(),
        reply(anthropic_message(calls=[("toolu_1", "charge", "not an object")], stop="tool_use")),  # malformed
        reply(anthropic_message(text="Charging.", calls=[("toolu_1", "charge", {"amount": 7})], stop="tool_use")),
        reply(anthropic_message(text="Done: 7 cents.")),
    ]
    async with ScriptedServer("/v1/messages", steps) as server:
        model = AnthropicModel(
            "claude-test", base_url=server.url, api_key="sk-ant-test", max_tokens=256, price=Price(3.0, 15.0)
        )
        definition = AgentDefinition(
            name="billing", model=model, tools=[charge], retry=FAST, instructions="You bill customers."
        )
        async with Runtime("memory://", agents=[definition]) as rt:
            started = time.monotonic()
            state = await rt.run("billing", "b1", "Charge 7 cents")
            took = time.monotonic() - started
            records = await journal(rt, "b1")
    assert state.status == "finished" and state.result == "Done: 7 cents." and charged == [7] and took >= 0.2
    assert failures(records) == [
        "TransientModelError",
        "TransientModelError",
        "TransientModelError",
        "MalformedToolCallError",
    ]
    responded = [d for k, d in records if k == Kind.MODEL_RESPONDED]
    assert [d["stop_reason"] for d in responded] == ["tool_use", "end"]
    assert responded[0]["usage"] == {
        "input_tokens": 20,
        "output_tokens": 7,
        "cost_usd": pytest.approx(20 * 3e-6 + 7 * 15e-6),
    }
    first, last = server.requests[0], server.requests[-1]
    sent_key = server.headers[0].get("x-api-key") or server.headers[0].get("authorization", "")
    assert sent_key.endswith("sk-ant-test") and first["max_tokens"] == 256
    assert first["system"] == "You bill customers."
    assert first["tools"] == [
        {"name": "charge", "description": "Charge the customer.", "input_schema": charge.spec()["parameters"]}
    ]
    assert [t["role"] for t in last["messages"]] == ["user", "assistant", "user"]
    assert last["messages"][1]["content"] == [
        {"type": "text", "text": "Charging."},
        {"type": "tool_use", "id": "toolu_1", "name": "charge", "input": {"amount": 7}},
    ]
    (result,) = last["messages"][2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert json.loads(result["content"]) == {"charged": 7, "currency": "EUR"}


async def test_a_provider_that_keeps_failing_leaves_a_failed_agent_that_retry_finishes() -> None:
    steps = [fail(503)] * 2 + [reply(openai_completion(content="finally"))]
    async with ScriptedServer("/v1/chat/completions", steps) as server:
        model = OpenAIChatModel("gpt-test", base_url=f"{server.url}/v1", api_key="k")
        definition = AgentDefinition(name="s", model=model, retry=RetryPolicy(attempts=2, initial_s=0.01, jitter_s=0))
        async with Runtime("memory://", agents=[definition]) as rt:
            state = await rt.run("s", "a1", "task")
            assert state.status == "failed" and "HTTP 503" in state.reason
            state = await (await rt.retry("a1")).wait()
    assert state.status == "finished" and state.result == "finally"


async def test_a_client_error_is_not_retried() -> None:
    async with ScriptedServer("/v1/chat/completions", [fail(401, error="authentication_error")]) as server:
        model = OpenAIChatModel("gpt-test", base_url=f"{server.url}/v1", api_key="wrong")
        async with Runtime("memory://", agents=[AgentDefinition(name="s", model=model, retry=FAST)]) as rt:
            state = await rt.run("s", "a1", "task")
    assert state.status == "failed" and "AuthenticationError" in state.reason and len(server.requests) == 1


def test_from_spec_builds_each_adapter_and_refuses_unknown_ones(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    assert isinstance(from_spec("openai:gpt-4.1-mini"), OpenAIChatModel)
    assert from_spec("anthropic:claude-test").name == "claude-test"
    with pytest.raises(ValueError, match="unknown model provider"):
        from_spec("acme:large")
    with pytest.raises(ValueError, match="provider:model"):
        from_spec("gpt-4.1")


@pytest.mark.parametrize(
    "figures", [(True, 1.0), (1.0, False), (-1, 1), (float("nan"), 1), (1, float("inf")), ("1", 1)]
)
def test_a_price_refuses_what_is_not_a_finite_number_of_dollars(figures) -> None:
    from durably.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="finite numbers >= 0"):
        Price(*figures)
    assert Price(0, 2.5).cost(1_000_000, 2_000_000) == 5.0
