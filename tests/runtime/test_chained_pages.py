"""A page is compressed as the continuation of earlier pages (its reference's ``base``).

An agent re-reads the same files, and a ledger entry repeats its call's result, which
the conversation holds too: a page compressed alone cannot refer to what earlier pages
hold. Chained, a conversation page continues the one before it and a ledger page the
conversation pages holding its calls (snapshot-v6.cddl, ``page-ref``). Each test tries
to break that: a page opened without its base, a base not named before it, a damaged
earlier page, a conversation compacted under ledger pages that continue it, encryption.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably._journal import page_reader, page_writer
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably.errors import CorruptRecordError
from durably.storage import StreamId, open_store
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key

STREAM = StreamId("default", "a1")
CIPHER = AESGCMCipher(StaticKeyProvider({"k1": generate_key()}, "k1"))


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    """Pages of 16 items, 4 kept inline."""
    monkeypatch.setattr(page_writer, "PAGE", 16)
    monkeypatch.setattr(page_writer, "KEEP", 4)


def rereading_run(calls: int) -> dict[str, Any]:
    """The wire of a run that reads the same 16 files (2 KiB of incompressible text each)
    again and again: a conversation of an assistant turn and a tool message per call,
    and a ledger entry per call holding the same result."""
    rng = random.Random(7)
    files = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=2048)) for _ in range(16)]
    messages: list[dict[str, Any]] = []
    ledger: dict[str, dict[str, Any]] = {}
    for i in range(calls):
        call = f"call-{i}"
        messages.append({"role": "assistant", "content": f"read file {i % 16}"})
        messages.append({"role": "tool", "tool_call_id": call, "content": files[i % 16]})
        ledger[f"key-{i}"] = {"call_id": call, "tool": "read", "done": True, "result": files[i % 16]}
    return {"run_id": "r1", "messages": messages, "ledger": ledger}


async def page_sizes(store: Any, wire: dict[str, Any]) -> dict[str, list[int]]:
    """Stored bytes of each page ``wire`` names, by section."""
    return {
        key: [len(await store.get_blob(STREAM, ref["digest"])) for ref in wire.get(key, [])]
        for _, key in page_writer.SECTIONS
    }


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_pages_that_repeat_earlier_pages_cost_a_fraction_of_them_and_read_back(encrypted):
    codec = RecordCodec(cipher=CIPHER if encrypted else None)
    wire = rereading_run(80)  # 160 messages (9 pages), 80 entries (4 pages)
    async with open_store("memory://") as store:
        paged = await page_writer.Pager(store).page_out(codec, STREAM, 200, wire)
        sizes = await page_sizes(store, paged)
        first, second, *later = sizes["pages"]
        assert min(first, second) > 8 * 1024, "the first two pages hold the 16 files, which do not compress"
        # Alone, each later page would cost about as much as the first: each holds 8 of the files again.
        assert sum(later) < first / 4, sizes
        assert sum(sizes["ledger_pages"]) < first / 2, "ledger entries repeat the conversation's results"
        assert all("base" in ref for ref in paged["pages"][1:] + paged["ledger_pages"])
        whole = await page_reader.page_in(store, codec, STREAM, 200, paged)
    assert whole == wire


async def test_a_chained_page_opens_only_after_the_pages_it_continues():
    codec = RecordCodec()
    async with open_store("memory://") as store:
        paged = await page_writer.Pager(store).page_out(codec, STREAM, 200, rereading_run(80))
        first, second = paged["pages"][:2]
        assert second["base"] == [first["digest"]]
        data = await store.get_blob(STREAM, second["digest"])
        with pytest.raises(CorruptRecordError):
            codec.decode_page(data, second["s"], STREAM)  # main: no base, no bytes to continue
        prefix = codec.open_page(await store.get_blob(STREAM, first["digest"]), first["s"], STREAM)
        assert len(codec.decode_page(data, second["s"], STREAM, prefix)) == second["count"]


@pytest.mark.parametrize("section", ["pages", "ledger_pages"])
async def test_a_snapshot_whose_page_continues_a_page_not_named_before_it_is_refused(section):
    codec = RecordCodec()
    async with open_store("memory://") as store:
        paged = await page_writer.Pager(store).page_out(codec, STREAM, 200, rereading_run(80))
        broken = dict(paged)
        if section == "pages":
            broken["pages"] = paged["pages"][1:]  # the second page's base is gone
        else:  # the first ledger page made to continue the second, named after it
            first, second = paged["ledger_pages"][:2]
            broken["ledger_pages"] = [{**first, "base": [second["digest"]]}, second]
        with pytest.raises(CorruptRecordError, match="continues a page not named before it"):
            await page_reader.page_refs(store, codec, STREAM, 200, broken)


async def fold(store: Any, codec: RecordCodec) -> dict[str, Any]:
    state = AgentState()
    async for record in JournalReader(store, codec, STREAM).records():
        apply(state, record)
    return state.to_wire()


async def test_a_damaged_page_that_later_pages_continue_falls_back_to_the_journal(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/agents.db"
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    async with Runtime(url, agents=[list_agent(40, [])], snapshot_policy=policy) as rt:
        live = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
    codec = RecordCodec()
    async with open_store(url) as store:
        snapshot = await store.get_snapshot(STREAM)
        assert snapshot is not None
        _, wire, _ = codec.decode_snapshot(snapshot, STREAM)
        first, second = wire["pages"][:2]
        assert second["base"] == [first["digest"]], "the later page continues the first"
    db = sqlite3.connect(f"{tmp_path}/agents.db")
    with db:
        db.execute("UPDATE blobs SET data = zeroblob(length(data)) WHERE digest = ?", (first["digest"],))
    db.close()
    async with Runtime(url) as rt:
        state = await rt.status("a1")
    async with open_store(url) as store:
        assert state.to_wire() == await fold(store, codec) == live.to_wire()


async def test_ledger_pages_continuing_a_compacted_conversation_are_written_anew():
    codec = RecordCodec()
    wire = rereading_run(80)
    full = {**wire, "last_seq": 200}
    async with open_store("memory://") as store:
        pager = page_writer.Pager(store)
        paged = await pager.page_out(codec, STREAM, 200, full)
        assert any("base" in ref for ref in paged["ledger_pages"])
        rest, older = await page_reader.page_refs(store, codec, STREAM, 200, {**AgentState().to_wire(), **paged})
        state = AgentState.from_paged(rest, older)
        state.messages = [{"role": "user", "content": "a summary of what came before"}]  # a compaction
        again = state.snapshot_wire()
        # main: the ledger pages continue conversation pages this snapshot no longer names
        assert "ledger_pages" not in again and "pages" not in again
        assert again["ledger"] == wire["ledger"]
        repaged = await pager.page_out(codec, STREAM, 300, again)
        whole = await page_reader.page_in(store, codec, STREAM, 300, repaged)
    assert whole["ledger"] == wire["ledger"] and whole["messages"] == state.messages


def shaped_alike_run() -> dict[str, Any]:
    """A conversation whose first two pages hold files of the same length and shape (so
    either page's bytes fit where the other's are expected) and whose third repeats the first."""
    rng = random.Random(3)
    first, second = (["".join(rng.choices("abcdefghij", k=2048)) for _ in range(16)] for _ in range(2))
    texts = first + second + first
    messages = [{"role": "tool", "content": text} for text in texts] + [{"role": "user", "content": "go"}] * 4
    return {"run_id": "r1", "messages": messages, "ledger": {}}


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_a_page_opened_with_its_bases_in_another_order_is_refused_not_misread(encrypted):
    codec = RecordCodec(cipher=CIPHER if encrypted else None)
    wire = shaped_alike_run()
    async with open_store("memory://") as store:
        paged = await page_writer.Pager(store).page_out(codec, STREAM, 200, wire)
        third = paged["pages"][2]
        assert len(third["base"]) == 2, "the third page continues the first two"
        swapped = {**paged, "pages": [*paged["pages"][:2], {**third, "base": third["base"][::-1]}]}
        # main: the third page's matches copy the second page's files: valid CBOR, the wrong conversation
        with pytest.raises(CorruptRecordError):
            await page_reader.page_in(store, codec, STREAM, 200, swapped)
        assert await page_reader.page_in(store, codec, STREAM, 200, paged) == wire


async def test_the_compaction_check_reads_and_decodes_each_page_once(monkeypatch):
    codec = RecordCodec()
    decoded: list[int] = []
    page_items = codec.page_items

    def counting(raw: bytes, seq: int, stream: StreamId | None = None) -> list[Any]:
        decoded.append(seq)
        return page_items(raw, seq, stream)

    monkeypatch.setattr(codec, "page_items", counting)
    longer = rereading_run(96)
    # The same messages and entries, fewer of them: the longer run's first pages are these.
    shorter = {**longer, "messages": longer["messages"][:160], "ledger": dict(list(longer["ledger"].items())[:80])}
    async with open_store("memory://") as store:
        read: list[str] = []
        get_blob = store.get_blob

        async def reading(stream: StreamId, digest: str) -> bytes:
            read.append(digest)
            return await get_blob(stream, digest)

        monkeypatch.setattr(store, "get_blob", reading)
        pager, check = page_writer.Pager(store), page_reader.PageCheck()
        first = await pager.page_out(codec, STREAM, 200, shorter)
        await check.check(store, codec, STREAM, 200, first)
        refs = first["pages"] + first["ledger_pages"]
        assert len(decoded) == len(refs) and sorted(read) == sorted(r["digest"] for r in refs)
        decoded.clear(), read.clear()
        await check.check(store, codec, STREAM, 200, first)
        assert decoded == [] and read == [], "pages already found to open are neither read nor decoded again"
        second = await pager.page_out(codec, STREAM, 300, longer)
        new = [ref for ref in second["pages"] + second["ledger_pages"] if ref not in refs]
        continued = {ref["digest"] for ref in new}  # with every page they continue, and those continue, ...
        for ref in reversed(second["pages"] + second["ledger_pages"]):
            if ref["digest"] in continued:
                continued.update(ref.get("base", ()))
        await check.check(store, codec, STREAM, 300, second)
        assert new and decoded == [300] * len(new), "only the new pages are decoded"
        assert set(read) == continued, "only the new pages and those they continue are read"
        assert len(continued) < len(second["pages"] + second["ledger_pages"])
        # A check in a process that has not seen the pages reads them all, and finds one missing.
        await store.delete_blobs(STREAM, [refs[0]["digest"]])
        with pytest.raises(CorruptRecordError, match="missing"):
            await page_reader.PageCheck().check(store, codec, STREAM, 300, second)


async def test_a_page_continuing_more_bytes_than_a_writer_joins_is_refused():
    codec = RecordCodec()
    # A crafted snapshot: its first page alone holds more than a prefix may, and the second continues it.
    big = codec.page_payload(200, [{"role": "tool", "content": "x" * page_reader.MAX_PREFIX}])
    small = codec.page_payload(200, [{"role": "tool", "content": "x" * 1024}])
    async with open_store("memory://") as store:
        first = await store.put_blob(STREAM, codec.page_frame(200, big, STREAM))
        second = await store.put_blob(STREAM, codec.page_frame(200, small, STREAM, big))
        wire = {
            **AgentState().to_wire(),
            "pages": [
                {"digest": first, "s": 200, "count": 1},
                {"digest": second, "s": 200, "count": 1, "base": [first]},
            ],
        }
        with pytest.raises(CorruptRecordError, match="prefix"):
            await page_reader.page_in(store, codec, STREAM, 200, wire)
