"""DurablySaver with real compiled graphs: linear storage, exact reads, snapshots, the sync
interface, strict values, encryption, redaction, TTL and bad input."""

from __future__ import annotations

import copy
import sys
import threading
import types

import anyio
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph_agent import ScriptedChatModel, State, build_agent
from pydantic import BaseModel

from durably._journal.redaction_policy import RedactionPolicy
from durably.integrations.langgraph import (
    CheckpointValueError,
    DurablySaver,
    InvalidPruneStrategyError,
    InvalidThreadIdError,
    SyncCallOnLoopError,
)
from durably.storage import StreamId
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._errors import DecryptionError
from durably.storage._registry import open_store


def _config(thread: str = "t1", **extra) -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 500, **extra}


async def _run(saver, steps: int, thread: str = "t1", calls: int = 1):
    graph = build_agent(ScriptedChatModel(steps=steps, calls_per_step=calls)).compile(checkpointer=saver)
    return await graph.ainvoke({"messages": [HumanMessage("go")]}, _config(thread), durability="sync")


async def _stored_bytes(url: str, namespace: str = "langgraph") -> tuple[int, int]:
    """(record bytes, snapshot bytes) of every thread in ``namespace``."""
    records = snapshots = 0
    async with open_store(url) as store:
        async for stream in store.list_streams(namespace):
            records += sum([len(r.data) async for r in store.read(stream)])
            snap = await store.get_snapshot(stream)
            snapshots += len(snap.data) if snap else 0
    return records, snapshots


async def test_storage_grows_linearly_with_steps(tmp_path) -> None:
    sizes = {}
    for steps in (40, 160):
        url = f"sqlite:///{tmp_path / f'lin{steps}.db'}"
        async with DurablySaver.from_url(url, snapshot_min_bytes=1 << 30) as saver:
            await _run(saver, steps)
        sizes[steps] = sum(await _stored_bytes(url))
    # 4x the steps: about 4x the bytes (O(N)); storing whole states would be about 16x (O(N^2)).
    assert sizes[160] < 5 * sizes[40], sizes


