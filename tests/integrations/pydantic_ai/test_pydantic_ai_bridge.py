"""DurableAgent on the real Pydantic AI: tool calls, deferred tools, retries, streaming, usage, MCP, errors.

What Pydantic AI's own tests check for its durable wrappers (test_dbos.py,
test_temporal.py), on durably's: each behaviour is run through a restart (a new
``Runtime`` over the same store, so the body replays from the journal) and the
test counts what really ran (tool executions, model requests) against what the
journal answered.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from model_servers import ScriptedServer, openai_completion, reply
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits
from pydantic_ai_agent import build_agent, lines
from pydantic_ai_worker import AGENT_ID, PROMPT, durable_agent

import durably
from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.integrations.pydantic_ai import DurableAgent, ToolPolicy

SUPPORT = Path(__file__).resolve().parents[2] / "support"


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]


def _script(*steps: Any, requests: list[int] | None = None) -> FunctionModel:
    """A model answering step ``n`` (the number of tool returns so far) with ``steps[n]``: parts or text."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = len(_returns(messages))
        if requests is not None:
            requests.append(done)
        step = steps[min(done, len(steps) - 1)]
        if callable(step):
            step = step(messages)
        parts = [TextPart(step)] if isinstance(step, str) else step
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=10, output_tokens=3))

    return FunctionModel(answer)


async def _run(url: str, durable: DurableAgent, agent_id: str = "a-1", prompt: str = "go"):
    async with durably.Runtime(url, agents=[durable]) as rt:
        return await durable.run_in(rt, prompt, agent_id=agent_id)


async def _approve(url: str, durable: DurableAgent, agent_id: str = "a-1", prompt: str = "go", **decision: Any):
    """Decide the one open approval from a new runtime (a restart), and run to the next stop."""
    async with durably.Runtime(url, agents=[durable]) as rt:
        state = await rt.status(agent_id)
        (request,) = state.open_approvals()
        await rt.approve(agent_id, request["approval_id"], **decision)
        return request, await durable.run_in(rt, prompt, agent_id=agent_id)


# -- tool calls and approvals ------------------------------------------------------------------------------


