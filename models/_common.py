"""What both model adapters share: prices, tool results as text, error mapping."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pydantic_core

from durably._loop.model_retries import parse_retry_after
from durably.errors import InvalidArgumentError, TransientModelError

#: Provider stop reasons in durably's words (the provider's own word is kept otherwise).
STOP_REASONS = {
    "stop": "end",
    "end_turn": "end",
    "tool_calls": "tool_use",
    "tool_use": "tool_use",
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "content_filter": "refused",
    "refusal": "refused",
    "stop_sequence": "end",
}


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price per token, for ``Usage.cost_usd`` when the provider's response reports no cost.

    Attributes:
        input_per_mtok: US dollars per million input (prompt) tokens.
        output_per_mtok: US dollars per million output tokens.

    Raises:
        InvalidArgumentError: A ``ValueError``: a figure is not a finite number >= 0 (a ``bool`` is refused).
    """

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        for value in (self.input_per_mtok, self.output_per_mtok):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidArgumentError(f"Price figures must be finite numbers >= 0, got {value!r}")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of one call at this price.

        Args:
            input_tokens: Tokens the model read.
            output_tokens: Tokens the model wrote.

        Returns:
            The cost in US dollars.
        """
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1_000_000


def as_text(content: Any) -> str:
    """A message's content as the text a chat API takes: strings as they are,
    anything else (a tool's result: dicts, datetimes, Decimals, sets...) as JSON."""
    if isinstance(content, str):
        return content
    return pydantic_core.to_json(content, bytes_mode="base64", fallback=str).decode()


def stop_reason(raw: str | None) -> str:
    """The provider's stop reason in durably's words ("" when it gave none)."""
    return STOP_REASONS.get(raw or "", raw or "")


def transient_from_status(exc: Exception, status: int, headers: Any) -> Exception:
    """``TransientModelError`` for HTTP 408/409/429/5xx (with ``Retry-After``),
    else ``exc`` itself (a 400 or 401 will not get better by asking again)."""
    if status in (408, 409, 429) or status >= 500:
        after = parse_retry_after(headers.get("retry-after") if headers is not None else None)
        return TransientModelError(f"HTTP {status} from the model provider", retry_after=after, status=status)
    return exc


def finite_cost(value: Any) -> float | None:
    """A provider-reported cost if it is a finite number >= 0, else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None
