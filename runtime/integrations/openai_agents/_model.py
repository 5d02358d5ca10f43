"""Model requests journaled: a ``Model`` wrapper and the ``ModelProvider`` that hands it out.

``get_response`` goes through ``Run.call(kind="model")``: the answer is stored
once received, a replay returns it without a request, and a request whose
answer was never stored (the process died while it ran) is simply asked again:
nothing stored was paid twice. Usage counts against the agent's ``Budget``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model, ModelProvider

from durably.errors import ArgumentTypeError

from ._calls import RunCalls
from ._values import dump_response, load_response, usage_of


class JournaledModel(Model):
    """``model`` with each ``get_response`` journaled in ``calls``' run."""

    def __init__(self, model: Model, calls: RunCalls) -> None:
        self.model = model
        self.calls = calls

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """The model's answer: stored in the journal, or asked for and stored.

        Raises:
            CallFailedError: The request failed (its error is journaled; the
                SDK's own retries ran inside the one call).
        """
        number, key = self.calls.next_model_key()

        async def ask() -> ModelResponse:
            return await self.model.get_response(*args, **kwargs)

        response: ModelResponse = await self.calls.run.call(
            ask, name="model", call_id=key, kind="model", dump=dump_response, load=load_response, usage=usage_of
        )
        ids = [getattr(item, "call_id", None) for item in response.output]
        self.calls.note_tool_calls(number, [i for i in ids if isinstance(i, str)])
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        """Not journaled: a DurableRunner runs with ``get_response``.

        Raises:
            ArgumentTypeError: Always (use ``DurableRunner.run``, not ``Runner.run_streamed``).
        """
        raise ArgumentTypeError("a DurableRunner journals whole answers: run it with DurableRunner.run")

    async def close(self) -> None:
        """Close the wrapped model."""
        close = getattr(self.model, "close", None)
        if close is not None:
            await close()


class JournaledProvider(ModelProvider):
    """A ``ModelProvider`` whose models are ``provider``'s, journaled in ``calls``' run."""

    def __init__(self, provider: ModelProvider, calls: RunCalls) -> None:
        self.provider = provider
        self.calls = calls

    def get_model(self, model_name: str | None) -> Model:
        """``provider``'s model of that name, journaled."""
        return JournaledModel(self.provider.get_model(model_name), self.calls)
