"""A paged snapshot's pages are read and checked at restore, and decoded only when needed.

Restore reads each page and checks its digest (a missing or damaged one still skips the
snapshot) but decodes none: the fold of the tail, the snapshot written next and the
state's narrow accessors use the snapshot's newest part. Each test tries to break
that: it counts page decodes through the codec, and compares every state against the
eager one (``page_in``) and the fold of the journal, on SQLite and S3 (moto server).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from support_agents import list_agent

from durably import Budget, Runtime, SnapshotPolicy
from durably._journal import page_reader, page_writer
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import AgentState, apply
from durably.errors import CorruptRecordError
from durably.schemas._records import Kind, Record
from durably.storage import StreamId, open_store
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._spi import Store

STREAM = StreamId("default", "a1")
STEPS = 30  # 62 messages and 30 ledger entries: several pages of 8 each
KEY = generate_key()


def cipher() -> AESGCMCipher:
    return AESGCMCipher(StaticKeyProvider({"k1": KEY}))


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    """Pages of 8 items, 4 kept inline: a short run already spans several pages of each kind."""
    monkeypatch.setattr(page_writer, "PAGE", 8)
    monkeypatch.setattr(page_writer, "KEEP", 4)


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """The seq of every page opened (decompressed, to decode it or a page continuing it) during
    the test (the real decode runs)."""
    seen: list[int] = []
    opened = RecordCodec.open_page

    def counting(
        self: RecordCodec, data: bytes, seq: int, stream: StreamId | None = None, prefix: bytes = b""
    ) -> bytes:
        seen.append(seq)
        return opened(self, data, seq, stream, prefix)

    monkeypatch.setattr(RecordCodec, "open_page", counting)
    return seen


@pytest.fixture(params=["sqlite", "s3"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/agents.db"
    return request.getfixturevalue("s3_server").url(f"lazy-{uuid.uuid4().hex[:10]}")


# A snapshot every 7 records: the latest leaves a tail of model turns and tool calls to fold.
EVERY_SEVEN = SnapshotPolicy(every_records=7, tail_ratio=0.0)


async def run_long(url: str, policy: SnapshotPolicy = EVERY_SEVEN, **kw: Any) -> AgentState:
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=policy, **kw) as rt:
        state = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        return state


async def journal_fold(store: Store, codec: RecordCodec, upto: int | None = None) -> AgentState:
    state = AgentState()
    async for record in JournalReader(store, codec, STREAM).records(upto=upto):
        apply(state, record)
    return state


async def eager(store: Store, codec: RecordCodec) -> AgentState:
    """The state as restore built it before: every page decoded (``page_in``), then the tail folded."""
    snapshot = await store.get_snapshot(STREAM)
    assert snapshot is not None
    seq, wire, _ = codec.decode_snapshot(snapshot, STREAM)
    assert page_reader.paged(wire), "the latest snapshot names pages"
    state = AgentState.from_wire(await page_reader.page_in(store, codec, STREAM, seq, wire))
    state.last_seq = seq
    async for record in JournalReader(store, codec, STREAM).records(seq):
        apply(state, record)
    return state


async def test_restore_and_the_tail_fold_decode_no_page_and_the_whole_state_is_the_eager_one(url, decodes):
    live = await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        restored = await restore(store, codec, STREAM)
        assert restored is not None and restored.tail_records > 0  # a tail with tool calls was folded
        assert decodes == [], "restore decoded pages"  # main: every page
        state = restored.state
        assert state.message_count() == len(live.messages)
        assert state.ledger_entry(state.pending_calls[0]["key"] if state.pending_calls else "none") is None
        assert decodes, "a key the newest entries do not hold is looked up in the pages"
        before = eager_state = await eager(store, codec)
        assert state.to_wire() == eager_state.to_wire() == (await journal_fold(store, codec)).to_wire()
    assert list(state.ledger) == list(before.ledger) == list(live.ledger)  # the ledger's order too
    assert state.messages == live.messages


async def test_a_fold_over_a_key_the_pages_hold_is_the_eager_fold(tmp_path, decodes):
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        restored = await restore(store, codec, STREAM)
        assert restored is not None and decodes == []  # main: every page
        lazy, whole = restored.state, await eager(store, codec)
        decodes.clear()
        oldest = next(iter(whole.ledger))  # in the ledger's first page
        entry = whole.ledger[oldest]
        # A new attempt of that call, then its result: written over the pages' entry, not beside it.
        seq = lazy.last_seq
        records = [
            Record(
                seq + 1,
                Kind.TOOL_INTENT,
                {"key": oldest, "call_id": entry["call_id"], "tool": "effect", "attempt": 9},
                1.0,
            ),
            Record(
                seq + 2,
                Kind.TOOL_RESULT,
                {"key": oldest, "call_id": entry["call_id"], "tool": "effect", "result": 99, "error": None},
                1.0,
            ),
        ]
        for record in records:
            apply(lazy, record)
            apply(whole, record)
        assert decodes == [], "the fold decoded pages"
        assert lazy.to_wire() == whole.to_wire()
        assert lazy.ledger[oldest]["attempts"] == 9 and lazy.ledger[oldest]["result"] == 99
        assert list(lazy.ledger) == list(whole.ledger)


async def test_a_snapshot_after_a_lazy_restore_names_the_same_pages(url, decodes):
    await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        old = await store.get_snapshot(STREAM)
        assert old is not None
        _, old_wire, _ = codec.decode_snapshot(old, STREAM)
        restored = await restore(store, codec, STREAM)
        assert restored is not None
        state = restored.state
        # Two more records, stored and folded, then a snapshot as the snapshot writer takes one.
        last = state.last_seq
        more = [
            Record(last + 1, Kind.MESSAGE_RECEIVED, {"role": "user", "content": "and then?"}, 1.0),
            Record(last + 2, Kind.MESSAGE_RECEIVED, {"role": "user", "content": "and then again?"}, 1.0),
        ]
        await store.append(STREAM, last, [codec.encode_record(r) for r in more])
        for record in more:
            apply(state, record)
        put = store.put_blob
        written: list[str] = []

        async def spy(stream: StreamId, data: bytes) -> str:
            written.append(digest := await put(stream, data))
            return digest

        store.put_blob = spy  # type: ignore[method-assign]
        for step in ("undecoded", "decoded"):
            wire = await page_writer.Pager(store).page_out(codec, STREAM, state.last_seq, state.snapshot_wire())
            for section in ("pages", "ledger_pages"):
                assert wire[section][: len(old_wire[section])] == old_wire[section], (step, section)
            assert not set(written) & {r["digest"] for r in old_wire["pages"] + old_wire["ledger_pages"]}
            if step == "undecoded":
                assert decodes == [], "a snapshot of an undecoded state decoded its pages"
                await store.put_snapshot(STREAM, state.last_seq, codec.encode_snapshot(state.last_seq, wire, STREAM))
                assert len(state.messages) == state.message_count()  # decoded now: the same objects stay paged
        again = await restore(store, codec, STREAM)
        assert again is not None and again.snapshot_seq == last + 2
        assert again.state.to_wire() == (await journal_fold(store, codec)).to_wire()


async def test_a_resumed_run_keeps_naming_the_pages_it_restored(url):
    # Encrypted: a page written anew would get a new digest.
    kw: dict[str, Any] = {"encryption": cipher(), "snapshot_policy": EVERY_SEVEN}
    async with Runtime(url, agents=[list_agent(STEPS, [])], **kw) as rt:
        await rt.run("list-agent", "a1", "count", budget=Budget(steps=STEPS // 2))
        await rt._activations.services.snapshots.flush()
    codec = RecordCodec(cipher=cipher())
    async with open_store(url) as store:
        first = await store.get_snapshot(STREAM)
        assert first is not None
        _, before, _ = codec.decode_snapshot(first, STREAM)
    async with Runtime(url, agents=[list_agent(STEPS, [])], **kw) as rt:
        await rt.extend_budget("a1", steps=STEPS)
        live = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        assert live.status == "finished"
    async with open_store(url) as store:
        latest = await store.get_snapshot(STREAM)
        assert latest is not None and latest.seq > first.seq
        _, after, _ = codec.decode_snapshot(latest, STREAM)
        for section in ("pages", "ledger_pages"):
            assert before[section] and after[section][: len(before[section])] == before[section]  # main: all new
        assert (await journal_fold(store, codec)).to_wire() == live.to_wire()
    async with Runtime(url, encryption=cipher()) as rt:
        assert (await rt.status("a1")).to_wire() == live.to_wire()


async def test_whole_state_reads_of_a_lazily_restored_agent_are_the_journal_fold(tmp_path, decodes):
    url = f"sqlite:///{tmp_path}/a.db"
    live = await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        whole = (await journal_fold(store, codec)).to_wire()
        snapshot = await store.get_snapshot(STREAM)
        assert snapshot is not None
        at = snapshot.seq + 1
        then = (await journal_fold(store, codec, upto=at)).to_wire()
    async with Runtime(url, agents=[list_agent(STEPS, [])]) as rt:
        status = await rt.status("a1")
        assert decodes == []  # main: every page
        assert status.to_wire() == whole
        assert (await rt.state_at("a1", at)).to_wire() == then  # time travel
        description = await rt.describe("a1")
        assert description.status == live.status
        forked = await rt.fork("a1", at, "a2")
        assert forked.messages == then["messages"]
        assert list(forked.ledger) == list(then["ledger"])


async def test_a_page_that_does_not_decode_when_needed_raises_a_typed_error(tmp_path, decodes):
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        snapshot = await store.get_snapshot(STREAM)
        assert snapshot is not None
        seq, wire, _ = codec.decode_snapshot(snapshot, STREAM)
        # Its bytes are the digest's (restore reads and checks them), but it is not the page named.
        wire["pages"][0] = {**wire["pages"][0], "count": wire["pages"][0]["count"] + 1}
        await store.put_snapshot(STREAM, seq, codec.encode_snapshot(seq, wire, STREAM))
        restored = await restore(store, codec, STREAM)  # main: skipped for the journal
        assert restored is not None and restored.snapshot_seq == seq and decodes == []
        state = restored.state
        with pytest.raises(CorruptRecordError) as caught:
            _ = state.messages
        assert caught.value.stream == STREAM and caught.value.seq == seq
        with pytest.raises(CorruptRecordError):
            state.to_wire()  # every whole read, not only the first


async def test_a_page_no_decode_would_accept_still_skips_its_snapshot_at_restore(tmp_path, decodes):
    url = f"sqlite:///{tmp_path}/a.db"
    live = await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        snapshot = await store.get_snapshot(STREAM)
        assert snapshot is not None
        seq, wire, _ = codec.decode_snapshot(snapshot, STREAM)
        data = bytearray(await store.get_blob(STREAM, wire["pages"][0]["digest"]))
        data[5:7] = (99).to_bytes(2, "big")  # a page from a newer durably, stored under its own digest
        wire["pages"][0] = {**wire["pages"][0], "digest": await store.put_blob(STREAM, bytes(data))}
        await store.put_snapshot(STREAM, seq, codec.encode_snapshot(seq, wire, STREAM))
        restored = await restore(store, codec, STREAM)
        assert restored is not None and restored.snapshot_seq < seq  # skipped at restore, not failing later
        assert restored.state.to_wire() == live.to_wire()


async def test_a_ledger_lookup_reads_the_pages_only_for_a_key_the_newest_entries_lack(tmp_path, decodes):
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    codec = RecordCodec()
    async with open_store(url) as store:
        restored = await restore(store, codec, STREAM)
        assert restored is not None
        whole = await eager(store, codec)
    state, keys = restored.state, list(whole.ledger)
    decodes.clear()
    assert state.ledger_entry(keys[-1]) == whole.ledger[keys[-1]]  # the current turn's call
    assert state.message_count() == len(whole.messages) and state.turn_start() <= len(whole.messages)
    assert decodes == []
    assert state.ledger_entry(keys[0]) == whole.ledger[keys[0]]  # in the first page: exact, so decoded
    assert decodes and state.ledger == whole.ledger


async def test_a_lazily_restored_run_under_write_compat_snapshots_its_whole_state_inline(tmp_path, decodes):
    """A run paged by this release, resumed with ``write_compat`` on (switched on late in an
    upgrade): its next snapshots are the older release's, whole and unpaged, never the
    restored pages' references in a version that cannot name them."""
    url = f"sqlite:///{tmp_path}/agents.db"
    kw: dict[str, Any] = {"snapshot_policy": EVERY_SEVEN}
    async with Runtime(url, agents=[list_agent(STEPS, [])], **kw) as rt:
        await rt.run("list-agent", "a1", "count", budget=Budget(steps=STEPS // 2))
        await rt._activations.services.snapshots.flush()
    codec = RecordCodec()
    async with open_store(url) as store:
        first = await store.get_snapshot(STREAM)
        assert first is not None and page_reader.paged(codec.decode_snapshot(first, STREAM)[1])
    async with Runtime(url, agents=[list_agent(STEPS, [])], write_compat="0.1", **kw) as rt:
        await rt.extend_budget("a1", steps=STEPS)
        live = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        assert live.status == "finished"
    async with open_store(url) as store:
        latest = await store.get_snapshot(STREAM)
        assert latest is not None and latest.seq > first.seq
        _, wire, frame = codec.decode_snapshot(latest, STREAM)
        assert not page_reader.paged(wire) and frame.schema_version < page_reader.FIRST_PAGED
        assert AgentState.from_wire(wire).to_wire() == (await journal_fold(store, codec, latest.seq)).to_wire()
