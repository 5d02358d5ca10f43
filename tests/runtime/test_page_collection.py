"""Pages no snapshot names any more are deleted, and never a page a snapshot still names.

On SQLite, real PostgreSQL and S3 (moto server): new snapshots retire their
predecessors' pages (deleted one snapshot later, so a restore of the previous
snapshot still finds them), ``reencrypt`` deletes the pages sealed under the retired
key once their re-sealed copies and the snapshot naming them are durable (a store
that fails at that very point loses nothing), and a purge deletes them all.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import pytest
from support_agents import StepModel, list_agent

from durably import AgentDefinition, Budget, ModelResponse, Runtime, SnapshotPolicy
from durably._journal import page_reader, page_writer
from durably._journal.page_collection import PageCollector, named, named_by_stored
from durably._journal.records import RecordCodec
from durably._loop.state import AgentState
from durably.errors import BlobNotFoundError, CorruptRecordError, StoreUnavailableError
from durably.storage import StreamId, open_store
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._spi import CAP_BLOB_DELETE, Store, supports_blob_delete, supports_blobs

KEYS = {"k1": generate_key(), "k2": generate_key()}
STEPS = 30
STREAM = StreamId("default", "a1")


def cipher(*ids: str, current: str | None = None) -> AESGCMCipher:
    return AESGCMCipher(StaticKeyProvider({i: KEYS[i] for i in ids}, current))


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    """Pages of 8 items, 4 kept inline: a short run already spans several pages of each kind."""
    monkeypatch.setattr(page_writer, "PAGE", 8)
    monkeypatch.setattr(page_writer, "KEEP", 4)


@pytest.fixture(params=["sqlite", "postgres", "s3"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/agents.db"
    if request.param == "postgres":
        return request.getfixturevalue("pg_server").url()
    return request.getfixturevalue("s3_server").url(f"pages-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def written(monkeypatch, url) -> list[str]:
    """Every digest ``put_blob`` stored on this store's class during the test (the real call runs)."""
    cls = type(open_store(url))
    digests: list[str] = []
    put = cls.put_blob

    async def spy(self: Any, stream: StreamId, data: bytes) -> str:
        digest = await put(self, stream, data)
        digests.append(digest)
        return digest

    monkeypatch.setattr(cls, "put_blob", spy)
    return digests


async def stored(store: Any, stream: StreamId, digests: Collection[str]) -> set[str]:
    """Which of ``digests`` the store still holds for ``stream``."""
    found = set()
    for digest in set(digests):
        try:
            await store.get_blob(stream, digest)
            found.add(digest)
        except BlobNotFoundError:
            pass
    return found


async def latest(store: Store, codec: RecordCodec) -> tuple[int, dict]:
    snapshot = await store.get_snapshot(STREAM)
    assert snapshot is not None
    seq, wire, _ = codec.decode_snapshot(snapshot, STREAM)
    return seq, wire


class WaitsForSnapshots(StepModel):
    """``list_agent``'s model, answering each step only once the snapshots submitted so far are written.

    The snapshot writer keeps just the newest snapshot waiting per stream, so how many a
    run writes depends on how fast the store is next to the agent (under load, a few).
    Waiting here writes one per step, whatever the load. ``written``: the runtime's
    ``SnapshotWriter.flush`` (None: answer at once).
    """

    def __init__(self, steps: int) -> None:
        super().__init__(steps)
        self.written: Callable[[], Awaitable[None]] | None = None

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        if self.written is not None:
            await self.written()
        return await super().respond(messages, tools)


def agent(every_snapshot: bool) -> tuple[AgentDefinition, WaitsForSnapshots | None]:
    """``list_agent``, and with ``every_snapshot`` its model that waits for each snapshot (to hand its runtime)."""
    if not every_snapshot:
        return list_agent(STEPS, []), None
    model = WaitsForSnapshots(STEPS)
    return dataclasses.replace(list_agent(STEPS, []), model=model), model


