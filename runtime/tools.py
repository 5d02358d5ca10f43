"""Tools, their idempotency keys, and what happens to a call whose outcome is unknown.

A tool is an async function taking its arguments as keywords plus ``ctx``
(a ``ToolContext``). durably journals a ``tool_intent`` before calling it and a
``tool_result`` after. If the process dies in between, nobody knows whether the
side effect happened: the tool's ``on_unknown_outcome`` policy decides.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class OnUnknownOutcome(StrEnum):
    """Policy for an intent found without a result on resume.

    * ``retry``: run again with the same idempotency key. At-least-once; exactly
      once when the tool (or the system behind it) deduplicates by key, as
      Stripe's ``Idempotency-Key`` header does.
    * ``reconcile``: ask the tool's ``reconcile`` hook whether the key already
      happened; run again only if it did not. Exactly-once when the hook is right.
    * ``ask``: turn it into an approval request; a human decides to re-run or skip.
    * ``fail``: stop the agent with status ``failed``. At-most-once.
    """

    RETRY = "retry"
    RECONCILE = "reconcile"
    ASK = "ask"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool gets besides its arguments.

    ``idempotency_key``: stable across retries of this call (hex str), to pass on
    to external systems; ``agent_id``, ``call_id``; ``attempt`` (1 for the first run).
    """

    idempotency_key: str
    agent_id: str
    call_id: str
    attempt: int


def idempotency_key(namespace: str, agent_id: str, run_id: str, call_id: str) -> str:
    """The key of a tool call: SHA-256 of its coordinates, 32 hex chars.

    The run id is part of it so that an agent id reused after a purge never
    collides with keys an external system saw before.
    """
    material = "\x00".join((namespace, agent_id, run_id, call_id)).encode()
    return hashlib.sha256(material).hexdigest()[:32]


Reconciler = Callable[[ToolContext], Awaitable["Reconciled | None"]]


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A ``reconcile`` hook's answer that the call did happen, with its ``result``."""

    result: Any


@dataclass(frozen=True)
class Tool:
    """A tool an agent may call.

    ``fn``: ``async def fn(**arguments, ctx: ToolContext) -> plain data``.
    ``requires_approval``: every call waits for a human decision first.
    ``on_unknown_outcome``: see ``OnUnknownOutcome``; ``reconcile`` is required
    for ``RECONCILE``. ``parameters``: JSON Schema of the arguments, shown to the model.
    """

    name: str
    fn: Callable[..., Awaitable[Any]]
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    requires_approval: bool = False
    on_unknown_outcome: OnUnknownOutcome = OnUnknownOutcome.FAIL
    reconcile: Reconciler | None = None

    def __post_init__(self) -> None:
        if not inspect.iscoroutinefunction(self.fn):
            raise TypeError(f"tool {self.name!r}: fn must be an async function")
        if self.on_unknown_outcome is OnUnknownOutcome.RECONCILE and self.reconcile is None:
            raise ValueError(f"tool {self.name!r}: the reconcile policy needs a reconcile hook")

    def spec(self) -> dict[str, Any]:
        """The tool as the model sees it: name, description, parameters."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def signature(self) -> str:
        """What defines the tool's behaviour for the agent definition digest."""
        return f"{self.name}|{self.parameters}|{self.requires_approval}|{self.on_unknown_outcome.value}"


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.FAIL,
    reconcile: Reconciler | None = None,
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Decorator turning an async function into a ``Tool`` (name and description
    default to the function's name and docstring)."""

    def wrap(fn: Callable[..., Awaitable[Any]]) -> Tool:
        return Tool(
            name=name or fn.__name__,
            fn=fn,
            description=description if description is not None else (inspect.getdoc(fn) or ""),
            parameters=parameters or {"type": "object"},
            requires_approval=requires_approval,
            on_unknown_outcome=OnUnknownOutcome(on_unknown_outcome),
            reconcile=reconcile,
        )

    return wrap
