"""One commit per step: a lone tool call's result is staged and
committed while the next model call runs, or in one commit with the model's answer
and intents; nothing after a result is ever durable without it, and nothing is
acted on before it is durable. The SIGKILL boundaries of the same path are in
``test_crash_recovery.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Kind
from durably.storage._errors import StoreUnavailableError
from durably.storage._spi import AppendRequest, StoredRecord, StreamId


class RecordingStore:
    """A memory store that keeps the record kinds of every ``append_batch`` call and
    can fail call number ``fail_on`` (1-based) with a ``StoreUnavailableError``."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.codec = RecordCodec()
        self.calls: list[list[str]] = []
        self.fail_on: int | None = None

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        await anyio.lowlevel.checkpoint()  # a store's I/O lets other tasks run
        kinds = []
        for request in requests:
            reader = JournalReader(self.inner, self.codec, request.stream)
            for offset, data in enumerate(request.records, start=1):
                record = reader.decode_loaded(StoredRecord(request.expected_seq + offset, data))
                kinds.append(record.kind)
        self.calls.append(kinds)
        if len(self.calls) == self.fail_on:
            raise StoreUnavailableError("disk gone")
        return await self.inner.append_batch(requests)

    async def stored_kinds(self, stream: StreamId) -> list[str]:
        return [record.kind async for record in JournalReader(self.inner, self.codec, stream).records()]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def counting_agent(steps: int, effects: list[int], model: StepModel) -> AgentDefinition:
    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int) -> int:
        effects.append(n)
        return n * 10

    return AgentDefinition(name="counter", model=model, tools=[effect])


class DurabilityProbe(StepModel):
    """A model that thinks, then checks that every tool result in the conversation it
    was given is already in the store (committed while it thought)."""

    def __init__(self, steps: int, store: RecordingStore, stream: StreamId) -> None:
        super().__init__(steps, think_s=0.02)
        self.store, self.stream = store, stream
        self.durable_at_answer: list[tuple[int, int]] = []  # (results given, results stored)

    async def respond(self, messages, tools):
        response = await super().respond(messages, tools)
        given = sum(1 for m in messages if m["role"] == "tool")
        stored = (await self.store.stored_kinds(self.stream)).count(Kind.TOOL_RESULT)
        self.durable_at_answer.append((given, stored))
        return response


async def test_an_instant_model_makes_one_commit_per_step() -> None:
    store, effects, steps = RecordingStore(), [], 12
    async with store.inner, Runtime(store) as rt:
        state = await rt.run(counting_agent(steps, effects, StepModel(steps)), "a1", "count")
    assert state.status == "finished" and effects == list(range(1, steps + 1))
    # started; then each step: the previous result, the response and its intent; last: result, answer, finished.
    assert store.calls[0] == [Kind.STARTED]
    assert store.calls[1] == [Kind.MODEL_RESPONDED, Kind.TOOL_INTENT]
    assert store.calls[2:-1] == [[Kind.TOOL_RESULT, Kind.MODEL_RESPONDED, Kind.TOOL_INTENT]] * (steps - 1)
    assert store.calls[-1] == [Kind.TOOL_RESULT, Kind.MODEL_RESPONDED, Kind.FINISHED]


async def test_a_thinking_model_answers_only_after_its_last_tool_result_is_durable() -> None:
    store, effects, steps = RecordingStore(), [], 6
    stream = StreamId("default", "a1")
    probe = DurabilityProbe(steps, store, stream)
    async with store.inner, Runtime(store) as rt:
        state = await rt.run(counting_agent(steps, effects, probe), "a1", "count")
    assert state.status == "finished" and effects == list(range(1, steps + 1))
    assert probe.durable_at_answer == [(n, n) for n in range(steps + 1)], "committed while the model thought"
    # The result's commit ran beside the model call, so it is a commit of its own.
    assert [Kind.TOOL_RESULT] in store.calls


async def test_a_failed_commit_while_the_model_thinks_stops_the_agent_before_it_acts() -> None:
    store, effects = RecordingStore(), []
    model = StepModel(5, think_s=0.5)
    store.fail_on = 3  # started, response 1 + intent, then result 1 (while the model thinks): fails
    async with store.inner, Runtime(store) as rt:
        handle = await rt.start(counting_agent(5, effects, model), "a1", "count")
        with anyio.fail_after(5):  # the model call is cancelled, not awaited for its 0.5 s
            with pytest.raises(StoreUnavailableError):
                await handle.wait()
        stored = await store.stored_kinds(StreamId("default", "a1"))
    assert effects == [1], "the second call never ran"
    assert store.calls[2] == [Kind.TOOL_RESULT]
    assert len(store.calls) == 3, "nothing was committed after the failed result"
    assert stored == [Kind.STARTED, Kind.MODEL_RESPONDED, Kind.TOOL_INTENT]
