"""The frameworks bench's crash trial, as ``durably bench --suite frameworks`` runs it: the same Pydantic AI agent,
killed inside its side-effecting tool after the effect, recovered by durably and by DBOS (``DBOSAgent``, SQLite).

durably runs the effect once (the ``reconcile`` policy finds it in the ledger by
its idempotency key); DBOS runs it again (a plain function tool is not a DBOS
step, and a step is recorded only after it returns). Both finish with the right
answer and pay no stored model answer twice. Its figures are re-measured here so
that the comparison the docs quote stays true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.bench.framework_child import file_bytes
from durably.bench.frameworks import CASES, run_child

pytest.importorskip("dbos")


@pytest.mark.parametrize("engine", ["durably", "dbos"])
async def test_killed_inside_the_tool_after_its_effect(tmp_path: Path, engine: str) -> None:
    (case,) = [c for c in CASES if c.framework == "pydantic-ai" and c.engine == engine]
    db = tmp_path / "agent.db"
    killed = await run_child(case, db, tmp_path, charges=1, approval=True, kill="in_tool")
    assert killed.code in (-9, 137), killed.stderr
    done = await run_child(case, db, tmp_path, charges=1, approval=True)
    assert done.code == 0, done.stderr
    assert done.figures is not None and done.figures["output"] == case.answer
    assert done.requests == {"0": 1, "1": 1, "2": 1}  # no stored model answer was asked for again
    assert done.effects == {"charge": 1 if engine == "durably" else 2, "refund": 1}
    assert file_bytes(db) > 0
