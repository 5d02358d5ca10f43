"""SIGKILL a durable Pydantic AI run at every boundary, resume it in another process, count effects and requests.

The agent (tests/support/pydantic_ai_agent.py) asks for ``charge`` (an effect: a
ledger line with the call's idempotency key), then for ``refund`` (an approval,
then an effect), then answers. A forked child runs it with ``KILL`` set and dies
there (exit -9); this process then resumes it and decides what it parks at as a
truthful operator would (pydantic_ai_worker.drive). In every trial:

* each effect happened exactly once (``reconcile`` asks the ledger; ``ask`` asks
  the operator, who says "it happened" when it did);
* the run finished with the answer an uninterrupted run gives;
* no model request whose answer was stored was asked again: each logical request
  was paid once, except the one killed after it was paid and before its answer
  was stored (``before_answer``), which nothing could have kept.

SQLite and PostgreSQL (the local server of tests/support/pg_server.py).
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from pathlib import Path

import pytest
from pydantic_ai_agent import BOUNDARIES, lines
from pydantic_ai_worker import drive, run_once

ANSWER = "done: charge 5 ok; refund 5 ok"


def _killed_run(url: str, work: Path, policy: str, kill: str) -> int:
    # fork: the child starts in milliseconds (pydantic_ai is already imported); no connection is open here.
    process = multiprocessing.get_context("fork").Process(target=run_once, args=(url, str(work), policy, kill))
    process.start()
    process.join(120)
    if process.is_alive():
        process.kill()
        pytest.fail(f"the child killed at {kill!r} hung")
    return process.exitcode


def _trial(url: str, work: Path, policy: str, kill: str) -> None:
    work.mkdir()
    code = _killed_run(url, work, policy, kill)
    assert code == -9, f"{policy}/{kill}: the child ended with {code}, not SIGKILL"
    result, asked = asyncio.run(drive(url, work, policy))
    where = f"{policy}/{kill}"
    assert result.status == "finished", f"{where}: {result.state.reason}"
    assert result.output == ANSWER, where
    effects = Counter(line.split()[0] for line in lines(work / "ledger"))
    assert effects == {"charge": 1, "refund": 1}, f"{where}: {lines(work / 'ledger')}"
    requests = Counter(lines(work / "requests"))
    paid_twice = {"0": 2} if kill == "before_answer" else {}
    assert requests == {"0": 1, "1": 1, "2": 1, **paid_twice}, f"{where}: requests per logical call {requests}"
    asked_tools = [request["tool"] for request in asked]
    if policy == "ask" and kill in ("before_tool", "in_tool"):
        assert asked_tools == ["charge", "approval"], where  # the unknown outcome was asked, then the refund
        assert asked[0]["arguments"] == {"amount": 5}, where  # the operator sees what would run again
    else:
        assert asked_tools == ["approval"], where  # only the refund's own approval


@pytest.mark.parametrize("policy", ["reconcile", "ask"])
def test_sigkill_at_every_boundary_sqlite(tmp_path: Path, policy: str) -> None:
    for kill in BOUNDARIES:
        work = tmp_path / kill
        _trial(f"sqlite:///{work / 'agents.db'}", work, policy, kill)


@pytest.mark.parametrize("policy", ["reconcile", "ask"])
def test_sigkill_at_every_boundary_postgres(tmp_path: Path, policy: str, pg_server) -> None:
    for kill in BOUNDARIES:
        _trial(pg_server.url(), tmp_path / kill, policy, kill)


def test_retry_policy_runs_again_with_the_same_key(tmp_path: Path) -> None:
    """``retry``: the call killed after its effect runs again, with the same idempotency key (at-least-once)."""
    work = tmp_path / "retry"
    work.mkdir()
    url = f"sqlite:///{work / 'agents.db'}"
    assert _killed_run(url, work, "retry", "in_tool") == -9
    result, _ = asyncio.run(drive(url, work, "retry"))
    assert result.output == ANSWER
    charges = [line.split()[2] for line in lines(work / "ledger") if line.startswith("charge ")]
    assert len(charges) == 2 and charges[0] == charges[1]  # twice, under one key a deduplicating system collapses
