"""Worker heartbeats on SQLite, PostgreSQL and S3: bounded streams, silent holders taken over, submit.

A lease holder on another host used to be REMOTE: nothing but its lease's
expiry freed its agents. A holder with a heartbeat stream is judged by it: a
beat older than ``heartbeat_timeout`` (or ``stopped``) means dead, and its
agents are taken at once; a fresh beat, or no heartbeat at all, leaves the
lease alone. The holder here is a real lease in the store whose owner names
another host, and real beats written through the store: the same bytes a
worker on that host would write.
"""

from __future__ import annotations

import time
import uuid

import anyio
import pytest
from serve_worker import slow_file_agent

from durably import AgentExistsError, AgentLeasedError, Runtime, Where
from durably._fleet.owner import OwnerIdentity
from durably._fleet.workers import (
    COMPACT_EVERY,
    FORGET_AFTER,
    STOPPED,
    WORKERS_NAMESPACE,
    Heartbeats,
    WorkerBeat,
    list_workers,
    read_beat,
)
from durably.storage import StreamId, open_store


@pytest.fixture(params=["sqlite", "postgres", "s3"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/agents.db"
    if request.param == "postgres":
        return request.getfixturevalue("pg_server").url()
    return request.getfixturevalue("s3_server").url(f"hb-{uuid.uuid4().hex[:10]}")


def remote_identity(worker_id: str = "far-worker") -> OwnerIdentity:
    """A runtime identity on another host (a container with its own hostname)."""
    return OwnerIdentity(worker_id, uuid.uuid4().hex[:12], "far-away-host", 4242, "777", "feedbeef0000", "4026531836")


def beat_of(identity: OwnerIdentity, *, at: float, state: str = "serving", agents: tuple[str, ...] = ()) -> WorkerBeat:
    return WorkerBeat(
        owner=str(identity),
        worker_id=identity.worker_id,
        host=identity.host,
        pid=identity.pid,
        namespace="default",
        definitions=("slow-file",),
        started_at=at - 100,
        beat_at=at,
        agents=len(agents),
        agent_ids=agents,
        state=state,
    )


async def held_remotely(url: str, tmp_path, beat_age: float | None, state: str = "serving") -> OwnerIdentity:
    """Agent ``a-1`` journaled, its lease (TTL 60 s) held by a runtime on another host whose
    last beat is ``beat_age`` seconds old (None: it never heartbeat)."""
    definition = slow_file_agent(2, tmp_path / "effects.jsonl", 0.0)
    async with Runtime(url, agents=[definition]) as rt:
        await rt.submit(definition, "a-1", "count")
    identity = remote_identity()
    async with open_store(url) as store:
        assert await store.acquire_lease(StreamId("default", "a-1"), str(identity), 60.0) is not None
        if beat_age is not None:
            await Heartbeats(store, identity).write(beat_of(identity, at=time.time() - beat_age, state=state))
    return identity


async def test_a_holder_whose_heartbeat_stopped_is_taken_over_at_once(url, tmp_path):
    await held_remotely(url, tmp_path, beat_age=10.0)
    definition = slow_file_agent(2, tmp_path / "effects.jsonl", 0.0)
    async with Runtime(url, agents=[definition], heartbeat_timeout=2.0) as rt:
        holder = await rt.lease_holder("a-1")
        assert holder is not None and holder.liveness == "dead"  # the lease has 60 s left
        handle = await rt.resume("a-1")
        assert handle is not None
        state = await handle.wait()
    assert state.status == "finished"


@pytest.mark.parametrize("state", [STOPPED])
async def test_a_holder_that_said_stopped_is_taken_over_at_once(url, tmp_path, state):
    await held_remotely(url, tmp_path, beat_age=0.0, state=state)
    async with Runtime(url, agents=[slow_file_agent(2, tmp_path / "effects.jsonl", 0.0)]) as rt:
        assert await rt.resume("a-1") is not None


@pytest.mark.parametrize("beat_age", [0.0, None], ids=["fresh-beat", "never-beat"])
async def test_a_beating_or_unknown_holder_keeps_its_lease(url, tmp_path, beat_age):
    identity = await held_remotely(url, tmp_path, beat_age=beat_age)
    async with Runtime(url, agents=[slow_file_agent(2, tmp_path / "effects.jsonl", 0.0)], heartbeat_timeout=2.0) as rt:
        with pytest.raises(AgentLeasedError) as refused:
            await rt.resume("a-1")
        assert refused.value.owner == str(identity)
        assert (await rt.lease_holder("a-1")).liveness == "remote"


async def test_a_heartbeat_stream_stays_bounded_and_reads_its_last_beat(url):
    identity = remote_identity()
    async with open_store(url) as store:
        heartbeats = Heartbeats(store, identity)
        for n in range(3 * COMPACT_EVERY + 3):
            assert await heartbeats.write(beat_of(identity, at=1_000_000.0 + n, agents=(f"a-{n}",)))
        stream = StreamId(WORKERS_NAMESPACE, identity.nonce)
        kept = [r async for r in store.read(stream)]
        assert len(kept) <= COMPACT_EVERY  # compacted: not one record per beat forever
        assert (await read_beat(store, stream)).agent_ids == (f"a-{3 * COMPACT_EVERY + 2}",)
        # The beat right after a compaction lives only in the snapshot.
        for n in range(3 * COMPACT_EVERY + 3, 4 * COMPACT_EVERY):
            await heartbeats.write(beat_of(identity, at=1_000_000.0 + n, agents=(f"a-{n}",)))
        assert [r async for r in store.read(stream)] == []
        assert (await read_beat(store, stream)).agent_ids == (f"a-{4 * COMPACT_EVERY - 1}",)


async def test_forgotten_workers_are_swept(url):
    old, recent, me = remote_identity("old"), remote_identity("recent"), remote_identity("me")
    async with open_store(url) as store:
        now = time.time()
        await Heartbeats(store, recent).write(beat_of(recent, at=now - 30))
        old_beats = Heartbeats(store, old)  # its first beat sweeps too, but finds nothing to forget
        await old_beats.write(beat_of(old, at=now - FORGET_AFTER - 5))
        assert [b.worker_id for b in await list_workers(store)] == ["old", "recent"]
        assert await Heartbeats(store, me).sweep(now) == 1
        assert [b.worker_id for b in await list_workers(store)] == ["recent"]
        # Forgotten while it was silent, the worker beats again: its stream starts anew.
        assert await old_beats.write(beat_of(old, at=now))
        assert [b.worker_id for b in await list_workers(store)] == ["old", "recent"]


async def test_submit_journals_a_runnable_agent_without_running_it(url, tmp_path):
    definition = slow_file_agent(2, tmp_path / "effects.jsonl", 0.0)
    async with Runtime(url, agents=[definition]) as rt:
        result = await rt.submit(definition, "job-1", "count")
        assert result.status == "running"
        assert result.placement.where is Where.UNASSIGNED  # no worker serves it
        await anyio.sleep(0.3)
        assert (await rt.status("job-1")).last_seq == 1  # nothing ran here: only the started record
        assert await rt.lease_holder("job-1") is None
        with pytest.raises(AgentExistsError):
            await rt.submit(definition, "job-1", "count")
        assert [s.agent_id for s in await rt.agents(statuses=["running"])] == ["job-1"]


async def test_an_operator_rewrite_takes_a_silent_workers_lease_at_once(url, tmp_path):
    # A purge (as a reencrypt or a sweep) of an agent whose holder on another host stopped
    # heartbeating does not wait out its 60 s lease, as a worker's claim would not.
    await held_remotely(url, tmp_path, beat_age=10.0)
    async with Runtime(url, heartbeat_timeout=2.0) as rt:
        await rt.purge("a-1")
        assert await rt.store.last_seq(StreamId("default", "a-1")) == 0


async def test_an_operator_rewrite_leaves_a_beating_workers_agent_alone(url, tmp_path):
    await held_remotely(url, tmp_path, beat_age=0.0)
    async with Runtime(url, heartbeat_timeout=2.0) as rt:
        with pytest.raises(AgentLeasedError):
            await rt.purge("a-1")
