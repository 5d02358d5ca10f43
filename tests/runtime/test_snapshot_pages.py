"""Snapshots page the older conversation and ledger out to blobs, and restore exactly.

A paged snapshot holds the newest messages and ledger entries, plus references to
pages written once as blobs (snapshot-v6.cddl). Each test tries to break that: a
page lost or damaged, a crash between the pages and their snapshot, a purge, a key
rotation, a fork; the state restored must always be the fold of the journal, or a
typed error when the journal behind the snapshot is gone too.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably._journal import page_reader, page_writer
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably._reading.verify import verify_stream
from durably.errors import BlobNotFoundError, CorruptRecordError
from durably.storage import StreamId, open_store
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._spi import Store, supports_blobs

KEYS = {"k1": generate_key(), "k2": generate_key()}


def cipher(*ids: str, current: str | None = None) -> AESGCMCipher:
    return AESGCMCipher(StaticKeyProvider({i: KEYS[i] for i in ids}, current))


STEPS = 30  # 62 messages and 30 ledger entries: several pages of 8 each


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    """Pages of 8 items, 4 kept inline: a short run already spans several pages of each kind."""
    monkeypatch.setattr(page_writer, "PAGE", 8)
    monkeypatch.setattr(page_writer, "KEEP", 4)


EVERY_TWO = SnapshotPolicy(every_records=2, tail_ratio=0.0)


async def folded(store: Store, stream: StreamId, codec: RecordCodec | None = None, upto: int | None = None) -> dict:
    """The state as the fold of the journal alone (no snapshot), as a wire dict."""
    codec = codec or RecordCodec()
    state = AgentState()
    async for record in JournalReader(store, codec, stream).records(upto=upto):
        apply(state, record)
    return state.to_wire()


async def latest_wire(store: Store, stream: StreamId, codec: RecordCodec | None = None) -> tuple[int, dict]:
    snapshot = await store.get_snapshot(stream)
    assert snapshot is not None
    seq, wire, _ = (codec or RecordCodec()).decode_snapshot(snapshot, stream)
    return seq, wire


def page_digests(wire: dict) -> list[str]:
    return [ref["digest"] for _, key in page_writer.SECTIONS for ref in wire.get(key, [])]


async def run_long(url: str, **kw: Any) -> AgentState:
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=EVERY_TWO, **kw) as rt:
        state = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        return state


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_a_long_run_is_paged_and_restores_to_the_fold_of_its_journal(tmp_path, encrypted):
    url = f"sqlite:///{tmp_path}/a.db"
    kw: dict[str, Any] = {"encryption": cipher("k1")} if encrypted else {}
    codec = RecordCodec(cipher=cipher("k1")) if encrypted else RecordCodec()
    live = await run_long(url, **kw)
    async with open_store(url) as store:
        stream = StreamId("default", "a1")
        seq, wire = await latest_wire(store, stream, codec)
        assert wire.get("pages") and wire.get("ledger_pages")  # main: the whole conversation inline
        assert len(wire["messages"]) < len(live.messages) and len(wire["ledger"]) < len(live.ledger)
        journal = await folded(store, stream, codec)
    assert journal["messages"] == live.messages and len(live.messages) > 40
    async with Runtime(url, **kw) as rt:
        restored = await rt.status("a1")  # a new runtime: from the paged snapshot
    assert restored.to_wire() == journal
    assert list(restored.ledger) == list(journal["ledger"])  # the ledger's order too


async def test_pages_are_written_once_and_shared_by_later_snapshots(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    with sqlite3.connect(tmp_path / "a.db") as db:
        stored = db.execute("SELECT count(*) FROM blobs").fetchone()[0]
    async with open_store(url) as store:
        _, wire = await latest_wire(store, StreamId("default", "a1"))
    # Each snapshot (one every two records) wrote only its new pages: no more blobs than
    # the latest snapshot names, plus the pages a turn's reordering made stale.
    assert len(page_digests(wire)) <= stored <= 2 * len(page_digests(wire))


@pytest.mark.parametrize("damage", ["missing", "damaged", "another page"])
async def test_a_lost_or_damaged_page_falls_back_to_the_journal(tmp_path, damage):
    url = f"sqlite:///{tmp_path}/a.db"
    live = await run_long(url)
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        _, wire = await latest_wire(store, stream)
    first, second = wire["pages"][0]["digest"], wire["pages"][1]["digest"]
    with sqlite3.connect(tmp_path / "a.db") as db:
        if damage == "missing":
            db.execute("DELETE FROM blobs WHERE digest = ?", (first,))
        elif damage == "damaged":
            db.execute("UPDATE blobs SET data = substr(data, 1, length(data) - 1) || x'00' WHERE digest = ?", (first,))
        else:  # a valid page frame, but not the one the reference names
            other = db.execute("SELECT data FROM blobs WHERE digest = ?", (second,)).fetchone()[0]
            db.execute("UPDATE blobs SET data = ? WHERE digest = ?", (other, first))
    async with Runtime(url) as rt:
        restored = await rt.status("a1")
    assert restored.to_wire() == live.to_wire()  # the journal is whole: replayed instead


async def test_a_lost_page_behind_compaction_is_a_typed_error_and_nothing_is_deleted(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0, compact=True)
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=policy) as rt:
        await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        _, wire = await latest_wire(store, stream)
        records = [r.data async for r in store.read(stream)]
        assert records and (await store.read(stream).__anext__()).seq > 1  # compacted: no seq 1
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute("DELETE FROM blobs WHERE digest = ?", (wire["pages"][0]["digest"],))
    async with Runtime(url) as rt:
        with pytest.raises(CorruptRecordError):
            await rt.status("a1")
    async with open_store(url) as store:
        assert [r.data async for r in store.read(stream)] == records


@pytest.mark.parametrize("bug", ["no base named", "not CBOR"])
async def test_compaction_keeps_the_records_behind_a_snapshot_whose_page_does_not_open(tmp_path, monkeypatch, bug):
    """A writer's bug makes pages whose bytes match their digest but that do not open: a
    chained page whose reference names no base, or a page whose payload is not CBOR."""
    encode = page_writer._encode

    def buggy_encode(codec, seq, items, stream, base):
        payload, data = encode(codec, seq, items, stream, base)
        if bug == "no base named":
            base.clear()  # the frame continues its base, the reference will name none
        else:
            data = codec.page_frame(seq, b"\xff", stream)
        return payload, data

    monkeypatch.setattr(page_writer, "_encode", buggy_encode)
    url = f"sqlite:///{tmp_path}/a.db"
    policy = SnapshotPolicy(every_records=30, tail_ratio=0.0, compact=True)  # every snapshot names pages
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=policy) as rt:
        live = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        _, wire = await latest_wire(store, stream)
        assert wire.get("pages"), "the snapshots name pages"
        seqs = [r.seq async for r in store.read(stream)]
        assert seqs == list(range(1, live.last_seq + 1)), "compacted behind a snapshot that cannot be restored"
        assert await folded(store, stream) == live.to_wire()  # the journal alone still restores the agent


CRASHING_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import anyio
    sys.path[:0] = sys.argv[3].split(os.pathsep)
    from support_agents import list_agent
    from durably import Runtime, SnapshotPolicy
    from durably._journal import page_reader, page_writer
    from durably.adapters.sqlite._store import SQLiteStore

    page_writer.PAGE, page_writer.KEEP = 8, 4
    put_blob, wrote = SQLiteStore.put_blob, []

    async def put_blob_then_die(self, stream, data):
        digest = await put_blob(self, stream, data)
        wrote.append(digest)
        if len(wrote) == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)  # the page is stored, its snapshot never will be
        return digest

    SQLiteStore.put_blob = put_blob_then_die

    async def main():
        policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
        async with Runtime(sys.argv[1], agents=[list_agent(30, [])], snapshot_policy=policy) as rt:
            await rt.run("list-agent", "a1", "count")

    anyio.run(main)
    """
)


