"""durably: durable execution for long-running LLM agents.

Every step an agent takes is written to a journal before it is acknowledged, so
a crash, a deploy or a long approval wait becomes a pause, not a restart. Service
builders import everything from here:

```python
from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, tool
```

Adapter authors import from ``durably.storage`` (the SPI, its errors, the URL
registry) and ``durably.storage.conformance`` (the test kit). Model adapters are
in ``durably.models.openai`` and ``durably.models.anthropic``, the LangGraph
bridge in ``durably.integrations.langgraph``. Every other module (``durably.*``,
the adapters' parts, ``durably._cli``) is internal and may change in any release.

The runtime's names are imported on first use (PEP 562), so ``import durably``
costs little and ``import durably.storage`` does not load the runtime; errors are
always here (``durably.errors``, one hierarchy rooted at ``DurablyError``).
``__version__`` is the installed distribution's version (``pyproject.toml`` is
its only source).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentLeaseLostError,
    AgentNotFoundError,
    ApprovalAlreadyDecidedError,
    ArgumentTypeError,
    BlobNotFoundError,
    CallFailedError,
    CodecError,
    ConflictError,
    CorruptRecordError,
    DecryptionError,
    DefinitionMigrationError,
    DefinitionNotRegisteredError,
    DurablyError,
    EncryptionRequiredError,
    ExtraNotInstalledError,
    FencedError,
    FrameLimitError,
    InvalidArgumentError,
    InvalidCommandError,
    InvalidRequestError,
    InvalidStoreError,
    InvalidStoreURLError,
    KeyConfigError,
    MissingUpcasterError,
    ModelReplyError,
    NonDeterminismError,
    NotInRunError,
    PurgeIncompleteError,
    RedactedArgumentError,
    RuntimeNotStartedError,
    SeqOutOfRangeError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    ToolArgumentsError,
    ToolTimeoutError,
    TransientModelError,
    TruncatedRecordError,
    UnencodableValueError,
    UnfoldableRecordError,
    UnknownKeyError,
    UnknownSchemaVersionError,
    UnknownSchemeError,
    UnsafeCompactionError,
    WaitTimeoutError,
    WorkerExistsError,
)

#: Public name -> the internal module that defines it (imported on first use).
_LAZY: dict[str, str] = {
    "Runtime": "durably._runtime",
    "AgentHandle": "durably._fleet.handle",
    "AgentDefinition": "durably._loop.agent",
    "Budget": "durably._loop.agent",
    "HistoryPolicy": "durably._loop.agent",
    "OnDefinitionChange": "durably._loop.agent",
    "Limit": "durably._loop.limits",
    "AgentState": "durably._loop.state",
    "Model": "durably._loop.model",
    "ModelResponse": "durably._loop.model",
    "ToolCall": "durably._loop.model",
    "Usage": "durably._loop.model",
    "RetryPolicy": "durably._loop.model_retries",
    "Sleep": "durably._loop.timers",
    "SnapshotPolicy": "durably._journal.snapshots",
    "Tool": "durably._tools.tool",
    "ToolContext": "durably._tools.tool",
    "ToolRetry": "durably._tools.attempts",
    "Reconciled": "durably._tools.tool",
    "OnUnknownOutcome": "durably._tools.tool",
    "tool": "durably._tools.tool",
    "agent_tool": "durably._tools.agent_tool",
    "AgentTool": "durably._tools.agent_tool",
    "RetentionPolicy": "durably._upkeep.retention",
    "DAY": "durably._upkeep.retention",
    "SweepItem": "durably._upkeep.retention",
    "Redact": "durably._journal.redaction_policy",
    "RedactionPolicy": "durably._journal.redaction_policy",
    "ephemeral": "durably._journal.redaction_policy",
    "AgentDescription": "durably._reading.describe",
    "LeaseInfo": "durably._reading.describe",
    "HistoryEntry": "durably._reading.history",
    "StatusChange": "durably._reading.watch",
    "CommandResult": "durably._operate.placement",
    "Placement": "durably._operate.placement",
    "Where": "durably._operate.placement",
    "LeaseHolder": "durably._fleet.owner",
    "Liveness": "durably._fleet.owner",
    "ReencryptReport": "durably._upkeep.reencrypt",
    "AESGCMCipher": "durably.storage._crypto",
    "EnvKeyProvider": "durably.storage._crypto",
    "StaticKeyProvider": "durably.storage._crypto",
    "KeyProvider": "durably.storage._crypto",
    "generate_key": "durably.storage._crypto",
    "open_store": "durably.storage._registry",
    "FrameCipher": "durably.storage._codec",
    "FunctionAgent": "durably._functions.definition",
    "Run": "durably._functions.run",
    "current_run": "durably._functions.run",
    "journaled": "durably._functions.journaled",
    "StreamingModel": "durably._loop.model",
    "AgentEvent": "durably._loop.live",
    "AgentEvents": "durably._reading.events",
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers, IDEs and the API reference
    from durably._fleet.handle import AgentHandle
    from durably._fleet.owner import LeaseHolder, Liveness
    from durably._functions.definition import FunctionAgent
    from durably._functions.journaled import journaled
    from durably._functions.run import Run, current_run
    from durably._journal.redaction_policy import Redact, RedactionPolicy, ephemeral
    from durably._journal.snapshots import SnapshotPolicy
    from durably._loop.agent import AgentDefinition, Budget, HistoryPolicy, OnDefinitionChange
    from durably._loop.limits import Limit
    from durably._loop.live import AgentEvent
    from durably._loop.model import Model, ModelResponse, StreamingModel, ToolCall, Usage
    from durably._loop.model_retries import RetryPolicy
    from durably._loop.state import AgentState
    from durably._loop.timers import Sleep
    from durably._operate.placement import CommandResult, Placement, Where
    from durably._reading.describe import AgentDescription, LeaseInfo
    from durably._reading.events import AgentEvents
    from durably._reading.history import HistoryEntry
    from durably._reading.watch import StatusChange
    from durably._runtime import Runtime
    from durably._tools.agent_tool import AgentTool, agent_tool
    from durably._tools.attempts import ToolRetry
    from durably._tools.tool import OnUnknownOutcome, Reconciled, Tool, ToolContext, tool
    from durably._upkeep.reencrypt import ReencryptReport
    from durably._upkeep.retention import DAY, RetentionPolicy, SweepItem
    from durably.storage._codec import FrameCipher
    from durably.storage._crypto import AESGCMCipher, EnvKeyProvider, KeyProvider, StaticKeyProvider, generate_key
    from durably.storage._registry import open_store

    __version__: str


def __getattr__(name: str) -> Any:
    """PEP 562: import a public name's module the first time the name is used.

    ``__version__`` comes from the installed distribution's metadata. Raises
    ``AttributeError`` for a name that is not public here.
    """
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("durably")
        except PackageNotFoundError:  # run from a source tree that was never installed
            value = "0+unknown"
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'durably' has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    # The public names and the public subpackages, not this module's own imports
    # (``Any``, ``importlib``, ``annotations``) nor what is not loaded yet.
    return sorted(set(__all__) | {"__version__", "errors", "models", "schemas", "storage", "adapters", "integrations"})


__all__ = [
    "AESGCMCipher",
    "AgentDefinition",
    "AgentDescription",
    "AgentEvent",
    "AgentEvents",
    "AgentExistsError",
    "AgentFencedError",
    "AgentHandle",
    "AgentLeaseLostError",
    "AgentLeasedError",
    "AgentNotFoundError",
    "AgentState",
    "AgentTool",
    "ApprovalAlreadyDecidedError",
    "ArgumentTypeError",
    "BlobNotFoundError",
    "Budget",
    "CallFailedError",
    "CodecError",
    "CommandResult",
    "ConflictError",
    "CorruptRecordError",
    "DAY",
    "DecryptionError",
    "DefinitionMigrationError",
    "DefinitionNotRegisteredError",
    "DurablyError",
    "EncryptionRequiredError",
    "EnvKeyProvider",
    "ExtraNotInstalledError",
    "FencedError",
    "FrameCipher",
    "FrameLimitError",
    "FunctionAgent",
    "HistoryEntry",
    "HistoryPolicy",
    "InvalidArgumentError",
    "InvalidCommandError",
    "InvalidRequestError",
    "InvalidStoreError",
    "InvalidStoreURLError",
    "KeyConfigError",
    "KeyProvider",
    "LeaseHolder",
    "LeaseInfo",
    "Limit",
    "Liveness",
    "MissingUpcasterError",
    "Model",
    "ModelReplyError",
    "ModelResponse",
    "NonDeterminismError",
    "NotInRunError",
    "OnDefinitionChange",
    "OnUnknownOutcome",
    "Placement",
    "PurgeIncompleteError",
    "Reconciled",
    "Redact",
    "RedactedArgumentError",
    "RedactionPolicy",
    "ReencryptReport",
    "RetentionPolicy",
    "RetryPolicy",
    "Run",
    "Runtime",
    "RuntimeNotStartedError",
    "SeqOutOfRangeError",
    "Sleep",
    "SnapshotPolicy",
    "StaticKeyProvider",
    "StatusChange",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "StreamingModel",
    "SweepItem",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolContext",
    "ToolRetry",
    "ToolTimeoutError",
    "TransientModelError",
    "TruncatedRecordError",
    "UnencodableValueError",
    "UnfoldableRecordError",
    "UnknownKeyError",
    "UnknownSchemaVersionError",
    "UnknownSchemeError",
    "UnsafeCompactionError",
    "Usage",
    "WaitTimeoutError",
    "Where",
    "WorkerExistsError",
    "agent_tool",
    "current_run",
    "ephemeral",
    "generate_key",
    "journaled",
    "open_store",
    "tool",
]
