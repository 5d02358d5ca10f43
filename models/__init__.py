"""durably.models: adapters from durably's ``Model`` protocol to real LLM APIs.

Each adapter is an optional extra using the vendor's official async client:

* ``durably.models.openai.OpenAIChatModel`` (``pip install -e '.[openai]'`` in durably's clone):
  the Chat Completions wire format, which OpenAI, vLLM, Ollama, LM Studio and
  LiteLLM's proxy all speak (``base_url=``);
* ``durably.models.anthropic.AnthropicModel`` (``pip install -e '.[anthropic]'`` in durably's clone):
  the Messages API.

``from_spec("openai:gpt-4.1-mini")`` builds one from a ``provider:model`` string.
Importing an adapter without its vendor client raises ``durably.errors.ExtraNotInstalledError``
(an ``ImportError``) naming the extra to install. The vendor clients' own retries are switched off: durably's ``RetryPolicy``
retries, so that each failed attempt is journaled and ``Retry-After`` is honoured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durably.errors import InvalidArgumentError, MalformedToolCallError

from ._common import Price

if TYPE_CHECKING:
    from durably._loop.model import Model

__all__ = ["MalformedToolCallError", "Price", "from_spec"]


def from_spec(spec: str, **options: Any) -> Model:
    """Build a model adapter from a ``"provider:model"`` string.

    The adapter's module is imported only when its provider is asked for.

    Args:
        spec: ``provider:model``, e.g. ``openai:gpt-4.1-mini`` or
            ``anthropic:claude-sonnet-4-5`` (providers: ``openai``, ``anthropic``).
        **options: Passed to the adapter's constructor (``OpenAIChatModel`` or
            ``AnthropicModel``): ``base_url``, ``api_key``, ``price``, request options...

    Returns:
        The adapter, a ``Model``.

    Raises:
        InvalidArgumentError: A ``ValueError``: an unknown provider, or a spec
            without a model.
        ExtraNotInstalledError: An ``ImportError`` naming the extra to install,
            when the vendor's client is missing.
    """
    provider, _, model = spec.partition(":")
    if not model:
        raise InvalidArgumentError(f"model spec {spec!r} is not provider:model, e.g. openai:gpt-4.1-mini")
    if provider == "openai":
        from .openai import OpenAIChatModel

        return OpenAIChatModel(model, **options)
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(model, **options)
    raise InvalidArgumentError(f"unknown model provider {provider!r} (known: openai, anthropic)")
