"""Agent definitions the CLI tests import by name (``durably retry --agents cli_agents:flaky``)."""

from __future__ import annotations

import os
from pathlib import Path

from durably import AgentDefinition, ModelResponse, Usage


class FlakyModel:
    """Answers "done" unless the file named by ``$FLAKY_FAIL`` exists: then it raises a
    non-transient error, so the agent fails (and ``durably retry`` has something to do)."""

    name = "flaky"

    async def respond(self, messages, tools) -> ModelResponse:
        marker = os.environ.get("FLAKY_FAIL")
        if marker and Path(marker).exists():
            raise ValueError("the model is broken today")
        return ModelResponse("done", (), Usage(1, 1, 0.0))


flaky = AgentDefinition(name="flaky", model=FlakyModel(), tools=[])
