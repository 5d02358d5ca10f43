"""Attacks on the lazily decoded ledger: entries folded over keys its undecoded pages hold.

A tool call whose intent is in a page and whose result (or retry, or heartbeat) is in the
tail leaves a *patch*. Every snapshot written after that, whether the ledger was decoded
before it or not, must hold the patched entry: a snapshot that names the old page and
drops the patch tells the next restore the call never finished, and a resumed run asks
again (or runs the tool again) for a call whose result is known.
"""

from __future__ import annotations

from typing import Any

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably._journal import pages
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import AgentState, apply
from durably.schemas._records import Kind, Record
from durably.storage import StreamId, open_store
from durably.storage._spi import Store

STREAM = StreamId("default", "a1")
STEPS = 30


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    """Pages of 8 items, 4 kept inline: a short run spans several pages of each kind."""
    monkeypatch.setattr(pages, "PAGE", 8)
    monkeypatch.setattr(pages, "KEEP", 4)


async def run_long(url: str) -> AgentState:
    policy = SnapshotPolicy(every_records=7, tail_ratio=0.0)
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=policy) as rt:
        state = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        return state


async def journal_fold(store: Store, codec: RecordCodec) -> AgentState:
    state = AgentState()
    async for record in JournalReader(store, codec, STREAM).records():
        apply(state, record)
    return state


async def snapshot(store: Store, codec: RecordCodec, state: AgentState) -> None:
    """A snapshot of ``state`` as the snapshot writer takes one."""
    wire = await pages.Pager(store).page_out(codec, STREAM, state.last_seq, state.snapshot_wire())
    await store.put_snapshot(STREAM, state.last_seq, codec.encode_snapshot(state.last_seq, wire, STREAM))


def retried_call(state: AgentState, oldest: str, entry: dict[str, Any]) -> list[Record]:
    """A new attempt of the ledger's oldest call, and its result."""
    seq = state.last_seq
    coordinates = {"key": oldest, "call_id": entry["call_id"], "tool": entry["tool"]}
    return [
        Record(seq + 1, Kind.TOOL_INTENT, {**coordinates, "attempt": 9}, 1.0),
        Record(seq + 2, Kind.TOOL_RESULT, {**coordinates, "result": 99, "error": None}, 1.0),
    ]


@pytest.mark.parametrize("decode_first", [False, True], ids=["undecoded", "decoded"])
async def test_a_snapshot_after_a_patch_holds_the_patched_entry(tmp_path, decode_first):
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        whole = await journal_fold(store, codec)
        oldest = next(iter(whole.ledger))  # in the ledger's first page
        restored = await restore(store, codec, STREAM)
        assert restored is not None
        state = restored.state
        records = retried_call(state, oldest, whole.ledger[oldest])
        await store.append(STREAM, state.last_seq, [codec.encode_record(r) for r in records])
        for record in records:
            apply(state, record)
        if decode_first:
            _ = state.ledger  # e.g. a status read, before the snapshot writer runs
        await snapshot(store, codec, state)
        again = await restore(store, codec, STREAM)
        assert again is not None and again.snapshot_seq == state.last_seq and again.tail_records == 0
        entry = again.state.ledger_entry(oldest)
        assert entry is not None and entry["attempts"] == 9 and entry["result"] == 99
        assert again.state.to_wire() == (await journal_fold(store, codec)).to_wire()
