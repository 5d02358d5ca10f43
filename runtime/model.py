"""The model interface: one small protocol between durably and any LLM client.

durably never calls an LLM itself. It hands the conversation and the tool
specs to a ``Model`` and journals the ``ModelResponse`` before acting on it,
so a resumed run never pays for the same response twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for: ``id`` (unique in the run; durably fills
    one in when empty), ``name`` and ``arguments`` (plain-data dict)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """What a model call cost: tokens in and out, and money in US dollars."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One model turn: ``text``, the ``tool_calls`` to run (none: the run is
    finished and ``text`` is its result), ``usage``, an optional new ``plan``
    (list of step descriptions) and the ``model`` name that answered."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    plan: list[str] | None = None
    model: str = ""


@runtime_checkable
class Model(Protocol):
    """Anything that turns a conversation into the next ``ModelResponse``.

    ``messages`` are OpenAI-style dicts (``role``: system/user/assistant/tool,
    ``content``, ``tool_calls``, ``tool_call_id``); ``tools`` are the agent's
    tool specs (``name``, ``description``, ``parameters`` as JSON Schema).
    Raise any exception to fail the step: it is journaled as ``failed``.
    """

    name: str

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse: ...
