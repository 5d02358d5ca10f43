"""``durably worker`` processes for the worker tests and the takeover measurement.

``spawn_worker`` runs ``python -m durably worker --agents worker_agents:agents``
(this folder as its current directory, so the module is imported from there),
optionally under another hostname (``unshare --uts``: a UTS namespace, as every
container has; root only). Its stdout and stderr go to files in ``folder``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
from serve_worker import slow_file_agent
from support_agents import read_lines

from durably import Runtime

SUPPORT = Path(__file__).resolve().parent


def can_change_hostname() -> bool:
    """Whether ``unshare --uts`` works here (root, and a kernel that allows it)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--uts", "sh", "-c", "hostname durably-probe && hostname"], capture_output=True, text=True
    )
    return probe.returncode == 0 and probe.stdout.strip() == "durably-probe"


def spawn_worker(
    url: str,
    folder: Path,
    name: str,
    *args: str,
    hostname: str | None = None,
    steps: int = 3,
    step_seconds: float = 0.05,
    agents: str = "worker_agents:agents",
) -> subprocess.Popen[str]:
    """A ``durably worker`` process named ``name`` (``--worker-id``), its output in ``folder/name.out|err``."""
    command = [
        sys.executable,
        "-m",
        "durably",
        "worker",
        "--agents",
        agents,
        "--store",
        url,
        "--worker-id",
        name,
        "--poll-interval",
        "0.2",
        *args,
    ]
    if hostname is not None:
        # exec keeps the pid: the test signals the worker itself, not a shell.
        command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *command]
    env = {
        **os.environ,
        "WORKER_EFFECTS": str(folder / "effects.jsonl"),
        "WORKER_STEPS": str(steps),
        "WORKER_STEP_SECONDS": str(step_seconds),
    }
    env.pop("DURABLY_STORE", None)
    return subprocess.Popen(
        command,
        cwd=SUPPORT,
        env=env,
        stdout=(folder / f"{name}.out").open("w"),
        stderr=(folder / f"{name}.err").open("w"),
        text=True,
    )


def durably_submit(
    url: str, folder: Path, *argv: str, environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``durably submit --store url --agents worker_agents:agents *argv``, run from this folder.

    ``environ``: variables to set (``WORKER_STEPS``, ``DURABLY_KEYS``...); ``DURABLY_STORE``,
    ``DURABLY_KEYS`` and ``DURABLY_KEY_ID`` are unset unless it names them."""
    environ = environ or {}
    env = {**os.environ, "WORKER_EFFECTS": str(folder / "effects.jsonl"), **environ}
    for name in ("DURABLY_STORE", "DURABLY_KEYS", "DURABLY_KEY_ID"):
        if name not in environ:
            env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "durably", "submit", "--store", url, "--agents", "worker_agents:agents", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SUPPORT,
        env=env,
    )


def workers_json(url: str, timeout: float) -> dict:
    """``durably workers --json`` as a document."""
    proc = subprocess.run(
        [sys.executable, "-m", "durably", "workers", "--store", url, "--json", "--heartbeat-timeout", str(timeout)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def effects(folder: Path) -> list[dict]:
    """The tool's own log of its steps (``serve_worker.slow_file_agent``)."""
    return read_lines(folder / "effects.jsonl")


def first_effect_by(folder: Path, pid: int) -> dict[str, float]:
    """agent id -> the time of the first step ``pid`` began on it."""
    first: dict[str, float] = {}
    for e in effects(folder):
        if e["pid"] == pid and e["phase"] == "start":
            first.setdefault(e["agent"], e["t"])
    return first


def wait_for(fetch, timeout: float, what: str, done=bool, poll: float = 0.05):
    """Poll ``fetch()`` until ``done(value)``; the value. Fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = fetch()
        if done(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(poll)


def stop(*workers) -> None:
    """SIGKILL (and reap) each worker still running."""
    for worker in workers:
        if worker.poll() is None:
            worker.kill()
        worker.wait()


def submit(url: str, folder: Path, agent_ids: list[str], steps: int) -> list:
    """Hand ``agent_ids`` to the fleet (``Runtime.submit``); their placements."""

    async def go() -> list:
        definition = slow_file_agent(steps, folder / "effects.jsonl", 0.05)
        async with Runtime(url, agents=[definition]) as rt:
            return [(await rt.submit(definition, agent_id, "count")).placement for agent_id in agent_ids]

    return anyio.run(go)


def run_then_lose(
    url: str, tmp_path: Path, lose, agents: int, hostname: str | None = None, *, timeout: float = 2.0, ttl: float = 60.0
) -> dict[str, float]:
    """Worker A (under ``hostname``) runs ``agents`` agents; B serves too; ``lose(A)`` silences A.
    Seconds from then until B began a step of each agent."""
    opts = ("--heartbeat-timeout", str(timeout), "--lease-ttl", str(ttl))
    ids = [f"agent-{i}" for i in range(agents)]
    a = spawn_worker(url, tmp_path, "a", *opts, hostname=hostname, steps=1000, step_seconds=0.2)
    b = None
    try:
        submit(url, tmp_path, ids, steps=1000)
        wait_for(lambda: set(first_effect_by(tmp_path, a.pid)) >= set(ids), 60, "A runs every agent")
        b = spawn_worker(url, tmp_path, "b", *opts, steps=1000, step_seconds=0.2)
        wait_for(
            lambda: [r for r in workers_json(url, timeout)["workers"] if r["status"] == "live"],
            30,
            "B is up",
            done=lambda live: len(live) == 2,
        )
        time.sleep(timeout)  # B scans meanwhile: A beats, so its leases are respected
        assert first_effect_by(tmp_path, b.pid) == {}
        lost_at = time.time()
        lose(a)
        taken = wait_for(
            lambda: first_effect_by(tmp_path, b.pid),
            ttl / 2,
            "B takes every agent of A",
            done=lambda found: set(found) >= set(ids),
        )
    finally:
        stop(a, *([b] if b else []))
    return {agent: taken[agent] - lost_at for agent in ids}
