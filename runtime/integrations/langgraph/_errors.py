"""The LangGraph bridge's typed errors, all ``DurablyError`` subclasses (defined in ``durably.errors``)."""

from __future__ import annotations

from durably.errors import (
    CheckpointValueError,
    ForeignLoopError,
    InvalidPruneStrategyError,
    InvalidThreadIdError,
    SyncCallOnLoopError,
)

__all__ = [
    "CheckpointValueError",
    "ForeignLoopError",
    "InvalidPruneStrategyError",
    "InvalidThreadIdError",
    "SyncCallOnLoopError",
]
