"""A function agent killed (SIGKILL) at every boundary of a journaled call, then finished
by another process: each effect happens once, by the call's policy.

The worker (tests/support/function_worker.py) charges through ``run.call`` and
writes each effect to a ledger file keyed by the call's idempotency key. Under
``reconcile`` the resumed run asks the ledger and never charges twice; under
``ask`` an approval is requested and the operator reports the ledger's result
(or approves a run when nothing happened); under ``retry`` the charge may run
again, but always with the same key, so a key-deduplicating system does it once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pg_server import PostgresTestServer
from support_agents import read_lines

WORKER = Path(__file__).resolve().parents[1] / "support" / "function_worker.py"
BOUNDARIES = ["before_intent", "before_effect", "after_effect", "after_result", "parked"]


def worker(store: str, ledger: Path, policy: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(WORKER), "--store", store, "--ledger", str(ledger), "--policy", policy]
    if crash is not None:
        argv += ["--crash", crash]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def crash_then_finish(store: str, ledger: Path, policy: str, boundary: str) -> dict[str, Any]:
    killed = worker(store, ledger, policy, boundary)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    finished = worker(store, ledger, policy)
    assert finished.returncode == 0, finished.stderr[-2000:]
    state: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    assert state["status"] == "finished", state
    return state


def effects(ledger: Path) -> list[dict[str, Any]]:
    return read_lines(ledger)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_reconcile_charges_once_whatever_the_kill(tmp_path: Path, boundary: str) -> None:
    ledger = tmp_path / "ledger.jsonl"
    state = crash_then_finish(f"sqlite:///{tmp_path / 'j.db'}", ledger, "reconcile", boundary)
    lines = effects(ledger)
    assert len(lines) == 1, lines
    assert state["result"] == {"charge": f"ch-{lines[0]['key'][:8]}", "approved": True}
    (entry,) = state["ledger"].values()
    assert entry["done"] and entry["error"] is None
    assert entry.get("reconciled", False) == (boundary == "after_effect")


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_ask_turns_an_unknown_outcome_into_an_approval(tmp_path: Path, boundary: str) -> None:
    ledger = tmp_path / "ledger.jsonl"
    state = crash_then_finish(f"sqlite:///{tmp_path / 'j.db'}", ledger, "ask", boundary)
    lines = effects(ledger)
    assert len(lines) == 1, lines
    unknown = boundary in ("before_effect", "after_effect")  # an intent without a result
    assert state["approvals"] == (["approval-1", "call-1#attempt2"] if unknown else ["approval-1"])
    assert state["result"]["charge"] == f"ch-{lines[0]['key'][:8]}"


@pytest.mark.parametrize("boundary", ["before_effect", "after_effect"])
def test_retry_runs_again_with_the_same_key(tmp_path: Path, boundary: str) -> None:
    ledger = tmp_path / "ledger.jsonl"
    crash_then_finish(f"sqlite:///{tmp_path / 'j.db'}", ledger, "retry", boundary)
    lines = effects(ledger)
    assert len({line["key"] for line in lines}) == 1, lines
    # The intent was durable: the resumed run is attempt 2, under the key attempt 1 had.
    assert [line["attempt"] for line in lines] == ([1, 2] if boundary == "after_effect" else [2])


@pytest.mark.parametrize("boundary", ["after_effect", "parked"])
def test_on_postgresql_too(tmp_path: Path, pg_server: PostgresTestServer, boundary: str) -> None:
    ledger = tmp_path / "ledger.jsonl"
    crash_then_finish(pg_server.url(), ledger, "reconcile", boundary)
    assert len(effects(ledger)) == 1


def show(store: str, *extra: str) -> str:
    argv = [sys.executable, "-m", "durably", "show", "r-1", "--store", store, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_call_killed_in_flight_is_shown_with_its_arguments_and_so_is_its_approval(tmp_path: Path) -> None:
    store, ledger = f"sqlite:///{tmp_path / 'j.db'}", tmp_path / "ledger.jsonl"
    killed = worker(store, ledger, "ask", "after_effect")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (pending,) = json.loads(show(store, "--json"))["pending_calls"]
    assert (pending["id"], pending["tool"], pending["arguments"]) == ("call-1", "charge", {"amount": 5})
    assert pending["started"] and pending["attempts"] == 1
    assert 'pending call:  call-1: charge({"amount":5}) [started, attempt 1]' in show(store)
    # The next activation asks what became of the charge: the operator sees what it was given.
    parked = worker(store, ledger, "ask", "parked")
    assert parked.returncode == -signal.SIGKILL, parked.stderr[-2000:]
    (approval,) = json.loads(show(store, "--json"))["open_approvals"]
    assert approval["approval_id"] == "call-1#attempt2" and approval["arguments"] == {"amount": 5}
    assert 'call-1#attempt2: charge({"amount": 5})' in show(store)
