"""``durably worker`` and ``durably workers`` as real processes on a SQLite file and a real PostgreSQL.

A worker runs what ``Runtime.submit`` hands the fleet, answers its health
probes and drains on SIGTERM (steps finished, leases released, exit 0);
``durably workers`` lists live workers and then a SIGKILLed one as dead; a
worker that stops heartbeating (paused, or SIGKILLed under another hostname,
where no process check can see it) has its agents taken over long before its
60 s leases lapse: the heartbeat timeout (2 s) decides, not the lease TTL.
"""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest
from fleet_processes import (
    can_change_hostname,
    effects,
    first_effect_by,
    spawn_worker,
    wait_for,
    workers_json,
)
from serve_worker import slow_file_agent

from durably import Runtime, Where
from durably.storage import StreamId, open_store

try:
    from .pg_server import pg_server
except ImportError:
    from pg_server import pg_server  # noqa: F401

TIMEOUT = 2.0  # --heartbeat-timeout of every worker here
TTL = 60.0  # --lease-ttl: a takeover before it is the heartbeat's doing


def submit(url: str, folder: Path, agent_ids: list[str], steps: int) -> list:
    """Hand ``agent_ids`` to the fleet (``Runtime.submit``); their placements."""

    async def go() -> list:
        definition = slow_file_agent(steps, folder / "effects.jsonl", 0.05)
        async with Runtime(url, agents=[definition]) as rt:
            return [(await rt.submit(definition, agent_id, "count")).placement for agent_id in agent_ids]

    return anyio.run(go)


def statuses(url: str, agent_ids: list[str]) -> dict[str, str]:
    async def go() -> dict[str, str]:
        async with Runtime(url) as rt:
            return {a: (await rt.status(a)).status for a in agent_ids}

    return anyio.run(go)


def leases(url: str, agent_ids: list[str]) -> list:
    async def go() -> list:
        async with open_store(url) as store:
            return [await store.get_lease(StreamId("default", a)) for a in agent_ids]

    return anyio.run(go)


def live_workers(url: str) -> list[dict]:
    return [r for r in workers_json(url, TIMEOUT)["workers"] if r["status"] == "live"]


def worker_statuses(url: str) -> dict[str, str]:
    return {r["worker_id"]: r["status"] for r in workers_json(url, TIMEOUT)["workers"]}


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def health_port(folder: Path, name: str) -> int:
    line = wait_for(
        lambda: next((s for s in (folder / f"{name}.out").read_text().splitlines() if s.startswith("health:")), None),
        20,
        "the worker prints its health port",
    )
    return int(line.split("127.0.0.1:")[1].split("/")[0])


def stop(*workers) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.kill()
        worker.wait()


