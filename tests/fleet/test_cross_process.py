"""Human decisions given by another process after a restart: the approval gate
and the budget guard, each across three processes (worker, operator CLI, worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support_agents import read_lines

WORKER = Path(__file__).resolve().parents[1] / "support" / "approval_worker.py"


def worker(tmp_path: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            str(WORKER),
            "--db",
            str(tmp_path / "a.db"),
            "--effects",
            str(tmp_path / "effects.jsonl"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def durably(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}  # a wide terminal, so table cells are not wrapped
    return subprocess.run(
        [sys.executable, "-m", "durably._cli", *argv, "--store", f"sqlite:///{tmp_path}/a.db"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_approval_given_by_another_process_after_restart(tmp_path):
    parked = worker(tmp_path, "--approval", "--steps", "2")
    assert parked["status"] == "waiting_approval" and parked["approvals"] == ["c1"]
    assert read_lines(tmp_path / "effects.jsonl") == []  # nothing ran before the decision

    listing = durably(tmp_path, "agents")
    assert listing.returncode == 0 and 'c1: effect({"n": 1})' in listing.stdout  # what the operator approves

    decided = durably(tmp_path, "approve", "a1", "c1", "--by", "alice")
    assert decided.returncode == 0 and "approved" in decided.stdout
    again = durably(tmp_path, "approve", "a1", "c1")
    assert again.returncode == 1 and "already decided" in again.stdout

    parked = worker(tmp_path, "--approval", "--steps", "2")  # a new process: runs call 1, parks at call 2
    assert parked["status"] == "waiting_approval" and parked["approvals"] == ["c2"]
    assert durably(tmp_path, "approve", "a1", "c2", "--deny", "--note", "enough").returncode == 0
    final = worker(tmp_path, "--approval", "--steps", "2")
    assert final["status"] == "finished"
    assert [e["n"] for e in read_lines(tmp_path / "effects.jsonl")] == [1]  # approved once, denied once
    assert "denied" in final["result"]


def test_budget_suspends_and_an_operator_extends_it(tmp_path):
    suspended = worker(tmp_path, "--steps", "3", "--budget-steps", "2")
    assert suspended["status"] == "suspended" and "steps limit 2" in suspended["reason"]
    extended = durably(tmp_path, "extend", "a1", "--steps", "5")
    assert extended.returncode == 0 and "budget extended" in extended.stdout
    final = worker(tmp_path, "--steps", "3", "--budget-steps", "2")
    assert final["status"] == "finished"
    assert [e["n"] for e in read_lines(tmp_path / "effects.jsonl")] == [1, 2, 3]


def test_operator_text_is_shown_as_text_not_markup(tmp_path):
    worker(tmp_path, "--approval", "--steps", "2")
    assert durably(tmp_path, "cancel", "a1", "--reason", "see [/tmp/x] and [red]this[/red]").returncode == 0
    listing = durably(tmp_path, "agents")
    assert listing.returncode == 0, listing.stderr
    assert "[/tmp/x]" in listing.stdout and "[red]this[/red]" in listing.stdout
