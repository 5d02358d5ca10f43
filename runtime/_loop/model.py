"""The model interface: one small protocol between durably and any LLM client.

durably never calls an LLM itself. It hands the conversation and the tool
specs to a ``Model`` and journals the ``ModelResponse`` before acting on it,
so a resumed run never pays for the same response twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from durably.errors import ModelReplyError

#: Bounds on one model reply, checked before it is journaled (a reply past them
#: is refused, never cut): characters of text, tool calls, plan steps, id/name length.
MAX_TEXT_CHARS = 4 * 1024 * 1024
MAX_TOOL_CALLS = 128
MAX_PLAN_STEPS = 1000
MAX_NAME_CHARS = 256

#: The stop reason of a refusal or a filtered reply: the run fails with it, never finishes.
REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for.

    Attributes:
        id: The call's id, unique in the run; durably fills one in when empty.
        name: The name of the tool to call.
        arguments: The call's arguments, a plain-data dict.
    """

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """What a model call cost: tokens in and out, and money in US dollars.

    Attributes:
        input_tokens: Tokens the model read (the prompt).
        output_tokens: Tokens the model wrote.
        cost_usd: What the call cost, in US dollars.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One model turn.

    Attributes:
        text: The model's text; when there are no tool calls, the run's result.
            With ``stop_reason`` ``refused``: the refusal, and the agent fails.
        tool_calls: The ``ToolCall`` objects to run (none: the run is finished
            and ``text`` is its result).
        usage: What the turn cost (``Usage``).
        plan: An optional new plan, a list of step descriptions (None: the plan
            is unchanged).
        model: The name of the model that answered.
        stop_reason: Why it stopped: ``end``, ``tool_use``, ``max_tokens``,
            ``refused``, a provider's own word, or "" when unknown. ``refused``
            (a refusal or a content filter) never finishes the run: the reply
            is journaled without its tool calls, none run, and the agent is
            ``failed`` with reason ``refused: <text>``.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    plan: list[str] | None = None
    model: str = ""
    stop_reason: str = ""


@runtime_checkable
class Model(Protocol):
    """Anything that turns a conversation into the next ``ModelResponse``.

    ``messages`` are OpenAI-style dicts (``role``: system/user/assistant/tool,
    ``content``, ``tool_calls``, ``tool_call_id``); ``tools`` are the agent's
    tool specs (``name``, ``description``, ``parameters`` as JSON Schema).
    An exception is a failed attempt: transient ones (``TransientModelError``,
    ``TimeoutError``, ``ConnectionError``, anything carrying an HTTP
    ``status_code`` of 408, 409, 425, 429 or 5xx; see ``is_transient``) are
    retried by the definition's ``RetryPolicy``; once the attempts are spent,
    or for any other exception, the agent is ``failed`` with the reason, and
    ``Runtime.retry`` resumes it.
    The reply is validated before it is journaled (``check_reply``).
    """

    name: str

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        """Answer the conversation with the next turn.

        Args:
            messages: The conversation, OpenAI-style dicts (``role``:
                system/user/assistant/tool, ``content``, ``tool_calls``,
                ``tool_call_id``).
            tools: The agent's tool specs (``name``, ``description``,
                ``parameters`` as JSON Schema).

        Returns:
            The next ``ModelResponse``; it is validated (``check_reply``) and
                journaled before durably acts on it.

        Raises:
            TransientModelError: A failure a later attempt may not meet (also
                ``TimeoutError``, ``ConnectionError`` or an HTTP 408/409/425/429/5xx
                error): retried by the definition's ``RetryPolicy``. Any other
                exception fails the agent.
        """


#: Where a streaming model hands each piece of text as it arrives (see ``StreamingModel``).
DeltaSink = Callable[[str], None]


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A ``Model`` that can also stream: the actor calls ``respond_stream`` instead of ``respond``.

    Only the final ``ModelResponse`` is journaled; the pieces handed to
    ``on_delta`` are for live subscribers (``Runtime.stream``) and are lost with
    the process. A model without ``respond_stream`` keeps working unchanged.
    """

    async def respond_stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> ModelResponse:
        """Answer as ``respond`` does, handing each piece of the reply's text to ``on_delta`` as it arrives.

        Args:
            messages: As ``respond``.
            tools: As ``respond``.
            on_delta: Called with each text piece, in order, before the reply is
                returned; it never blocks and never raises.

        Returns:
            The whole reply, exactly as ``respond`` would have assembled it.

        Raises:
            TransientModelError: As ``respond``; a stream cut off midway is one
                (its pieces were already handed on: the retry streams them again).
        """


