"""Peer: DBOS Transact on SQLite, the same conversation and the same step as LangGraph's.

The agent is a DBOS workflow that loops as LangGraph's tool-calling graph
does: a ``model`` step (the scripted model: its answer, with one tool call, is
the step's checkpointed output) and a ``tool`` step (the tool's result), until
the model answers without a tool call. Both steps are the bench's scripted
ones (``workload.Step``): no sleep, O(1) per call; the model step records
``perf_counter`` at each call, as ``ScriptedModel`` does. The system database
is a SQLite file in DBOS's own schema; its connections are put in WAL mode
with ``synchronous=FULL``, as durably's and LangGraph's are (DBOS's default,
a rollback journal, is as durable but slower: WAL is the generous choice).

DBOS is a process-wide singleton with background threads, so each run is a
child process: ``python -m durably.bench.dbos_peer DB STEPS SEED OUT`` writes
its figures as JSON to ``OUT``; ``run_dbos`` starts it and reads them. Needs
the ``peers`` extra (``pip install 'durably[peers]'``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASK = "Fix the failing test in the standard library."
INSTRUCTIONS = "You are a careful software engineer. Use the tools."


def available() -> bool:
    """True when DBOS Transact is importable."""
    return importlib.util.find_spec("dbos") is not None


@dataclass
class DbosRun:
    """One DBOS run: ``wall_s``, per-step seconds, steps, the database's file bytes after close,
    checkpoints (rows of ``operation_outputs``) and the child's CPU seconds over the run (all threads)."""

    wall_s: float
    latencies: list[float]
    steps: int
    file_bytes: int
    checkpoints: int
    cpu_s: float


def file_bytes(path: Path) -> int:
    """Bytes of the database and every file beside it (-wal, -shm, -journal)."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def run_dbos(path: Path, steps: int, seed: int, agent: int = 0) -> DbosRun:
    """Run the ``steps``-step conversation of ``agent`` (seed ``seed``) as a DBOS workflow
    on a fresh SQLite file at ``path``, in a child process. Raises ``RuntimeError`` when
    the child fails or did not store every step."""
    import anyio

    out = path.with_suffix(".json")
    argv = [sys.executable, "-m", "durably.bench.dbos_peer", str(path), str(steps), str(seed), str(agent), str(out)]
    proc = await anyio.run_process(argv, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"the DBOS peer failed ({proc.returncode}): {tail}")
    doc = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    # Counted here, after the child exited: every connection is closed.
    return DbosRun(doc["wall_s"], doc["latencies"], doc["steps"], file_bytes(path), doc["checkpoints"], doc["cpu_s"])


def _child(db: Path, steps_count: int, seed: int, agent: int) -> dict[str, Any]:
    import asyncio

    from dbos import DBOS, DBOSConfig
    from sqlalchemy import event, text

    from .workload import Workload

    steps = Workload(seed).conversation(steps_count, agent)
    results = {s.call_id: s.result for s in steps}
    stamps: list[float] = []

    @DBOS.step()
    async def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        i = len(stamps) - 1
        if i >= len(steps):
            return {"text": "All tests pass now.", "tool_calls": []}
        step = steps[i]
        return {"text": step.text, "tool_calls": [{"id": step.call_id, "name": step.tool, "arguments": step.arguments}]}

    @DBOS.step()
    async def tool(call: dict[str, Any]) -> str:
        return results[call["id"]]

    @DBOS.workflow()
    async def agent_loop(task: str) -> int:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": task},
        ]
        while True:
            response = await model(messages)
            messages.append({"role": "assistant", "content": response["text"], "tool_calls": response["tool_calls"]})
            if not response["tool_calls"]:
                return len(messages)
            for call in response["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": await tool(call)})

    config: DBOSConfig = {"name": "durably-bench", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING"}
    dbos = DBOS(config=config)
    DBOS.launch()
    engine = dbos._sys_db.engine  # the system database's SQLAlchemy engine (DBOS has no option for pragmas)

    def durable(dbapi_conn: Any, _: Any) -> None:
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute("PRAGMA synchronous = FULL")

    event.listen(engine.pool, "connect", durable)
    engine.dispose()  # the connections made from now on get the pragmas

    async def main() -> tuple[float, float, int]:
        start, cpu = time.perf_counter(), time.process_time()
        messages = await agent_loop(TASK)
        return time.perf_counter() - start, time.process_time() - cpu, messages

    wall, cpu, messages = asyncio.run(main())
    with engine.connect() as conn:
        checkpoints = conn.execute(text("SELECT count(*) FROM operation_outputs")).scalar_one()
        journal_mode = conn.execute(text("PRAGMA journal_mode")).scalar_one()
    DBOS.destroy()
    if journal_mode != "wal":
        raise RuntimeError(f"DBOS's database is in journal mode {journal_mode!r}, not WAL")
    if messages != 2 + 2 * len(steps) + 1:
        raise RuntimeError(f"DBOS run ended with {messages} messages, expected {2 + 2 * len(steps) + 1}")
    latencies = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return {"wall_s": wall, "cpu_s": cpu, "latencies": latencies, "steps": len(steps), "checkpoints": checkpoints}


if __name__ == "__main__":
    db_path, count, seed_, agent_, out_path = sys.argv[1:6]
    doc = _child(Path(db_path), int(count), int(seed_), int(agent_))
    Path(out_path).write_text(json.dumps(doc), encoding="utf-8")
