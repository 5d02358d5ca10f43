"""A dead lease holder is seen as dead.

A restarted process (same pid as pid 1 in a container, or the same stable
``worker_id``) must not be locked out by its own ghost, and a fresh ``serve()``
after a SIGKILL takes the dead worker's agents at once, not after the lease TTL.
A holder on another host is reported with the time its lease lapses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from serve_worker import slow_file_agent
from support_agents import read_lines

from durably import AgentLeasedError, Runtime
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store

WORKER = Path(__file__).resolve().parents[1] / "support" / "serve_worker.py"


def spawn(db: Path, effects: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--db", str(db), "--effects", str(effects), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def until(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


def started_by(effects: Path, pid: int) -> list[dict]:
    return [e for e in read_lines(effects) if e["pid"] == pid and e["phase"] == "start"]


async def kill_mid_run(db: Path, effects: Path, *args: str) -> int:
    """Start agent-0 in a worker, SIGKILL it in the middle of a step; its pid."""
    worker = spawn(db, effects, "--start", "1", *args)
    try:
        await until(lambda: started_by(effects, worker.pid) or worker.poll() is not None)
        assert worker.poll() is None, worker.stderr.read()
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    return worker.pid


async def kinds(url: str, agent_id: str) -> list[str]:
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId("default", agent_id)
        return [record.kind async for record in JournalReader(store, codec, stream).records()]


async def test_a_restart_with_the_same_stable_worker_id_is_not_locked_out_by_its_ghost(tmp_path):
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"
    await kill_mid_run(db, effects, "--worker-id", "worker-a")
    definition = slow_file_agent(2, effects, 0.0)
    async with Runtime(f"sqlite:///{db}", agents=[definition], worker_id="worker-a") as rt:
        handle = await rt.resume("agent-0")  # main: AgentLeasedError naming its own dead predecessor
        assert (await handle.wait()).status == "finished"


@pytest.mark.parametrize("form", ["legacy", "other-start-time"])
async def test_a_ghost_with_this_very_pid_is_dead(tmp_path, form):
    """pid 1 in a restarted container: the ghost's pid is ours, its incarnation is not."""
    url = f"sqlite:///{tmp_path}/a.db"
    definition = slow_file_agent(1, tmp_path / "effects.jsonl", 0.0)
    async with Runtime(url, agents=[definition]) as first:
        await first.start(definition, "a1", "task")
        await first.status("a1")
    if form == "legacy":  # what this host's previous incarnation wrote before owner identities
        ghost = f"{socket.gethostname()}:{os.getpid()}/cafe"
    else:
        from durably._fleet.owner import OwnerIdentity, new_identity

        me = new_identity("svc", Keeper())
        ghost = str(OwnerIdentity(me.worker_id, "0ld", me.host, me.pid, "1", me.boot_id, me.pid_ns))
    async with Runtime(url, agents=[definition]) as rt:
        assert await rt.store.get_lease(rt.stream("a1")) is None  # the first runtime released it on exit
        assert await rt.store.acquire_lease(rt.stream("a1"), ghost, 30.0) is not None
        handles = await rt.resume_all()  # main: [] (its own pid is alive, so the ghost looked alive)
        assert len(handles) == 1 and (await handles[0].wait()).status == "finished"


class Keeper:
    """Stands for the lease keeper a runtime registers its nonce with."""


async def test_lease_holder_names_a_dead_holder(tmp_path):
    from durably._fleet.owner import Liveness

    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"
    pid = await kill_mid_run(db, effects, "--worker-id", "worker-a")
    async with Runtime(f"sqlite:///{db}") as rt:
        holder = await rt.lease_holder("agent-0")
    assert holder.worker_id == "worker-a" and holder.pid == pid and holder.liveness is Liveness.DEAD
    assert holder.expires_at > time.time() + 20  # still in the store: only its liveness says it is dead


async def test_a_live_runtime_of_this_process_is_alive_and_a_remote_holder_shows_its_expiry(tmp_path):
    from durably._fleet.owner import Liveness

    url = f"sqlite:///{tmp_path}/a.db"
    effects = tmp_path / "effects.jsonl"
    definition = slow_file_agent(100, effects, 0.05)
    async with Runtime(url, agents=[definition]) as a, Runtime(url, agents=[definition]) as b:
        handle = await a.start(definition, "a1", "task")
        holder = await b.lease_holder("a1")
        assert holder.liveness is Liveness.ALIVE and holder.pid == os.getpid()
        with pytest.raises(AgentLeasedError):
            await b.resume("a1")
        await a.cancel("a1")
        await handle.wait()
        expires = time.time() + 30
        assert await a.store.acquire_lease(a.stream("a2"), "elsewhere:1:2:3:4/x@far-host:12:99:abc:1", 30.0)
        far = await b.lease_holder("a2")
        assert far.liveness is Liveness.REMOTE and far.host == "far-host" and abs(far.expires_at - expires) < 5


async def test_a_fresh_serve_after_a_local_sigkill_resumes_the_agent_in_under_two_seconds(tmp_path):
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"
    await kill_mid_run(db, effects)
    definition = slow_file_agent(2, effects, 0.0)
    async with (
        Runtime(f"sqlite:///{db}", agents=[definition], lease_ttl=30.0) as a,
        Runtime(f"sqlite:///{db}", agents=[definition], lease_ttl=30.0) as b,
    ):
        begun = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.serve, 0.1)
            tg.start_soon(b.serve, 0.1)  # two servers see the same dead holder: one takes it
            await until(lambda: started_by(effects, os.getpid()), timeout=10)
            took = time.monotonic() - begun
            await until(lambda: len([e for e in read_lines(effects) if e["phase"] == "done"]) >= 2, timeout=10)
            tg.cancel_scope.cancel()
    assert took < 2.0, f"resumed after {took:.1f} s"
    assert (await kinds(f"sqlite:///{db}", "agent-0")).count(Kind.RESUMED) == 1
