"""The snapshot policy weighs raw (CBOR) bytes, not compressed ones.

A snapshot compresses several times better than the small record frames of its
tail, so comparing stored sizes would snapshot far more often than ``tail_ratio``
says. These tests use records that compress about 100x, where the two
measures disagree by that much.
"""

from __future__ import annotations

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._journal.snapshots import SnapshotPolicy, SnapshotWriter
from durably.storage._codec import raw_size
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

LONG = "the same line of tool output, again and again\n" * 400  # ~18 KB raw, ~0.2 KB compressed


def chatty_agent(steps: int) -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int, *, ctx) -> str:
        return LONG

    return AgentDefinition(name="chatty", model=StepModel(steps), tools=[effect])


async def stream_sizes(url: str) -> tuple[list[int], list[int]]:
    """The raw and stored sizes of every record of agent a1."""
    async with open_store(url) as store:
        frames = [stored.data async for stored in store.read(StreamId("default", "a1"))]
    return [raw_size(f) for f in frames], [len(f) for f in frames]


async def test_every_bytes_counts_raw_bytes(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    # By count never (a million records); by bytes after 40 KB: raw, two tool results pass it.
    policy = SnapshotPolicy(every_records=1_000_000, every_bytes=40_000, tail_ratio=0.0)
    async with Runtime(url, agents=[chatty_agent(4)], snapshot_policy=policy) as rt:
        await rt.run("chatty", "a1", "task")
    raw, stored = await stream_sizes(url)
    assert sum(stored) < 40_000 < sum(raw), "the workload must tell the two measures apart"
    async with open_store(url) as store:
        snapshot = await store.get_snapshot(StreamId("default", "a1"))
    assert snapshot is not None, "raw bytes passed every_bytes, so a snapshot was due"


@pytest.mark.parametrize("ratio", [0.5, 2.0])
async def test_tail_ratio_compares_raw_tail_with_the_raw_snapshot(tmp_path, ratio: float) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    policy = SnapshotPolicy(every_records=1, tail_ratio=ratio, keep=1_000)
    async with Runtime(url, agents=[chatty_agent(12)], snapshot_policy=policy) as rt:
        await rt.run("chatty", "a1", "task")
    raw, _ = await stream_sizes(url)
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        seqs = []
        at = None
        while (snap := await store.get_snapshot(stream, at)) is not None:
            seqs.append(snap.seq)
            at = snap.seq - 1
        seqs.reverse()
        codec = RecordCodec()
        sizes = {seq: raw_size((await store.get_snapshot(stream, seq)).data) for seq in seqs}
        restored = await restore(store, codec, stream)
    assert len(seqs) >= 2
    for before, after in zip(seqs, seqs[1:], strict=False):
        tail = sum(raw[before:after])  # records before+1 .. after (seq s is raw[s - 1])
        # Until the background writer reports a snapshot's size, the journal estimates it as the
        # last size plus the tail, while the state grows by up to twice that (a tool result sits in
        # the conversation and in the ledger): hence the factor 2. Stored sizes gave 0.008 here.
        assert tail >= ratio * sizes[before] / 2, (before, after, tail, sizes[before])
    # What a restore hands the policy is raw too: the newest snapshot's size and the tail after it.
    assert restored.snapshot_raw == sizes[seqs[-1]]
    assert restored.tail_raw == sum(raw[seqs[-1] :])
    assert restored.tail_records == len(raw) - seqs[-1]


async def test_a_late_size_of_an_older_snapshot_leaves_the_newer_estimate(tmp_path, monkeypatch) -> None:
    """A slow writer (a loaded machine) reports snapshot 1's size after snapshot 6 was submitted.

    That older, smaller size must not replace the estimate of snapshot 6: the next snapshot
    would then come one tool result later, far below ``tail_ratio`` of snapshot 6 (under load,
    about 3 times in 20 for this test's 2.0 case). The writer is held by events, not by time: the
    first write reports only once a newer snapshot is submitted, and the second writes only
    once the agent is done, so no reported size is the newest one's while the agent runs.
    """
    ratio = 2.0
    newer_submitted, run_done = anyio.Event(), anyio.Event()
    submitted: list[tuple[int, int]] = []  # (seq, raw size of the state submitted)
    writes = 0
    codec = RecordCodec()
    write, submit = SnapshotWriter._write, SnapshotWriter.submit

    async def held_write(self, codec_, stream, seq, wire, claim):
        nonlocal writes
        writes += 1
        if writes == 2:
            await run_done.wait()
        size = await write(self, codec_, stream, seq, wire, claim)
        if writes == 1:
            await newer_submitted.wait()
        return size

    def spied_submit(self, stream, seq, wire, *, claim=None):
        submitted.append((seq, raw_size(codec.encode_snapshot(seq, wire, stream))))
        if len(submitted) > 1:
            newer_submitted.set()
        submit(self, stream, seq, wire, claim=claim)

    monkeypatch.setattr(SnapshotWriter, "_write", held_write)
    monkeypatch.setattr(SnapshotWriter, "submit", spied_submit)
    url = f"sqlite:///{tmp_path / 'p.db'}"
    policy = SnapshotPolicy(every_records=1, tail_ratio=ratio, keep=1_000)
    async with Runtime(url, agents=[chatty_agent(12)], snapshot_policy=policy) as rt:
        handle = await rt.start("chatty", "a1", "task")
        await handle._actor.done.wait()  # its lease is given back once the writes under it end
        run_done.set()
        await handle.wait()
    raw, _ = await stream_sizes(url)
    assert len(submitted) >= 3
    for (before, size), (after, _) in zip(submitted, submitted[1:], strict=False):
        tail = sum(raw[before:after])
        assert tail >= ratio * size / 2, (before, after, tail, size)
