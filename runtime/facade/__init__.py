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
bridge in ``durably.integrations.langgraph``. Every other module (``durably._runtime.*``,
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
    CodecError,
    ConflictError,
    CorruptRecordError,
    DecryptionError,
    DefinitionMigrationError,
    DefinitionNotRegisteredError,
    DurablyError,
    EncryptionRequiredError,
    ExtraNotInstalledError,
    FrameLimitError,
    InvalidArgumentError,
    InvalidCommandError,
    InvalidRequestError,
    InvalidStoreError,
    InvalidStoreURLError,
    KeyConfigError,
    MissingUpcasterError,
    ModelReplyError,
    PurgeIncompleteError,
    RedactedArgumentError,
    RuntimeNotStartedError,
    SeqOutOfRangeError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    ToolArgumentsError,
    TransientModelError,
    TruncatedRecordError,
    UnencodableValueError,
    UnfoldableRecordError,
    UnknownKeyError,
    UnknownSchemaVersionError,
    UnknownSchemeError,
    UnsafeCompactionError,
    WaitTimeoutError,
)

#: Public name -> the internal module that defines it (imported on first use).
_LAZY: dict[str, str] = {
    "Runtime": "durably._runtime.runtime",
    "AgentHandle": "durably._runtime.handle",
    "AgentDefinition": "durably._runtime.agent",
    "Budget": "durably._runtime.agent",
    "HistoryPolicy": "durably._runtime.agent",
    "OnDefinitionChange": "durably._runtime.agent",
    "AgentState": "durably._runtime.state",
    "Model": "durably._runtime.model",
    "ModelResponse": "durably._runtime.model",
    "ToolCall": "durably._runtime.model",
    "Usage": "durably._runtime.model",
    "RetryPolicy": "durably._runtime.model_retry",
    "SnapshotPolicy": "durably._runtime.snapshots",
    "Tool": "durably._runtime.tools",
    "ToolContext": "durably._runtime.tools",
    "Reconciled": "durably._runtime.tools",
    "OnUnknownOutcome": "durably._runtime.tools",
    "tool": "durably._runtime.tools",
    "RetentionPolicy": "durably._runtime.retention",
    "DAY": "durably._runtime.retention",
    "SweepItem": "durably._runtime.retention",
    "Redact": "durably._runtime.redaction",
    "RedactionPolicy": "durably._runtime.redaction",
    "ephemeral": "durably._runtime.redaction",
    "AgentDescription": "durably._runtime.describe",
    "LeaseInfo": "durably._runtime.describe",
    "HistoryEntry": "durably._runtime.history",
    "StatusChange": "durably._runtime.watch",
    "CommandResult": "durably._runtime.placement",
    "Placement": "durably._runtime.placement",
    "Where": "durably._runtime.placement",
    "LeaseHolder": "durably._runtime.owner",
    "Liveness": "durably._runtime.owner",
    "ReencryptReport": "durably._runtime.reencrypt",
    "AESGCMCipher": "durably.storage._crypto",
    "EnvKeyProvider": "durably.storage._crypto",
    "StaticKeyProvider": "durably.storage._crypto",
    "KeyProvider": "durably.storage._crypto",
    "generate_key": "durably.storage._crypto",
    "open_store": "durably.storage._registry",
    "FrameCipher": "durably.storage._codec",
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers, IDEs and the API reference
    from durably._runtime.agent import AgentDefinition, Budget, HistoryPolicy, OnDefinitionChange
    from durably._runtime.describe import AgentDescription, LeaseInfo
    from durably._runtime.handle import AgentHandle
    from durably._runtime.history import HistoryEntry
    from durably._runtime.model import Model, ModelResponse, ToolCall, Usage
    from durably._runtime.model_retry import RetryPolicy
    from durably._runtime.owner import LeaseHolder, Liveness
    from durably._runtime.placement import CommandResult, Placement, Where
    from durably._runtime.redaction import Redact, RedactionPolicy, ephemeral
    from durably._runtime.reencrypt import ReencryptReport
    from durably._runtime.retention import DAY, RetentionPolicy, SweepItem
    from durably._runtime.runtime import Runtime
    from durably._runtime.snapshots import SnapshotPolicy
    from durably._runtime.state import AgentState
    from durably._runtime.tools import OnUnknownOutcome, Reconciled, Tool, ToolContext, tool
    from durably._runtime.watch import StatusChange
    from durably.storage._crypto import AESGCMCipher, EnvKeyProvider, KeyProvider, StaticKeyProvider, generate_key
    from durably.storage._codec import FrameCipher
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
    "AgentExistsError",
    "AgentFencedError",
    "AgentHandle",
    "AgentLeaseLostError",
    "AgentLeasedError",
    "AgentNotFoundError",
    "AgentState",
    "ApprovalAlreadyDecidedError",
    "ArgumentTypeError",
    "BlobNotFoundError",
    "Budget",
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
    "FrameCipher",
    "FrameLimitError",
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
    "Liveness",
    "MissingUpcasterError",
    "Model",
    "ModelReplyError",
    "ModelResponse",
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
    "Runtime",
    "RuntimeNotStartedError",
    "SeqOutOfRangeError",
    "SnapshotPolicy",
    "StaticKeyProvider",
    "StatusChange",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "SweepItem",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolContext",
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
    "ephemeral",
    "generate_key",
    "open_store",
    "tool",
]
