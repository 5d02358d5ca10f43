"""One SDK run's journaled calls: the keys they get and the policies they follow.

Keys are what make a replay find its stored results, so they are derived from
what the journal itself replays, never from task scheduling order: the N-th
model request of the run is ``model:N`` (an SDK run asks its model one turn at a
time); a tool call is keyed by the call id the model gave it, qualified by the
model request that asked for it (a provider may reuse ids across turns); a
guardrail by its name and how many times it ran before.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from durably._functions.run import Run
from durably._tools.tool import OnUnknownOutcome, Reconciler, ToolContext
from durably.errors import NotInRunError

_CALL: ContextVar[ToolContext | None] = ContextVar("durably_openai_agents_call", default=None)


def current_call() -> ToolContext:
    """The durably ``ToolContext`` of the journaled tool call running now (inside a tool's function).

    Its ``idempotency_key`` is the same on every attempt of the call (and on a
    ``retry`` after a crash), so a tool can pass it to the service it changes.

    Returns:
        The running call's ``ToolContext`` (idempotency key, agent id, call id, attempt).

    Raises:
        NotInRunError: Called outside a tool run by a ``DurableRunner``.
    """
    ctx = _CALL.get()
    if ctx is None:
        raise NotInRunError("current_call() is only available inside a tool run by a DurableRunner")
    return ctx


class RunCalls:
    """The journaled calls of one body execution: ``run``, the tool policies, the counters.

    ``policies`` maps a tool name to its unknown-outcome policy (``default`` for
    the others); ``reconcilers`` a tool name to its reconcile hook.
    """

    def __init__(
        self,
        run: Run,
        default: OnUnknownOutcome,
        policies: Mapping[str, OnUnknownOutcome],
        reconcilers: Mapping[str, Reconciler],
    ) -> None:
        self.run = run
        self._default = default
        self._policies = policies
        self._reconcilers = reconcilers
        self._models = 0
        self._asked_by: dict[str, int] = {}  # tool call id -> the model request that asked for it
        self._guardrails: Counter[str] = Counter()

    def next_model_key(self) -> tuple[int, str]:
        """The next model request's number and key."""
        self._models += 1
        return self._models, f"model:{self._models}"

    def note_tool_calls(self, request: int, call_ids: list[str]) -> None:
        """Remember which model request asked for these tool call ids."""
        for call_id in call_ids:
            self._asked_by.setdefault(call_id, request)

    def tool_key(self, call_id: str) -> str:
        """The key of the tool call the model gave ``call_id``."""
        request = self._asked_by.get(call_id)
        return f"tool:{call_id}" if request is None else f"tool:{request}:{call_id}"

    def guardrail_key(self, kind: str, name: str) -> str:
        """The key of the next run of the ``kind`` (input/output) guardrail ``name``."""
        self._guardrails[f"{kind}:{name}"] += 1
        return f"guardrail:{kind}:{name}:{self._guardrails[f'{kind}:{name}']}"

    async def tool(self, name: str, call_id: str, invoke: Any, arguments: str = "") -> Any:
        """Run ``invoke()`` (the SDK's own tool invocation) once, journaled under the tool's policy;
        ``arguments`` (the model's JSON) is what the journal shows the call was given."""
        from ._values import plain

        async def journaled(ctx: ToolContext) -> Any:
            token = _CALL.set(ctx)
            try:
                return await invoke()
            finally:
                _CALL.reset(token)

        policy = self._policies.get(name, self._default)
        return await self.run.call(
            journaled,
            name=name,
            call_id=self.tool_key(call_id),
            on_unknown_outcome=policy,
            reconcile=self._reconcilers.get(name),
            dump=plain,
            shown_arguments=_parsed(arguments),
        )


def _parsed(arguments: str) -> dict[str, Any]:
    """The model's JSON arguments as a dict; text that is not a JSON object is shown as it is."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}
