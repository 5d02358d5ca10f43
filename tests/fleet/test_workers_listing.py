"""``durably workers``: a stopped or dead worker holds no agents, whatever its
last heartbeat said, and is no longer listed 10 minutes after its last beat,
also when no live worker is left to delete its heartbeat stream; until then an
earlier run of a reused worker id is marked superseded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
from fleet_processes import workers_json

from durably._fleet.workers import FORGET_AFTER, WORKERS_NAMESPACE, WorkerBeat
from durably.storage._registry import open_store
from durably.storage._spi import StreamId


def _beat(worker_id: str, state: str, age: float, agent_ids: tuple[str, ...]) -> WorkerBeat:
    now = time.time()
    return WorkerBeat(
        owner=f"{worker_id}/owner",
        worker_id=worker_id,
        host="h",
        pid=1,
        namespace="default",
        definitions=("support",),
        started_at=now - age - 60,
        beat_at=now - age,
        agents=len(agent_ids),
        agent_ids=agent_ids,
        state=state,
    )


def test_dead_and_stopped_workers_hold_nothing_and_are_forgotten(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    beats = [
        _beat("live", "serving", 0.0, ("job-1",)),
        _beat("killed", "serving", 30.0, ("job-2",)),
        _beat("left", "stopped", 10.0, ()),
        _beat("killed-long-ago", "serving", FORGET_AFTER + 60, ("job-3",)),
        _beat("left-long-ago", "stopped", FORGET_AFTER + 60, ()),
    ]

    async def write() -> None:
        async with open_store(url) as store:
            for beat in beats:
                await store.append(StreamId(WORKERS_NAMESPACE, beat.worker_id), 0, [beat.to_bytes()])

    anyio.run(write)
    rows = {r["worker_id"]: r for r in workers_json(url, 5.0)["workers"]}
    assert sorted(rows) == ["killed", "left", "live"]
    assert {w: (r["status"], r["agents"], r["agent_ids"]) for w, r in rows.items()} == {
        "live": ("live", 1, ["job-1"]),
        "killed": ("dead", 0, []),
        "left": ("stopped", 0, []),
    }


def test_a_stopped_run_of_a_reused_worker_id_is_marked_superseded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    earlier = _beat("web-7", "stopped", 10.0, ())  # started 70 s ago, left 10 s ago
    later = _beat("web-7", "serving", 0.0, ("job-1",))  # started 60 s ago under the same --worker-id
    twins = [_beat("twin", "serving", 0.0, ()), _beat("twin", "serving", 0.0, ())]  # one id, two live runs

    async def write() -> None:
        async with open_store(url) as store:
            for n, beat in enumerate([earlier, later, *twins]):
                await store.append(StreamId(WORKERS_NAMESPACE, f"nonce-{n}"), 0, [beat.to_bytes()])

    anyio.run(write)
    rows = workers_json(url, 5.0)["workers"]
    assert [(r["worker_id"], r["status"], r["superseded"]) for r in rows] == [
        ("twin", "live", False),
        ("twin", "live", False),
        ("web-7", "stopped", True),
        ("web-7", "live", False),
    ]
    table = subprocess.run(
        [sys.executable, "-m", "durably", "workers", "--store", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert table.returncode == 0, table.stderr
    assert "stopped (superseded)" in table.stdout and "superseded: an earlier run" in table.stdout, table.stdout
