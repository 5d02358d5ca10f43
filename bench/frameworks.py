"""frameworks: the same framework agent made durable by durably and by DBOS, side by side.

Each ``FrameworkCase`` names a framework, an engine and the module whose child
process runs the agent: ``python -m MODULE ENGINE DB WORK CHARGES APPROVAL``
runs it on the SQLite file ``DB`` until it ends (deciding its approval), writes
``WORK/figures.json`` (``output``, ``wall_s`` of the agent's runs, ``cpu_s``)
and leaves two counting files in ``WORK``: ``ledger`` (one line per effect of a
tool, its kind first) and ``requests`` (one line per model request paid, the
logical request's number). A process given ``KILL=<boundary>`` dies there by
SIGKILL. Cases of other frameworks append themselves to ``CASES``.

Two figures per case:

* throughput: ``CHARGES`` tool steps without approval; steps/s (model requests
  per second of the agent's runs) and bytes on disk (every file of the database).
* crash: per boundary and trial, one process killed there, then one that
  recovers and finishes; counted: effects of each tool (``charge`` should run
  once), model requests per logical request (1 unless the one killed after it
  was paid and before its answer was stored), and whether the answer is right.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from .context import Bench
from .framework_child import BOUNDARIES, file_bytes, lines

SUITE = "frameworks"
STORE = "sqlite (a file per run)"


def _importable(*modules: str) -> Callable[[], bool]:
    return lambda: all(importlib.util.find_spec(module) is not None for module in modules)


@dataclass(frozen=True)
class FrameworkCase:
    """One framework on one engine: who runs it and what its right answer is.

    Attributes:
        framework: e.g. ``pydantic-ai``.
        engine: e.g. ``durably``, ``dbos``.
        module: The child process's module (the protocol above).
        boundaries: The ``KILL`` values its agent knows.
        answer: The output of a run that went right.
        available: False when the framework or engine is not installed (the case is skipped, with a note).
    """

    framework: str
    engine: str
    module: str
    boundaries: tuple[str, ...]
    answer: str
    available: Callable[[], bool]

    @property
    def system(self) -> str:
        """The figures' system name: ``framework/engine``."""
        return f"{self.framework}/{self.engine}"


_PYDANTIC_AI = "durably.bench.frameworks_pydantic_ai"
_OPENAI_AGENTS = "durably.bench.frameworks_openai_agents"
_ANSWER = "done: charge 5 ok; refund 5 ok"

CASES: list[FrameworkCase] = [
    FrameworkCase("pydantic-ai", "durably", _PYDANTIC_AI, BOUNDARIES, _ANSWER, _importable("pydantic_ai")),
    FrameworkCase("pydantic-ai", "dbos", _PYDANTIC_AI, BOUNDARIES, _ANSWER, _importable("pydantic_ai", "dbos")),
    FrameworkCase("openai-agents", "durably", _OPENAI_AGENTS, BOUNDARIES, _ANSWER, _importable("agents")),
    FrameworkCase(
        "openai-agents",
        "dbos",
        _OPENAI_AGENTS,
        BOUNDARIES,
        _ANSWER,
        _importable("agents", "dbos", "dbos_openai_agents"),
    ),
]


@dataclass
class ChildRun:
    """What one child process left: its exit code, figures (None if it died) and counts."""

    code: int
    figures: dict[str, Any] | None
    effects: Counter[str]
    requests: Counter[str]
    stderr: str


