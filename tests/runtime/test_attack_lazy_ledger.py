"""Attacks on the lazily decoded ledger: entries folded over keys its undecoded pages hold.

A tool call whose intent is in a page and whose result (or retry, or heartbeat) is in the
tail leaves a *patch*. Every snapshot written after that, whether the ledger was decoded
before it or not, must hold the patched entry: a snapshot that names the old page and
drops the patch tells the next restore the call never finished, and a resumed run asks
again (or runs the tool again) for a call whose result is known.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably._journal import page_writer
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
    monkeypatch.setattr(page_writer, "PAGE", 8)
    monkeypatch.setattr(page_writer, "KEEP", 4)


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
    wire = await page_writer.Pager(store).page_out(codec, STREAM, state.last_seq, state.snapshot_wire())
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


def random_journal(rng: random.Random, turns: int) -> list[tuple[str, dict[str, Any]]]:
    """A fold-valid journal: model turns of up to 12 parallel calls whose intents, failed
    attempts, heartbeats and results interleave, messages, and now and then a compaction."""
    out: list[tuple[str, dict[str, Any]]] = [
        (
            Kind.STARTED,
            {
                "namespace": "default",
                "agent_id": "a1",
                "run_id": "r1",
                "definition": {"name": "x", "version": "1", "digest": "d"},
                "task": "t",
                "budget": {"steps": None, "tokens": None, "cost_usd": None},
            },
        )
    ]
    usage = {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0}
    length = 2
    for turn in range(turns):
        calls = [
            {"id": f"c{turn}-{i}", "name": "effect", "arguments": {"n": i}, "key": f"k{turn}-{i}"}
            for i in range(rng.randint(0, 12))
        ]
        out.append((Kind.MODEL_RESPONDED, {"text": "", "tool_calls": calls, "usage": usage}))
        length += 1
        live = {c["key"]: (c, 0) for c in calls}
        while live:
            key = rng.choice(list(live))
            call, attempts = live[key]
            coordinates = {"key": key, "call_id": call["id"], "tool": "effect"}
            move = rng.random()
            if attempts == 0 or move < 0.2:
                live[key] = (call, attempts + 1)
                out.append((Kind.TOOL_INTENT, {**coordinates, "attempt": attempts + 1}))
            elif move < 0.35:
                out.append((Kind.TOOL_FAILED, {**coordinates, "attempt": attempts, "retry_at": 5.0, "error": "e"}))
            elif move < 0.5:
                out.append((Kind.TOOL_HEARTBEAT, {**coordinates, "details": attempts}))
            elif move < 0.6:
                out.append((Kind.MESSAGE_RECEIVED, {"role": "user", "content": f"m{turn}"}))
            else:
                del live[key]
                out.append((Kind.TOOL_RESULT, {**coordinates, "result": attempts, "error": None}))
                length += 1
        length += sum(1 for k, d in out if k == Kind.MESSAGE_RECEIVED and d["content"] == f"m{turn}")
        if rng.random() < 0.1 and length > 12:
            first = rng.randint(1, length // 3)
            count = rng.randint(1, length // 3)
            out.append((Kind.HISTORY_COMPACTED, {"first": first, "count": count, "summary": "s"}))
            length += 1 - count
    return out


def random_read(rng: random.Random, state: AgentState, keys: list[str]) -> None:
    """One of the reads a runtime makes of a restored state, some decoding pages, some not."""
    choice = rng.randrange(6)
    if choice == 0:
        _ = state.ledger
    elif choice == 1:
        _ = state.messages
    elif choice == 2 and keys:
        state.ledger_entry(rng.choice(keys))
    elif choice == 3:
        state.turn_start()
    elif choice == 4:
        state.messages_from(max(0, state.message_count() - rng.randint(0, 20)))


RUNS = 40


async def test_random_journals_snapshots_restores_and_reads_keep_the_journal_fold(tmp_path):
    """Random journals; at random points a snapshot of the live (lazily restored) state, a
    restore from the store, a read; each restore and the end state are the journal's fold."""
    checked = 0
    for run in range(RUNS):
        rng = random.Random(run)
        url = f"sqlite:///{tmp_path}/r{run}.db"
        codec = RecordCodec()
        entries = random_journal(rng, rng.randint(3, 14))
        async with open_store(url) as store:
            live, whole = AgentState(), AgentState()
            for seq, (kind, data) in enumerate(entries, 1):
                record = Record(seq, kind, data, 1.0)
                await store.append(STREAM, seq - 1, [codec.encode_record(record)])
                apply(live, record)
                apply(whole, record)
                move = rng.random()
                if move < 0.15:
                    await snapshot(store, codec, live)
                elif move < 0.3:
                    restored = await restore(store, codec, STREAM)
                    assert restored is not None
                    live = restored.state
                    checked += 1
                    assert (await restore(store, codec, STREAM)).state.to_wire() == whole.to_wire(), (run, seq)
                elif move < 0.45:
                    random_read(rng, live, list(whole.ledger))
            assert live.to_wire() == whole.to_wire(), run
            await snapshot(store, codec, live)
            final = await restore(store, codec, STREAM)
            assert final is not None and final.state.to_wire() == whole.to_wire(), run
            assert list(final.state.ledger) == list(whole.ledger)
    assert checked > RUNS  # restores did happen, of paged snapshots


async def test_reads_of_an_agent_whose_tail_patches_its_pages_are_the_journal_fold(tmp_path):
    """Status, time travel, describe and a fork of an agent restored from a paged snapshot
    whose tail writes over an entry of the ledger's first page."""
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        whole = await journal_fold(store, codec)
        oldest = next(iter(whole.ledger))
        records = retried_call(whole, oldest, whole.ledger[oldest])
        await store.append(STREAM, whole.last_seq, [codec.encode_record(r) for r in records])
        for record in records:
            apply(whole, record)
    async with Runtime(url, agents=[list_agent(STEPS, [])]) as rt:
        assert (await rt.status("a1")).to_wire() == whole.to_wire()
        assert (await rt.state_at("a1", whole.last_seq)).to_wire() == whole.to_wire()
        assert (await rt.describe("a1")).status == whole.status
        forked = await rt.fork("a1", whole.last_seq, "a2")
        assert forked.ledger[oldest]["attempts"] == 9 and forked.ledger[oldest]["result"] == 99
        assert list(forked.ledger) == list(whole.ledger)
        again = await rt.status("a2")
        assert again.ledger == forked.ledger and again.messages == forked.messages
