"""A function agent submitted from a script (module ``__main__``) is the same
definition to a worker that imports the script's file as a module, also inside
a package; a journal fingerprinted under ``__main__`` resumes; a changed body
is reported in words.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from fleet_processes import stop, wait_for

from durably import FunctionAgent, Run, Runtime
from durably._upkeep.migrate import definition_changed, stop_reason

SCRIPT = """
import sys, anyio, durably

async def double(n: int, ctx: durably.ToolContext) -> int:
    return 2 * n

async def flow(run: durably.Run, task: str) -> list:
    return [await run.call(double, i, name="double") for i in range(3)]

agents = [durably.FunctionAgent("scripted", flow)]

async def main() -> None:
    async with durably.Runtime(sys.argv[1]) as rt:
        await rt.submit(agents[0], "job-1", "go")

if __name__ == "__main__":
    anyio.run(main)
"""


def _serve(folder: Path, script: str, module: str) -> dict[str, Any]:
    """Run ``script`` as ``__main__`` (it submits), then a worker importing ``module``; the agent's end state."""
    url = f"sqlite:///{folder / 'j.db'}"
    subprocess.run([sys.executable, script, url], cwd=folder, check=True, timeout=60)
    command = [sys.executable, "-m", "durably", "worker", "--agents", f"{module}:agents", "--store", url]
    worker = subprocess.Popen([*command, "--poll-interval", "0.2"], cwd=folder, stderr=subprocess.PIPE, text=True)

    async def state() -> dict[str, Any]:
        async with Runtime(url) as rt:
            s = await rt.status("job-1")
            return {"status": s.status, "result": s.result, "reason": s.reason}

    try:
        return wait_for(
            lambda: anyio.run(state),
            60,
            "the worker finishes or stops the agent",
            done=lambda s: s["status"] in ("finished", "needs_migration"),
        )
    finally:
        stop(worker)


def test_a_script_s_agent_runs_on_a_worker_importing_its_file(tmp_path: Path) -> None:
    (tmp_path / "scripted_flow.py").write_text(SCRIPT)
    end = _serve(tmp_path, "scripted_flow.py", "scripted_flow")
    assert end == {"status": "finished", "result": [0, 2, 4], "reason": ""}


def test_a_script_inside_a_package_is_named_with_its_package(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "__init__.py").write_text("")
    (tmp_path / "flows" / "scripted.py").write_text(SCRIPT)
    end = _serve(tmp_path, "flows/scripted.py", "flows.scripted")
    assert end == {"status": "finished", "result": [0, 2, 4], "reason": ""}


async def _body(run: Run, task: str) -> str:
    return task


async def _other_body(run: Run, task: str) -> str:
    return task


def test_a_journal_fingerprinted_under_main_is_the_same_definition() -> None:
    from hashlib import sha256

    definition = FunctionAgent("f", _body)
    where = f"__main__.{_body.__qualname__}"
    legacy = sha256("\x00".join(("function", "f", "1", where)).encode()).hexdigest()[:16]
    assert legacy != definition.digest()
    assert not definition_changed({"name": "f", "version": "1", "digest": legacy}, definition)
    assert not definition_changed(definition.info(), definition)
    assert definition_changed({"name": "f", "version": "1", "digest": "0" * 16}, definition)


def test_a_changed_body_under_the_same_version_is_told_in_words() -> None:
    recorded = FunctionAgent("f", _body).info()
    state = type("S", (), {"definition": recorded})()
    reason = stop_reason(state, FunctionAgent("f", _other_body))  # type: ignore[arg-type]
    assert reason is not None
    assert "version '1' -> '1'" not in reason
    assert f"the function's module or name changed (now '{__name__}._other_body')" in reason