def test_worker_runs_submitted_agents_answers_probes_and_drains_on_sigterm(tmp_path):
    url = f"sqlite:///{tmp_path}/agents.db"
    submit(url, tmp_path, ["warm-up"], steps=1)  # the database exists before the worker
    worker = spawn_worker(url, tmp_path, "w1", "--health-port", "0", steps=40, step_seconds=0.1)
    try:
        port = health_port(tmp_path, "w1")
        assert probe(port, "/livez") == 200
        wait_for(lambda: probe(port, "/readyz") == 200, 20, "ready once serving and heartbeating")
        assert probe(port, "/nope") == 404
        wait_for(lambda: statuses(url, ["warm-up"])["warm-up"] == "finished", 20, "the first agent runs")
        placements = submit(url, tmp_path, ["job-1", "job-2", "job-3"], steps=40)
        assert {p.where for p in placements} == {Where.QUEUED}, placements
        assert "w1" in placements[0].reason
        wait_for(
            lambda: (
                {e["agent"] for e in effects(tmp_path) if e["phase"] == "done" and e["n"] >= 2}
                >= {"job-1", "job-2", "job-3"}
            ),
            30,
            "the worker runs the submitted agents",
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, (tmp_path / "w1.err").read_text()
    finally:
        stop(worker)
    assert "drained" in (tmp_path / "w1.out").read_text()
    steps = effects(tmp_path)
    begun = {e["key"] for e in steps if e["phase"] == "start"}
    finished = {e["key"] for e in steps if e["phase"] == "done"}
    assert begun == finished  # every step in flight at SIGTERM was finished, none cut
    jobs = ["job-1", "job-2", "job-3"]
    assert set(statuses(url, jobs).values()) == {"running"}  # drained, not done: the next worker goes on
    assert leases(url, jobs) == [None, None, None]  # released at once
    [row] = workers_json(url, TIMEOUT)["workers"]
    assert (row["worker_id"], row["status"], row["agents"]) == ("w1", "stopped", 0)


def test_workers_lists_two_live_workers_then_one_dead(pg_server, tmp_path):
    url = pg_server.url()
    submit(url, tmp_path, ["warm-up"], steps=1)
    timeout = ("--heartbeat-timeout", str(TIMEOUT))
    w1 = spawn_worker(url, tmp_path, "w1", *timeout)
    w2 = spawn_worker(url, tmp_path, "w2", *timeout)
    try:
        live = wait_for(lambda: live_workers(url), 30, "two live workers", done=lambda found: len(found) == 2)
        assert sorted((r["worker_id"], r["pid"]) for r in live) == [("w1", w1.pid), ("w2", w2.pid)]
        assert all(r["definitions"] == ["slow-file"] and r["age_s"] < TIMEOUT for r in live)
        # Submitted on PostgreSQL (change notifications): a worker takes it.
        submit(url, tmp_path, ["job-1"], steps=2)
        wait_for(lambda: statuses(url, ["job-1"])["job-1"] == "finished", 30, "a worker runs the submitted agent")
        w2.send_signal(signal.SIGKILL)
        w2.wait()
        rows = wait_for(
            lambda: worker_statuses(url),
            30,
            "the SIGKILLed worker is listed dead",
            done=lambda found: found.get("w2") == "dead",
        )
        assert rows == {"w1": "live", "w2": "dead"}
    finally:
        stop(w1, w2)


def run_then_lose(url: str, tmp_path: Path, lose, agents: int, hostname: str | None = None) -> dict[str, float]:
    """Worker A (under ``hostname``) runs ``agents`` agents; B serves too; ``lose(A)`` silences A.
    Seconds from then until B began a step of each agent."""
    opts = ("--heartbeat-timeout", str(TIMEOUT), "--lease-ttl", str(TTL))
    ids = [f"agent-{i}" for i in range(agents)]
    a = spawn_worker(url, tmp_path, "a", *opts, hostname=hostname, steps=1000, step_seconds=0.2)
    b = None
    try:
        submit(url, tmp_path, ids, steps=1000)
        wait_for(lambda: set(first_effect_by(tmp_path, a.pid)) >= set(ids), 60, "A runs every agent")
        b = spawn_worker(url, tmp_path, "b", *opts, steps=1000, step_seconds=0.2)
        wait_for(lambda: len(live_workers(url)) == 2, 30, "B is up")
        time.sleep(TIMEOUT)  # B scans meanwhile: A beats, so its leases are respected
        assert first_effect_by(tmp_path, b.pid) == {}
        lost_at = time.time()
        lose(a)
        taken = wait_for(
            lambda: first_effect_by(tmp_path, b.pid),
            TTL / 2,
            "B takes every agent of A",
            done=lambda found: set(found) >= set(ids),
        )
    finally:
        stop(a, *([b] if b else []))
    return {agent: taken[agent] - lost_at for agent in ids}


def test_a_paused_worker_agents_are_taken_over_by_heartbeat_not_lease_expiry(tmp_path):
    """A SIGSTOPped worker on this host: its process is alive, only its heartbeat says otherwise."""
    url = f"sqlite:///{tmp_path}/agents.db"
    submit(url, tmp_path, ["warm-up"], steps=1)
    delays = run_then_lose(url, tmp_path, lambda a: a.send_signal(signal.SIGSTOP), agents=4)
    assert max(delays.values()) < TTL / 2, delays


@pytest.mark.skipif(not can_change_hostname(), reason="needs root and unshare --uts (a UTS namespace)")
def test_a_sigkilled_worker_on_another_host_is_taken_over_by_heartbeat(pg_server, tmp_path):
    """Another hostname: no process check can tell it died; before heartbeats only its 60 s leases did."""
    url = pg_server.url()
    submit(url, tmp_path, ["warm-up"], steps=1)

    def kill(a) -> None:
        a.send_signal(signal.SIGKILL)
        a.wait()

    delays = run_then_lose(url, tmp_path, kill, agents=6, hostname="another-host")
    assert max(delays.values()) < TTL / 2, delays