async def test_a_crash_between_a_page_and_its_snapshot_loses_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    support = [str(Path(__file__).parents[1] / "support")]
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_CHILD, url, "5", os.pathsep.join(support)], capture_output=True, timeout=120
    )
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        journal = await folded(store, stream)
        snapshot = await store.get_snapshot(stream)
        named = set(page_digests(RecordCodec().decode_snapshot(snapshot, stream)[1])) if snapshot else set()
    with sqlite3.connect(tmp_path / "a.db") as db:
        stored = {digest for (digest,) in db.execute("SELECT digest FROM blobs")}
    assert stored - named  # the page the crash cut off from its snapshot is there
    effects: list = []
    async with Runtime(url, agents=[list_agent(STEPS, effects)], snapshot_policy=EVERY_TWO) as rt:
        assert (await rt.status("a1")).to_wire() == journal
        handle = await rt.resume("a1")
        assert handle is not None
        finished = await handle.wait()
        await rt._activations.services.snapshots.flush()
    assert finished.status == "finished"
    done = {e["call_id"] for e in finished.ledger.values() if e["done"]}
    assert len(done) == STEPS and not {n for _, n in effects} & {
        int(e["call_id"][1:]) for e in journal["ledger"].values() if e["done"]
    }  # no call that was done before the crash ran again
    async with Runtime(url) as rt:
        assert (await rt.status("a1")).to_wire() == finished.to_wire()


