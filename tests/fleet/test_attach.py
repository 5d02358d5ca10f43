"""Attach: ``run()`` on an agent another process runs now waits for its result instead of raising.

A real worker process (``support/serve_worker.py``) runs ``agent-0``, a few
slow steps whose tool logs each start and end to a file. This process calls
``run()`` on the same id meanwhile.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from serve_worker import slow_file_agent
from support_agents import read_lines

from durably import AgentLeasedError, InvalidArgumentError, Runtime

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).resolve().parents[1] / "support" / "serve_worker.py"
STEPS = 5


def spawn(db: Path, effects: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--db", str(db), "--effects", str(effects), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def running_elsewhere(db: Path, effects: Path, step_seconds: float = 0.4) -> subprocess.Popen[str]:
    """A worker running agent-0 (each step's tool taking ``step_seconds``), seen in the middle of its first step."""
    worker = spawn(db, effects, "--start", "1", "--steps", str(STEPS), "--step-seconds", str(step_seconds))
    with anyio.fail_after(60):
        while not [e for e in read_lines(effects) if e["pid"] == worker.pid] and worker.poll() is None:
            await anyio.sleep(0.02)
    assert worker.poll() is None, worker.stderr.read()
    return worker


def stop(worker: subprocess.Popen[str]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGKILL)
    worker.wait()
    worker.stderr.close()


def done_steps(effects: Path) -> list[int]:
    return sorted(e["n"] for e in read_lines(effects) if e["phase"] == "done")


async def test_run_on_an_agent_running_elsewhere_returns_its_result(tmp_path):
    db, effects = tmp_path / "agents.db", tmp_path / "effects.jsonl"
    definition = slow_file_agent(STEPS, effects, 0.4)
    worker = await running_elsewhere(db, effects)
    try:
        async with Runtime(f"sqlite:///{db}", agents=[definition]) as rt:
            with pytest.raises(AgentLeasedError):  # the old behaviour stays available
                await rt.run(definition, "agent-0", "count", on_running="raise")
            with pytest.raises(InvalidArgumentError):
                await rt.run(definition, "agent-0", "count", on_running="maybe")
            state = await rt.run(definition, "agent-0", "count")
    finally:
        stop(worker)
    assert state.status == "finished" and state.result.startswith("done")
    assert done_steps(effects) == list(range(1, STEPS + 1))  # each step once
    assert {e["pid"] for e in read_lines(effects)} == {worker.pid}  # all of it ran there


async def test_an_attached_run_takes_over_when_the_runner_dies(tmp_path, monkeypatch):
    """The runner is killed while ``run()`` here follows it, in the middle of the agent's first step.

    Both are events, not times: the kill waits until ``run()`` follows the runner (it called
    ``wait``), and the runner's tool sleeps far longer than any stall of this process, so the
    runner cannot finish the agent before it is killed, however loaded the machine is. This
    process runs the same definition with short steps (its digest does not cover the sleep)."""
    db, effects = tmp_path / "agents.db", tmp_path / "effects.jsonl"
    definition = slow_file_agent(STEPS, effects, 0.4)
    worker = await running_elsewhere(db, effects, step_seconds=600)
    try:
        async with Runtime(f"sqlite:///{db}", agents=[definition]) as rt, anyio.create_task_group() as tg:
            result = {}
            following = anyio.Event()
            wait = rt.wait

            async def followed(*args, **kwargs):
                following.set()
                return await wait(*args, **kwargs)

            monkeypatch.setattr(rt, "wait", followed)

            async def attached() -> None:
                result["state"] = await rt.run(definition, "agent-0", "count")

            tg.start_soon(attached)
            with anyio.fail_after(60):
                await following.wait()
            assert worker.poll() is None and done_steps(effects) == []  # it follows a runner mid-step
            worker.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(worker.wait)
    finally:
        stop(worker)
    assert result["state"].status == "finished"
    assert done_steps(effects) == list(range(1, STEPS + 1))  # the step cut short is reconciled, never redone twice
    assert len({e["pid"] for e in read_lines(effects)}) == 2  # it ran on here
