"""durably.runtime: durable agent actors, the step loop, tools, approvals and budgets.

The names most programs need are re-exported here::

    from durably.runtime import Runtime, AgentDefinition, tool, ModelResponse, ToolCall
"""

from .agent import AgentDefinition, Budget
from .errors import (
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentLeaseLostError,
    AgentNotFoundError,
    ApprovalAlreadyDecidedError,
    DefinitionNotRegisteredError,
    InvalidCommandError,
)
from .model import Model, ModelResponse, ToolCall, Usage
from .runtime import AgentHandle, Runtime
from .snapshots import SnapshotPolicy
from .state import AgentState
from .tools import OnUnknownOutcome, Reconciled, Tool, ToolContext, tool

__all__ = [
    "AgentDefinition", "AgentExistsError", "AgentFencedError", "AgentLeasedError", "AgentLeaseLostError", "AgentHandle", "AgentNotFoundError", "AgentState",
    "ApprovalAlreadyDecidedError",
    "Budget", "DefinitionNotRegisteredError", "InvalidCommandError", "Model", "ModelResponse", "OnUnknownOutcome",
    "Reconciled", "Runtime", "SnapshotPolicy", "Tool", "ToolCall", "ToolContext", "Usage", "tool",
]
