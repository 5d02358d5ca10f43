"""Agent definitions for ``durably worker --agents worker_agents:agents`` in the worker tests.

``agents`` is a callable (as ``durably worker`` accepts): it builds the
``slow-file`` agent of ``serve_worker`` from ``$WORKER_EFFECTS`` (the effects
file), ``$WORKER_STEPS`` and ``$WORKER_STEP_SECONDS``.
"""

from __future__ import annotations

import os
from pathlib import Path

from serve_worker import slow_file_agent
from support_agents import StepModel, append_line

from durably import AgentDefinition


def agents() -> list[AgentDefinition]:
    """The slow-file agent, configured from the environment."""
    return [
        slow_file_agent(
            int(os.environ.get("WORKER_STEPS", "3")),
            Path(os.environ["WORKER_EFFECTS"]),
            float(os.environ.get("WORKER_STEP_SECONDS", "0.05")),
        )
    ]


def kind_a() -> list[AgentDefinition]:
    """Only the ``kind-a`` agent (the slow-file agent under that name), configured from the environment."""
    return [_named("kind-a")]


def kind_b() -> list[AgentDefinition]:
    """Only the ``kind-b`` agent, as ``kind_a``."""
    return [_named("kind-b")]


def _named(name: str) -> AgentDefinition:
    return slow_file_agent(
        int(os.environ.get("WORKER_STEPS", "3")),
        Path(os.environ["WORKER_EFFECTS"]),
        float(os.environ.get("WORKER_STEP_SECONDS", "0.05")),
        name=name,
    )


def gated() -> list[AgentDefinition]:
    """The ``gated`` agent: one step whose tool needs an approval, then "done 1"."""
    from durably import tool

    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx) -> int:
        append_line(Path(os.environ["WORKER_EFFECTS"]), {"key": ctx.idempotency_key, "n": n, "pid": os.getpid()})
        return n * 10

    return [AgentDefinition(name="gated", model=StepModel(1), tools=[effect])]
