"""Internal: the errors the runtime raises to its embedder, re-exported from ``durably.errors``.

Import them from ``durably`` (or ``durably.errors``, where they are defined).
"""

from __future__ import annotations

from durably.errors import (
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentLeaseLostError,
    AgentNotFoundError,
    ApprovalAlreadyDecidedError,
    DefinitionMigrationError,
    DefinitionNotRegisteredError,
    InvalidCommandError,
    SeqOutOfRangeError,
    WaitTimeoutError,
)

__all__ = [
    "AgentExistsError",
    "AgentFencedError",
    "AgentLeaseLostError",
    "AgentLeasedError",
    "AgentNotFoundError",
    "ApprovalAlreadyDecidedError",
    "DefinitionMigrationError",
    "DefinitionNotRegisteredError",
    "InvalidCommandError",
    "SeqOutOfRangeError",
    "WaitTimeoutError",
]
