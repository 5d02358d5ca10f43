"""``durably worker`` and ``durably workers`` as real processes on a SQLite file and a real PostgreSQL.

A worker runs what ``Runtime.submit`` hands the fleet, answers its health
probes and drains on SIGTERM (steps finished, leases released, exit 0);
``durably workers`` lists live workers and then a SIGKILLed one as dead; a
worker that stops heartbeating (paused, or SIGKILLed under another hostname,
where no process check can see it) has its agents taken over long before its
60 s leases lapse: the heartbeat timeout (2 s) decides, not the lease TTL.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import click
import pytest
from fleet_processes import (
    can_change_hostname,
    effects,
    run_then_lose,
    spawn_worker,
    stop,
    submit,
    wait_for,
    workers_json,
)
from worker_agents import gated

from durably import Runtime, Where
from durably._cli.worker import load_agents
from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.storage import StreamId, open_store

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 2.0  # --heartbeat-timeout of every worker here
TTL = 60.0  # --lease-ttl: a takeover before it is the heartbeat's doing


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


@pytest.mark.parametrize("drain_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_worker_runs_submitted_agents_answers_probes_and_drains_on_sigterm(tmp_path, drain_signal):
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
        worker.send_signal(drain_signal)
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


def test_a_paused_worker_agents_are_taken_over_by_heartbeat_not_lease_expiry(tmp_path):
    """A SIGSTOPped worker on this host: its process is alive, only its heartbeat says otherwise."""
    url = f"sqlite:///{tmp_path}/agents.db"
    submit(url, tmp_path, ["warm-up"], steps=1)
    delays = run_then_lose(
        url, tmp_path, pause_outside_a_write(tmp_path / "agents.db"), agents=4, timeout=TIMEOUT, ttl=TTL
    )
    assert max(delays.values()) < TTL / 2, delays


def pause_outside_a_write(path: Path):
    """SIGSTOP a worker at a moment it holds no write transaction on the SQLite file ``path``.

    A process paused inside a write keeps SQLite's one write lock until it continues or
    dies, so no other worker could write (take over) at all: SQLite's nature, not the
    heartbeat's. Holding the write lock here while the signal lands means the worker is
    not inside a write then; it waits for the lock at most, holding nothing.
    """

    def pause(worker: subprocess.Popen[str]) -> None:
        con = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")  # waits for the worker's write transaction to end
            worker.send_signal(signal.SIGSTOP)
            con.execute("ROLLBACK")
        finally:
            con.close()

    return pause


@pytest.mark.skipif(not can_change_hostname(), reason="needs root and unshare --uts (a UTS namespace)")
def test_a_sigkilled_worker_on_another_host_is_taken_over_by_heartbeat(pg_server, tmp_path):
    """Another hostname: no process check can tell it died; before heartbeats only its 60 s leases did."""
    url = pg_server.url()
    submit(url, tmp_path, ["warm-up"], steps=1)

    def kill(a) -> None:
        a.send_signal(signal.SIGKILL)
        a.wait()

    delays = run_then_lose(url, tmp_path, kill, agents=6, hostname="another-host", timeout=TIMEOUT, ttl=TTL)
    assert max(delays.values()) < TTL / 2, delays


def test_an_approval_from_the_cli_says_a_live_worker_will_run_it(tmp_path):
    url = f"sqlite:///{tmp_path}/agents.db"
    submit(url, tmp_path, ["warm-up"], steps=1)
    worker = spawn_worker(url, tmp_path, "w1", "--heartbeat-timeout", str(TIMEOUT), agents="worker_agents:gated")
    try:

        async def hand_over() -> None:
            [definition] = gated()
            async with Runtime(url) as rt:
                await rt.submit(definition, "g-1", "pay")

        anyio.run(hand_over)
        wait_for(lambda: statuses(url, ["g-1"])["g-1"], 30, "the worker parks it", done="waiting_approval".__eq__)

        async def approval_id() -> str:
            async with Runtime(url) as rt:
                return (await rt.status("g-1")).open_approvals()[0]["approval_id"]

        approve = subprocess.run(
            [sys.executable, "-m", "durably", "approve", "g-1", anyio.run(approval_id), "--store", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert approve.returncode == 0, approve.stdout + approve.stderr
        assert "a live worker will run it" in approve.stdout and "w1" in approve.stdout, approve.stdout
        wait_for(lambda: statuses(url, ["g-1"])["g-1"], 30, "the worker runs it", done="finished".__eq__)
        assert [e["pid"] for e in effects(tmp_path)] == [worker.pid]
    finally:
        stop(worker)


def readme_worker_lines() -> list[str]:
    """The README's quick path for workers: its sh block that starts ``durably worker``."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Running workers") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def argv(line: str) -> list[str]:
    words = shlex.split(line.rstrip("&"))
    return [sys.executable, "-m", "durably", *words[1:]] if words[0] == "durably" else [sys.executable, *words[1:]]


def test_the_readme_quick_path_runs(tmp_path):
    """From the clone: a worker in the background, three tickets handed over (and a fourth with
    ``durably submit``), the workers and agents listed."""
    start, hand_over, from_shell, listing, agents = readme_worker_lines()
    assert start.startswith("durably worker") and start.endswith("&") and listing == "durably workers"
    assert from_shell.startswith("durably submit")
    assert agents == "durably agents"
    url = f"sqlite:///{tmp_path}/durably.db"
    env = {**os.environ, "DURABLY_STORE": url}
    worker = subprocess.Popen(argv(start), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: Path(f"{tmp_path}/durably.db").exists(), 30, "the worker opens the store")
        wait_for(lambda: live_workers(url), 30, "the worker heartbeats")
        handed = subprocess.run(argv(hand_over), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert handed.returncode == 0, handed.stderr
        assert handed.stdout.count("queued: a live worker will run it") == 3, handed.stdout
        shell = subprocess.run(argv(from_shell), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0 and "queued: a live worker will run it" in shell.stdout, shell
        tickets = ["ticket-1", "ticket-2", "ticket-3", "ticket-9"]
        wait_for(lambda: set(statuses(url, tickets).values()), 30, "answered", done={"finished"}.__eq__)
        listed = subprocess.run(argv(listing), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "live" in listed.stdout and str(worker.pid) in listed.stdout
        shown = subprocess.run(argv(agents), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and all(t in shown.stdout for t in tickets), shown.stdout
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        stop(worker)


def test_agents_are_loaded_from_the_current_directory_in_every_shape(tmp_path, monkeypatch):
    (tmp_path / "my_fleet.py").write_text(
        "from worker_agents import gated\n"
        "one = gated()[0]\n"
        "several = [one]\n"
        "by_name = {'gated': one}\n"
        "def build():\n    return several\n"
        "nothing = 42\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader puts the current directory on it
    for attr in ("one", "several", "by_name", "build"):
        assert [d.name for d in load_agents(f"my_fleet:{attr}")] == ["gated"]
    for spec in ("my_fleet:nothing", "my_fleet:missing", "no_such_module:x", "my_fleet"):
        with pytest.raises(click.BadParameter):
            load_agents(spec)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), "5"])
def test_a_bad_heartbeat_timeout_is_refused(tmp_path, timeout):
    with pytest.raises((InvalidArgumentError, ArgumentTypeError)):
        Runtime(f"sqlite:///{tmp_path}/agents.db", heartbeat_timeout=timeout)
