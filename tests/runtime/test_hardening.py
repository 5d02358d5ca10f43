"""Inputs that can hurt: bad strings, huge values, commands racing a live
worker, reused call ids, long conversations, broken hooks. Each is stopped at
the agent that caused it, with a clear reason, and nothing acknowledged is lost."""

from __future__ import annotations

import json
import uuid

import anyio
import pytest
from support_agents import StepModel, list_agent

from durably import (
    AgentDefinition,
    Budget,
    InvalidCommandError,
    ModelResponse,
    Runtime,
    ToolCall,
    tool,
)
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._loop.agent import HistoryPolicy
from durably.schemas._records import Kind
from durably.storage import StreamId, UnencodableValueError, open_store
from durably.storage._codec import Codec, CodecLimits


@pytest.fixture(params=["memory", "sqlite"])
def url(request, tmp_path):
    return f"memory://{uuid.uuid4().hex}" if request.param == "memory" else f"sqlite:///{tmp_path}/a.db"


async def kinds(url: str, agent_id: str) -> list[str]:
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId("default", agent_id)
        return [record.kind async for record in JournalReader(store, codec, stream).records()]


class LastResult:
    """Calls ``effect`` ``steps`` times, reading its progress from the last tool
    result rather than from the whole history (which a HistoryPolicy cuts)."""

    name = "last-result"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def respond(self, messages, tools):
        last = messages[-1]
        done = last["content"] // 10 if last["role"] == "tool" else 0
        if done < self.steps:
            return ModelResponse("", (ToolCall(f"c{done + 1}", "effect", {"n": done + 1}),))
        return ModelResponse(f"done {done}")


class SlowModel:
    name = "slow"

    async def respond(self, messages, tools):
        await anyio.sleep(0.2)
        return ModelResponse("ok")


async def test_a_lone_surrogate_fails_that_call_only_and_the_runtime_lives_on(url):
    ran: list = []

    @tool(name="effect", on_unknown_outcome="retry")
    async def fetch(n: int, *, ctx):
        ran.append(n)
        return json.loads('"caf\\ud83d"')  # what json gives for a broken escape

    bad = AgentDefinition(name="bad", model=StepModel(1), tools=[fetch])
    bystander = AgentDefinition(name="bystander", model=SlowModel())
    async with Runtime(url, agents=[bad, bystander]) as rt:
        other = await rt.start(bystander, "bystander", "wait")
        state = await rt.run(bad, "victim", "task")
        assert (await other.wait()).status == "finished"
    # The effect happened, so the agent fails naming the field rather than finishing
    # on a substitute; the ledger keeps the call done.
    assert state.status == "failed" and ran == [1]
    assert "tool_result.data.result: str is not valid Unicode" in state.reason
    (entry,) = state.ledger.values()
    assert entry["done"] and "could not be stored" in entry["error"]


def test_a_value_past_the_decode_limit_fails_at_save_time():
    codec = RecordCodec(Codec(limits=CodecLimits(max_raw_size=10_000)))
    from durably.schemas._records import Record

    # The error names the field that is too big, not the record's data.
    with pytest.raises(UnencodableValueError, match="tool_result.data.result: encodes to .* over the 10000-byte limit"):
        codec.encode_record(Record(1, Kind.TOOL_RESULT, {"result": "x" * 20_000}, 0.0))


async def test_commands_from_another_process_fold_into_a_running_worker(url):
    effects: list = []
    release = anyio.Event()

    @tool(name="effect", on_unknown_outcome="fail")
    async def charge(n: int, *, ctx) -> int:
        await release.wait()
        effects.append(n)
        return n

    definition = AgentDefinition(name="pay", model=StepModel(2), tools=[charge], budget=Budget(steps=10))
    async with Runtime(url, agents=[definition], worker_id="worker") as worker:
        handle = await worker.start(definition, "order", "charge twice")
        while not (await worker.status("order")).ledger:
            await anyio.sleep(0.01)
        async with Runtime(url, worker_id="operator") as operator:  # another process, in effect
            await operator.extend_budget("order", steps=5)
            await operator.send("order", "the customer says hi")
        release.set()
        state = await handle.wait()  # not fenced: the commands were folded in
    assert state.status == "finished" and effects == [1, 2]
    assert state.budget["steps"] == 15
    journal = await kinds(url, "order")
    assert journal.count("budget_extended") == 1 and journal.count("message_received") == 1
    assert "resumed" not in journal


