"""``durably verify`` reads every frame of a namespace and reports, changing nothing.

Damage to a record that a snapshot already covers never shows in a restore;
verify finds it, and a clean namespace verifies clean.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from support_agents import list_agent

from durably import Runtime, SnapshotPolicy


def rows(path) -> list:
    with sqlite3.connect(path) as db:
        return (
            db.execute("SELECT stream_id, seq, data FROM records ORDER BY 1, 2").fetchall()
            + db.execute("SELECT stream_id, seq, data FROM snapshots ORDER BY 1, 2").fetchall()
        )


async def test_verify_reports_damage_under_a_snapshot_and_changes_nothing(tmp_path):
    path = tmp_path / "a.db"
    url = f"sqlite:///{path}"
    effects: list = []
    definition = list_agent(4, effects)
    async with Runtime(url, agents=[definition], snapshot_policy=SnapshotPolicy(every_records=3, tail_ratio=0)) as rt:
        for agent_id in ("damaged", "sound"):
            assert (await rt.run(definition, agent_id, "task")).status == "finished"
        await rt._activations.services.snapshots.flush()
    with sqlite3.connect(path) as db:
        (sid,) = db.execute("SELECT id FROM streams WHERE agent_id = 'damaged'").fetchone()
        (data,) = db.execute("SELECT data FROM records WHERE stream_id = ? AND seq = 2", (sid,)).fetchone()
        flipped = data[:-1] + bytes([data[-1] ^ 0x01])
        db.execute("UPDATE records SET data = ? WHERE stream_id = ? AND seq = 2", (flipped, sid))
    async with Runtime(url) as rt:
        assert (await rt.status("damaged")).status == "finished"  # restore never reads seq 2: silent
    before = rows(path)
    from durably._journal.records import RecordCodec
    from durably._reading.verify import verify_namespace
    from durably.storage import open_store

    async with open_store(url) as store:
        reports = {r.stream.agent_id: r async for r in verify_namespace(store, RecordCodec(), "default")}
    assert reports["sound"].ok and reports["sound"].records == reports["sound"].last_seq
    problem, *group = reports["damaged"].problems
    assert (problem.where, problem.seq, problem.error) == ("record", 2, "CorruptRecordError")
    # Seq 2 holds its commit's group frame: the later records of that commit are lost with it.
    assert [(p.where, p.seq, p.error) for p in group] == [
        ("record", 3 + i, "CorruptRecordError") for i in range(len(group))
    ]
    assert all("seq 2" in p.detail for p in group)
    assert rows(path) == before
    # The command: exit 1 and a JSON report naming the damaged record.
    durably = Path(sys.executable).parent / "durably"
    done = subprocess.run(
        [str(durably), "verify", "--store", url, "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    damaged = [s for s in out["streams"] if s["stream"]["agent_id"] == "damaged"]
    assert damaged[0]["problems"][0]["seq"] == 2 and out["ok"] is False
    assert rows(path) == before


async def test_verify_reports_a_gap_and_a_journal_cut_short(tmp_path):
    path = tmp_path / "a.db"
    url = f"sqlite:///{path}"
    effects: list = []
    definition = list_agent(2, effects)
    async with Runtime(url, agents=[definition], snapshot_policy=SnapshotPolicy(every_records=0)) as rt:
        last = (await rt.run(definition, "a1", "task")).last_seq
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM records WHERE seq IN (3, ?)", (last,))
    from durably._journal.records import RecordCodec
    from durably._reading.verify import verify_stream
    from durably.storage import StreamId, open_store

    async with open_store(url) as store:
        report = await verify_stream(store, RecordCodec(), StreamId("default", "a1"))
    assert [(p.where, p.seq) for p in report.problems] == [("journal", 3), ("journal", last)]
