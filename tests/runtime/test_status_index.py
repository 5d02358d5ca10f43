"""The status index: kept right by every writer, read by scans, never hiding a runnable agent."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest
from support_agents import StepModel, list_agent

from durably import AgentDefinition, Runtime, tool
from durably._journal.restore import restore
from durably._journal.status_index import entry_of, rebuild
from durably._upkeep.retention import RetentionPolicy
from durably.adapters.filesystem import FileSystemStore
from durably.storage import AppendRequest, IndexEntry, StreamId

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "file"])
def store_url(request, tmp_path):
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if request.param == "file":
        return f"file://{tmp_path}/files"
    return f"sqlite:///{tmp_path}/agents.db"


async def index_agrees(rt: Runtime) -> dict[str, str]:
    """Every stream's entry says what its journal says; returns agent id -> status."""
    found = {}
    async for stream in rt.store.list_streams(rt.namespace):
        restored = await restore(rt.store, rt.codec, stream, rt.telemetry)
        entry = await rt.store.get_index(stream)
        assert entry is not None, f"{stream} has no entry"
        want = entry_of(restored.state, 0.0)
        assert (entry.status, entry.definition, entry.open_approvals) == (
            want.status,
            want.definition,
            want.open_approvals,
        ), f"{stream}: index {entry}, journal {want}"
        assert entry.seq <= restored.state.last_seq
        found[stream.agent_id] = entry.status
    return found


def counting_restores(rt: Runtime) -> list[str]:
    restored: list[str] = []
    original = rt._activations._restore

    async def counted(agent_id: str, claim=None):
        restored.append(agent_id)
        return await original(agent_id, claim)

    rt._activations._restore = counted
    return restored


async def test_the_entry_follows_the_status_through_approval_and_finish(store_url):
    definition = list_agent(1, [], requires_approval=True)
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")
        assert state.status == "waiting_approval"
        (approval,) = state.open_approvals()
        entry = await rt.store.get_index(rt.stream("a1"))
        assert entry.status == "waiting_approval" and entry.open_approvals == (approval["approval_id"],)
        assert entry.definition == "list-agent" and entry.updated_at > 0
        await rt.approve("a1", approval["approval_id"])
        with anyio.fail_after(10):
            while (await rt.status("a1")).status != "finished":
                await anyio.sleep(0.01)
        assert await index_agrees(rt) == {"a1": "finished"}


async def test_resume_all_restores_only_what_the_index_says_may_run(store_url):
    definition = list_agent(1, [])
    async with Runtime(store_url, agents=[definition]) as rt:
        for i in range(5):
            await rt.run(definition, f"done-{i}", "task")
        parked = list_agent(1, [], requires_approval=True, name="parked")
        await rt.run(parked, "waits", "task")
    async with Runtime(store_url, agents=[definition]) as rt:
        restored = counting_restores(rt)
        assert await rt.resume_all() == []
        assert restored == [], "finished and parked agents are not restored by a scan"
        assert [s.agent_id for s in await rt.agents(statuses=["waiting_approval"])] == ["waits"]
        assert sorted(s.agent_id for s in await rt.agents(statuses={"finished"})) == [f"done-{i}" for i in range(5)]
        assert sorted(restored) == sorted(["waits"] + [f"done-{i}" for i in range(5)]), "each listed agent read once"
        described = await rt.describe_all(statuses=["waiting_approval"])
        assert [d.agent_id for d in described] == ["waits"]


async def test_a_crashed_agent_stays_runnable_and_is_resumed(store_url):
    gate = anyio.Event()

    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int, *, ctx) -> int:
        if n == 2 and not gate.is_set():
            await gate.wait()  # the runtime is torn down here, mid-step, as by a crash
        return n

    definition = AgentDefinition(name="crashy", model=StepModel(3), tools=[effect])
    async with Runtime(store_url, agents=[definition]) as rt:
        await rt.start(definition, "crashy", "task")
        with anyio.fail_after(10):
            while (await rt.status("crashy")).last_seq < 6:
                await anyio.sleep(0.01)
    gate.set()
    async with Runtime(store_url, agents=[definition]) as rt:
        assert (await rt.store.get_index(rt.stream("crashy"))).status == "running"
        handles = await rt.resume_all()
        assert [h.agent_id for h in handles] == ["crashy"]
        assert (await handles[0].wait()).status == "finished"
        assert await index_agrees(rt) == {"crashy": "finished"}


