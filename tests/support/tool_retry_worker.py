"""A worker process for the tool retry crash tests: runs (or resumes) agent ``a1``
on a SQLite file, one call of tool ``work``; the test SIGKILLs it mid-call.

Modes (``--mode``):
  backoff    every attempt appends a line to ``--effects`` and raises
             ConnectionError; ``ToolRetry(attempts=3, backoff=--backoff)``. The
             test kills the worker while it waits to retry.
  heartbeat  ``heartbeat_every`` is an hour, ``on_unknown_outcome="retry"``.
             Attempt 1 beats ``{"i": 1}`` .. ``{"i": 20}`` and raises
             ConnectionError (its newest beat is journaled with the failure);
             attempt 2 beats 21 .. 40 (none journaled: within the hour), logs
             "waiting" to ``--effects`` and sleeps until killed. Any later attempt
             logs what ``ctx.last_heartbeat`` held and returns it.
  hang       ``on_unknown_outcome="retry"``, ``ToolRetry(attempts=3)``: attempts
             1 to 3 log "waiting" and sleep until killed; a later one returns.
  hang-bare  the same tool without a ``ToolRetry``.

Each attempt logs ``{"attempt", "key", "last_heartbeat"}`` (fsynced) to ``--effects``.
Prints the final state as JSON (status, messages' tool contents).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from privacy_support import ScriptModel
from support_agents import append_line

from durably import AgentDefinition, AgentExistsError, ModelResponse, Runtime, ToolCall, ToolRetry, Usage, tool


def definition(mode: str, effects: Path, backoff: float) -> AgentDefinition:
    def log(ctx, **extra) -> None:
        append_line(
            effects, {"attempt": ctx.attempt, "key": ctx.idempotency_key, "last_heartbeat": ctx.last_heartbeat, **extra}
        )

    if mode == "backoff":

        @tool(name="work", retry=ToolRetry(attempts=3, backoff=backoff, jitter=0.0))
        async def work(*, ctx) -> str:
            log(ctx)
            raise ConnectionError(f"upstream reset on attempt {ctx.attempt}")

    elif mode.startswith("hang"):
        retry = ToolRetry(attempts=3, backoff=0.01, jitter=0.0) if mode == "hang" else None

        @tool(name="work", retry=retry, on_unknown_outcome="retry")
        async def work(*, ctx) -> str:
            log(ctx, waiting=ctx.attempt <= 3)
            if ctx.attempt <= 3:
                await anyio.sleep(3600)
            return f"ran attempt {ctx.attempt}"

    else:

        @tool(name="work", retry=ToolRetry(attempts=3, backoff=0.01, jitter=0.0), on_unknown_outcome="retry",
              heartbeat_every=3600.0)  # fmt: skip
        async def work(*, ctx) -> dict:
            log(ctx)
            if ctx.attempt == 1:
                for i in range(1, 21):
                    await ctx.heartbeat({"i": i})
                raise ConnectionError("upstream reset")
            if ctx.attempt == 2:
                for i in range(21, 41):
                    await ctx.heartbeat({"i": i})
                log(ctx, waiting=True)
                await anyio.sleep(3600)
            return {"resumed_from": ctx.last_heartbeat}

    model = ScriptModel([ModelResponse("", (ToolCall("c1", "work", {}),), Usage(1, 1, 0.0))])
    return AgentDefinition(name=f"retry-{mode}", model=model, tools=[work])


async def main(args: argparse.Namespace) -> None:
    agent = definition(args.mode, Path(args.effects), args.backoff)
    async with Runtime(f"sqlite:///{args.db}", agents=[agent]) as rt:
        try:
            handle = await rt.start(agent, "a1", "work")
        except AgentExistsError:
            handle = await rt.resume("a1")
        state = await handle.wait() if handle is not None else await rt.status("a1")
    tools = [m["content"] for m in state.messages if m["role"] == "tool"]
    print(json.dumps({"status": state.status, "tools": tools, "approvals": list(state.approvals)}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--mode", choices=("backoff", "heartbeat", "hang", "hang-bare"), required=True)
    parser.add_argument("--backoff", type=float, default=2.0)
    anyio.run(main, parser.parse_args())
