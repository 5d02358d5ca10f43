"""Durable timers across processes: a parked agent needs no process, and its timer fires once.

Each test runs real worker processes (``support/timer_worker.py``) on one
SQLite store. The agent naps (a tool returning ``durably.Sleep``), then runs
one side effect that appends a line to a file. SIGKILL lands while it is
parked, or right after its timer fired; another worker must fire the timer
(once) and run the effect (once).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from support_agents import read_lines

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).resolve().parents[1] / "support" / "timer_worker.py"


def spawn(db: Path, effects: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--db", str(db), "--effects", str(effects), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def kinds(db: Path, agent_id: str = "nap-0") -> list[str]:
    """The record kinds of ``agent_id``'s journal, in order."""
    codec = RecordCodec()
    stream = StreamId("default", agent_id)
    async with open_store(f"sqlite:///{db}") as store:
        return [record.kind async for record in JournalReader(store, codec, stream).records()]


def stop(*workers: subprocess.Popen[str]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
        worker.wait()
        for pipe in (worker.stdout, worker.stderr):
            if pipe is not None:
                pipe.close()


async def parked_worker(db: Path, effects: Path, *args: str) -> subprocess.Popen[str]:
    """A worker that started nap-0, saw it park, and now serves."""
    worker = spawn(db, effects, "--start", "1", *args)
    line = await anyio.to_thread.run_sync(worker.stdout.readline)
    assert line.strip() == "parked", worker.stderr.read()
    return worker


async def test_sigkill_while_parked_another_worker_fires_the_timer_once(tmp_path):
    db, effects = tmp_path / "agents.db", tmp_path / "effects.jsonl"
    first = await parked_worker(db, effects, "--nap", "2")
    second = None
    try:
        first.send_signal(signal.SIGKILL)  # parked: nothing of the agent is held by it
        first.wait()
        assert "timer_set" in await kinds(db) and "timer_fired" not in await kinds(db)
        second = spawn(db, effects)
        with anyio.fail_after(60):
            while "finished" not in await kinds(db):
                await anyio.sleep(0.05)
    finally:
        stop(first, *([second] if second else []))
    journal = await kinds(db)
    assert journal.count(Kind.TIMER_SET) == 1 and journal.count(Kind.TIMER_FIRED) == 1
    assert journal[-1] == Kind.FINISHED
    ran = read_lines(effects)
    assert len(ran) == 1 and ran[0]["pid"] == second.pid


async def test_sigkill_right_after_the_timer_fired_runs_the_next_tool_once(tmp_path):
    db, effects = tmp_path / "agents.db", tmp_path / "effects.jsonl"
    first = await parked_worker(db, effects, "--nap", "1", "--die-awake")
    second = None
    try:
        await anyio.to_thread.run_sync(first.wait)  # killed itself at the call after the firing
        assert first.returncode == -signal.SIGKILL
        journal = await kinds(db)
        assert journal.count(Kind.TIMER_FIRED) == 1 and not read_lines(effects)
        second = spawn(db, effects)
        with anyio.fail_after(60):
            while "finished" not in await kinds(db):
                await anyio.sleep(0.05)
    finally:
        stop(first, *([second] if second else []))
    journal = await kinds(db)
    assert journal.count(Kind.TIMER_FIRED) == 1, journal  # fired once: the second worker ran on from it
    ran = read_lines(effects)
    assert len(ran) == 1 and ran[0]["pid"] == second.pid


async def test_two_serving_workers_fire_a_due_timer_once(tmp_path):
    db, effects = tmp_path / "agents.db", tmp_path / "effects.jsonl"
    first = await parked_worker(db, effects, "--nap", "2", "--start", "3")  # "--start 3" wins over the helper's 1
    second = spawn(db, effects)  # both wake for the same timers
    try:
        with anyio.fail_after(60):
            while any("finished" not in journal for journal in [await kinds(db, f"nap-{i}") for i in range(3)]):
                await anyio.sleep(0.05)
    finally:
        stop(first, second)
    for i in range(3):
        journal = await kinds(db, f"nap-{i}")
        assert journal.count(Kind.TIMER_SET) == 1 and journal.count(Kind.TIMER_FIRED) == 1, journal
    ran = read_lines(effects)
    assert sorted(e["agent"] for e in ran) == ["nap-0", "nap-1", "nap-2"]