async def test_approval_decided_after_a_restart_runs_the_tool_and_replays_the_rest(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    durable = durable_agent(tmp_path)
    parked = await _run(url, durable, AGENT_ID, PROMPT)
    assert parked.status == "waiting_approval" and parked.output is None
    assert lines(tmp_path / "ledger")[0].startswith("charge 5 ") and len(lines(tmp_path / "ledger")) == 1
    request, done = await _approve(url, durable_agent(tmp_path), AGENT_ID, PROMPT)
    assert request["arguments"]["tool"] == "refund" and request["arguments"]["args"] == {"amount": 5}
    assert done.status == "finished" and done.output == "done: charge 5 ok; refund 5 ok"
    assert [line.split()[0] for line in lines(tmp_path / "ledger")] == ["charge", "refund"]
    assert lines(tmp_path / "requests") == ["0", "1", "2"]  # the replay asked the model nothing it had answered
    assert [type(m).__name__ for m in done.all_messages()][-1] == "ModelResponse"


async def test_denied_approval_tells_the_model_and_runs_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    await _run(url, durable_agent(tmp_path), AGENT_ID, PROMPT)
    _, done = await _approve(url, durable_agent(tmp_path), AGENT_ID, PROMPT, approved=False, note="no refunds today")
    assert done.output == "done: charge 5 ok; no refunds today"
    assert [line.split()[0] for line in lines(tmp_path / "ledger")] == ["charge"]


async def test_parallel_tool_calls_are_keyed_by_tool_call_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    ran: list[int] = []
    requests: list[int] = []

    def build() -> DurableAgent:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            returns = _returns(messages)
            requests.append(len(returns))
            if not returns:
                return ModelResponse(parts=[ToolCallPart("add", {"n": n}, tool_call_id=f"c{n}") for n in range(5)])
            if len(returns) == 5:
                return ModelResponse(parts=[ToolCallPart("gate", {}, tool_call_id="g")])
            return ModelResponse(parts=[TextPart("sum " + str(sum(int(p.content) for p in returns[:5])))])

        agent = Agent(FunctionModel(answer), name="adder")

        @agent.tool_plain
        async def add(n: int) -> int:
            ran.append(n)
            return n * 10

        @agent.tool_plain(requires_approval=True)
        def gate() -> str:
            return "open"

        return DurableAgent(agent)

    assert (await _run(url, build())).status == "waiting_approval"
    _, done = await _approve(url, build())
    assert done.output == "sum 100"
    assert sorted(ran) == [0, 1, 2, 3, 4]  # each once, though the replay re-entered all five concurrently
    assert requests == [0, 5, 6]


async def test_model_retry_is_journaled_and_replays_the_same_path(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    calls: list[str] = []

    def build() -> DurableAgent:
        agent = Agent(
            _script(
                [ToolCallPart("lookup", {"q": "bad"})],
                lambda messages: [ToolCallPart("lookup", {"q": "good"})] if len(_returns(messages)) == 1 else "x",
                [ToolCallPart("gate", {})],
                "found",
            ),
            name="retrier",
        )

        @agent.tool_plain(retries=2)
        def lookup(q: str) -> str:
            calls.append(q)
            if q == "bad":
                raise ModelRetry("try a good query")
            return "hit"

        @agent.tool_plain(requires_approval=True)
        def gate() -> str:
            return "open"

        return DurableAgent(agent)

    assert (await _run(url, build())).status == "waiting_approval"
    _, done = await _approve(url, build())
    assert done.status == "finished" and done.output == "found"
    assert calls == ["bad", "good"]  # the replay took the retry from the journal
    retried = [p for p in _returns(done.all_messages()) if p.tool_name == "lookup"][0]
    assert "try a good query" in str(retried.content)


async def test_approval_required_raised_by_a_tool_becomes_an_approval(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    ran: list[bool] = []

    def build() -> DurableAgent:
        agent = Agent(_script([ToolCallPart("wire", {"amount": 900})], "sent"), name="wirer")

        @agent.tool
        def wire(ctx: RunContext[None], amount: int) -> str:
            if amount > 500 and not ctx.tool_call_approved:
                raise ApprovalRequired(metadata={"reason": "large"})
            ran.append(ctx.tool_call_approved)
            return "wired"

        return DurableAgent(agent)

    parked = await _run(url, build())
    assert parked.status == "waiting_approval" and ran == []
    request, done = await _approve(url, build())
    assert request["arguments"]["metadata"] == {"reason": "large"}
    assert done.output == "sent" and ran == [True]


async def test_call_deferred_is_answered_with_a_result(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"

    def build() -> DurableAgent:
        agent = Agent(
            _script([ToolCallPart("ask_human", {"q": "colour?"})], lambda m: "human said " + _returns(m)[0].content),
            name="asker",
        )

        @agent.tool_plain
        def ask_human(q: str) -> str:
            raise CallDeferred(metadata={"q": q})

        return DurableAgent(agent)

    assert (await _run(url, build())).status == "waiting_approval"
    request, done = await _approve(url, build(), result="blue")
    assert request["arguments"]["kind"] == "external"
    assert done.output == "human said blue"


# -- streaming, usage, errors ------------------------------------------------------------------------------


async def test_event_stream_handler_gets_live_events_and_a_replay_pays_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    events: list[Any] = []
    streamed: list[int] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo):
        done = len(_returns(messages))
        streamed.append(done)
        if done == 0:
            yield {0: DeltaToolCall(name="gate", json_args="{}", tool_call_id="g1")}
        else:
            for word in ("all ", "done"):
                yield word

    async def handler(ctx: RunContext[Any], stream_events: Any) -> None:
        async for event in stream_events:
            events.append(event)

    def build() -> DurableAgent:
        agent = Agent(FunctionModel(stream_function=stream), name="streamer")

        @agent.tool_plain(requires_approval=True)
        def gate() -> str:
            return "open"

        return DurableAgent(agent, event_stream_handler=handler)

    assert (await _run(url, build())).status == "waiting_approval"
    assert any(isinstance(e, PartStartEvent) and isinstance(e.part, ToolCallPart) for e in events)
    events.clear()
    _, done = await _approve(url, build())
    assert done.output == "all done"
    assert streamed == [0, 1]  # the stored first response was not streamed again
    deltas = [e.delta.content_delta for e in events if isinstance(e, PartDeltaEvent)]
    assert "".join(deltas) in ("done", "all done")  # the live text stream reached the handler
    assert any(isinstance(e, FunctionToolCallEvent) for e in events)
    assert any(isinstance(e, FunctionToolResultEvent) for e in events)


async def test_usage_is_counted_and_request_limit_is_a_durably_budget(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    agent = Agent(_script([ToolCallPart("tick", {})], [ToolCallPart("tick", {})], "ok"), name="ticker")

    @agent.tool_plain
    def tick() -> str:
        return "t"

    durable = DurableAgent(agent, usage_limits=UsageLimits(request_limit=2))
    stopped = await _run(url, durable)
    assert stopped.status == "suspended"  # the third request waits for more budget; nothing failed
    assert stopped.state.usage["steps"] == 2
    assert stopped.state.usage["input_tokens"] == 20 and stopped.state.usage["output_tokens"] == 6
    async with durably.Runtime(url, agents=[durable]) as rt:
        await rt.extend_budget("a-1", steps=1)
        done = await durable.run_in(rt, "go", agent_id="a-1")
    assert done.output == "ok" and done.state.usage["steps"] == 3


async def test_a_failing_tool_fails_the_run_with_its_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    agent = Agent(_script([ToolCallPart("boom", {})], "never"), name="boomer")

    @agent.tool_plain
    def boom() -> str:
        raise RuntimeError("the ledger is on fire")

    failed = await _run(url, DurableAgent(agent))
    assert failed.status == "failed" and "the ledger is on fire" in failed.state.reason


def test_bad_input_is_refused_with_typed_errors(tmp_path: Path) -> None:
    agent = build_agent(tmp_path)
    with pytest.raises(ArgumentTypeError):
        DurableAgent("not an agent")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        DurableAgent(Agent(name="modelless"))
    with pytest.raises(InvalidArgumentError):
        DurableAgent(agent, tools={"charge": "sometimes"})
    with pytest.raises(InvalidArgumentError):
        DurableAgent(agent, tools={"charge": ToolPolicy("reconcile")})
    with pytest.raises(ArgumentTypeError):
        DurableAgent(agent, tools={"charge": 3})  # type: ignore[dict-item]
    with pytest.raises(ArgumentTypeError):
        DurableAgent(Agent(_script("x")))  # no name


# -- MCP, a real provider client ---------------------------------------------------------------------------


async def test_mcp_toolset_calls_are_journaled(tmp_path: Path) -> None:
    from fastmcp.client.transports import PythonStdioTransport
    from pydantic_ai.mcp import MCPToolset

    url = f"sqlite:///{tmp_path / 'agents.db'}"
    stamps = tmp_path / "stamps"

    def build() -> DurableAgent:
        transport = PythonStdioTransport(
            SUPPORT / "pydantic_ai_mcp_server.py", args=[str(stamps)], python_cmd=sys.executable
        )
        agent = Agent(
            _script(
                [ToolCallPart("stamp", {"text": "x"})], [ToolCallPart("gate", {})], lambda m: _returns(m)[0].content
            ),
            name="stamper",
            toolsets=[MCPToolset(transport, id="stamps", init_timeout=120)],
        )

        @agent.tool_plain(requires_approval=True)
        def gate() -> str:
            return "open"

        return DurableAgent(agent)

    parked = await _run(url, build())
    assert parked.status == "waiting_approval", parked.state.reason
    _, done = await _approve(url, build())
    assert done.output == "stamped x"
    assert lines(stamps) == ["x"]  # the MCP server's tool ran once; the replay took its result from the journal


async def test_openai_chat_model_over_the_wire(tmp_path: Path) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    url = f"sqlite:///{tmp_path / 'agents.db'}"
    ran: list[str] = []
    steps = [
        reply(openai_completion(calls=[("call_1", "charge", '{"amount": 7}')], finish="tool_calls")),
        reply(openai_completion(content="charged 7")),
    ]
    async with ScriptedServer("/v1/chat/completions", steps) as server:
        model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(base_url=server.url + "/v1", api_key="k"))
        agent = Agent(model, name="openai-charger")

        @agent.tool_plain
        def charge(amount: int) -> str:
            ran.append(str(amount))
            return f"charged {amount}"

        done = await _run(url, DurableAgent(agent))
    assert done.output == "charged 7" and ran == ["7"]
    assert len(server.requests) == 2
    assert done.state.usage["input_tokens"] == 24 and done.state.usage["output_tokens"] == 10


# -- durably's own tools on these runs ---------------------------------------------------------------------


def _durably(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "COLUMNS": "250", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "durably._cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=environment,
    )


async def test_show_history_state_verify_and_approve_from_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    parked = await _run(url, durable_agent(tmp_path), AGENT_ID, PROMPT)
    (request,) = parked.state.open_approvals()
    history = _durably("history", AGENT_ID, "--store", url)
    assert history.returncode == 0, history.stderr
    assert "model.request" in history.stdout and "charge" in history.stdout
    show = _durably("show", AGENT_ID, "--store", url)
    assert show.returncode == 0 and request["approval_id"] in show.stdout, show.stdout + show.stderr
    state = _durably("state", AGENT_ID, "--store", url)
    assert state.returncode == 0 and "waiting_approval" in state.stdout, state.stdout + state.stderr
    verify = _durably("verify", "--store", url)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    approve = _durably("approve", AGENT_ID, request["approval_id"], "--store", url)
    assert approve.returncode == 0, approve.stdout + approve.stderr
    done = await _run(url, durable_agent(tmp_path), AGENT_ID, PROMPT)
    assert done.output == "done: charge 5 ok; refund 5 ok"
    assert Counter(line.split()[0] for line in lines(tmp_path / "ledger")) == {"charge": 1, "refund": 1}


async def test_durably_worker_serves_submitted_runs_and_their_approvals(tmp_path: Path) -> None:
    import anyio

    url = f"sqlite:///{tmp_path / 'agents.db'}"
    durable = durable_agent(tmp_path)
    async with durably.Runtime(url) as rt:
        await rt.submit(durable, AGENT_ID, PROMPT)

    async def wait_for(status: str) -> durably.AgentState:
        with anyio.fail_after(120):
            while True:
                async with durably.Runtime(url) as rt:
                    state = await rt.status(AGENT_ID)
                if state.status == status:
                    return state
                await anyio.sleep(0.2)

    worker = subprocess.Popen(
        [sys.executable, "-m", "durably._cli", "worker", "--agents", "pydantic_ai_served:definitions"]
        + ["--store", url, "--poll-interval", "0.1"],
        cwd=SUPPORT,
        env={**os.environ, "PYDANTIC_AI_WORK": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        parked = await wait_for("waiting_approval")
        (request,) = parked.open_approvals()
        approve = _durably("approve", AGENT_ID, request["approval_id"], "--store", url)
        assert approve.returncode == 0, approve.stdout + approve.stderr
        finished = await wait_for("finished")
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    assert durable.result_of(finished).output == "done: charge 5 ok; refund 5 ok"
    assert Counter(line.split()[0] for line in lines(tmp_path / "ledger")) == {"charge": 1, "refund": 1}
    assert lines(tmp_path / "requests") == ["0", "1", "2"]
