"""``OpenAIChatModel``: durably's ``Model`` over the Chat Completions API.

The same wire format is served by OpenAI and by vLLM, Ollama, LM Studio and
LiteLLM's proxy, so one adapter reaches them all through ``base_url``. It uses
the official async client (``pip install -e '.[openai]'`` in durably's clone), with its own
retries off: durably's ``RetryPolicy`` retries and journals each attempt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from durably.errors import ExtraNotInstalledError

try:
    import openai
except ImportError as exc:  # the vendor client is the optional extra durably[openai]
    raise ExtraNotInstalledError.of("durably.models.openai", "openai", exc) from None

import httpx

from durably._loop.model import DeltaSink, ModelResponse, ToolCall, Usage
from durably.errors import MalformedToolCallError, TransientModelError

from ._common import Price, as_text, finite_cost, stop_reason, transient_from_status

__all__ = ["OpenAIChatModel", "to_wire"]


class OpenAIChatModel:
    """A ``Model`` answering through ``POST {base_url}/chat/completions``.

    The Chat Completions wire format, also served by vLLM, Ollama, LM Studio and
    LiteLLM's proxy. A client built here has its own retries off
    (``max_retries=0``): durably's ``RetryPolicy`` retries and journals each attempt.

    Args:
        model: The provider's model name, e.g. ``gpt-4.1-mini``.
        client: An ``openai.AsyncOpenAI`` you configured; when given,
            ``base_url``, ``api_key`` and ``timeout`` are not used.
        base_url: The API's base URL for the client built here (None: OpenAI's).
        api_key: The API key for the client built here (None: ``$OPENAI_API_KEY``).
        timeout: Seconds per request for the client built here.
        price: Gives ``Usage.cost_usd`` when the response reports no cost (as
            LiteLLM and OpenRouter do, in ``usage.cost``); None with no reported
            cost gives 0.0.
        **options: Passed to every request (``temperature``,
            ``max_completion_tokens``...).
    """

    #: ``gen_ai.provider.name`` on its spans and metrics (OpenTelemetry GenAI conventions).
    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        client: Any = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        price: Price | None = None,
        **options: Any,
    ) -> None:
        self.name = model
        self.price = price
        self.options = options
        self.client = client or openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        """One chat completion for ``messages`` with ``tools`` (``durably.Model.respond``).

        Args:
            messages: The conversation, OpenAI-style dicts; tool results and
                tool-call arguments that are not text are sent as JSON.
            tools: The agent's tool specs (``name``, ``description``,
                ``parameters``), sent as ``function`` tools.

        Returns:
            The first choice's text and tool calls, with its usage and its stop
                reason in durably's words. A refusal (the message's ``refusal``
                text, or ``finish_reason`` ``content_filter``) is a reply with
                stop reason ``refused`` whose text is the refusal.

        Raises:
            TransientModelError: A timeout or connection error, HTTP
                408/409/429/5xx (with its ``Retry-After``), or a reply with no
                choices. Other HTTP errors (400, 401...) propagate as the client's
                ``openai.APIStatusError``.
            MalformedToolCallError: A ``TransientModelError``: a tool call's
                arguments are not a JSON object (its ``usage``: what the reply cost).
        """
        try:
            reply = await self.client.chat.completions.create(**self._request(messages, tools))
        except openai.APIStatusError as exc:
            raise transient_from_status(exc, exc.status_code, exc.response.headers) from exc
        except openai.APIConnectionError as exc:  # APITimeoutError is one
            raise TransientModelError(f"{type(exc).__name__}: the model provider did not answer") from exc
        if not reply.choices:
            raise TransientModelError("the model provider answered with no choices")
        choice = reply.choices[0]
        message = choice.message
        calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        return self._response(
            message.content, getattr(message, "refusal", None), calls, choice.finish_reason, reply.usage, reply.model
        )

    async def respond_stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> ModelResponse:
        """``respond`` over a streamed completion (``stream=True``), each text piece handed to ``on_delta``.

        The chunks are assembled into the reply ``respond`` would have returned:
        text, refusal, tool calls (their argument pieces joined, then parsed),
        stop reason and usage (asked for with ``stream_options.include_usage``).

        Args:
            messages: As ``respond``.
            tools: As ``respond``.
            on_delta: Called with each piece of the first choice's text.

        Returns:
            The assembled reply, as ``respond``.

        Raises:
            TransientModelError: As ``respond``; also a stream cut off before its
                finish reason (a dropped connection, a read error).
            MalformedToolCallError: As ``respond``.
        """
        request = {**self._request(messages, tools), "stream": True, "stream_options": {"include_usage": True}}
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]
        finish: str | None = None
        usage, model = None, None
        try:
            stream = await self.client.chat.completions.create(**request)
            async with stream:
                async for chunk in stream:
                    model = chunk.model or model
                    usage = chunk.usage or usage
                    for choice in chunk.choices:
                        if choice.index != 0:
                            continue  # only the first choice is the reply, as in ``respond``
                        delta = choice.delta
                        if delta.content:
                            text.append(delta.content)
                            on_delta(delta.content)
                        if getattr(delta, "refusal", None):
                            refusal.append(delta.refusal)
                        for piece in delta.tool_calls or ():
                            slot = calls.setdefault(piece.index, ["", "", ""])
                            slot[0] = piece.id or slot[0]
                            if piece.function is not None:
                                slot[1] += piece.function.name or ""
                                slot[2] += piece.function.arguments or ""
                        finish = choice.finish_reason or finish
        except openai.APIStatusError as exc:
            raise transient_from_status(exc, exc.status_code, exc.response.headers) from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:  # a cut stream is not an APIError
            raise TransientModelError(f"{type(exc).__name__}: the model provider's stream broke off") from exc
        if finish is None:
            raise TransientModelError("the model provider's stream ended before its finish reason")
        ordered = [(c[0], c[1], c[2]) for _, c in sorted(calls.items())]
        return self._response("".join(text) or None, "".join(refusal) or None, ordered, finish, usage, model)

    def _request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.name, "messages": to_wire(messages), **self.options}
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
                }
                for t in tools
            ]
        return request

    def _response(
        self,
        content: str | None,
        refusal: Any,
        calls: Sequence[tuple[str | None, str, str | None]],
        finish: str | None,
        usage: Any,
        model: str | None,
    ) -> ModelResponse:
        text, reason = content or "", stop_reason(finish)
        if isinstance(refusal, str) and refusal:
            # The refusal is the answer (a refusal may come with finish_reason "stop").
            text, reason = refusal, "refused"
        billed = self._usage(usage)
        try:
            tool_calls = tuple(_call(*c) for c in calls)
        except MalformedToolCallError as exc:
            exc.usage = billed  # billed all the same: it counts towards the budgets
            raise
        return ModelResponse(text, tool_calls, billed, model=model or self.name, stop_reason=reason)

    def _usage(self, usage: Any) -> Usage:
        if usage is None:
            return Usage()
        tokens_in, tokens_out = usage.prompt_tokens or 0, usage.completion_tokens or 0
        reported = finite_cost((usage.model_extra or {}).get("cost"))
        cost = reported if reported is not None else (self.price.cost(tokens_in, tokens_out) if self.price else 0.0)
        return Usage(tokens_in, tokens_out, cost)


def _call(call_id: str | None, name: str, arguments: str | None) -> ToolCall:
    text = arguments or "{}"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedToolCallError(f"tool call {name!r}: arguments are not JSON ({exc.msg})") from None
    if not isinstance(parsed, dict):
        raise MalformedToolCallError(f"tool call {name!r}: arguments are not a JSON object")
    return ToolCall(call_id or "", name, parsed)


def to_wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Convert durably's conversation to Chat Completions messages.

    Args:
        messages: durably's messages (``role``, ``content``, ``tool_calls``,
            ``tool_call_id``).

    Returns:
        The Chat Completions messages, in order. Contents (an assistant's
            aside) and tool-call arguments that are not strings become JSON text;
            an assistant message's empty content becomes None.
    """
    wire: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "assistant":
            calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": as_text(c["arguments"])},
                }
                for c in m.get("tool_calls") or ()
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
            if calls:
                entry["tool_calls"] = calls
            wire.append(entry)
        elif role == "tool":
            wire.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": as_text(m["content"])})
        else:
            wire.append({"role": role, "content": as_text(m["content"])})
    return wire