async def run_long(url: str, policy: SnapshotPolicy, *, every_snapshot: bool = False, **kw: Any) -> AgentState:
    """The run in two runtimes: the second restores the first's pages (and names them while they are unchanged).

    ``every_snapshot``: each step waits for the snapshot of the step before to be written
    (none is skipped for a newer one), so the snapshots written do not depend on the load."""
    definition, model = agent(every_snapshot)
    async with Runtime(url, agents=[definition], snapshot_policy=policy, **kw) as rt:
        if model is not None:
            model.written = rt._activations.services.snapshots.flush
        assert (await rt.run("list-agent", "a1", "count", budget=Budget(steps=STEPS // 2))).status != "finished"
        await rt._activations.services.snapshots.flush()
    definition, model = agent(every_snapshot)
    async with Runtime(url, agents=[definition], snapshot_policy=policy, **kw) as rt:
        if model is not None:
            model.written = rt._activations.services.snapshots.flush
        await rt.extend_budget("a1", steps=STEPS)
        state = await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        assert state.status == "finished"
        return state


@pytest.mark.parametrize("compact", [False, True], ids=["snapshots", "compaction"])
async def test_new_snapshots_delete_the_pages_no_kept_snapshot_names(url, written, compact, monkeypatch):
    # Encrypted: a page written anew gets a new digest. The pager remembering no stream, every
    # snapshot writes its pages anew (as when it forgets the least recently paged of many
    # streams), so each retires its predecessor's: many pages to delete, and some to keep.
    monkeypatch.setattr(page_writer, "REMEMBERED", 0)
    retired: dict[int, set[str]] = {}  # per writer (one per runtime): what its last prune retired
    pruned = PageCollector.pruned

    async def spy(self: PageCollector, stream: StreamId, oldest_kept: int, dropped: set[str]) -> None:
        retired[id(self)] = set(dropped)
        await pruned(self, stream, oldest_kept, dropped)

    monkeypatch.setattr(PageCollector, "pruned", spy)
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0, compact=compact)
    # A writer deletes a page at the prune after the one that dropped the last snapshot naming
    # it: two snapshots more in the same runtime. One that writes only a few paged snapshots
    # (skipping the others for newer ones, as under load) deletes none: each step waits for them.
    live = await run_long(url, policy, every_snapshot=True, encryption=cipher("k1"))
    codec = RecordCodec(cipher=cipher("k1"))
    async with open_store(url) as store:
        seq, wire = await latest(store, codec)
        names = named(wire)
        held = await stored(store, STREAM, written)
        assert names <= held, "every page the latest snapshot names is there"
        garbage = held - await named_by_stored(store, codec, STREAM, None)  # by no kept snapshot
        # Left: at most the pages retired by each writer's last prune (deleted at its next one,
        # which the first runtime, closed, never makes).
        assert garbage <= set().union(*retired.values()), "a page retired before a last prune is still there"
        assert set(written) - names - garbage, "no page was deleted"
        whole = await page_reader.page_in(store, codec, STREAM, seq, wire)
    assert whole["messages"] == live.messages
    async with Runtime(url, encryption=cipher("k1")) as rt:
        assert (await rt.status("a1")).to_wire() == live.to_wire()


async def test_a_restore_of_the_previous_snapshot_finds_its_pages(url, written):
    """The snapshot writer deletes a dropped snapshot's pages one snapshot late."""
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    codec = RecordCodec(cipher=cipher("k1"))
    seen: list[tuple[int, dict]] = []
    failed: list[CorruptRecordError] = []
    kw: dict[str, Any] = {"agents": [list_agent(STEPS, [])], "snapshot_policy": policy, "encryption": cipher("k1")}
    async with Runtime(url, **kw) as rt:
        await rt.run("list-agent", "a1", "count", budget=Budget(steps=STEPS // 2))
        await rt._activations.services.snapshots.flush()
    # A new runtime pages anew: the previous snapshot's pages are retired by its first prune.
    async with Runtime(url, **kw) as rt:
        store = rt.store
        writer = rt._activations.services.snapshots
        prune = writer._prune

        async def watch(codec_: RecordCodec, stream: StreamId, seq: int, data: bytes, check: Any) -> None:
            # What a reader that read the previous snapshot just before this prune holds.
            before = await store.get_snapshot(stream, seq - 1)
            await prune(codec_, stream, seq, data, check)
            if before is not None:
                at, wire = codec.decode_snapshot(before, stream)[:2]
                try:
                    await page_reader.page_in(store, codec, stream, at, wire)
                except CorruptRecordError as exc:  # a page deleted with its snapshot
                    failed.append(exc)
                seen.append((at, wire))

        writer._prune = watch
        await rt.extend_budget("a1", steps=STEPS)
        await rt.run("list-agent", "a1", "count")
        await writer.flush()
    assert seen and all(page_reader.paged(wire) for _, wire in seen)
    assert failed == []


class FailingDeletes:
    """Makes ``delete_blobs`` of the store's class fail, as an outage at that very point would."""

    def __init__(self, monkeypatch, url: str) -> None:
        self.cls = type(open_store(url))
        self.monkeypatch = monkeypatch

    def __enter__(self) -> None:
        async def down(self: Any, stream: StreamId, digests: Collection[str]) -> None:
            raise StoreUnavailableError("the store went away before the old pages were deleted")

        self.monkeypatch.setattr(self.cls, "delete_blobs", down)

    def __exit__(self, *exc: object) -> None:
        self.monkeypatch.undo()


async def test_a_store_failing_before_the_old_pages_are_deleted_loses_nothing(url, written, monkeypatch):
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    live = await run_long(url, policy, encryption=cipher("k1"))
    old_codec = RecordCodec(cipher=cipher("k1"))
    async with open_store(url) as store:
        _, wire = await latest(store, old_codec)
        under_k1 = await stored(store, STREAM, written)
        assert named(wire) <= under_k1
    # The store fails right after the re-sealed pages and their snapshot are durable.
    with FailingDeletes(monkeypatch, url):
        async with Runtime(url, encryption=cipher("k1", "k2", current="k2")) as rt:
            with pytest.raises(StoreUnavailableError):
                await rt.reencrypt()
    only_k2 = RecordCodec(cipher=cipher("k2"))
    async with open_store(url) as store:
        seq, wire = await latest(store, only_k2)  # the new snapshot is there, under k2
        whole = await page_reader.page_in(store, only_k2, STREAM, seq, wire)  # and every page it names
        assert whole["messages"] == live.messages
    async with Runtime(url, encryption=cipher("k1", "k2", current="k2")) as rt:
        restored = await rt.status("a1")  # a restore through the new snapshot's pages
    assert restored.messages == live.messages and restored.ledger == live.ledger


async def test_reencrypt_deletes_the_retired_pages_in_one_go(url, written):
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    live = await run_long(url, policy, encryption=cipher("k1"))
    async with open_store(url) as store:
        under_k1 = await stored(store, STREAM, written)
    assert under_k1
    async with Runtime(url, encryption=cipher("k1", "k2", current="k2")) as rt:
        await rt.reencrypt()
    only_k2 = RecordCodec(cipher=cipher("k2"))
    async with open_store(url) as store:
        assert await stored(store, STREAM, under_k1) == set(), "main: the pages under k1 stay"
        seq, wire = await latest(store, only_k2)
        assert named(wire) and named(wire) <= await stored(store, STREAM, written)
        whole = await page_reader.page_in(store, only_k2, STREAM, seq, wire)
    assert AgentState.from_wire(whole).messages == live.messages


async def test_a_purge_deletes_every_page(url, written):
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    async with Runtime(url, agents=[list_agent(STEPS, [])], snapshot_policy=policy) as rt:
        await rt.run("list-agent", "a1", "count")
        await rt._activations.services.snapshots.flush()
        assert await stored(rt.store, STREAM, written)
        await rt.purge("a1")
        assert await stored(rt.store, STREAM, written) == set()


async def test_a_store_with_blobs_but_no_blob_delete_still_pages_and_reencrypts(url, written, caplog):
    """A third-party store that declares blobs only: pages are written and read, never deleted."""
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    agents = [list_agent(STEPS, [])]
    async with open_store(url) as store:
        store.capabilities = store.capabilities - {CAP_BLOB_DELETE}  # type: ignore[misc]
        assert supports_blobs(store) and not supports_blob_delete(store)
        async with Runtime(store, agents=agents, snapshot_policy=policy, encryption=cipher("k1")) as rt:
            await rt.run("list-agent", "a1", "count", budget=Budget(steps=STEPS // 2))
            await rt._activations.services.snapshots.flush()
        async with Runtime(store, agents=agents, snapshot_policy=policy, encryption=cipher("k1")) as rt:
            await rt.extend_budget("a1", steps=STEPS)
            live = await rt.run("list-agent", "a1", "count")
            await rt._activations.services.snapshots.flush()
        before = await stored(store, STREAM, written)
        async with Runtime(store, encryption=cipher("k1", "k2", current="k2")) as rt:
            await rt.reencrypt()
            restored = await rt.status("a1")
        assert restored.messages == live.messages and restored.ledger == live.ledger
        assert await stored(store, STREAM, before) == before, "nothing deleted"
    assert "cannot delete blobs" in caplog.text
