"""A function agent for ``durably worker --agents function_agents:agents`` in the tests.

Its body makes one journaled call that appends a line to ``$WORKER_EFFECTS``
(fsynced) and returns the task upper-cased.
"""

from __future__ import annotations

import os
from pathlib import Path

from support_agents import append_line

from durably import FunctionAgent, Run, ToolContext


async def shout(text: str, ctx: ToolContext) -> str:
    append_line(Path(os.environ["WORKER_EFFECTS"]), {"agent": ctx.agent_id, "key": ctx.idempotency_key})
    return text.upper()


async def body(run: Run, task: str) -> str:
    loud: str = await run.call(shout, task, on_unknown_outcome="retry")
    return loud


agents = [FunctionAgent("shouter", body)]