async def test_a_cancel_from_elsewhere_stops_the_worker_after_recording_the_running_call(url):
    effects: list = []
    release = anyio.Event()

    @tool(name="effect", on_unknown_outcome="fail")
    async def effect(n: int, *, ctx) -> int:
        await release.wait()
        effects.append(n)
        return n

    definition = AgentDefinition(name="d", model=StepModel(3), tools=[effect])
    async with Runtime(url, agents=[definition]) as worker:
        handle = await worker.start(definition, "a1", "task")
        while not (await worker.status("a1")).ledger:
            await anyio.sleep(0.01)
        async with Runtime(url) as operator:
            await operator.cancel("a1", "customer gave up")
        release.set()
        state = await handle.wait()
    assert state.status == "cancelled" and effects == [1]
    # The running call's result is recorded after the cancel. The worker learns of the
    # cancel at its next commit, which (one commit per step) carries the result with the
    # model's next answer: that answer is recorded too (its tokens were spent), and
    # nothing it decided is (no intent, no second effect).
    journal = await kinds(url, "a1")
    assert journal[journal.index("cancelled") :] in (
        ["cancelled", "tool_result"],
        ["cancelled", "tool_result", "model_responded"],
    )


async def test_reused_provider_call_ids_get_distinct_keys(url):
    seen: list = []

    @tool(name="send", on_unknown_outcome="retry")
    async def send(to: str, *, ctx) -> str:
        seen.append((ctx.call_id, ctx.idempotency_key, to))
        return f"sent to {to}"

    class Reuser:
        name = "reuser"

        async def respond(self, messages, tools):
            done = sum(m["role"] == "tool" for m in messages)
            if done == 0:
                return ModelResponse(
                    "", (ToolCall("call_0", "send", {"to": "ana"}), ToolCall("call_0", "send", {"to": "bo"}))
                )
            if done == 2:
                return ModelResponse("", (ToolCall("call_0", "send", {"to": "cy"}),))
            return ModelResponse("done")

    async with Runtime(url, agents=[AgentDefinition(name="r", model=Reuser(), tools=[send])]) as rt:
        state = await rt.run("r", "a1", "task")
    assert state.status == "finished" and [to for *_, to in seen] == ["ana", "bo", "cy"]
    assert len({key for _, key, _ in seen}) == 3
    assert len({call_id for call_id, _, _ in seen[:2]}) == 2  # renamed within one response
    assert [m["content"] for m in state.messages if m["role"] == "tool"] == ["sent to ana", "sent to bo", "sent to cy"]