def check_reply(response: Any) -> None:
    """Raise ``ModelReplyError`` unless ``response`` is a ``ModelResponse`` whose
    fields have their declared types, finite non-negative usage figures and
    sizes within the module's bounds. A reply that passes folds cleanly."""
    if not isinstance(response, ModelResponse):
        raise ModelReplyError("response", f"expected a ModelResponse, got {type(response).__name__}")
    _text("text", response.text, MAX_TEXT_CHARS)
    _text("model", response.model, MAX_NAME_CHARS)
    _text("stop_reason", response.stop_reason, MAX_NAME_CHARS)
    calls = response.tool_calls
    if not isinstance(calls, (tuple, list)):
        raise ModelReplyError("tool_calls", f"expected a tuple of ToolCall, got {type(calls).__name__}")
    if len(calls) > MAX_TOOL_CALLS:
        raise ModelReplyError("tool_calls", f"{len(calls)} calls, over the limit of {MAX_TOOL_CALLS}")
    for i, call in enumerate(calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, ToolCall):
            raise ModelReplyError(where, f"expected a ToolCall, got {type(call).__name__}")
        _text(f"{where}.id", call.id, MAX_NAME_CHARS)
        _text(f"{where}.name", call.name, MAX_NAME_CHARS)
        if not call.name:
            raise ModelReplyError(f"{where}.name", "empty tool name")
        if type(call.arguments) is not dict:
            raise ModelReplyError(f"{where}.arguments", f"expected a dict, got {type(call.arguments).__name__}")
    _check_usage(response.usage)
    plan = response.plan
    if plan is not None:
        if not isinstance(plan, list) or len(plan) > MAX_PLAN_STEPS:
            raise ModelReplyError("plan", f"expected a list of at most {MAX_PLAN_STEPS} str, or None")
        for i, step in enumerate(plan):
            _text(f"plan[{i}]", step, MAX_TEXT_CHARS)


def _text(path: str, value: Any, limit: int) -> None:
    if type(value) is not str:
        raise ModelReplyError(path, f"expected a str, got {type(value).__name__}")
    if len(value) > limit:
        raise ModelReplyError(path, f"{len(value)} characters, over the limit of {limit}")


def _check_usage(usage: Any) -> None:
    if not isinstance(usage, Usage):
        raise ModelReplyError("usage", f"expected a Usage, got {type(usage).__name__}")
    for name in ("input_tokens", "output_tokens"):
        value = getattr(usage, name)
        if type(value) is not int or value < 0:
            raise ModelReplyError(f"usage.{name}", f"expected an int >= 0, got {value!r}")
    cost = usage.cost_usd
    if type(cost) not in (int, float) or not math.isfinite(cost) or cost < 0:
        raise ModelReplyError("usage.cost_usd", f"expected a finite number >= 0, got {cost!r}")


def billed_usage(error: BaseException, response: Any = None) -> dict[str, Any] | None:
    """What the provider billed for a reply that was refused, as journaled (``input_tokens``,
    ``output_tokens``, ``cost_usd``); None when nothing is known to be billed.

    ``response`` is the adapter's reply when it returned one that ``check_reply``
    refused (its ``usage`` counts if that is valid); else the usage an adapter's
    error carries (``MalformedToolCallError.usage``: a reply whose tool calls do not parse).
    """
    usage = getattr(error, "usage", None) if response is None else getattr(response, "usage", None)
    try:
        _check_usage(usage)
    except ModelReplyError:
        return None
    assert isinstance(usage, Usage)  # _check_usage made sure
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd}
