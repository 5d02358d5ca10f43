"""Attack on the fleet: a store stall longer than the heartbeat timeout must not make live workers
take each other's agents.

Found by attacking fair shares with real ``durably worker`` processes: while another
process held the SQLite write lock (an operator's ``sqlite3`` shell, a backup, a worker
SIGSTOPped inside a write) for three heartbeat timeouts, no worker could write its
heartbeat. When the lock was let go, each worker read the others' beats as older than the
timeout and took their leases at once, while those workers were alive and inside a step:
the journal stayed single-writer (fencing), but the steps in flight ran a second time
beside the first (8 agents: 25 activations stopped with "lost its lease here", 38 steps
run twice). A worker's silence is evidence of its death only when this worker could write
its own heartbeat through the same timeout.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter

from fleet_processes import effects, spawn_worker, stop, submit, wait_for, workers_json

TIMEOUT = 2.0  # --heartbeat-timeout of both workers
AGENTS = 6


def test_live_workers_keep_their_agents_through_a_store_stall_longer_than_the_heartbeat_timeout(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    submit(url, tmp_path, ["warm-up"], steps=1)  # the database exists before the workers
    opts = ("--heartbeat-timeout", str(TIMEOUT))
    workers = [spawn_worker(url, tmp_path, name, *opts, steps=40, step_seconds=0.2) for name in ("w1", "w2")]
    ids = [f"agent-{i}" for i in range(AGENTS)]
    try:
        wait_for(
            lambda: [r for r in workers_json(url, TIMEOUT)["workers"] if r["status"] == "live"],
            60,
            "both workers heartbeat",
            done=lambda live: len(live) == 2,
        )
        submit(url, tmp_path, ids, steps=40)
        wait_for(
            lambda: {e["pid"] for e in effects(tmp_path) if e["agent"] in ids},
            60,
            "both workers run agents of the burst",
            done=lambda pids: pids >= {w.pid for w in workers},
        )
        lock = sqlite3.connect(f"{tmp_path}/agents.db", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # every write waits, heartbeats included
        time.sleep(3 * TIMEOUT)
        lock.execute("COMMIT")
        lock.close()
        wait_for(
            lambda: Counter(e["agent"] for e in effects(tmp_path) if e["phase"] == "done" and e["agent"] in ids),
            120,
            "every agent ran its 40 steps",
            done=lambda done: len(done) == AGENTS and min(done.values()) >= 40,
        )
    finally:
        stop(*workers)
    lost = [
        line
        for w in ("w1", "w2")
        for line in (tmp_path / f"{w}.err").read_text().splitlines()
        if "lost its lease" in line
    ]
    assert lost == []
    runs = Counter(e["key"] for e in effects(tmp_path) if e["phase"] == "start" and e["agent"] in ids)
    assert [key for key, n in runs.items() if n > 1] == []  # no step run twice
