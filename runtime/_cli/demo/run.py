"""``durably demo``: crash a real agent run with SIGKILL, resume it, approve it
from another process, and verify from the tools' own effects on disk that
nothing was lost and nothing was done twice.

Steps: (1) an uninterrupted reference run in a private in-memory store;
(2) worker 1 starts the same run on the real store and SIGKILLs itself at a
random model call and boundary; (3) worker 2 resumes it until it parks on the
approval gate and exits; (4) a separate ``durably approve`` process decides;
(5) worker 3 resumes and finishes. Then every check is printed; the exit
status is 1 if any fails.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from durably import Runtime
from durably._cli.demo.survey import CANDIDATES, _read_lines, survey_agent, survey_task
from durably.storage import StreamId, open_store
from durably.storage._url_redaction import SecretScrubber, redact_url

NAMESPACE = "demo"
CRASH_POINTS = ["model:before_call", "tool:before_effect", "tool:after_effect"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _worker(store: str, agent_id: str, workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "durably._cli.demo.worker",
        "--store",
        store,
        "--namespace",
        NAMESPACE,
        "--agent-id",
        agent_id,
        "--workdir",
        str(workdir),
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def _last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"worker printed no state (exit {proc.returncode}): {proc.stderr[-2000:]}")
    state: dict[str, Any] = json.loads(lines[-1])
    return state


async def _reference(workdir: Path, agent_id: str, modules: list[str]) -> dict[str, Any]:
    """The same run, never interrupted, approved in-process."""
    definition = survey_agent(workdir)
    async with Runtime("memory://", agents=[definition], namespace=NAMESPACE) as rt:
        state = await rt.run(definition, agent_id, survey_task(modules))
        for approval in state.open_approvals():
            await rt.approve(agent_id, approval["approval_id"], by="reference")
        for _ in range(2000):
            state = await rt.status(agent_id)
            if state.status == "finished":
                break
            await anyio.sleep(0.01)
        return {"status": state.status, "result": state.result}


async def _purge(store: str, agent_id: str) -> None:
    async with open_store(store) as s:
        await s.delete_stream(StreamId(NAMESPACE, agent_id))


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.md"))}


def run_demo(
    store: str, out: Path, seed: int | None, n_modules: int, console: Console, model: str | None = None
) -> int:
    """Run the whole demo; return the process exit status (0: every check passed).

    ``model``: a ``provider:model`` spec (e.g. ``openai:gpt-4.1-mini``, key from
    the provider's usual environment variable) to run the survey with a real
    LLM. A real model is not deterministic, so there is no reference run to
    compare files with: the checks are then the ones any run must pass (the
    SIGKILL, no model turn paid twice, no tool effect twice, the approval from
    another process, a finished run)."""
    seed = seed if seed is not None else random.SystemRandom().randrange(1_000_000)
    rng = random.Random(seed)
    modules = rng.sample(CANDIDATES, n_modules)
    agent_id = f"stdlib-survey-{seed}"
    ref_dir, run_dir = out / "reference", out / "run"
    for d in (ref_dir, run_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    secrets = SecretScrubber([store])  # what the demo prints of its store and workers: no password
    console.print(f"[bold]durably demo[/] seed={seed} store={escape(redact_url(store))} agent={NAMESPACE}/{agent_id}")
    console.print(f"task: survey {n_modules} stdlib modules: {', '.join(modules)}")

    extra = ("--model", model) if model else ()
    if model is None:
        console.print("1. reference run (uninterrupted, in memory)...")
        reference = anyio.run(_reference, ref_dir, agent_id, modules)
        ref_calls = _read_lines(ref_dir / "model_calls.jsonl")
    else:
        console.print(f"1. model {model}: no reference run (a real model is not deterministic)", markup=False)
        reference, ref_calls = None, []

    anyio.run(_purge, store, agent_id)
    crash_call = rng.randint(2, 3 * n_modules if model is None else max(2, n_modules))
    crash_point = rng.choice(CRASH_POINTS)
    console.print(f"2. worker 1 starts the run and will SIGKILL itself at model call {crash_call}, {crash_point}...")
    w1 = _worker(
        store, agent_id, run_dir, "--modules", ",".join(modules), "--crash-at", f"{crash_call}:{crash_point}", *extra
    )
    console.print(f"   worker 1 exit status {w1.returncode}")
    console.print("3. worker 2 resumes from the journal...")
    w2 = _worker(store, agent_id, run_dir, *extra)
    parked = _last_json(w2) if w2.returncode == 0 else {"status": f"exit {w2.returncode}", "approvals": []}
    console.print(f"   worker 2 exited: agent {parked['status']}, open approvals {parked['approvals']}")
    approver = None
    if parked["approvals"]:
        argv = [
            "approve",
            agent_id,
            parked["approvals"][0],
            "--store",
            store,
            "--namespace",
            NAMESPACE,
            "--by",
            "demo-reviewer",
        ]
        console.print(f"4. a separate process approves: durably {secrets.text(' '.join(argv))}", markup=False)
        approver = subprocess.run([sys.executable, "-m", "durably", *argv], capture_output=True, text=True, timeout=120)
        console.print(f"   {secrets.text(approver.stdout.strip() or approver.stderr.strip())}", markup=False)
    console.print("5. worker 3 resumes and finishes...")
    w3 = _worker(store, agent_id, run_dir, *extra)
    final = _last_json(w3) if w3.returncode == 0 else {"status": f"exit {w3.returncode}", "result": None}

    checks = verify(ref_dir, run_dir, ref_calls, reference, final, w1, w2, w3, approver, modules)
    table = Table(title="verification (judged from files the tools and the model wrote)")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail")
    for check in checks:
        table.add_row(check.name, "[green]ok[/]" if check.ok else "[red]FAILED[/]", check.detail)
    console.print(table)
    failed = [c for c in checks if not c.ok]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed[/] (seed {seed}; rerun with --seed {seed})")
        for proc in (w1, w2, w3):
            if proc.stderr.strip():
                console.print(secrets.text(proc.stderr[-3000:]), markup=False)
        return 1
    console.print(
        f"[green]all {len(checks)} checks passed[/]: the run survived SIGKILL and a restart without repeating work."
    )
    return 0


def surveyed(run_dir: Path, modules: list[str]) -> Check:
    """Whether every module the task asked for was surveyed: a summary file each and a row in the report
    (a reference run with the same blind spot cannot catch a module that was never read)."""
    summaries = sorted(p.stem for p in (run_dir / "summaries").glob("*.md"))
    report = run_dir / "report.md"
    rows = (
        {line.split("|")[1].strip() for line in report.read_text().splitlines() if line.startswith("| ")}
        if report.exists()
        else set()
    )
    missing = [m for m in modules if m not in summaries or m not in rows]
    return Check(
        "every module surveyed",
        not missing and len(summaries) == len(modules),
        f"{len(summaries)} of {len(modules)} modules summarised and reported"
        + (f"; missing: {', '.join(missing)}" if missing else ""),
    )


def verify(
    ref_dir: Path,
    run_dir: Path,
    ref_calls: list[dict[str, Any]],
    reference: dict[str, Any] | None,
    final: dict[str, Any],
    w1: subprocess.CompletedProcess[str],
    w2: subprocess.CompletedProcess[str],
    w3: subprocess.CompletedProcess[str],
    approver: subprocess.CompletedProcess[str] | None,
    modules: list[str],
) -> list[Check]:
    """Compare the crashed run's effects on disk with the reference run's, and with the task's
    ``modules``. Returns one ``Check`` per verdict."""
    calls = _read_lines(run_dir / "model_calls.jsonl")
    by_pid = Counter(c["pid"] for c in calls)
    first_pid = calls[0]["pid"] if calls else None
    before = by_pid.get(first_pid, 0)
    turns = [c["turn"] for c in calls]
    effects = _read_lines(run_dir / "effects.jsonl")
    ref_effects = _read_lines(ref_dir / "effects.jsonl")
    keys = Counter(e["key"] for e in effects)
    twice = [k for k, n in keys.items() if n > 1]
    if reference is None:  # a real model: the checks every run must pass, without a reference to compare
        return [
            Check("worker 1 killed by SIGKILL", w1.returncode == -signal.SIGKILL, f"exit status {w1.returncode}"),
            Check(
                "no model turn paid twice",
                len(turns) == len(set(turns)),
                f"{len(calls)} calls for {len(set(turns))} turns",
            ),
            Check("no tool executed twice", not twice, f"{len(effects)} side effects, {len(twice)} keys twice"),
            Check(
                "approval from another process",
                approver is not None and approver.returncode == 0,
                "worker 2 parked and exited; `durably approve` decided; worker 3 resumed",
            ),
            Check("run finished", final.get("status") == "finished", f"{final.get('status')}: {final.get('result')}"),
            surveyed(run_dir, modules),
        ]
    outbox = [(m["channel"], m["message"]) for m in _read_lines(run_dir / "outbox.jsonl")]
    ref_outbox = [(m["channel"], m["message"]) for m in _read_lines(ref_dir / "outbox.jsonl")]
    ref_files, run_files = _files(ref_dir), _files(run_dir)
    return [
        Check("worker 1 killed by SIGKILL", w1.returncode == -signal.SIGKILL, f"exit status {w1.returncode}"),
        Check(
            "steps before / after the crash",
            before > 0 and len(calls) - before > 0,
            f"{before} model calls before the crash, {len(calls) - before} after, in {len(by_pid)} processes",
        ),
        Check(
            "no model call repeated",
            len(turns) == len(set(turns)) and len(calls) == len(ref_calls),
            f"{len(calls)} calls for {len(set(turns))} turns; uninterrupted run: {len(ref_calls)}",
        ),
        Check(
            "no tool executed twice",
            not twice and Counter(e["tool"] for e in effects) == Counter(e["tool"] for e in ref_effects),
            f"{len(effects)} side effects, {len(twice)} keys twice; per tool {dict(Counter(e['tool'] for e in effects))}",
        ),
        Check("outbox identical", outbox == ref_outbox, f"{len(outbox)} messages sent, reference {len(ref_outbox)}"),
        Check(
            "files identical",
            run_files == ref_files,
            f"{len(run_files)} files (summaries + report) vs {len(ref_files)}",
        ),
        Check(
            "approval from another process",
            approver is not None and approver.returncode == 0 and w2.returncode == 0,
            "worker 2 parked and exited; `durably approve` decided; worker 3 resumed",
        ),
        Check(
            "final result identical",
            final.get("status") == "finished" and final.get("result") == reference["result"],
            f"{final.get('status')}: {final.get('result')}",
        ),
        surveyed(run_dir, modules),
    ]