async def test_a_missing_or_stale_entry_never_hides_a_runnable_agent(store_url):
    definition = list_agent(1, [], requires_approval=True)
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "lost", "task")
        await rt.run(definition, "stale", "task")
        stream = rt.stream("lost")
        # A writer that keeps no index decided the approval: the entry still says "waiting".
        (approval,) = state.open_approvals()
        await rt.store.put_index(stream, None, state.last_seq)  # and this one lost its entry altogether
    async with Runtime(store_url) as rt:  # no definition here: the command only appends
        await rt.approve("lost", approval["approval_id"])
        stale = await rt.status("stale")
        (other,) = stale.open_approvals()
        await rt.approve("stale", other["approval_id"])
        wrong = IndexEntry("finished", "list-agent", stale.last_seq + 1, 0.0)
        assert await rt.store.put_index(rt.stream("stale"), wrong, stale.last_seq + 1)
        runnable = sorted(s.agent_id for s in await rt.agents(statuses=["running"]))
        assert "lost" in runnable, "a stream without an entry is always looked at"
    async with Runtime(store_url, agents=[definition]) as rt:
        handles = await rt.resume_all()
        assert [h.agent_id for h in handles] == ["lost"], "the stale 'finished' entry hides 'stale' until a rebuild"
        await handles[0].wait()
        reports = [r async for r in rebuild(rt.store, rt.codec, rt.namespace, rt.telemetry)]
        assert {r.stream.agent_id: r.changed for r in reports} == {"lost": False, "stale": True}
        handles = await rt.resume_all()
        assert [h.agent_id for h in handles] == ["stale"]
        await handles[0].wait()
        assert await index_agrees(rt) == {"lost": "finished", "stale": "finished"}


async def test_a_stale_running_entry_is_repaired_by_the_restore_it_costs(store_url):
    definition = list_agent(1, [])
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")
        running = IndexEntry("running", "list-agent", state.last_seq, 0.0)
        assert await rt.store.put_index(rt.stream("a1"), running, state.last_seq)
        restored = counting_restores(rt)
        assert await rt.resume_all() == [] and restored == ["a1"]
        assert await rt.resume_all() == [] and restored == ["a1"], "once repaired it costs nothing"
        assert await index_agrees(rt) == {"a1": "finished"}


async def test_purge_retention_and_fork_keep_the_index_right(store_url):
    definition = list_agent(2, [])
    async with Runtime(store_url, agents=[definition]) as rt:
        await rt.run(definition, "gone", "task")
        await rt.run(definition, "swept", "task")
        await rt.run(definition, "source", "task")
        await rt.purge("gone")
        assert await rt.store.get_index(rt.stream("gone")) is None
        forked = await rt.fork("source", 4, "branch")
        assert forked.status == "running"
        assert (await rt.store.get_index(rt.stream("branch"))).status == "running"
        assert await index_agrees(rt) == {"branch": "running", "source": "finished", "swept": "finished"}
        swept = await rt.sweep(RetentionPolicy({"finished": 0}))
        assert {i.stream.agent_id for i in swept if i.outcome == "purged"} == {"source", "swept"}
        assert await index_agrees(rt) == {"branch": "running"}
        handles = await rt.resume_all()
        assert [h.agent_id for h in handles] == ["branch"]
        assert (await handles[0].wait()).status == "finished"


async def test_a_live_agent_answers_status_from_its_actor(store_url):
    gate = anyio.Event()

    @tool(name="effect")
    async def effect(n: int, *, ctx) -> int:
        await gate.wait()
        return n

    definition = AgentDefinition(name="gated", model=StepModel(1), tools=[effect])
    async with Runtime(store_url, agents=[definition]) as rt:
        handle = await rt.start(definition, "live", "task")
        with anyio.fail_after(10):
            while (await rt.status("live")).last_seq < 3:
                await anyio.sleep(0.01)
        restored = counting_restores(rt)
        state = await rt.status("live")
        assert restored == [] and state.status == "running" and state.last_seq == 3
        state.messages.append({"role": "user", "content": "mine"})  # a copy: the actor's state is untouched
        assert len((await rt.status("live")).messages) == len(state.messages) - 1
        gate.set()
        assert (await handle.wait()).status == "finished"


