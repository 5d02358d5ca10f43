"""What ``durably worker --agents pydantic_ai_served:definitions`` serves: the durable Pydantic AI agent.

Its ledger and request count live in ``$PYDANTIC_AI_WORK``.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_ai_worker import durable_agent

from durably.integrations.pydantic_ai import DurableAgent


def definitions() -> DurableAgent:
    """The agent of pydantic_ai_worker.py, on the work folder the test chose."""
    return durable_agent(Path(os.environ["PYDANTIC_AI_WORK"]), "reconcile")
