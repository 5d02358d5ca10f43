"""What an agent is: a model, tools, instructions, a version, a budget."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .model import Model
from .tools import Tool


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits that suspend an agent when reached: model ``steps``, ``tokens``
    (input + output) and ``cost_usd`` (US dollars). None means unlimited."""

    steps: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None

    def to_wire(self) -> dict:
        """As a plain dict for the journal."""
        return {"steps": self.steps, "tokens": self.tokens, "cost_usd": self.cost_usd}


#: ``summarize(dropped_messages) -> str``: condenses messages leaving the context
#: (typically one cheap model call). Its answer is journaled, so it runs once.
Summarizer = Callable[[list[dict[str, Any]]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class HistoryPolicy:
    """Keeps the working conversation bounded, as an LLM's context window must be.

    When the conversation passes ``max_messages``, the oldest messages after the
    task are dropped until ``keep_recent`` remain after it (never splitting a
    tool call from its result), replaced by one message from ``summarize`` if
    given. The journal keeps every record: only the state (and so snapshots,
    restore time and what the model sees) is bounded. The drop is itself a
    ``history_compacted`` record, so replay gives the same conversation.
    Raises ``ValueError`` unless 0 < ``keep_recent`` <= ``max_messages`` - 4
    (room for the system prompt, the task, a summary, and something to drop).
    """

    max_messages: int = 200
    keep_recent: int = 100
    summarize: Summarizer | None = None

    def __post_init__(self) -> None:
        if not 0 < self.keep_recent <= self.max_messages - 4:
            raise ValueError("HistoryPolicy needs 0 < keep_recent <= max_messages - 4")

    def cut(self, messages: list[dict[str, Any]]) -> tuple[int, int] | None:
        """``(first, count)`` of the messages to drop now, or None.

        The system prompt and the task always stay, and a cut never separates
        tool results from the call that asked for them.
        """
        if len(messages) <= self.max_messages:
            return None
        head = next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), 0)
        end = len(messages) - self.keep_recent
        while end < len(messages) and messages[end]["role"] == "tool":
            end += 1
        after = head + (self.summarize is not None) + len(messages) - end
        # A cut must shorten the conversation, or it would only replace the last summary.
        return (head, end - head) if end > head and after < len(messages) else None


class OnDefinitionChange(StrEnum):
    """What ``Runtime.resume`` does with an agent whose journal was written under
    another definition (the recorded ``version`` or ``digest()`` differs).

    * ``continue``: run on under the new definition; a ``definition_changed``
      record notes the switch.
    * ``migrate``: call the definition's ``migrate(state, previous)`` hook to
      rewrite the state, journal the rewritten fields in a ``definition_changed``
      record (durable and replayed, so the rewrite happens once), then run on.
    * ``stop``: do not run; the agent reports status ``needs_migration`` and its
      data is left untouched (nothing is appended), until a definition with a
      matching digest or another policy is registered.
    """

    CONTINUE = "continue"
    MIGRATE = "migrate"
    STOP = "stop"


#: ``migrate(state, previous) -> state``: ``state`` is a deep copy of the agent's
#: state as plain data (``AgentState.to_wire()``), ``previous`` the recorded
#: definition info (name, version, digest). Return the state to run on with.
MigrateHook = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class AgentDefinition:
    """The code side of an agent; its journal is the data side.

    ``name`` identifies the definition across processes (the journal records
    it, and a runtime resumes a stream with the definition registered under
    that name). ``version`` is the author's label; ``digest()`` fingerprints
    instructions and tool signatures so a changed definition is noticed on resume.

    ``on_definition_change`` (an ``OnDefinitionChange`` or its value) says what
    happens when an agent is resumed under a definition whose version or digest
    differs from the recorded one; ``migrate`` is the hook the ``migrate`` policy
    calls. The default is ``stop`` because nothing else is safe without knowing
    the change: a new prompt may not understand the old conversation, a renamed
    tool leaves pending calls that no tool answers, a changed tool policy would
    re-run a side effect the old one would not. Stopping costs a redeploy;
    guessing may cost a duplicated payment. Raises ``ValueError`` for
    ``migrate`` without a hook. ``history``: a ``HistoryPolicy`` bounding the
    conversation (None: it grows with the run).
    """

    name: str
    model: Model
    tools: Sequence[Tool] = ()
    instructions: str = ""
    version: str = "1"
    budget: Budget = field(default_factory=Budget)
    on_definition_change: OnDefinitionChange = OnDefinitionChange.STOP
    migrate: MigrateHook | None = None
    history: HistoryPolicy | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_definition_change", OnDefinitionChange(self.on_definition_change))
        if self.on_definition_change is OnDefinitionChange.MIGRATE and self.migrate is None:
            raise ValueError(f"agent definition {self.name!r}: the migrate policy needs a migrate hook")

    def info(self) -> dict[str, str]:
        """``{"name", "version", "digest"}``: what the journal records of this definition."""
        return {"name": self.name, "version": self.version, "digest": self.digest()}

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        for candidate in self.tools:
            if candidate.name == name:
                return candidate
        return None

    def digest(self) -> str:
        """SHA-256 (hex, 16 chars) of version, instructions and tool signatures."""
        parts = [self.version, self.instructions, *sorted(t.signature() for t in self.tools)]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]
