"""SIGKILL at random points of a long paged run with parallel tool calls, restored lazily.

A real process runs (or resumes) the agent with pages of 8 items and a snapshot every 3
records, and is killed at a random moment, again and again until the agent finishes.
After each kill the lazily restored state (pages undecoded, the tail folded over them)
must be the fold of the journal, and at the end no tool body has run twice for one
idempotency key (the tool reconciles an unknown outcome from its effects file).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
from support_agents import read_lines

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import AgentState, apply
from durably.storage import StreamId, open_store

STREAM = StreamId("default", "a1")
STEPS = 240

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path[:0] = sys.argv[3].split(":")
    import anyio
    from durably import Runtime, SnapshotPolicy
    from durably._journal import page_writer
    from support_agents import file_agent

    page_writer.PAGE, page_writer.KEEP = 8, 4

    async def main():
        agent = file_agent(int(sys.argv[4]), Path(sys.argv[2]), per_turn=6, think_s=0.02)
        policy = SnapshotPolicy(every_records=3, tail_ratio=0.0)
        async with Runtime(sys.argv[1], agents=[agent], snapshot_policy=policy, lease_ttl=1.0) as rt:
            if not [s async for s in rt.store.list_streams("default")]:
                await rt.run("file-agent", "a1", "count")
            else:
                handle = await rt.resume("a1", force=True)
                if handle is not None:
                    await handle.wait()
            print("status", (await rt.status("a1")).status, flush=True)

    anyio.run(main)
    """
)

KILLS = 12


def journaled(db: Path) -> int:
    """How many records the agent's journal holds now (read beside the writing process)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:  # no table yet
        return 0


async def fold(url: str) -> AgentState:
    state = AgentState()
    async with open_store(url) as store:
        async for record in JournalReader(store, RecordCodec(), STREAM).records():
            apply(state, record)
    return state


async def test_random_sigkills_of_a_paged_run_restore_the_journal_fold_and_run_no_tool_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    effects = tmp_path / "effects.jsonl"
    support = str(Path(__file__).parents[1] / "support")
    rng = random.Random(35)
    kills = restores = lazy = 0
    finished = False
    for attempt in range(KILLS + 10):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, url, str(effects), support, str(STEPS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if kills < KILLS:
            # Killed once it has written a random number more records: at random points of the run.
            target = journaled(tmp_path / "a.db") + rng.randint(3, 40)
            with anyio.move_on_after(60):
                while child.poll() is None and journaled(tmp_path / "a.db") < target:
                    await anyio.sleep(0.005)
        if child.poll() is None and kills < KILLS:
            os.kill(child.pid, signal.SIGKILL)
            kills += 1
        out, err = child.communicate(timeout=240)
        if child.returncode == 0:
            finished = "status finished" in out
            if finished:
                break
        else:
            assert child.returncode == -signal.SIGKILL, err[-3000:]
        async with open_store(url) as store:
            restored = await restore(store, RecordCodec(), STREAM)
        if restored is None:
            continue
        restores += 1
        lazy += bool(restored.state.__dict__.get("_older"))  # restored with pages undecoded
        assert restored.state.to_wire() == (await fold(url)).to_wire(), attempt
    print(f"kills {kills}, restores {restores}, lazily restored {lazy}")
    assert finished and kills >= KILLS // 2 and lazy > 0
    keys = [line["key"] for line in read_lines(effects)]
    assert len(keys) == len(set(keys)), "a tool body ran twice for one idempotency key"
    final = await fold(url)
    assert final.status == "finished" and sum(1 for e in final.ledger.values() if e["done"]) == STEPS
