"""status() under load: a live agent answers from its actor without
reading the store, and only with what is durable; a restore on SQLite reads its
snapshot, last seq, run check and tail in one statement (on the loop's thread
when small), and finds the same state as the separate reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import AgentState
from durably.adapters.memory import MemoryStore
from durably.adapters.sqlite import SQLiteStore
from durably.schemas._records import Kind, Record
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
        kinds = []
        for r in requests:
            reader = JournalReader(self.inner, self.codec, r.stream)  # a commit's rows, from its group frame on
            kinds += [
                reader.decode_loaded(StoredRecord(r.expected_seq + i, data)).kind
                for i, data in enumerate(r.records, start=1)
            ]
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


async def test_status_of_a_live_agent_does_not_read_the_store(tmp_path, monkeypatch) -> None:
    model = TwoTurns()
    async with Runtime(f"sqlite:///{tmp_path / 'a.db'}") as rt:
        handle = await rt.start(two_turns(model), "a1", "task")
        with anyio.fail_after(10):
            await model.second.wait()
        store = rt.store
        assert isinstance(store, SQLiteStore)

        def no_read(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("status() of a live agent read the store")

        for name in ("_fetch", "read", "get_snapshot", "last_seq", "read_restore"):
            monkeypatch.setattr(store, name, no_read)
        state = await rt.status("a1")
        assert state.agent_id == "a1" and state.status == "running" and state.last_seq >= 3
        monkeypatch.undo()
        model.answer.set()
        assert (await handle.wait()).status == "finished"


class Separate:
    """A store's ``Store`` methods without ``read_restore``: restore makes its separate reads."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "read_restore":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _record(seq: int, kind: str, data: dict[str, Any]) -> Record:
    return Record(seq, kind, data, 1.0)


async def _journal(store: SQLiteStore, codec: RecordCodec, stream: StreamId, sizes: Sequence[int]) -> None:
    """A started record, then one user message per size (of that many characters)."""
    started = {
        "namespace": stream.namespace,
        "agent_id": stream.agent_id,
        "run_id": "r1",
        "task": "t",
        "definition": {"name": "d", "version": "1", "digest": "x"},
        "instructions": "",
        "budget": {},
        "worker": "w",
    }
    records = [_record(1, Kind.STARTED, started)]
    records += [
        _record(i, Kind.MESSAGE_RECEIVED, {"role": "user", "content": "x" * size})
        for i, size in enumerate(sizes, start=2)
    ]
    await store.append_batch([AppendRequest(stream, 0, [codec.encode_record(r, stream) for r in records])])


@pytest.mark.parametrize("shape", ["small", "long", "big-records", "snapshot", "big-snapshot"])
async def test_one_read_restore_finds_what_the_separate_reads_find(tmp_path, shape: str) -> None:
    codec, stream = RecordCodec(), StreamId("ns", "a1")
    sizes = {
        "small": [10] * 5,
        "long": [10] * 700,
        "big-records": [3000, 10, 5000, 10],
        "snapshot": [10] * 8,
        "big-snapshot": [1000] * 8,
    }[shape]
    async with SQLiteStore(f"sqlite:///{tmp_path / 'r.db'}") as store:
        await _journal(store, codec, stream, sizes)
        if shape in ("snapshot", "big-snapshot"):
            folded = await restore(Separate(store), codec, stream)  # type: ignore[arg-type]
            assert folded is not None
            at = 5
            early = await restore(Separate(store), codec, stream, upto=at)  # type: ignore[arg-type]
            assert early is not None
            await store.put_snapshot(stream, at, codec.encode_snapshot(at, early.state.to_wire(), stream))
        fast = await restore(store, codec, stream)
        slow = await restore(Separate(store), codec, stream)  # type: ignore[arg-type]
        assert fast is not None and slow is not None
        assert fast.state.to_wire() == slow.state.to_wire()
        assert fast.state.last_seq == len(sizes) + 1
        assert (fast.snapshot_seq, fast.tail_records, fast.tail_bytes) == (
            slow.snapshot_seq,
            slow.tail_records,
            slow.tail_bytes,
        )
        snapshot, last, first, tail = await store.read_restore(stream)
        assert last == len(sizes) + 1
        assert (snapshot is not None) == shape.endswith("snapshot")
        after = snapshot.seq if snapshot is not None else 0
        assert (first is not None and first.seq == 1) == (snapshot is not None)
        everything = [r async for r in store.read(stream, after)]
        assert tail == everything[: len(tail)], "a prefix of the records after the snapshot, in seq order"
        if shape != "long":
            assert tail == everything, "one page holds a tail shorter than the page size"


async def test_one_read_restore_of_an_unknown_stream_and_a_snapshot_of_another_run(tmp_path) -> None:
    codec, stream = RecordCodec(), StreamId("ns", "a1")
    async with SQLiteStore(f"sqlite:///{tmp_path / 'r.db'}") as store:
        assert await store.read_restore(stream) == (None, 0, None, [])
        assert await restore(store, codec, stream) is None
        await _journal(store, codec, stream, [10, 10, 10])
        # A purged run's snapshot landing late: skipped for the journal, as with separate reads.
        stale = AgentState(namespace="ns", agent_id="a1", run_id="old-run", last_seq=3).to_wire()
        await store.put_snapshot(stream, 3, codec.encode_snapshot(3, stale, stream))
        restored = await restore(store, codec, stream)
        assert restored is not None and restored.state.run_id == "r1" and restored.snapshot_seq == 0
        assert restored.state.last_seq == 4