class RecordingSaver(DurablySaver):
    """Keeps a copy of everything LangGraph hands the saver."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.puts: list[tuple[dict, dict]] = []
        self.writes: dict[str, set] = {}

    async def aput(self, config, checkpoint, metadata, new_versions):
        self.puts.append((copy.deepcopy(checkpoint), copy.deepcopy(metadata)))
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes, task_id, task_path=""):
        found = self.writes.setdefault(config["configurable"]["checkpoint_id"], set())
        found.update((task_id, channel, repr(value)) for channel, value in writes)
        return await super().aput_writes(config, writes, task_id, task_path)


async def test_reads_rebuild_exactly_what_langgraph_wrote(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'exact.db'}"
    async with RecordingSaver(url, snapshot_min_bytes=2048) as saver:
        await _run(saver, 12, calls=2)
        graph = build_agent(ScriptedChatModel(steps=12)).compile(checkpointer=saver)
        # A non-append update (a message removed) is stored whole, then deltas resume.
        state = await graph.aget_state(_config())
        await graph.aupdate_state(_config(), {"messages": [RemoveMessage(id=state.values["messages"][1].id)]})
        await graph.aupdate_state(_config(), {"messages": [AIMessage("after the removal", id="after")]})
    assert len(saver.puts) > 20
    async with DurablySaver.from_url(url) as fresh:  # a new saver: everything comes from the store
        for checkpoint, metadata in saver.puts:
            tup = await fresh.aget_tuple(
                _config(checkpoint_id=checkpoint["id"])
                | {"configurable": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}}
            )
            assert tup.checkpoint == checkpoint
            assert metadata.items() <= tup.metadata.items()
            written = {(task, channel, repr(value)) for task, channel, value in tup.pending_writes}
            assert written == saver.writes.get(checkpoint["id"], set())
        listed = [t async for t in fresh.alist(_config())]
        assert [t.checkpoint for t in listed] == [c for c, _ in reversed(saver.puts)]


async def test_snapshots_bound_replay_and_prune_compacts(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'snap.db'}"
    async with DurablySaver.from_url(url, snapshot_min_bytes=4096) as saver:
        await _run(saver, 60)
        latest = await saver.aget_tuple(_config())
    async with open_store(url) as store:
        stream = StreamId("langgraph", "t1")
        snapshot = await store.get_snapshot(stream)
        last = await store.last_seq(stream)
        assert snapshot is not None and 0 < snapshot.seq <= last
        tail = [r async for r in store.read(stream, snapshot.seq)]
        assert len(tail) < last / 2  # restore replays the tail only
    before = sum(await _stored_bytes(url))
    async with DurablySaver.from_url(url) as saver:
        restored = await saver.aget_tuple(_config())
        assert restored.checkpoint == latest.checkpoint
        await saver.aprune(["t1"])
        assert [t.config for t in [t async for t in saver.alist(_config())]] == [latest.config]
        assert (await saver.aget_tuple(_config())).checkpoint == latest.checkpoint
    assert sum(await _stored_bytes(url)) < before


async def test_sync_methods_work_off_the_loop_and_fail_fast_on_it(tmp_path) -> None:
    async with DurablySaver.from_url(f"sqlite:///{tmp_path / 'sync.db'}") as saver:
        await _run(saver, 2)
        with pytest.raises(SyncCallOnLoopError):
            saver.get_tuple(_config())
        found = await anyio.to_thread.run_sync(saver.get_tuple, _config())
        assert found == await saver.aget_tuple(_config())
        listed = await anyio.to_thread.run_sync(lambda: list(saver.list(_config(), limit=2)))
        assert [t.config for t in listed] == [t.config async for t in saver.alist(_config(), limit=2)]


def test_a_purely_synchronous_graph_runs_on_the_savers_own_loop(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'pure.db'}"
    builder = StateGraph(State)
    builder.add_node("greet", lambda s: {"messages": [AIMessage(f"hello #{len(s['messages'])}")]})
    builder.add_edge(START, "greet")
    with DurablySaver.from_url(url) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("hi")]}, _config())
        result = graph.invoke({"messages": [HumanMessage("again")]}, _config())
        assert [m.content for m in result["messages"]] == ["hi", "hello #1", "again", "hello #3"]
        assert graph.get_state(_config()).values == result
    assert not any(t.name == "durably-langgraph-saver" for t in threading.enumerate())


class Secretive(BaseModel):
    name: str


async def test_an_unknown_value_fails_loudly_with_its_channel(tmp_path) -> None:
    module = types.ModuleType("durably_lg_vanishing")
    module.Vanishing = type("Vanishing", (Secretive,), {"__module__": "durably_lg_vanishing"})
    sys.modules["durably_lg_vanishing"] = module
    url = f"sqlite:///{tmp_path / 'unknown.db'}"

    class Holder(State):
        thing: object

    builder = StateGraph(Holder)
    builder.add_node("make", lambda s: {"thing": module.Vanishing(name="x")})
    builder.add_edge(START, "make")
    try:
        async with DurablySaver.from_url(url) as saver:
            await builder.compile(checkpointer=saver).ainvoke({"messages": []}, _config())
    finally:
        del sys.modules["durably_lg_vanishing"]
    async with DurablySaver.from_url(url) as saver:
        with pytest.raises(CheckpointValueError) as caught:
            await saver.aget_tuple(_config())
    assert caught.value.channel == "thing" and "durably_lg_vanishing.Vanishing" in str(caught.value)


class _WeirdSerde:
    """Writes values under a type name LangGraph's serializer does not know."""

    def dumps_typed(self, value):
        return ("weird-format", b"\x00\x01")

    def loads_typed(self, data):
        raise AssertionError("not used")


async def test_an_undecodable_value_fails_loudly_with_its_channel(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'weird.db'}"
    async with DurablySaver.from_url(url, serde=_WeirdSerde()) as saver:
        await _run(saver, 1)
    async with DurablySaver.from_url(url) as saver:
        with pytest.raises(CheckpointValueError) as caught:
            await saver.aget_tuple(_config())
    assert caught.value.channel and "weird-format" in str(caught.value)


