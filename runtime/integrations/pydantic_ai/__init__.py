"""durably.integrations.pydantic_ai: any ``pydantic_ai.Agent`` made durable on durably's journal.

```python
from durably.integrations.pydantic_ai import DurableAgent
durable = DurableAgent(agent, tools={"charge": "fail"})
async with durably.Runtime("sqlite:///agents.db", agents=[durable]) as rt:
    result = await durable.run_in(rt, "Refund order 42", agent_id="order-42")
```

``DurableAgent`` is a ``durably.FunctionAgent``: model requests and tool calls
are journaled calls of the run, deferred tools are durably approvals, and
``durably worker --agents module:attr`` serves its runs.
Needs the ``pydantic-ai`` extra: ``pip install -e '.[pydantic-ai]'`` in durably's clone.
"""

from durably.errors import ExtraNotInstalledError

with ExtraNotInstalledError.guard(__name__, "pydantic-ai", "pydantic_ai"):
    from ._agent import DurableAgent, DurableRunResult
    from ._model import JournaledModel
    from ._policy import ToolPolicy
    from ._toolset import JournaledToolset, tool_context

__all__ = ["DurableAgent", "DurableRunResult", "JournaledModel", "JournaledToolset", "ToolPolicy", "tool_context"]
