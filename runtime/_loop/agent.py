"""What an agent is: a model, tools, instructions, a version, a budget."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from durably._figures import check_figure
from durably._loop.limits import Limit, check_limits
from durably._loop.model import Model
from durably._loop.model_retries import RetryPolicy
from durably._tools.attempts import ToolRetry
from durably._tools.tool import Tool
from durably.errors import ArgumentTypeError, InvalidArgumentError


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits that suspend an agent when reached (status ``suspended``) until an
    operator extends them (``Runtime.extend_budget``).

    Attributes:
        steps: Model responses, or None for unlimited.
        tokens: Input + output tokens, or None.
        cost_usd: US dollars as the model reports them in ``Usage.cost_usd``, or None.

    Raises:
        InvalidArgumentError: A ``ValueError``: a figure that is not a finite number
            of at least 0 (an int for ``steps`` and ``tokens``).
    """

    steps: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None

    def __post_init__(self) -> None:
        check_figure("Budget", "steps", self.steps, integer=True)
        check_figure("Budget", "tokens", self.tokens, integer=True)
        check_figure("Budget", "cost_usd", self.cost_usd)

    def to_wire(self) -> dict[str, Any]:
        """The budget as a plain dict for the journal.

        Returns:
            ``{"steps", "tokens", "cost_usd"}``, each None where unlimited.
        """
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

    Attributes:
        max_messages: The conversation length (messages) past which a cut happens.
        keep_recent: How many messages (after the task) a cut keeps.
        summarize: A ``Summarizer`` condensing the dropped messages into one
            message; its answer is journaled, so it runs once (None: the dropped
            messages are replaced by nothing).

    Raises:
        InvalidArgumentError: ``max_messages`` or ``keep_recent`` is not an int of
            at least 0, or ``keep_recent`` is not in 1..``max_messages - 4`` (room for
            the system prompt, the task, a summary, and something to drop).
    """

    max_messages: int = 200
    keep_recent: int = 100
    summarize: Summarizer | None = None

    def __post_init__(self) -> None:
        check_figure("HistoryPolicy", "max_messages", self.max_messages, integer=True, optional=False)
        check_figure("HistoryPolicy", "keep_recent", self.keep_recent, integer=True, optional=False)
        if not 0 < self.keep_recent <= self.max_messages - 4:
            raise InvalidArgumentError("HistoryPolicy needs 0 < keep_recent <= max_messages - 4")

    def cut(self, messages: list[dict[str, Any]]) -> tuple[int, int] | None:
        """Which messages to drop now, if any.

        The system prompt and the task always stay, and a cut never separates
        tool results from the call that asked for them.

        Args:
            messages: The working conversation, as ``{"role", ...}`` dicts.

        Returns:
            ``(first, count)``: the index of the first message to drop and how
                many, or None when the conversation is within ``max_messages`` (or a
                cut would not shorten it).
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

    ``digest()`` fingerprints instructions and tool signatures so a changed
    definition is noticed on resume. The default ``on_definition_change`` is
    ``stop`` because nothing else is safe without knowing the change: a new
    prompt may not understand the old conversation, a renamed tool leaves
    pending calls that no tool answers, a changed tool policy would re-run a
    side effect the old one would not. Stopping costs a redeploy; guessing may
    cost a duplicated payment.

    Attributes:
        name: Identifies the definition across processes: the journal records
            it, and a runtime resumes a stream with the definition registered
            under that name.
        model: The ``Model`` answering each step.
        tools: The ``Tool`` objects (functions decorated with ``@tool``).
        instructions: The system prompt ("" for none).
        version: The author's label, recorded with the digest.
        budget: The default ``Budget`` of a run (``Runtime.start`` may override it).
        on_definition_change: An ``OnDefinitionChange`` (or its value): what
            happens when an agent is resumed under a definition whose version or
            digest differs from the recorded one.
        migrate: The hook the ``migrate`` policy calls.
        history: A ``HistoryPolicy`` bounding the conversation (None: it grows
            with the run).
        retry: The ``RetryPolicy`` for transient model errors (4 attempts by default).
        max_parallel_tools: How many calls of one model turn run at once.
        tool_retry: The ``ToolRetry`` of every tool that sets none itself
            (None: one attempt, no retry).
        limits: ``Limit``s on this definition's model calls, shared (by key)
            with every worker of the store, whatever its key says.

    Raises:
        ArgumentTypeError: A ``TypeError``: a missing model (or one without an async ``respond``), a tool
            list holding something other than ``Tool`` objects (a bare function:
            decorate it with ``@tool``), a non-str name, a ``tool_retry`` that is not
            a ``ToolRetry``.
        InvalidArgumentError: A ``ValueError``: an empty name, duplicate tool names, ``migrate`` without a hook, a
            ``max_parallel_tools`` below 1, two ``limits`` with one key. A ``reconcile`` policy without a hook
            is refused by ``Tool`` itself.
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
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_parallel_tools: int = 8
    tool_retry: ToolRetry | None = None
    limits: Sequence[Limit] = ()
    # Set by __post_init__: the tools by name.
    _by_name: dict[str, Tool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"agent definition {self.name!r}"
        if not isinstance(self.name, str):
            raise ArgumentTypeError(f"an agent definition needs a non-empty str name, got {self.name!r}")
        if not self.name:
            raise InvalidArgumentError("an agent definition needs a non-empty str name, got ''")
        if self.model is None or not callable(getattr(self.model, "respond", None)):
            raise ArgumentTypeError(
                f"{where}: model must be a Model (an object with async respond(messages, tools)), got {self.model!r}"
            )
        tools = tuple(self.tools)
        for index, candidate in enumerate(tools):
            if not isinstance(candidate, Tool):
                hint = " (decorate it with @tool)" if callable(candidate) else ""
                raise ArgumentTypeError(f"{where}: tools[{index}] is a {type(candidate).__name__}, not a Tool{hint}")
        names = [t.name for t in tools]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise InvalidArgumentError(f"{where}: duplicate tool names {duplicates}")
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "_by_name", {t.name: t for t in tools})
        if not isinstance(self.retry, RetryPolicy):
            raise ArgumentTypeError(f"{where}: retry must be a RetryPolicy, got {type(self.retry).__name__}")
        if self.tool_retry is not None and not isinstance(self.tool_retry, ToolRetry):
            raise ArgumentTypeError(f"{where}: tool_retry must be a ToolRetry, got {type(self.tool_retry).__name__}")
        check_figure(where, "max_parallel_tools", self.max_parallel_tools, integer=True, optional=False)
        if self.max_parallel_tools < 1:
            raise InvalidArgumentError(f"{where}: max_parallel_tools must be >= 1")
        object.__setattr__(self, "on_definition_change", OnDefinitionChange(self.on_definition_change))
        object.__setattr__(self, "limits", check_limits(where, self.limits, runtime_wide=False))
        if self.on_definition_change is OnDefinitionChange.MIGRATE and self.migrate is None:
            raise InvalidArgumentError(f"agent definition {self.name!r}: the migrate policy needs a migrate hook")

    def info(self) -> dict[str, str]:
        """What the journal records of this definition.

        Returns:
            ``{"name", "version", "digest"}``.
        """
        return {"name": self.name, "version": self.version, "digest": self.digest()}

    def tool(self, name: str) -> Tool | None:
        """Look up a tool of this definition by name.

        Args:
            name: The tool's name, as the model calls it.

        Returns:
            The tool called ``name``, or None when the definition has none.
        """
        return self._by_name.get(name)

    def digest(self) -> str:
        """Fingerprint the definition, so a changed one is noticed on resume.

        Returns:
            The first 16 hex characters of the SHA-256 of version, instructions
                and tool signatures (``Tool.signature()``, sorted).
        """
        from hashlib import sha256  # here, not at import: hashlib loads OpenSSL's bindings (import time)

        parts = [self.version, self.instructions, *sorted(t.signature() for t in self.tools)]
        return sha256("\x00".join(parts).encode()).hexdigest()[:16]

    def same_digests(self) -> frozenset[str]:
        """The digests a journal may hold for this very definition.

        Returns:
            ``{digest()}``; a subclass whose digest was once computed another
                way adds the older form, so journals written then resume as
                the same definition.
        """
        return frozenset({self.digest()})

    def digest_covers(self) -> str:
        """Say in words what a changed digest means, for a message to the user.

        Returns:
            What the digest covers (here: the instructions or a tool's signature).
        """
        return "its instructions or a tool's signature (name, parameters, approval, unknown-outcome policy) changed"
