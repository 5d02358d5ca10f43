"""A parent agent that hands work to child agents (``agent_tool``), for the child-agent tests.

``boss`` asks ``helper`` (one call, id ``h1``, or ``fan`` calls ``h1``..``hN`` in one
turn) and answers with what the helpers said. ``helper`` calls its tool
``effect`` once (appending ``(key, task, pid)`` as a JSON line to ``EFFECTS``)
and answers ``did <task> in <pid>``; a task containing ``fail`` makes its model
raise (the child fails), ``ask`` makes its tool need an approval, and ``wait``
makes the tool block until the file ``GATE`` exists.

Run as a script it is a worker process: ``child_agents.py DB MODE``, with MODE
``parent`` (start ``boss`` and wait), ``serve-children`` (serve only ``helper``),
``serve-all`` (serve both until ``boss`` is finished), or ``die-at-child-end``
(serve ``helper`` and SIGKILL itself right after the child's ``finished`` is
durable, before its end reaches the parent).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, agent_tool, tool

EFFECTS = Path(os.environ.get("CHILD_EFFECTS", "effects.jsonl"))
GATE = Path(os.environ.get("CHILD_GATE", "gate"))


class HelperModel:
    name = "helper-model"

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        task = next(m["content"] for m in messages if m["role"] == "user")
        if "fail" in task:
            raise RuntimeError("the helper's model is down")
        if messages[-1]["role"] == "tool":
            return ModelResponse(f"did {task} in {messages[-1]['content']}")
        return ModelResponse("", (ToolCall("e1", "effect", {"task": task}),))


class BossModel:
    name = "boss-model"

    def __init__(self, fan: int = 1) -> None:
        self.fan = fan

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        task = next(m["content"] for m in messages if m["role"] == "user")
        if messages[-1]["role"] == "tool":
            said = [m["content"] for m in messages if m["role"] == "tool"]
            return ModelResponse(f"helpers said {said}")
        calls = tuple(ToolCall(f"h{i}", "helper", {"task": f"{task}-{i}"}) for i in range(1, self.fan + 1))
        return ModelResponse("", calls)


def helper_agent(*, approval: bool = False) -> AgentDefinition:
    @tool(name="effect", requires_approval=approval)
    async def effect(task: str, *, ctx) -> int:
        if "wait" in task:
            while not GATE.exists():
                await anyio.sleep(0.05)
        with EFFECTS.open("a") as f:
            f.write(json.dumps({"key": ctx.idempotency_key, "task": task, "pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return os.getpid()

    return AgentDefinition(name="helper", model=HelperModel(), tools=[effect])


def boss_agent(*, fan: int = 1, approval: bool = False) -> AgentDefinition:
    return AgentDefinition(name="boss", model=BossModel(fan), tools=[agent_tool(helper_agent(approval=approval))])


def effects() -> list[dict[str, Any]]:
    """The helper tool's effects so far."""
    if not EFFECTS.exists():
        return []
    return [json.loads(line) for line in EFFECTS.read_text().splitlines() if line.strip()]


async def _main(db: str, mode: str) -> None:
    store = f"sqlite:///{db}"
    if mode == "parent":
        async with Runtime(store, agents=[boss_agent(), helper_agent()]) as rt:
            state = await rt.run("boss", "boss-1", sys.argv[3] if len(sys.argv) > 3 else "job")
            print(json.dumps({"status": state.status, "result": state.result}))
    elif mode in ("serve-children", "die-at-child-end"):
        async with Runtime(store, agents=[helper_agent()], lease_ttl=2.0) as rt:
            if mode == "die-at-child-end":
                runs = rt._activations

                def die(state: Any) -> None:
                    if state.parent is not None and state.status == "finished":
                        os.kill(os.getpid(), signal.SIGKILL)  # the child's end is durable; its delivery is not

                runs.on_end = die
            await rt.serve(0.1, drain_signals=())
    elif mode == "serve-all":
        async with Runtime(store, agents=[boss_agent(), helper_agent()]) as rt, anyio.create_task_group() as tg:
            tg.start_soon(rt.serve, 0.1)
            state = await rt.wait("boss-1", until=("finished", "failed", "cancelled"), timeout=60)
            print(json.dumps({"status": state.status, "result": state.result}))
            tg.cancel_scope.cancel()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    anyio.run(_main, sys.argv[1], sys.argv[2])
