"""A purge by another runtime while this runtime's snapshot of the agent is still being
written (the snapshot writer works in the background). The snapshot itself is fenced off
by the store, but its conversation pages are blobs, written first and without a fence:
they must not outlive the purge (the purged agent listed again, its conversation still
stored). Two ways to get there: the agent finished and its activation gave its lease back
while the write was in flight; or the writer paused between two page writes past its
lease, which another runtime took to purge. The same holds for the writer's deletes
(pruning older snapshots, compaction), unfenced too: paused past its lease before them,
it must delete nothing of the next run of a purged id. Tried on one SQLite file and on one
PostgreSQL schema on a local server, the races driven by hooks in the store (a subclass of
the real adapter), never by sleeps."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, AgentLeasedError, Runtime, SnapshotPolicy, tool
from durably._journal import page_writer
from durably._journal.claim import LeaseClaim
from durably.storage import StreamId, open_store

A = StreamId("default", "a1")


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 8 items, 4 kept inline: a short run already spans several pages."""
    monkeypatch.setattr(page_writer, "PAGE", 8)
    monkeypatch.setattr(page_writer, "KEEP", 4)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").url())
    return f"sqlite:///{tmp_path}/a.db"


def step_agent(steps: int) -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int) -> int:
        return n * 10

    return AgentDefinition(name="counter", model=StepModel(steps), tools=[effect])