async def test_encryption_binds_each_record_to_its_thread(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'enc.db'}"
    cipher = AESGCMCipher(StaticKeyProvider({"k1": generate_key()}))
    async with DurablySaver.from_url(url, cipher=cipher, snapshot_min_bytes=1 << 30) as saver:
        result = await _run(saver, 20)
        await _run(saver, 2, thread="other")
    async with DurablySaver.from_url(url, cipher=cipher, snapshot_min_bytes=2048) as saver:
        await _run(saver, 20, thread="snapshotted")
    async with open_store(url) as store:
        frames = [r.data async for r in store.read(StreamId("langgraph", "t1"))]
        snapshot = await store.get_snapshot(StreamId("langgraph", "snapshotted"))
        assert frames and snapshot is not None
        assert not any(b"recorded step" in f or b"Step 1" in f for f in [*frames, snapshot.data])
        # A frame moved to another thread's stream at the same seq does not decrypt there.
        other = StreamId("langgraph", "other")
        last = await store.last_seq(other)
        await store.append(other, last, [frames[last]])
    async with DurablySaver.from_url(url, cipher=cipher) as saver:
        state = await build_agent(ScriptedChatModel(steps=20)).compile(checkpointer=saver).aget_state(_config())
        assert state.values == result
        with pytest.raises(DecryptionError):
            await saver.aget_tuple(_config("other"))
        assert (await saver.aget_tuple(_config("snapshotted"))).checkpoint["channel_values"]["messages"]
    async with DurablySaver.from_url(url) as keyless:
        with pytest.raises(DecryptionError):
            await keyless.aget_tuple(_config())


async def test_redaction_keeps_secrets_out_of_the_store(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'redact.db'}"
    token = "sk-" + "a1B2c3D4e5" * 4
    builder = StateGraph(State)
    builder.add_node(
        "leak",
        lambda s: {
            "messages": [
                AIMessage(
                    content=f"the key is {token}",
                    tool_calls=[
                        {
                            "name": "login",
                            "id": "c1",
                            "type": "tool_call",
                            "args": {"user": "ana", "password": "hunter2"},
                        }
                    ],
                ),
                ToolMessage(content="ok", tool_call_id="c1"),
            ]
        },
    )
    builder.add_edge(START, "leak")
    async with DurablySaver.from_url(url, redaction=RedactionPolicy()) as saver:
        live = await builder.compile(checkpointer=saver).ainvoke({"messages": [HumanMessage("hi")]}, _config())
    assert token in live["messages"][1].content  # the live graph keeps the originals
    async with DurablySaver.from_url(url) as saver:
        stored = (await saver.aget_tuple(_config())).checkpoint["channel_values"]["messages"]
    assert token not in stored[1].content and "[REDACTED" in stored[1].content
    assert stored[1].tool_calls[0]["args"] == {"user": "ana", "password": {"$redacted": "secret field password"}}
    async with open_store(url) as store:
        frames = b"".join([r.data async for r in store.read(StreamId("langgraph", "t1"))])
    assert b"hunter2" not in frames and token.encode() not in frames


async def test_ttl_purges_idle_threads(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ttl.db'}"
    async with DurablySaver.from_url(url, ttl=0.5) as saver:
        await _run(saver, 1, thread="idle")
        await _run(saver, 1, thread="swept")
        assert await saver.aget_tuple(_config("idle")) is not None
    await anyio.sleep(0.7)
    async with DurablySaver.from_url(url, ttl=0.5) as saver:
        assert await saver.aget_tuple(_config("idle")) is None
        assert await saver.asweep() == ["swept"]
    async with open_store(url) as store:
        assert [s async for s in store.list_streams("langgraph")] == []


async def test_bad_input_gets_typed_errors(tmp_path) -> None:
    async with DurablySaver.from_url(f"sqlite:///{tmp_path / 'bad.db'}") as saver:
        with pytest.raises(InvalidThreadIdError):
            await saver.aget_tuple({"configurable": {"thread_id": "x" * 300}})
        with pytest.raises(InvalidThreadIdError):
            await saver.aget_tuple({"configurable": {}})
        with pytest.raises(InvalidPruneStrategyError):
            await saver.aprune(["t1"], strategy="keep_some")
        with pytest.raises(ValueError):
            DurablySaver.from_url("memory://", ttl=0)


async def test_two_writers_on_one_thread_rebase_instead_of_losing_data(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    async with DurablySaver.from_url(url) as first, DurablySaver.from_url(url) as second:
        stored = await first.aput(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            {
                "v": 1,
                "id": "1",
                "ts": "",
                "channel_values": {},
                "channel_versions": {},
                "versions_seen": {},
                "updated_channels": None,
            },
            {"step": 0},
            {},
        )
        await second.aget_tuple(stored)  # second knows the thread at seq 1
        await first.aput_writes(stored, [("a", 1)], "task-a")
        await second.aput_writes(stored, [("b", 2)], "task-b")  # stale by one record: conflict, rebase
        tup = await first.aget_tuple(stored)
    assert sorted(w[1:] for w in tup.pending_writes) == [("a", 1), ("b", 2)]
