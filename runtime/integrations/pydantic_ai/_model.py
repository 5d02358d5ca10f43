"""A Pydantic AI model whose requests are journaled calls of the durably run they happen in.

Each request (plain or streamed) is one ``Run.call`` of kind ``model``: intent
before the request goes out, the ``ModelResponse`` (in Pydantic AI's own message
encoding) after it came back. A resumed run gets the stored response without
asking the model again; a request whose answer was never stored is simply asked
again (nothing was stored, so nothing is paid twice). Outside a durably run the
model behaves exactly like the one it wraps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

import durably
from durably.errors import CorruptRecordError, NotInRunError

__all__ = ["JournaledModel", "dump_response", "load_response", "response_usage"]

#: The journaled call's name: on replay the call at a position must carry it (determinism check).
MODEL_CALL = "model.request"


def dump_response(response: ModelResponse) -> Any:
    """``response`` as plain JSON values, in the encoding of Pydantic AI's ``ModelMessagesTypeAdapter``."""
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def load_response(payload: Any) -> ModelResponse:
    """The ``ModelResponse`` ``dump_response`` wrote.

    Raises:
        CorruptRecordError: The journaled call holds something else (a
            ``ModelRequest``, or data Pydantic AI cannot read as a message).
    """
    try:
        message = ModelMessagesTypeAdapter.validate_python([payload])[0]
    except ValidationError as exc:
        raise CorruptRecordError(f"a journaled model call holds no Pydantic AI message: {exc}") from None
    if not isinstance(message, ModelResponse):
        raise CorruptRecordError(f"a journaled model call holds a {type(message).__name__}, not a ModelResponse")
    return message


def response_usage(response: ModelResponse) -> durably.Usage:
    """What one response cost, as durably counts it against the agent's budget."""
    usage = response.usage
    return durably.Usage(input_tokens=int(usage.input_tokens or 0), output_tokens=int(usage.output_tokens or 0))


def _current_run() -> Any:
    """The durably run this task is in, or None outside one."""
    try:
        return durably.current_run()
    except NotInRunError:
        return None


class JournaledModel(WrapperModel):
    """Wraps a Pydantic AI ``Model`` so each request is a journaled call of the current durably run.

    Args:
        model: The model that really answers.
        event_stream_handler: Returns the handler that gets the live stream of a
            streamed request while it runs (None: nobody watches it). Only the
            final response is journaled; a replayed request delivers no events.
    """

    def __init__(self, model: Model, *, event_stream_handler: Callable[[], EventStreamHandler[Any] | None]) -> None:
        super().__init__(model)
        self._event_stream_handler = event_stream_handler

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Ask the wrapped model, or return the answer the journal holds for this request."""
        run = _current_run()
        if run is None:
            return await super().request(messages, model_settings, model_request_parameters)

        async def ask() -> ModelResponse:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        response: ModelResponse = await run.call(
            ask, name=MODEL_CALL, kind="model", usage=response_usage, dump=dump_response, load=load_response
        )
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Stream from the wrapped model inside one journaled call; the run sees the completed response.

        The live events go to the event stream handler while the model streams;
        the journal keeps the final response only. Without a handler the
        completed response is replayed as events, so ``agent.iter`` /
        ``run_stream`` consumers still see its parts.
        """
        run = _current_run()
        if run is None:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                yield streamed
            return
        handler = self._event_stream_handler()

        async def stream() -> ModelResponse:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                if handler is not None and run_context is not None:
                    await handler(run_context, streamed)
                async for _ in streamed:
                    pass
            return streamed.get()

        response: ModelResponse = await run.call(
            stream, name=MODEL_CALL, kind="model", usage=response_usage, dump=dump_response, load=load_response
        )
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=handler is None
        )