async def test_history_policy_bounds_the_state_and_replays_identically(url):
    summaries: list = []

    async def summarize(messages):
        summaries.append(len(messages))
        return f"(summary of {len(messages)} messages)"

    effects: list = []
    base = list_agent(40, effects)
    definition = AgentDefinition(
        name=base.name,
        model=LastResult(40),
        tools=base.tools,
        history=HistoryPolicy(max_messages=12, keep_recent=6, summarize=summarize),
    )
    async with Runtime(url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")
        restored = await rt.status("a1")
    assert state.status == "finished" and len(effects) == 40
    assert len(state.messages) <= 13 and len(state.ledger) <= 8
    assert state.messages[0]["content"] == "task" and state.messages[1]["content"].startswith("(summary of")
    # Every tool result still follows its call, as chat APIs require.
    for i, message in enumerate(state.messages):
        if message["role"] == "tool":
            assert state.messages[i - 1]["role"] in ("assistant", "tool")
    assert restored.to_wire() == state.to_wire()
    assert (await kinds(url, "a1")).count("history_compacted") == len(summaries) > 3


async def test_budget_extensions_are_checked():
    async with Runtime("memory://", agents=[list_agent(5, [])]) as rt:
        await rt.run("list-agent", "a1", "task", budget=Budget(steps=1))
        with pytest.raises(InvalidCommandError, match="negative"):
            await rt.extend_budget("a1", steps=-3)
        with pytest.raises(InvalidCommandError, match="nothing to extend: .* limits on steps"):
            await rt.extend_budget("a1", tokens=100)


async def test_a_broken_model_adapter_fails_its_agent_not_the_runtime(url):
    class Broken:
        name = "broken"

        async def respond(self, messages, tools):
            return None  # not a ModelResponse: a bug in the adapter

    broken = AgentDefinition(name="broken", model=Broken())
    bystander = AgentDefinition(name="bystander", model=SlowModel())
    async with Runtime(url, agents=[broken, bystander]) as rt:
        other = await rt.start(bystander, "bystander", "wait")
        handle = await rt.start(broken, "a1", "task")
        # The reply is validated before it is journaled, so the adapter's bug is a typed model error naming the field.
        assert (await handle.wait()).status == "failed"
        assert (await other.wait()).status == "finished"
        state = await rt.status("a1")
    assert state.status == "failed" and "ModelReplyError" in state.reason and "expected a ModelResponse" in state.reason


async def test_a_failing_summariser_postpones_compaction_instead_of_failing_the_agent(url):
    calls: list = []

    async def summarize(messages):
        calls.append(len(messages))
        if len(calls) < 3:
            raise RuntimeError("summariser down")
        return "summary"

    base = list_agent(10, [])
    definition = AgentDefinition(
        name=base.name,
        model=LastResult(10),
        tools=base.tools,
        history=HistoryPolicy(max_messages=8, keep_recent=4, summarize=summarize),
    )
    async with Runtime(url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")
    assert state.status == "finished" and len(calls) >= 3
    assert any(m["content"] == "summary" for m in state.messages)


def test_history_policies_that_cannot_shorten_are_refused():
    for max_messages, keep_recent in ((6, 4), (4, 3), (10, 0)):
        with pytest.raises(ValueError):
            HistoryPolicy(max_messages=max_messages, keep_recent=keep_recent)
    policy = HistoryPolicy(max_messages=5, keep_recent=1, summarize=lambda m: "s")
    head = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]
    tail = [{"role": "assistant", "content": "a", "tool_calls": [{"id": "c", "name": "x", "arguments": {}}]}]
    tools = [{"role": "tool", "tool_call_id": "c", "content": i} for i in range(4)]
    # Tool results go with their call: the cut takes all of them or none.
    assert policy.cut(head + tail + tools) == (2, 5)
    assert policy.cut(head + tail + tools[:2]) is None  # not over the limit


async def test_a_message_sent_while_a_tool_runs_joins_after_its_result(url):
    release = anyio.Event()

    @tool(name="effect")
    async def effect(n: int, *, ctx) -> int:
        await release.wait()
        return n * 10

    definition = AgentDefinition(name="d", model=StepModel(1), tools=[effect])
    async with Runtime(url, agents=[definition]) as worker:
        handle = await worker.start(definition, "a1", "task")
        while not (await worker.status("a1")).ledger:
            await anyio.sleep(0.01)
        async with Runtime(url) as operator:
            await operator.send("a1", "also do Y")
        release.set()
        state = await handle.wait()
    roles = [m["role"] for m in state.messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
    assert state.messages[3]["content"] == "also do Y" and state.inbox == []


async def test_a_cancel_during_the_last_model_call_is_not_undone_by_its_answer(url):
    class SlowAnswer:
        name = "slow-answer"

        async def respond(self, messages, tools):
            await anyio.sleep(0.3)
            return ModelResponse("all done")

    definition = AgentDefinition(name="d", model=SlowAnswer())
    async with Runtime(url, agents=[definition]) as worker:
        handle = await worker.start(definition, "a1", "task")
        await anyio.sleep(0.05)
        async with Runtime(url) as operator:
            assert (await operator.cancel("a1", "stop it")).status == "cancelled"
        state = await handle.wait()
    assert state.status == "cancelled"
    assert await kinds(url, "a1") == ["started", "cancelled", "model_responded"]  # the answer is kept, "finished" not


class SurrogateKeyModel:
    """Replies with a tool call whose argument name is not valid Unicode."""

    name = "surrogate-key"

    async def respond(self, messages, tools):
        return ModelResponse("", (ToolCall("c1", "effect", json.loads('{"caf\\udc80": {"x": "\\ud83d"}}')),))


async def test_a_reply_unstorable_at_a_surrogate_path_fails_with_a_storable_reason_naming_the_field(url):
    @tool(name="effect")
    async def effect(**kwargs) -> str:
        return "ran"

    definition = AgentDefinition(name="keys", model=SurrogateKeyModel(), tools=[effect])
    async with Runtime(url, agents=[definition]) as rt:
        state = await rt.run(definition, "keys", "task")
    assert state.status == "failed"
    # The path is escaped, so the failure record holding it was stored; it names the field.
    assert "model response cannot be stored" in state.reason
    assert "['caf\\udc80']" in state.reason
    state.reason.encode("utf-8")
    assert (await kinds(url, "keys"))[-1] == Kind.FAILED
