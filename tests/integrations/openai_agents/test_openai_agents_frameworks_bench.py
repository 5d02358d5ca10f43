"""The frameworks bench's OpenAI Agents case, as ``durably bench --suite frameworks`` runs it: the scripted SDK
agent killed inside its side-effecting tool after the effect, then recovered by durably (``DurableRunner``, SQLite).

The child is the shared frameworks child (``durably.bench.framework_child``):
its figures file, its ledger and its request file are what the suite reads.
durably runs the effect once (``reconcile`` finds it in the ledger by its
idempotency key) and pays no stored model answer twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.bench.framework_child import file_bytes
from durably.bench.frameworks import CASES, run_child

pytest.importorskip("agents")


async def test_killed_inside_the_tool_after_its_effect_runs_it_once(tmp_path: Path) -> None:
    (case,) = [c for c in CASES if c.framework == "openai-agents" and c.engine == "durably"]
    db = tmp_path / "agent.db"
    killed = await run_child(case, db, tmp_path, charges=1, approval=True, kill="in_tool")
    assert killed.code in (-9, 137), killed.stderr
    assert killed.figures is None and killed.effects == {"charge": 1}
    done = await run_child(case, db, tmp_path, charges=1, approval=True)
    assert done.code == 0, done.stderr
    assert done.figures is not None and done.figures["output"] == case.answer
    assert done.figures["wall_s"] > 0 and done.figures["cpu_s"] > 0
    assert done.requests == {"0": 1, "1": 1, "2": 1}  # no stored model answer was asked for again
    assert done.effects == {"charge": 1, "refund": 1}
    assert file_bytes(db) > 0


async def test_a_throughput_run_writes_its_figures(tmp_path: Path) -> None:
    (case,) = [c for c in CASES if c.framework == "openai-agents" and c.engine == "durably"]
    run = await run_child(case, tmp_path / "agent.db", tmp_path, charges=3, approval=False)
    assert run.code == 0, run.stderr
    assert run.figures is not None and run.figures["output"].startswith("done")
    assert run.requests == {"0": 1, "1": 1, "2": 1, "3": 1} and run.effects == {"charge": 3}