@pytest.mark.parametrize("scheme", ["sqlite", "memory"])
async def test_a_purge_deletes_the_pages(tmp_path, scheme):
    url = f"sqlite:///{tmp_path}/a.db" if scheme == "sqlite" else "memory://"
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=EVERY_TWO) as rt:
        await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        stream = rt.stream("a1")
        store = rt.store
        assert supports_blobs(store)
        _, wire = await latest_wire(store, stream)
        digests = page_digests(wire)
        assert digests
        await rt.purge("a1")
        for digest in digests:
            with pytest.raises(BlobNotFoundError):
                await store.get_blob(stream, digest)
        # The same id anew: its snapshots page again (nothing remembered of the purged run's pages).
        again = await rt.run("list-agent", "a1", "count again")
        await rt._activations.services.snapshots.flush()
        _, wire = await latest_wire(store, stream)
        assert wire.get("pages")
        restored_wire = await page_reader.page_in(store, RecordCodec(), stream, wire["last_seq"], wire)
        assert restored_wire["messages"] == again.messages


async def test_reencrypt_writes_the_pages_under_the_current_key(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    live = await run_long(url, encryption=cipher("k1"))
    async with Runtime(url, encryption=cipher("k1", "k2", current="k2")) as rt:
        await rt.reencrypt()
    stream = StreamId("default", "a1")
    only_k2 = RecordCodec(cipher=cipher("k2"))
    async with open_store(url) as store:
        seq, wire = await latest_wire(store, stream, only_k2)
        assert page_reader.paged(wire)
        whole = await page_reader.page_in(store, only_k2, stream, seq, wire)  # main: a page under k1 fails here
    restored = AgentState.from_wire(whole)
    assert restored.messages == live.messages and restored.ledger == live.ledger


async def test_a_fork_and_time_travel_read_through_pages(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0, keep=3)
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=policy) as rt:
        live = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        newest = await store.get_snapshot(stream)
        older = await store.get_snapshot(stream, newest.seq - 1)
        assert page_reader.paged(RecordCodec().decode_snapshot(older, stream)[1])
        at = await folded(store, stream, upto=older.seq + 1)
    async with Runtime(url) as rt:
        past = await rt.state_at("a1", older.seq + 1)  # from the older paged snapshot and one record
        assert past.to_wire() == at
        fork = await rt.fork("a1", live.last_seq, "a2")
        assert fork.messages == live.messages and fork.ledger == live.ledger


def test_a_state_is_never_built_from_a_paged_snapshot_without_its_pages():
    wire = AgentState(messages=[{"role": "user", "content": "newest"}]).to_wire()
    with pytest.raises(ValueError, match="pages"):
        AgentState.from_wire({**wire, "pages": [{"digest": "0" * 64, "s": 1, "count": 1}]})
    with pytest.raises(ValueError, match="pages"):
        AgentState.from_wire({**wire, "ledger_pages": []})


async def test_verify_reports_a_snapshot_whose_page_is_missing(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    await run_long(url)
    stream = StreamId("default", "a1")
    async with open_store(url) as store:
        _, wire = await latest_wire(store, stream)
        assert not (await verify_stream(store, RecordCodec(), stream)).problems
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute("DELETE FROM blobs WHERE digest = ?", (wire["ledger_pages"][-1]["digest"],))
    async with open_store(url) as store:
        report = await verify_stream(store, RecordCodec(), stream)
    assert report.snapshots == 0 and any("missing" in str(p) for p in report.problems), report.problems
