"""``AnthropicModel``: durably's ``Model`` over Anthropic's Messages API.

It uses the official async client (``pip install -e '.[anthropic]'`` in durably's clone), with
its own retries off: durably's ``RetryPolicy`` retries and journals each
attempt. The Messages API takes the system prompt apart and wants user and
assistant turns to alternate, so consecutive messages of one side (a turn's
tool results, then a message the operator sent) are merged into one turn.
"""

from __future__ import annotations

import json
from typing import Any

from durably.errors import ExtraNotInstalledError

try:
    import anthropic
except ImportError as exc:  # the vendor client is the optional extra durably[anthropic]
    raise ExtraNotInstalledError.of("durably.models.anthropic", "anthropic", exc) from None

import httpx

from durably._loop.model import DeltaSink, ModelResponse, ToolCall, Usage
from durably.errors import MalformedToolCallError, TransientModelError

from ._common import Price, as_text, stop_reason, transient_from_status

__all__ = ["AnthropicModel", "to_wire"]


class AnthropicModel:
    """A ``Model`` answering through ``POST {base_url}/v1/messages`` (Anthropic's Messages API).

    A client built here has its own retries off (``max_retries=0``): durably's
    ``RetryPolicy`` retries and journals each attempt.

    Args:
        model: The model name, e.g. ``claude-sonnet-4-5``.
        client: An ``anthropic.AsyncAnthropic`` you configured; when given,
            ``base_url``, ``api_key`` and ``timeout`` are not used.
        base_url: The API's base URL for the client built here (None: Anthropic's).
        api_key: The API key for the client built here (None: ``$ANTHROPIC_API_KEY``).
        timeout: Seconds per request for the client built here.
        max_tokens: The most tokens per reply (the API requires a limit).
        price: Gives ``Usage.cost_usd`` (the API reports tokens, not money);
            None gives 0.0.
        **options: Passed to every request.
    """

    #: ``gen_ai.provider.name`` on its spans and metrics (OpenTelemetry GenAI conventions).
    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        client: Any = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_tokens: int = 4096,
        price: Price | None = None,
        **options: Any,
    ) -> None:
        self.name = model
        self.max_tokens = max_tokens
        self.price = price
        self.options = options
        self.client = client or anthropic.AsyncAnthropic(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
        )

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        """One Messages API call for ``messages`` with ``tools`` (``durably.Model.respond``).

        Args:
            messages: The conversation, OpenAI-style dicts; system messages go
                to ``system``, the rest become alternating turns (``to_wire``).
            tools: The agent's tool specs (``name``, ``description``,
                ``parameters``, sent as ``input_schema``).

        Returns:
            The reply's text blocks joined and its tool calls, with its usage
                and its stop reason in durably's words.

        Raises:
            TransientModelError: A timeout or connection error, or HTTP
                408/409/429/5xx (529 "overloaded" included; with its
                ``Retry-After``). Other HTTP errors (400, 401...) propagate as the
                client's ``anthropic.APIStatusError``.
            MalformedToolCallError: A ``TransientModelError``: a tool call's
                input is not a JSON object.
        """
        try:
            reply = await self.client.messages.create(**self._request(messages, tools))
        except anthropic.APIStatusError as exc:
            raise transient_from_status(exc, exc.status_code, exc.response.headers) from exc
        except anthropic.APIConnectionError as exc:  # APITimeoutError is one
            raise TransientModelError(f"{type(exc).__name__}: the model provider did not answer") from exc
        return self._response(reply)

    async def respond_stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> ModelResponse:
        """``respond`` over a streamed message (``stream=True``), each text piece handed to ``on_delta``.

        The events are assembled into the reply ``respond`` would have returned:
        text blocks joined, tool calls with their input pieces joined and then
        parsed, usage (input tokens from the start, output tokens from the end)
        and the stop reason.

        Args:
            messages: As ``respond``.
            tools: As ``respond``.
            on_delta: Called with each piece of text as it arrives.

        Returns:
            The assembled reply, as ``respond``.

        Raises:
            TransientModelError: As ``respond``; also a stream cut off before
                its stop reason (a dropped connection, a read error).
            MalformedToolCallError: As ``respond``; also a tool call's input
                pieces that do not make JSON.
        """
        blocks: dict[int, dict[str, Any]] = {}
        tokens_in = tokens_out = 0
        model, stop = None, None
        try:
            stream = await self.client.messages.create(**self._request(messages, tools), stream=True)
            async with stream:
                async for event in stream:
                    if event.type == "message_start":
                        model = event.message.model
                        tokens_in = event.message.usage.input_tokens or 0
                        tokens_out = event.message.usage.output_tokens or 0
                    elif event.type == "content_block_start":
                        block = event.content_block
                        if block.type in ("text", "tool_use"):
                            blocks[event.index] = {"type": block.type, "block": block, "pieces": []}
                    elif event.type == "content_block_delta" and event.index in blocks:
                        delta = event.delta
                        if delta.type == "text_delta":
                            blocks[event.index]["pieces"].append(delta.text)
                            on_delta(delta.text)
                        elif delta.type == "input_json_delta":
                            blocks[event.index]["pieces"].append(delta.partial_json)
                    elif event.type == "message_delta":
                        stop = event.delta.stop_reason or stop
                        tokens_out = event.usage.output_tokens or tokens_out
        except anthropic.APIStatusError as exc:
            raise transient_from_status(exc, exc.status_code, exc.response.headers) from exc
        except (anthropic.APIConnectionError, httpx.TransportError) as exc:  # a cut stream is not an APIError
            raise TransientModelError(f"{type(exc).__name__}: the model provider's stream broke off") from exc
        if stop is None:
            raise TransientModelError("the model provider's stream ended before its stop reason")
        texts, calls = [], []
        for _, entry in sorted(blocks.items()):
            joined = "".join(entry["pieces"])
            if entry["type"] == "text":
                texts.append(joined)
                continue
            block = entry["block"]
            try:
                arguments = json.loads(joined) if joined else (block.input or {})
            except json.JSONDecodeError as exc:
                raise MalformedToolCallError(f"tool call {block.name!r}: input is not JSON ({exc.msg})") from None
            calls.append((block.id, block.name, arguments))
        return self._assemble(texts, calls, tokens_in, tokens_out, model, stop)

    def _request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        system, turns = to_wire(messages)
        request: dict[str, Any] = {"model": self.name, "max_tokens": self.max_tokens, "messages": turns, **self.options}
        if system:
            request["system"] = system
        if tools:
            request["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools
            ]
        return request

    def _response(self, reply: Any) -> ModelResponse:
        texts = [block.text for block in reply.content if block.type == "text"]
        calls = [(block.id, block.name, block.input) for block in reply.content if block.type == "tool_use"]
        usage = reply.usage
        return self._assemble(
            texts, calls, usage.input_tokens or 0, usage.output_tokens or 0, reply.model, reply.stop_reason
        )

    def _assemble(
        self,
        texts: list[str],
        calls: list[tuple[str, str, Any]],
        tokens_in: int,
        tokens_out: int,
        model: str | None,
        stop: str | None,
    ) -> ModelResponse:
        usage = Usage(tokens_in, tokens_out, self.price.cost(tokens_in, tokens_out) if self.price else 0.0)
        for _, name, arguments in calls:
            if not isinstance(arguments, dict):
                # Billed all the same: the usage counts towards the budgets.
                raise MalformedToolCallError(f"tool call {name!r}: input is not a JSON object", usage=usage)
        return ModelResponse(
            "".join(texts),
            tuple(ToolCall(call_id, name, arguments) for call_id, name, arguments in calls),
            usage,
            model=model or self.name,
            stop_reason=stop_reason(stop),
        )


def to_wire(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Convert durably's conversation to the Messages API's system prompt and turns.

    The API takes the system prompt apart and wants user and assistant turns to
    alternate, so consecutive messages of one side (a turn's tool results, then
    a message the operator sent) are merged into one turn.

    Args:
        messages: durably's messages (``role``, ``content``, ``tool_calls``,
            ``tool_call_id``).

    Returns:
        ``(system, turns)``: the system messages' text joined by blank lines
            ("" when there are none), and the other messages as alternating
            ``user`` / ``assistant`` turns of content blocks (tool results as
            ``tool_result`` blocks of the user's side).
    """
    system = "\n\n".join(as_text(m["content"]) for m in messages if m["role"] == "system")
    turns: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "system":
            continue
        if role == "assistant":
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
                for c in m.get("tool_calls") or ()
            ]
            side = "assistant"
        elif role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": as_text(m["content"])}]
            side = "user"
        else:
            blocks = [{"type": "text", "text": as_text(m["content"])}]
            side = "user"
        if turns and turns[-1]["role"] == side:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": side, "content": blocks})
    return system, turns