def durably_cli(*args: str) -> subprocess.CompletedProcess:
    durably = Path(sys.executable).parent / "durably"
    return subprocess.run([str(durably), *args], capture_output=True, text=True, timeout=120)


async def test_the_cli_lists_by_status_from_the_index_and_rebuilds_it(tmp_path):
    path = tmp_path / "agents.db"
    url = f"sqlite:///{path}"
    parked = list_agent(1, [], requires_approval=True)
    async with Runtime(url, agents=[parked, list_agent(1, [], name="quick")]) as rt:
        await rt.run(parked, "waits", "task")
        await rt.run("quick", "done", "task")
    with sqlite3.connect(path) as db:  # an index lost or damaged outside durably
        db.execute("UPDATE streams SET status = NULL WHERE agent_id = 'done'")
        db.execute("UPDATE streams SET status = 'finished' WHERE agent_id = 'waits'")
    listed = durably_cli("agents", "--store", url, "--status", "waiting_approval", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [a["agent_id"] for a in json.loads(listed.stdout)["agents"]] == [], "a stale entry hides until rebuilt"
    rebuilt = durably_cli("verify", "--store", url, "--rebuild-index", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    report = {r["agent_id"]: r for r in json.loads(rebuilt.stdout)["rebuilt"]}
    assert report["waits"]["status"] == "waiting_approval" and report["waits"]["changed"]
    assert report["done"]["status"] == "finished" and report["done"]["changed"]
    listed = durably_cli("agents", "--store", url, "--status", "waiting_approval", "--json")
    (row,) = json.loads(listed.stdout)["agents"]
    assert row["agent_id"] == "waits" and row["status"] == "waiting_approval" and len(row["open_approvals"]) == 1


async def test_sqlite_reads_do_not_queue_behind_the_writer(tmp_path):
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[list_agent(1, [])]) as rt:
        await rt.run("list-agent", "a1", "task")
        async with rt.store._lock:  # the writer connection busy (a commit waiting on its fsync)
            with anyio.fail_after(5):
                assert (await rt.status("a1")).status == "finished"
                assert [s.agent_id for s in await rt.agents(statuses=["finished"])] == ["a1"]


async def test_file_store_a_crash_between_records_and_entry_never_hides_the_stream(tmp_path, monkeypatch):
    stream = StreamId("ns", "a1")
    running, waiting = IndexEntry("running", "d", 1, 1.0), IndexEntry("waiting_approval", "d", 2, 2.0, ("ap",))
    async with FileSystemStore(f"file://{tmp_path}") as store:
        await store.append_batch([AppendRequest(stream, 0, [b"started"], running)])
        monkeypatch.setattr(FileSystemStore, "_settle", lambda self, *args: True)  # killed after the records
        await store.append_batch([AppendRequest(stream, 1, [b"asked"], waiting)])
        monkeypatch.undo()
        asked = {row.stream: row.entry async for row in store.list_index("ns", {"waiting_approval"})}
        assert asked == {stream: None}, "listed under its new status, as 'read the journal'"
        again = IndexEntry("running", "d", 3, 3.0)
        monkeypatch.setattr(FileSystemStore, "_settle", lambda self, *args: True)
        await store.append_batch([AppendRequest(stream, 2, [b"decided"], again)])
        monkeypatch.undo()
        runnable = {row.stream: row.entry async for row in store.list_index("ns", {"running"})}
        assert stream in runnable, "a stream made runnable is listed as runnable before its records land"
        assert await store.put_index(stream, again, 3)
        assert {row.stream: row.entry async for row in store.list_index("ns", {"running"})} == {stream: again}
        assert [row async for row in store.list_index("ns", {"waiting_approval"})] == []
    hinted = tmp_path / "old"
    async with FileSystemStore(f"file://{hinted}") as store:
        await store.append(stream, 0, [b"from before the index"])
    shutil.rmtree(hinted / "index")  # as a directory written by an older durably
    async with FileSystemStore(f"file://{hinted}") as store:
        assert [(r.stream, r.entry) async for r in store.list_index("ns", {"finished"})] == [(stream, None)]