async def run_child(
    case: FrameworkCase, db: Path, work: Path, *, charges: int, approval: bool, kill: str = ""
) -> ChildRun:
    """Run the case's child once (killed at ``kill``, if given) and read what it left."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "figures.json").unlink(missing_ok=True)
    argv = [sys.executable, "-m", case.module, case.engine, str(db), str(work), str(charges), "1" if approval else "0"]
    env = {**os.environ, "KILL": kill}
    proc = await anyio.run_process(argv, check=False, env=env)
    figures_file = work / "figures.json"
    figures = json.loads(figures_file.read_text(encoding="utf-8")) if figures_file.exists() else None
    return ChildRun(
        proc.returncode,
        figures,
        Counter(line.split()[0] for line in lines(work / "ledger")),
        Counter(lines(work / "requests")),
        proc.stderr.decode(errors="replace")[-2000:],
    )


async def _throughput(bench: Bench, case: FrameworkCase, steps: int) -> None:
    r = bench.results
    work = bench.scratch / f"frameworks-{case.framework}-{case.engine}-{steps}-{bench.run_id}"
    db = work / "agent.db"
    run = await run_child(case, db, work, charges=steps, approval=False)
    requests = sum(run.requests.values())
    output = (run.figures or {}).get("output")
    finished = isinstance(output, str) and output.startswith("done") and requests == steps + 1
    if run.code != 0 or run.figures is None or not finished:
        r.note(f"frameworks: {case.system} throughput run failed ({run.code}, {output!r}): {run.stderr}")
        return
    params: dict[str, Any] = {"steps": steps}
    r.add(SUITE, "steps_per_s", requests / run.figures["wall_s"], "steps/s", system=case.system, store=STORE, **params)
    r.add(SUITE, "file_bytes", file_bytes(db), "B", system=case.system, store=STORE, **params)
    r.add(SUITE, "cpu_s", run.figures["cpu_s"], "s", system=case.system, store=STORE, **params)


async def _crash(bench: Bench, case: FrameworkCase, boundaries: tuple[str, ...], trials: int, task: Any) -> None:
    r = bench.results
    for boundary in boundaries:
        twice = wrong = repaid = 0
        for trial in range(trials):
            work = bench.scratch / f"frameworks-crash-{case.framework}-{case.engine}-{boundary}-{trial}-{bench.run_id}"
            db = work / "agent.db"
            killed = await run_child(case, db, work, charges=1, approval=True, kill=boundary)
            if killed.code not in (-9, 137):
                r.note(f"frameworks: {case.system} was not killed at {boundary} ({killed.code}): {killed.stderr}")
            done = await run_child(case, db, work, charges=1, approval=True)
            output = (done.figures or {}).get("output")
            twice += any(count > 1 for count in done.effects.values())
            wrong += output != case.answer
            # A request killed after it was paid and before its answer was stored is asked again by any engine.
            unavoidable = 1 if boundary == "before_answer" else 0
            repaid += sum(count - 1 for count in done.requests.values()) > unavoidable
            bench.progress.advance(task)
        params: dict[str, Any] = {"boundary": boundary, "trials": trials}
        store = STORE
        r.add(SUITE, "effect_twice_trials", twice, "trials", system=case.system, store=store, **params)
        r.add(SUITE, "stored_answer_repaid_trials", repaid, "trials", system=case.system, store=store, **params)
        r.add(SUITE, "wrong_answer_trials", wrong, "trials", system=case.system, store=store, **params)


async def run(bench: Bench) -> None:
    """Every available case: throughput at the bench's size, then the crash trials at every boundary.

    Five trials per boundary by default (as the DBOS figures of the issue were
    measured), one with --quick; the tests' tiny sizes run no crash trial (each
    trial is two processes; the bridge's own tests kill at every boundary).
    """
    steps = min(bench.sizes.peer_steps, 200)
    trials = 1 if bench.sizes.peer_steps <= 200 else 5
    cases = [case for case in CASES if case.available()]
    for case in CASES:
        if case not in cases:
            bench.results.note(f"frameworks: {case.system} skipped (not installed)")
    tiny = bench.sizes.peer_steps < 50

    def boundaries(case: FrameworkCase) -> tuple[str, ...]:
        return () if tiny else case.boundaries

    if tiny:
        bench.results.note("frameworks: no crash trials at these sizes (throughput only)")

    total = sum(1 + len(boundaries(case)) * trials for case in cases)
    task = bench.progress.start("frameworks: throughput and crash trials", total)
    for case in cases:
        await _throughput(bench, case, steps)
        bench.progress.advance(task)
        await _crash(bench, case, boundaries(case), trials, task)
    for name, better in (("steps_per_s", "higher"), ("file_bytes", "lower")):
        frameworks = sorted({case.framework for case in cases})
        for framework in frameworks:
            r = bench.results
            r.ratio(
                SUITE,
                f"{framework} {name} durably/dbos",
                r.find(SUITE, name, f"{framework}/durably", steps=steps),
                r.find(SUITE, name, f"{framework}/dbos", steps=steps),
                better=better,
                steps=steps,
            )
