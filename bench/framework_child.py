"""The child process side of the frameworks suite, shared by every framework's agent module.

A framework module (``frameworks_pydantic_ai``, ``frameworks_openai_agents``)
builds the same refund agent on its framework and gives ``main`` one runner per
engine; ``main`` reads the command line of the protocol ``frameworks`` drives
(``ENGINE DB WORK CHARGES APPROVAL``), runs the engine's runner and writes
``WORK/figures.json``. The agent's tools and model count what they do with
``append_line`` (one fsynced line per effect or request, so a SIGKILL loses
none) and die at a boundary with ``kill_here`` (``KILL`` in the environment).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from durably.errors import InvalidArgumentError

#: The ``KILL`` values every framework's agent knows, in the order a run passes them.
BOUNDARIES = ("before_tool", "in_tool", "after_tool", "before_answer")
PROMPT = "refund order 42"

#: ``runner(db, work, charges, approval)`` -> (the run's output, seconds of the agent's runs).
Runner = Callable[[Path, Path, int, bool], Coroutine[Any, Any, tuple[Any, float]]]


def lines(path: Path) -> list[str]:
    """The lines of a ledger or request file (none if it does not exist)."""
    return path.read_text().splitlines() if path.exists() else []


def kill_here(boundary: str) -> None:
    """SIGKILL this process if ``KILL`` (environment) names ``boundary``."""
    if os.environ.get("KILL") == boundary:
        os.kill(os.getpid(), signal.SIGKILL)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to ``path`` and fsync it: it survives the SIGKILL that may follow."""
    with path.open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def file_bytes(path: Path) -> int:
    """Bytes of a SQLite database and every file beside it (-wal, -shm, -journal)."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def main(runners: Mapping[str, Runner], argv: Sequence[str]) -> None:
    """Run ``runners[ENGINE]`` for ``argv`` = ``ENGINE DB WORK CHARGES APPROVAL`` (APPROVAL ``1`` or ``0``)
    and write ``WORK/figures.json``: ``output``, ``wall_s`` (as the runner measured it), ``cpu_s`` (this
    process from this call on). Raises ``InvalidArgumentError`` for a short ``argv``, ``KeyError``
    for an unknown engine, and whatever the runner raises (the process then exits non-zero)."""
    if len(argv) < 5:
        raise InvalidArgumentError(f"expected ENGINE DB WORK CHARGES APPROVAL, got {list(argv)}")
    engine, db, work, charges, approval = argv[:5]
    runner = runners[engine]
    cpu = time.process_time()
    output, wall = asyncio.run(runner(Path(db), Path(work), int(charges), approval == "1"))
    doc = {"output": output, "wall_s": wall, "cpu_s": time.process_time() - cpu}
    (Path(work) / "figures.json").write_text(json.dumps(doc), encoding="utf-8")
