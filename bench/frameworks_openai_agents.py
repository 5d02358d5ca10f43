"""One OpenAI Agents SDK agent, run durable by durably (``DurableRunner``) and by DBOS (``DBOSRunner``),
for the frameworks suite.

The agent is the same for both: a scripted SDK ``Model`` (the SDK's own model
interface, no network) asks for ``charge(amount=5)`` (an effect: a ledger
line), ``charges`` times in a row, then (with ``approval``) for
``refund(amount=5)``, a ``needs_approval`` tool, then answers with what the
tools returned. Every model request is a line in a request file (the logical
call's number: tool results so far) and every effect a ledger line, so
executions per logical call are counted across processes. ``KILL``
(environment) names the boundary a process SIGKILLs itself at, once:
``before_tool`` (in ``charge``, before its effect), ``in_tool`` (after its
effect), ``after_tool`` (at the next model request, before it is paid),
``before_answer`` (in the first request, paid, its answer not stored).

DBOS is set up as ``dbos-openai-agents`` documents it: ``DBOSRunner.run``
inside a ``@DBOS.workflow()``, the tools ``@DBOS.step()``s; its approval is a
``DBOS.recv`` in the workflow, sent by the driver. durably runs ``charge`` and
``refund`` under ``reconcile`` (the hook reads the ledger for the key).

Each engine runs in child processes (DBOS is a process-wide singleton):
``python -m durably.bench.frameworks_openai_agents ENGINE DB WORK CHARGES APPROVAL``
runs the agent to its end and writes its figures to ``WORK/figures.json``;
``measure(work)`` runs both engines (throughput, bytes, and the crash test)
and returns the case's figures. Needs ``openai-agents`` (and
``dbos-openai-agents`` for the DBOS side).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

BOUNDARIES = ("before_tool", "in_tool", "after_tool", "before_answer")
PROMPT = "refund order 42"
RUN_ID = "run-1"


def lines(path: Path) -> list[str]:
    """The lines of a ledger or request file (none if it does not exist)."""
    return path.read_text().splitlines() if path.exists() else []


def _kill_here(boundary: str) -> None:
    if os.environ.get("KILL") == boundary:
        os.kill(os.getpid(), signal.SIGKILL)


def _append(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def scripted_model(work: Path, charges: int, approval: bool) -> Any:
    """The SDK ``Model`` both engines ask: its requests are lines of ``work/requests``."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    requests = work / "requests"

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            items = input if isinstance(input, list) else []
            done = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if len(done) == 1:
                _kill_here("after_tool")  # charge's result is stored; this request is not paid yet
            _append(requests, str(len(done)))
            if not done:
                _kill_here("before_answer")  # the first request is paid; its answer is not stored
            usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
            if len(done) < charges or (approval and len(done) == charges):
                name = "charge" if len(done) < charges else "refund"
                call = ResponseFunctionToolCall(
                    type="function_call", call_id=f"call_{len(done)}", name=name, arguments='{"amount": 5}'
                )
                return ModelResponse(output=[call], usage=usage, response_id=None)
            text = "done: " + "; ".join(str(i.get("output")) for i in done[-2:])
            message = ResponseOutputMessage(
                type="message",
                id="msg",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
            return ModelResponse(output=[message], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Scripted()


def build_agent(work: Path, key: Any, charges: int, approval: bool, step: Any = None) -> Any:
    """The agent; ``key(ctx)`` gives the idempotency key written with each effect; ``step`` wraps the tools (DBOS)."""
    from agents import Agent, function_tool
    from agents.tool_context import ToolContext

    ledger = work / "ledger"

    async def charge(ctx: ToolContext[Any], amount: int) -> str:
        """Charge the customer.

        Args:
            amount: In cents.
        """
        _kill_here("before_tool")
        _append(ledger, f"charge {amount} {key(ctx)}")
        _kill_here("in_tool")
        return f"charge {amount} ok"

    async def refund(ctx: ToolContext[Any], amount: int) -> str:
        """Refund the customer.

        Args:
            amount: In cents.
        """
        _append(ledger, f"refund {amount} {key(ctx)}")
        return f"refund {amount} ok"

    for tool in (charge, refund):  # real types: the SDK reads them (this module's annotations are strings)
        tool.__annotations__ = {"ctx": ToolContext, "amount": int, "return": str}
    wrap = step or (lambda fn: fn)
    tools: list[Any] = [function_tool(wrap(charge)), function_tool(wrap(refund), needs_approval=True)]
    return Agent(name="refunds", instructions="Refund.", model=scripted_model(work, charges, approval), tools=tools)


def file_bytes(path: Path) -> int:
    """Bytes of a SQLite database and every file beside it (-wal, -shm, -journal)."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


# -- durably -----------------------------------------------------------------------------------------------


async def _run_durably(db: Path, work: Path, charges: int, approval: bool) -> Any:
    import durably
    from durably.integrations.openai_agents import DurableRunner, current_call

    async def found(ctx: durably.ToolContext) -> durably.Reconciled | None:
        for line in lines(work / "ledger"):
            kind, amount, key = line.split()
            if key == ctx.idempotency_key:
                return durably.Reconciled(f"{kind} {amount} ok")
        return None

    agent = build_agent(work, lambda ctx: current_call().idempotency_key, charges, approval)
    policy = {"charge": "reconcile", "refund": "reconcile"}
    async with durably.Runtime(f"sqlite:///{db}") as rt:
        runner = DurableRunner(rt, on_unknown_outcome=policy, reconcile={"charge": found, "refund": found})
        result = await runner.run(agent, PROMPT, agent_id=RUN_ID, max_turns=charges + 4)
        for _ in range(4):
            if result.status != "waiting_approval":
                break
            for approval_id in result.approvals:
                await rt.approve(RUN_ID, approval_id)
            result = await runner.wait(agent, RUN_ID, timeout=120)
    return result.final_output


# -- DBOS --------------------------------------------------------------------------------------------------


async def _run_dbos(db: Path, work: Path, charges: int, approval: bool) -> Any:
    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from dbos_openai_agents import DBOSRunner

    config: DBOSConfig = {
        "name": "durably-frameworks-oa",
        "system_database_url": f"sqlite:///{db}",
        "log_level": "ERROR",
    }
    DBOS(config=config)
    agent = build_agent(work, lambda ctx: ctx.tool_call_id, charges, approval, step=DBOS.step())

    @DBOS.workflow()
    async def run_agent(prompt: str) -> str:
        result = await DBOSRunner.run(agent, prompt, max_turns=charges + 4)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                # The documented way to wait for a human in a workflow: a message, sent from outside.
                approved = await DBOS.recv_async("approval", timeout_seconds=120)
                state.approve(item) if approved else state.reject(item)
            result = await DBOSRunner.run(agent, state, max_turns=charges + 4)
        return str(result.final_output)

    DBOS.launch()
    try:
        with SetWorkflowID(RUN_ID):
            handle = await DBOS.start_workflow_async(run_agent, PROMPT)
        if approval:
            await DBOS.send_async(RUN_ID, True, "approval")  # durable: the workflow receives it when it gets there
        return await handle.get_result()
    finally:
        DBOS.destroy()


RUNNERS = {"durably": _run_durably, "dbos": _run_dbos}


def _child(engine: str, db: Path, work: Path, charges: int, approval: bool) -> None:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    import agents  # noqa: F401  (imports are not the run's time)

    if engine == "durably":
        import durably.integrations.openai_agents  # noqa: F401
    else:
        import dbos_openai_agents  # noqa: F401
    start, cpu = time.perf_counter(), time.process_time()
    output = asyncio.run(RUNNERS[engine](db, work, charges, approval))
    doc = {"output": output, "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    (work / "figures.json").write_text(json.dumps(doc), encoding="utf-8")


# -- the driver --------------------------------------------------------------------------------------------


def _spawn(engine: str, db: Path, work: Path, charges: int, approval: bool, kill: str = "") -> int:
    env = {**os.environ, "KILL": kill, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    command = [sys.executable, "-m", "durably.bench.frameworks_openai_agents", engine, str(db), str(work)]
    command += [str(charges), "1" if approval else "0"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode


def throughput(engine: str, root: Path, charges: int) -> dict[str, Any]:
    """One run of ``charges`` charges (and the approval): steps/s (model requests + tool calls) and bytes."""
    work = root / f"{engine}-throughput"
    work.mkdir(parents=True, exist_ok=True)
    db = work / "runs.db"
    code = _spawn(engine, db, work, charges, True)
    figures = json.loads((work / "figures.json").read_text()) if code == 0 else {}
    steps = len(lines(work / "requests")) + len(lines(work / "ledger"))
    return {
        "exit": code,
        "steps": steps,
        "wall_s": figures.get("wall_s"),
        "steps_per_s": steps / figures["wall_s"] if figures.get("wall_s") else None,
        "bytes": file_bytes(db) if db.exists() else 0,
        "output": figures.get("output"),
    }


def crash(engine: str, root: Path, boundary: str, trial: int) -> dict[str, Any]:
    """Kill one run at ``boundary``, run it again to its end; count executions per logical call."""
    work = root / f"{engine}-{boundary}-{trial}"
    work.mkdir(parents=True, exist_ok=True)
    db = work / "runs.db"
    first = _spawn(engine, db, work, 1, True, kill=boundary)
    second = _spawn(engine, db, work, 1, True)
    figures = json.loads((work / "figures.json").read_text()) if (work / "figures.json").exists() else {}
    effects = Counter(line.split()[0] for line in lines(work / "ledger"))
    requests = Counter(lines(work / "requests"))
    return {
        "killed": first == -signal.SIGKILL,
        "finished": second == 0,
        "output": figures.get("output"),
        "charge_runs": effects["charge"],
        "refund_runs": effects["refund"],
        "requests_per_call": dict(sorted(requests.items())),
    }


def measure(
    root: Path, *, charges: int = 20, trials: int = 3, engines: tuple[str, ...] = ("durably", "dbos")
) -> dict[str, Any]:
    """The OpenAI Agents case of the frameworks suite, for each engine that is installed.

    Args:
        root: A fresh folder for the databases and ledgers.
        charges: Charges in the throughput run.
        trials: Kills per boundary.
        engines: ``durably`` and/or ``dbos``.

    Returns:
        ``{engine: {"throughput": {...}, "crash": {boundary: [trial figures]}}}``, or
        ``{engine: {"missing": "..."}}`` for an engine whose packages are not installed.
    """
    out: dict[str, Any] = {}
    for engine in engines:
        needed = ["agents"] + (["dbos", "dbos_openai_agents"] if engine == "dbos" else [])
        missing = [m for m in needed if not _importable(m)]
        if missing:
            out[engine] = {"missing": ", ".join(missing)}
            continue
        out[engine] = {
            "throughput": throughput(engine, root, charges),
            "crash": {b: [crash(engine, root, b, t) for t in range(trials)] for b in BOUNDARIES},
        }
    return out


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    if sys.argv[1] == "measure":
        print(json.dumps(measure(Path(sys.argv[2]), trials=int(sys.argv[3]) if len(sys.argv) > 3 else 3), indent=1))
    else:
        engine_, db_, work_, charges_, approval_ = sys.argv[1:6]
        _child(engine_, Path(db_), Path(work_), int(charges_), approval_ == "1")