async def first_of(*events: anyio.Event) -> None:
    """Return once any of ``events`` is set."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


async def left_of(runtime: Runtime) -> list[StreamId]:
    """What the store still holds of ``A``: it is listed, it has records or a snapshot."""
    assert await runtime.store.last_seq(A) == 0
    assert await runtime.store.get_snapshot(A) is None
    return [s async for s in runtime.store.list_streams("default")]


async def test_a_purge_elsewhere_leaves_no_page_of_a_snapshot_still_being_written(url: str) -> None:
    gate, paging = anyio.Event(), anyio.Event()
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def put_blob(self, stream: StreamId, data: bytes) -> str:
            paging.set()
            await gate.wait()  # the snapshot writer is slow: the agent is done meanwhile
            digest: str = await super().put_blob(stream, data)
            return digest

    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    async with Hooked(url) as store, Runtime(store, agents=[step_agent(30)], snapshot_policy=policy) as here:
        releasing = anyio.Event()
        leases = here._activations.leases
        give_back = leases.before_release

        async def noted(claim: LeaseClaim) -> None:
            releasing.set()
            await give_back(claim)

        leases.before_release = noted
        handle = await here.start("counter", "a1", "count")
        actor = handle._actor
        with anyio.fail_after(30):
            await paging.wait()
            # The agent ends while its snapshot's pages are still being written: its lease is
            # given back (exited), or its release waits for that write.
            await first_of(actor.exited, releasing)
        assert actor.done.is_set()
        async with Runtime(url, agents=[step_agent(30)]) as elsewhere:
            try:
                await elsewhere.purge("a1")
                purged_early = True
            except AgentLeasedError:  # the lease is held until the write in flight has ended
                purged_early = False
            gate.set()
            with anyio.fail_after(30):
                state = await handle.wait()
                await here._activations.services.snapshots.flush()
            assert state.status == "finished"
            if not purged_early:
                await elsewhere.purge("a1")
            left = await left_of(elsewhere)
    assert left == [], "pages of the purged agent's conversation were written after its purge"
    assert not purged_early, "the agent's lease was given back while its snapshot was still being written"


async def test_a_writer_paused_between_pages_past_its_lease_writes_no_page_after_a_purge_elsewhere(url: str) -> None:
    """The writer pauses (as if SIGSTOPped, the store slow) right after a snapshot's first
    page, its lease renewals stalled too, past the lease's ttl; another runtime takes the
    lapsed lease and purges the agent. When the writer goes on, its next page must not be written."""
    paused, resume = anyio.Event(), anyio.Event()
    blobs: list[str] = []
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def put_blob(self, stream: StreamId, data: bytes) -> str:
            digest: str = await super().put_blob(stream, data)
            blobs.append(digest)
            if len(blobs) == 1:
                paused.set()
                await resume.wait()
            return digest

        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            if paused.is_set():
                await resume.wait()  # the whole process is paused: no renewal either
            return await super().acquire_lease(stream, owner, ttl)

        async def renew_leases(self, owner: str, ttl: float, leases: Any) -> Any:
            if paused.is_set():
                await resume.wait()  # nor a round's renewal of every lease in one call
            return await super().renew_leases(owner, ttl, leases)

    # The first snapshot comes late: it has several pages to write.
    policy = SnapshotPolicy(every_records=40, tail_ratio=0.0)
    ttl = 2.0  # renewals every ttl / 3: a loaded machine does not lapse it before the pause
    async with (
        Hooked(url) as store,
        Runtime(store, agents=[step_agent(30)], snapshot_policy=policy, lease_ttl=ttl) as here,
    ):
        handle = await here.start("counter", "a1", "count")
        with anyio.fail_after(30):
            await paused.wait()
        async with Runtime(url, agents=[step_agent(30)], lease_ttl=ttl) as elsewhere:
            with anyio.fail_after(30):
                while True:  # refused until the paused writer's lease has lapsed in the store
                    try:
                        await elsewhere.purge("a1")
                        break
                    except AgentLeasedError:
                        await anyio.sleep(ttl / 10)
            resume.set()
            with anyio.fail_after(30):
                try:
                    await handle.wait()  # done before its lease lapsed, its release waiting for the writer
                except AgentLeasedError:
                    pass  # or stopped once its lease lapsed (the agent's steps do not wait for the writer)
                await here._activations.services.snapshots.flush()
            left = await left_of(elsewhere)
    assert len(blobs) == 1, "the paused writer wrote pages after its lease lapsed"
    assert left == [], "pages of the purged agent's conversation were written after its purge"


async def test_a_writer_paused_before_its_prune_past_its_lease_deletes_nothing_of_the_next_run(url: str) -> None:
    """The writer pauses right after storing a snapshot, before pruning and compacting behind
    it (deletes carry no fencing token either), past its lease; another runtime purges the
    agent and runs the id anew. When the writer goes on, the new run's records and snapshots stay."""
    paused, resume = anyio.Event(), anyio.Event()
    stored: list[int] = []
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
            await super().put_snapshot(stream, seq, data, fence=fence)
            stored.append(seq)
            if len(stored) == 2:  # two kept: this write prunes and compacts behind the first
                paused.set()
                await resume.wait()

        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            if paused.is_set():
                await resume.wait()  # the whole process is paused: no renewal either
            return await super().acquire_lease(stream, owner, ttl)

        async def renew_leases(self, owner: str, ttl: float, leases: Any) -> Any:
            if paused.is_set():
                await resume.wait()  # nor a round's renewal of every lease in one call
            return await super().renew_leases(owner, ttl, leases)

    policy = SnapshotPolicy(every_records=4, tail_ratio=0.0, compact=True)
    ttl = 2.0  # renewals every ttl / 3: a loaded machine does not lapse it before the pause
    async with (
        Hooked(url) as store,
        Runtime(store, agents=[step_agent(30)], snapshot_policy=policy, lease_ttl=ttl) as here,
    ):
        handle = await here.start("counter", "a1", "count")
        with anyio.fail_after(30):
            await paused.wait()
        # The next run keeps its whole journal (no compaction), with snapshots past the stale ones.
        kept = SnapshotPolicy(every_records=4, tail_ratio=0.0)
        async with Runtime(url, agents=[step_agent(30)], snapshot_policy=kept, lease_ttl=ttl) as elsewhere:
            with anyio.fail_after(30):
                while True:  # refused until the paused writer's lease has lapsed in the store
                    try:
                        await elsewhere.purge("a1")
                        break
                    except AgentLeasedError:
                        await anyio.sleep(ttl / 10)
                state = await elsewhere.run("counter", "a1", "count again")
                await elsewhere._activations.services.snapshots.flush()
            assert state.status == "finished"
            resume.set()
            with anyio.fail_after(30):
                try:
                    await handle.wait()
                except AgentLeasedError:
                    pass  # stopped once its lease lapsed, or done before: either way its writer went on
                await here._activations.services.snapshots.flush()
            seqs = [record.seq async for record in elsewhere.store.read(A, 0)]
            assert seqs == list(range(1, state.last_seq + 1)), "the stale writer compacted the next run's journal"
            again = await elsewhere.status("a1")
    assert again.run_id == state.run_id
    assert again.to_wire() == state.to_wire()
