"""Errors the runtime raises to its embedder."""

from __future__ import annotations

from durably.storage.errors import ConflictError, DurablyError


class AgentFencedError(ConflictError):
    """Another writer appended to this agent's stream: this process lost it.

    The stale process stops that agent without writing anything more (its
    appends would fail their expected-seq check anyway); the new owner goes on.
    """


class AgentNotFoundError(DurablyError, KeyError):
    """No stream exists for that agent id in the runtime's namespace."""


class AgentExistsError(DurablyError):
    """``start`` was called for an agent id that already has a journal."""


class DefinitionNotRegisteredError(DurablyError, LookupError):
    """The journal names an agent definition this runtime has not registered."""


class InvalidCommandError(DurablyError, ValueError):
    """A command does not fit the agent's state (unknown approval, already decided, terminal agent...)."""
