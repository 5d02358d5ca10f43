"""SIGKILL a real worker process at each boundary of a step, resume in a new
process, and judge from the tool's own effects file and the acknowledgement
log: no side effect twice, no acknowledged record lost, every run finished."""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support_agents import read_lines

WORKER = Path(__file__).resolve().parents[1] / "support" / "crash_worker.py"
AGENTS, STEPS = 4, 6


def run_worker(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        str(WORKER),
        "--db",
        str(tmp_path / "agents.db"),
        "--effects",
        str(tmp_path / "effects.jsonl"),
        "--acks",
        str(tmp_path / "acks.jsonl"),
        "--agents",
        str(AGENTS),
        "--steps",
        str(STEPS),
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "boundary,at",
    [
        ("before_intent", 3),
        ("before_effect", 5),
        ("after_effect", 1),
        ("after_effect", 9),
        ("after_result", 7),
        ("result_staged", 2),
        ("result_staged", 9),
        ("model_answered", 4),
        ("model_answered", 11),
        ("snapshot", 2),
        ("group_commit", 3),
        ("group_commit", 7),
    ],
)
def test_sigkill_at_boundary_resumes_without_duplicates_or_loss(tmp_path, boundary, at):
    check_crash_and_resume(tmp_path, boundary, at)


@pytest.mark.parametrize(
    "boundary,at", [("after_result", 3), ("result_staged", 4), ("model_answered", 6), ("group_commit", 8)]
)
def test_sigkill_while_the_model_thinks(tmp_path, boundary, at):
    # A model that takes its time: each tool result is committed while it thinks.
    check_crash_and_resume(tmp_path, boundary, at, "--think", "0.05")


def check_crash_and_resume(tmp_path: Path, boundary: str, at: int, *extra: str) -> None:
    crashed = run_worker(tmp_path, "--crash", boundary, "--at", str(at), *extra)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    acked_before_crash = read_lines(tmp_path / "acks.jsonl")
    assert acked_before_crash, "the worker acknowledged nothing before dying"

    resumed = run_worker(tmp_path, *extra)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    states = json.loads(resumed.stdout.strip().splitlines()[-1])
    expected = f"done {[n * 10 for n in range(1, STEPS + 1)]}"
    assert {s["status"] for s in states.values()} == {"finished"}, states
    assert all(s["result"] == expected for s in states.values())

    # The tool's own record of what it did: every call exactly once.
    effects = read_lines(tmp_path / "effects.jsonl")
    assert not [k for k, n in Counter(e["key"] for e in effects).items() if n > 1]
    assert sorted(e["n"] for e in effects) == sorted(list(range(1, STEPS + 1)) * AGENTS)

    # Every record acknowledged before the crash is in the database, byte for byte.
    with sqlite3.connect(tmp_path / "agents.db") as db:
        stored = {
            (agent, seq): hashlib.sha256(data).hexdigest()
            for agent, seq, data in db.execute(
                "SELECT s.agent_id, r.seq, r.data FROM records r JOIN streams s ON s.id = r.stream_id"
            )
        }
    for ack in acked_before_crash:
        assert stored.get((ack["agent"], ack["seq"])) == ack["sha"], ack
