"""A deploy is a graceful drain.

Two serving worker processes share a SQLite store. On SIGTERM the one running
the agents finishes the steps in flight, releases its leases and exits; the
other worker's ``serve()`` takes every agent at once, without waiting for
the leases to lapse. No step runs twice
and none is left with an unknown outcome.
"""

from __future__ import annotations

import signal
import time

import anyio
from support_agents import read_lines
from test_dead_holders import kinds, spawn, until

from durably.schemas._records import Kind


def effects_of(effects, pid: int, phase: str) -> list[dict]:
    return [e for e in read_lines(effects) if e["pid"] == pid and e["phase"] == phase]


#: The workers' lease TTL, seconds: a take-over that waited for a drained lease to lapse takes about this long.
LEASE_TTL = 30.0


async def test_sigterm_drains_and_another_serve_takes_the_agents_without_waiting_out_their_leases(tmp_path):
    """b takes the drained agents well before their leases could have lapsed (a third of the
    TTL): a's drain released them, b did not wait them out. Whatever the machine's load, a
    take-over that waits a lease out cannot come sooner than that. No step runs twice, none is lost."""
    latency = await drain_once(tmp_path)
    assert latency < LEASE_TTL / 3, f"b took the agents {latency:.1f} s after the drain: their leases were waited out"


async def drain_once(tmp_path) -> float:
    """One deploy: a drains on SIGTERM, b takes the agents; how long after a exited b took the last."""
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"
    ttl = ("--lease-ttl", str(LEASE_TTL))
    a = spawn(db, effects, "--start", "3", "--steps", "6", "--step-seconds", "0.3", *ttl)
    b = None
    try:
        await until(lambda: len({e["agent"] for e in effects_of(effects, a.pid, "start")}) == 3 or a.poll() is not None)
        assert a.poll() is None, a.stderr.read()
        b = spawn(db, effects, "--steps", "6", "--step-seconds", "0.3", *ttl)
        await anyio.sleep(1.0)  # b is serving: it must find every agent leased by a live worker
        assert effects_of(effects, b.pid, "start") == []
        a.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            out, err = await anyio.to_thread.run_sync(a.communicate)
        drained_at = time.time()
        assert a.returncode == 0 and "drained" in out, err
        await until(lambda: len({e["agent"] for e in effects_of(effects, b.pid, "start")}) == 3, timeout=LEASE_TTL * 2)
        await until(lambda: len([e for e in read_lines(effects) if e["phase"] == "done"]) >= 3 * 6, timeout=30)
        with anyio.fail_after(30):  # and b journals the last results and finishes, before it is stopped
            while [(await kinds(f"sqlite:///{db}", f"agent-{i}"))[-1:] for i in range(3)] != [[Kind.FINISHED]] * 3:
                await anyio.sleep(0.1)
    finally:
        for worker in (a, b):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGKILL)
                worker.wait()
    lines = read_lines(effects)
    taken = {}
    for e in lines:
        if e["pid"] == b.pid and e["phase"] == "start":
            taken.setdefault(e["agent"], e["t"])
    assert len(taken) == 3, taken
    # Each step started once and finished once: a's steps in flight finished before it let go.
    starts = [e["key"] for e in lines if e["phase"] == "start"]
    dones = [e["key"] for e in lines if e["phase"] == "done"]
    assert len(starts) == len(set(starts)) == len(dones) == 3 * 6
    for i in range(3):
        journal = await kinds(f"sqlite:///{db}", f"agent-{i}")
        assert journal.count(Kind.RESUMED) == 1 and journal[-1] == Kind.FINISHED
    return max(taken.values()) - drained_at
