"""Agent definitions for ``durably worker --agents worker_agents:agents`` in the worker tests.

``agents`` is a callable (as ``durably worker`` accepts): it builds the
``slow-file`` agent of ``serve_worker`` from ``$WORKER_EFFECTS`` (the effects
file), ``$WORKER_STEPS`` and ``$WORKER_STEP_SECONDS``.
"""

from __future__ import annotations

import os
from pathlib import Path

from serve_worker import slow_file_agent

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
