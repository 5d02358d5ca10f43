"""Streaming through the vendors' real clients, over real HTTP to the local servers
that speak each wire format: deltas reach ``Runtime.events`` before the reply they make up
is journaled, the journaled reply is the one the non-streaming path journals, a reader
that stops or lags never holds the agent back nor loses a journaled event, a stream
cut off is counted and asked again, a SIGKILL mid-stream re-asks the model on resume
with the tool after it run once, and each step is one INFO line."""

from __future__ import annotations

import logging
import re
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import stream_worker
from model_servers import (
    ScriptedServer,
    anthropic_message,
    openai_completion,
    reply,
    stream_then_cut,
    stream_then_hang,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from durably import AgentDefinition, AgentEvent, RetryPolicy, Runtime, tool
from durably.models.anthropic import AnthropicModel
from durably.models.openai import OpenAIChatModel
from durably.schemas._records import Kind

FAST = RetryPolicy(attempts=3, initial_s=0.01, max_s=0.02, jitter_s=0.0)
SAID = "I will charge the customer five hundred cents now, as asked."
DONE = "Charged five hundred cents; the receipt is on its way to the customer."
charged: list[int] = []


@tool
async def charge(amount: int) -> dict:
    """Charge the customer.

    Args:
        amount: in cents.
    """
    charged.append(amount)
    return {"charged": amount}


def script(provider: str) -> tuple[str, list[dict[str, Any]]]:
    """The server path and the two replies of a one-tool run, for ``provider``."""
    if provider == "openai":
        return "/v1/chat/completions", [
            openai_completion(content=SAID, calls=[("call_1", "charge", '{"amount": 500}')], finish="tool_calls"),
            openai_completion(content=DONE),
        ]
    return "/v1/messages", [
        anthropic_message(text=SAID, calls=[("toolu_1", "charge", {"amount": 500})], stop="tool_use"),
        anthropic_message(text=DONE),
    ]


def model_for(provider: str, url: str) -> Any:
    if provider == "openai":
        return OpenAIChatModel("gpt-test", base_url=f"{url}/v1", api_key="sk-test")
    return AnthropicModel("claude-test", base_url=url, api_key="sk-ant-test")


class WholeReplies:
    """The same adapter without ``respond_stream``: the non-streaming path."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.provider = inner, inner.name, inner.provider

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        return await self.inner.respond(messages, tools)


async def replies(rt: Runtime, agent_id: str) -> list[dict[str, Any]]:
    """The journaled model replies, without the per-run idempotency keys."""
    found = []
    async for entry in rt.history(agent_id, kinds=[Kind.MODEL_RESPONDED], payload=True):
        data = dict(entry.payload)
        data["tool_calls"] = [{k: v for k, v in c.items() if k != "key"} for c in data["tool_calls"]]
        found.append(data)
    return found


async def follow(rt: Runtime, agent_id: str, until: str = "finished", **options: Any) -> list[AgentEvent]:
    """Start ``agent_id`` and collect its events until its status is ``until``."""
    seen: list[AgentEvent] = []
    async with rt.events(agent_id, after_seq=0, **options) as events:  # subscribed before it starts
        await rt.start("billing", agent_id, "Charge 500 cents")
        with anyio.fail_after(30):
            async for event in events:
                seen.append(event)
                if event.kind == "status" and event.status == until:
                    break
    return seen


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_deltas_come_before_the_reply_and_the_journal_holds_what_the_whole_reply_path_holds(
    provider: str,
) -> None:
    path, bodies = script(provider)
    charged.clear()
    async with ScriptedServer(path, [reply(b) for b in bodies] * 2) as server:
        streaming = AgentDefinition(name="billing", model=model_for(provider, server.url), tools=[charge], retry=FAST)
        async with Runtime("memory://", agents=[streaming]) as rt:
            seen = await follow(rt, "streamed")
            streamed = await replies(rt, "streamed")
        whole = AgentDefinition(
            name="billing", model=WholeReplies(model_for(provider, server.url)), tools=[charge], retry=FAST
        )
        async with Runtime("memory://", agents=[whole]) as rt:
            assert (await rt.run("billing", "whole", "Charge 500 cents")).status == "finished"
            not_streamed = await replies(rt, "whole")
    assert [r.get("stream") for r in server.requests] == [True, True, None, None]
    assert streamed == not_streamed and [r["text"] for r in streamed] == [SAID, DONE]
    assert charged == [500, 500]
    kinds = [e.kind for e in seen]
    first, second = [i for i, k in enumerate(kinds) if k == "model_responded"]
    # Each reply's text arrives in pieces before the reply is journaled, and makes it up exactly.
    assert "".join(e.text for e in seen[:first] if e.kind == "delta") == SAID
    assert "".join(e.text for e in seen[first:second] if e.kind == "delta") == DONE
    assert len([e for e in seen[:first] if e.kind == "delta"]) > 3
    assert [k for k in kinds if k != "delta"] == ["status", "model_responded", "tool_started", "tool_result"] + [
        "model_responded",
        "status",
    ]
    started, result = seen[kinds.index("tool_started")], seen[kinds.index("tool_result")]
    assert (started.tool, result.tool, result.result, result.error) == ("charge", "charge", {"charged": 500}, None)
    journaled = [e.seq for e in seen if e.seq is not None]
    assert journaled == sorted(journaled) and len(set(journaled)) == len(journaled)
    assert all(e.seq is None for e in seen if e.kind == "delta")
    assert seen[0].event == "started" and seen[-1].event == "finished"


async def test_a_reader_that_stops_early_leaves_the_agent_running_and_is_unsubscribed() -> None:
    path, bodies = script("openai")
    charged.clear()
    async with ScriptedServer(path, [reply(b) for b in bodies]) as server:
        definition = AgentDefinition(name="billing", model=model_for("openai", server.url), tools=[charge], retry=FAST)
        async with Runtime("memory://", agents=[definition]) as rt:
            events = rt.events("early")
            await rt.start("billing", "early", "Charge 500 cents")
            async with events:
                async for event in events:
                    if event.kind == "delta":
                        break
            assert not rt._activations.events.listened("early")
            assert [e async for e in events] == []  # closed: it ends
            state = await rt.wait("early", timeout=30)
    assert state.status == "finished" and state.result == DONE and charged == [500]


async def test_a_slow_reader_loses_deltas_never_journaled_events_and_never_holds_the_agent() -> None:
    path, bodies = script("anthropic")
    long = " ".join(["word"] * 200)
    bodies[1] = anthropic_message(text=long)
    charged.clear()
    async with ScriptedServer(path, [reply(b) for b in bodies]) as server:
        definition = AgentDefinition(
            name="billing", model=model_for("anthropic", server.url), tools=[charge], retry=FAST
        )
        async with Runtime("memory://", agents=[definition]) as rt:
            async with rt.events("slow", after_seq=0, buffer=2) as events:
                # The reader reads nothing until the agent is done: it finishes all the same.
                await rt.start("billing", "slow", "Charge 500 cents")
                state = await rt.wait("slow", timeout=30)
                seen = []
                with anyio.fail_after(30):
                    async for event in events:
                        seen.append(event)
                        if event.kind == "status" and event.status == "finished":
                            break
                dropped = events.dropped
    assert state.status == "finished" and state.result == long and charged == [500]
    assert [e.kind for e in seen if e.kind != "delta"] == [
        "status",
        "model_responded",
        "tool_started",
        "tool_result",
        "model_responded",
        "status",
    ]
    deltas = [e for e in seen if e.kind == "delta"]
    assert 0 < len(deltas) <= 2 and dropped >= 200  # the second reply's pieces all came while it was behind
    assert all(seen.index(d) < [e.kind for e in seen].index("model_responded") for d in deltas)


async def test_events_of_an_agent_run_by_another_runtime_come_from_the_journal_without_deltas(
    tmp_path: Path,
) -> None:
    path, bodies = script("openai")
    charged.clear()
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with ScriptedServer(path, [reply(b) for b in bodies]) as server:
        definition = AgentDefinition(name="billing", model=model_for("openai", server.url), tools=[charge], retry=FAST)
        async with Runtime(url, agents=[definition]) as worker, Runtime(url) as watcher:
            await worker.submit("billing", "elsewhere", "Charge 500 cents")
            seen = []
            async with watcher.events("elsewhere", after_seq=0, poll_interval=0.05) as events:
                await worker.resume("elsewhere")
                with anyio.fail_after(30):
                    async for event in events:
                        seen.append(event)
                        if event.kind == "status" and event.status == "finished":
                            break
    kinds = [e.kind for e in seen]
    assert "delta" not in kinds
    assert kinds == ["status", "status", "model_responded", "tool_started", "tool_result", "model_responded", "status"]
    assert [e.event for e in seen if e.kind == "status"] == ["started", "resumed", "finished"]
    assert seen[-1].text == "" and charged == [500]


async def test_a_stream_cut_midway_is_counted_and_asked_again() -> None:
    path, bodies = script("openai")
    charged.clear()
    reader = InMemoryMetricReader()
    steps = [stream_then_cut(bodies[0], 4), reply(bodies[0]), reply(bodies[1])]
    async with ScriptedServer(path, steps) as server:
        definition = AgentDefinition(name="billing", model=model_for("openai", server.url), tools=[charge], retry=FAST)
        async with Runtime("memory://", agents=[definition], meter_provider=MeterProvider([reader])) as rt:
            seen = await follow(rt, "cut")
            failed = [e.payload async for e in rt.history("cut", kinds=[Kind.MODEL_FAILED], payload=True)]
    assert [f["error"].rsplit(".", 1)[-1] for f in failed] == ["TransientModelError"]
    assert len(server.requests) == 3 and charged == [500]
    metrics = {
        m.name: m for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics for m in s.metrics
    }
    (point,) = metrics["durably.model.streams.interrupted"].data.data_points
    assert point.value == 1
    # The cut attempt's pieces came first; the retry streamed the whole text again.
    first = [e.kind for e in seen].index("model_responded")
    assert "".join(e.text for e in seen[:first] if e.kind == "delta").endswith(SAID)


async def test_each_step_is_one_info_line_and_no_delta_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    path, bodies = script("openai")
    charged.clear()
    caplog.set_level(logging.INFO, logger="durably")
    async with ScriptedServer(path, [reply(b) for b in bodies]) as server:
        definition = AgentDefinition(name="billing", model=model_for("openai", server.url), tools=[charge], retry=FAST)
        async with Runtime("memory://", agents=[definition]) as rt:
            seen = await follow(rt, "logged")
    lines = [r.getMessage() for r in caplog.records if r.name == "durably.steps"]
    assert len(lines) == 4, lines
    patterns = [
        r"agent default/logged seq 2: model answered with 1 call \(12 in \+ 5 out tokens, \d+ ms\)",
        r"agent default/logged seq 4: tool charge returned \(\d+ ms\)",
        r"agent default/logged seq 5: model answered with 0 calls \(12 in \+ 5 out tokens, \d+ ms\)",
        r"agent default/logged seq 6: finished",
    ]
    assert all(re.fullmatch(p, line) for p, line in zip(patterns, lines, strict=True)), lines
    assert all(SAID not in r.getMessage() and DONE not in r.getMessage() for r in caplog.records)
    assert len([e for e in seen if e.kind == "delta"]) > len(lines)


async def test_approval_parks_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    @tool(requires_approval=True)
    async def refund(amount: int) -> str:
        """Refund the customer.

        Args:
            amount: in cents.
        """
        return "refunded"

    body = openai_completion(calls=[("call_1", "refund", '{"amount": 5}')], finish="tool_calls")
    caplog.set_level(logging.INFO, logger="durably.steps")
    async with ScriptedServer("/v1/chat/completions", [reply(body)]) as server:
        definition = AgentDefinition(name="billing", model=model_for("openai", server.url), tools=[refund], retry=FAST)
        async with Runtime("memory://", agents=[definition]) as rt:
            seen = await follow(rt, "parked", until="waiting_approval")
    lines = [r.getMessage() for r in caplog.records if r.name == "durably.steps"]
    assert lines[-1].endswith(": parked until a human decides approval call_1 (a call of refund)"), lines[-1]
    assert seen[-1].event == "approval_requested"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_sigkill_mid_stream_asks_the_model_again_on_resume_and_runs_the_tool_once(
    tmp_path: Path, provider: str
) -> None:
    path, bodies = script(provider)
    ledger, db = tmp_path / "ledger", tmp_path / "a.db"
    steps = [stream_then_hang(bodies[0], 4), reply(bodies[0]), reply(bodies[1])]
    async with ScriptedServer(path, steps) as server:
        worker = Path(stream_worker.__file__)
        process = await anyio.open_process([sys.executable, str(worker), str(db), server.url, str(ledger), provider])
        try:
            with anyio.fail_after(60):
                while server.streamed < 4:  # the reply is half-way down the wire
                    await anyio.sleep(0.02)
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        assert process.returncode == -signal.SIGKILL
        definition = stream_worker.definition(server.url, ledger, provider)
        async with Runtime(f"sqlite:///{db}", agents=[definition], lease_ttl=stream_worker.LEASE_TTL) as rt:
            before = [e.kind async for e in rt.history("s1")]
            await rt.resume("s1", force=True)
            state = await rt.wait("s1", timeout=60)
            after = [e.kind async for e in rt.history("s1")]
    assert before == [Kind.STARTED]  # nothing of the interrupted stream was journaled
    assert state.status == "finished" and state.result == DONE
    assert len(server.requests) == 3  # the interrupted call, asked again, then the last step
    assert all(r["stream"] is True for r in server.requests)  # it was killed mid-stream, not mid-request
    assert server.requests[0]["messages"] == server.requests[1]["messages"]
    assert ledger.read_text() == "500\n"  # the tool after the stream ran once
    assert after.count(Kind.MODEL_RESPONDED) == 2 and after.count(Kind.TOOL_RESULT) == 1
