"""The SDK's values as the journal holds them, and back.

A model answer (``ModelResponse``) is stored as its output items (the
Responses API items, dumped to JSON-compatible dicts), its usage (the SDK's own
``serialize_usage``) and ids; it is rebuilt with the ``openai`` types, so a
replayed answer is the same object the model produced. A tool's output and a
guardrail's ``output_info`` are plain data; a pydantic model among them is
stored as its JSON dump (and comes back as that dict on a replay).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pydantic
from agents.guardrail import GuardrailFunctionOutput
from agents.items import ModelResponse, TResponseOutputItem
from agents.usage import deserialize_usage, serialize_usage

from durably._loop.model import Usage


@cache
def _output_items() -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(TResponseOutputItem)


def plain(value: Any) -> Any:
    """``value`` with every pydantic model in it replaced by its JSON dump (lists, tuples and dicts walked)."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def dump_response(response: ModelResponse) -> dict[str, Any]:
    """A ``ModelResponse`` as plain data for the journal."""
    return {
        "output": [plain(item) for item in response.output],
        "usage": plain(serialize_usage(response.usage)),
        "response_id": response.response_id,
        "request_id": response.request_id,
    }


def load_response(stored: Any) -> ModelResponse:
    """The ``ModelResponse`` ``dump_response`` stored (the very object on a first run)."""
    if isinstance(stored, ModelResponse):
        return stored
    return ModelResponse(
        output=[_output_items().validate_python(item) for item in stored["output"]],
        usage=deserialize_usage(stored["usage"]),
        response_id=stored.get("response_id"),
        request_id=stored.get("request_id"),
    )


def usage_of(response: ModelResponse) -> Usage:
    """What one answer cost, in durably's terms (tokens; the SDK reports no price)."""
    return Usage(input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens)


def dump_guardrail(output: GuardrailFunctionOutput) -> dict[str, Any]:
    """A guardrail's verdict as plain data."""
    return {"tripwire": bool(output.tripwire_triggered), "info": plain(output.output_info)}


def load_guardrail(stored: Any) -> GuardrailFunctionOutput:
    """The verdict ``dump_guardrail`` stored."""
    if isinstance(stored, GuardrailFunctionOutput):
        return stored
    return GuardrailFunctionOutput(output_info=stored["info"], tripwire_triggered=stored["tripwire"])
