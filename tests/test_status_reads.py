"""status() (issue 16 item 7): a live agent answers from its actor with only what is durable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from durably.adapters.memory import MemoryStore
from durably._runtime import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._runtime.record_codec import RecordCodec
from durably._runtime.restore import restore
from durably.schemas._records import Kind
from durably.storage._spi import AppendRequest, StoredRecord, StreamId


class HeldStore:
    """A memory store whose commits of a ``tool_result`` wait for ``release`` (``held`` is set meanwhile)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.codec = RecordCodec()
        self.held = anyio.Event()
        self.release = anyio.Event()

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        await anyio.lowlevel.checkpoint()
        kinds = [self.codec.decode_record(StoredRecord(r.expected_seq + i, data), r.stream).kind
                 for r in requests for i, data in enumerate(r.records, start=1)]
        if Kind.TOOL_RESULT in kinds:
            self.held.set()
            await self.release.wait()
        return await self.inner.append_batch(requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class TwoTurns:
    """Calls ``effect`` once, then (second call) waits for ``answer`` before it answers."""

    name = "two-turns"

    def __init__(self) -> None:
        self.second = anyio.Event()
        self.answer = anyio.Event()

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        usage = Usage(1, 1, 0.0)
        if not any(m["role"] == "tool" for m in messages):
            return ModelResponse("step", (ToolCall("c1", "effect", {"n": 1}),), usage)
        self.second.set()
        await self.answer.wait()
        return ModelResponse("done", (), usage)


def two_turns(model: TwoTurns) -> AgentDefinition:
    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int) -> int:
        return n * 10

    return AgentDefinition(name="two-turns", model=model, tools=[effect])


async def test_status_of_a_live_agent_holds_only_what_is_durable() -> None:
    store, model = HeldStore(), TwoTurns()
    stream = StreamId("default", "a1")
    async with store.inner, Runtime(store) as rt:
        handle = await rt.start(two_turns(model), "a1", "task")
        with anyio.fail_after(10):
            await model.second.wait()  # the tool result is staged and folded: the model sees it
            await store.held.wait()  # ... and its commit is not done
        status = await rt.status("a1")
        crashed_now = await restore(store.inner, store.codec, stream)
        assert crashed_now is not None
        assert status.to_wire() == crashed_now.state.to_wire(), "what a resume after a crash would find"
        assert not any(m["role"] == "tool" for m in status.messages)
        live = handle._actor.state
        assert any(m["role"] == "tool" for m in live.messages) and live.last_seq == status.last_seq + 1
        store.release.set()
        with anyio.fail_after(10):
            while (await rt.status("a1")).last_seq == status.last_seq:
                await anyio.sleep(0.01)
        committed = await rt.status("a1")
        assert [m["content"] for m in committed.messages if m["role"] == "tool"] == [10]
        model.answer.set()
        assert (await handle.wait()).status == "finished"
    # The copy shares nothing with the actor's state.
    committed.messages.clear()
    assert handle._actor.state.messages
