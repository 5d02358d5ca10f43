"""durably._runtime (internal): durable agent actors, the step loop, tools, approvals and budgets.

Import the public names from ``durably`` (``from durably import Runtime, tool``);
this package and its modules are the implementation and may change in any
release. The names below stay importable from here for the code that used them.
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
from .model import Model, ModelReplyError, ModelResponse, ToolCall, TransientModelError, Usage
from .model_retry import RetryPolicy
from .handle import AgentHandle
from .runtime import Runtime
from .snapshots import SnapshotPolicy
from .state import AgentState
from .tools import OnUnknownOutcome, Reconciled, Tool, ToolArgumentsError, ToolContext, tool

__all__ = [
    "AgentDefinition", "AgentExistsError", "AgentFencedError", "AgentLeasedError", "AgentLeaseLostError", "AgentHandle", "AgentNotFoundError", "AgentState",
    "ApprovalAlreadyDecidedError",
    "Budget", "DefinitionNotRegisteredError", "InvalidCommandError", "Model", "ModelReplyError", "ModelResponse",
    "OnUnknownOutcome", "Reconciled", "RetryPolicy", "Runtime", "SnapshotPolicy", "Tool", "ToolArgumentsError", "ToolCall",
    "ToolContext", "TransientModelError", "Usage", "tool",
]
