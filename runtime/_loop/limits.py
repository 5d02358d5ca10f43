"""``Limit``: a requests-per-minute, tokens-per-minute or concurrency limit on model calls.

A limit is a value: what it allows and which calls it covers (its ``key``).
Enforcing it across every worker of a store is ``durably._fleet.limiter``'s part;
``Admission`` is how an actor asks it before each model call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from durably._figures import check_figure
from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.storage._spi import StreamId

#: The key prefixes a ``Runtime``-wide limit matches calls by.
MODEL_PREFIX = "model:"
AGENT_PREFIX = "agent:"


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit on model calls shared by every worker of a store.

    Each attribute that is not None limits the calls the limit covers: at most
    ``requests_per_minute`` calls start in any sliding window, at most
    ``tokens_per_minute`` tokens (input + output, charged when a reply arrives)
    are spent in it, and at most ``concurrency`` calls are in flight at once.
    Given to ``Runtime(limits=...)`` a limit covers the calls its key names:
    ``"model:NAME"`` every call to a model named ``NAME`` (or ``"model:PROVIDER/NAME"``
    for one provider's, as ``gen_ai.provider.name`` spells it), ``"agent:NAME"``
    every call of the agents of definition ``NAME``. Given to an
    ``AgentDefinition(limits=...)`` it covers that definition's calls, whatever
    its key; definitions (in any process) that give limits with one key share them.

    Attributes:
        key: The limit's name, which the state in the store is kept under.
        requests_per_minute: Calls that may start per minute, or None.
        tokens_per_minute: Tokens (an int) that may be spent per minute, or None.
        concurrency: Calls (an int) that may be in flight at once, or None.
        window_s: The sliding window the per-minute rates are counted over, in
            seconds (60 by default): a window of 10 s allows a sixth of each rate
            in any 10 s, which spreads calls more evenly than a minute would.

    Raises:
        ArgumentTypeError: ``key`` is not a str.
        InvalidArgumentError: ``key`` is empty; no limit is given; a figure is
            not a finite number > 0 (an int for ``tokens_per_minute`` and
            ``concurrency``); or the window allows less than one call.
    """

    key: str
    requests_per_minute: float | None = None
    tokens_per_minute: int | None = None
    concurrency: int | None = None
    window_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.key, str):
            raise ArgumentTypeError(f"Limit: key must be a str, got {type(self.key).__name__}")
        if not self.key.strip():
            raise InvalidArgumentError("Limit: key must not be empty")
        check_figure("Limit", "requests_per_minute", self.requests_per_minute)
        check_figure("Limit", "tokens_per_minute", self.tokens_per_minute, integer=True)
        check_figure("Limit", "concurrency", self.concurrency, integer=True)
        check_figure("Limit", "window_s", self.window_s, optional=False)
        for name in ("requests_per_minute", "tokens_per_minute", "concurrency", "window_s"):
            if getattr(self, name) == 0:
                raise InvalidArgumentError(f"Limit {self.key!r}: {name} must be > 0")
        if self.requests_per_minute is None and self.tokens_per_minute is None and self.concurrency is None:
            raise InvalidArgumentError(
                f"Limit {self.key!r}: give requests_per_minute, tokens_per_minute or concurrency"
            )
        if self.requests_per_minute is not None and self.requests_in_window < 1:
            raise InvalidArgumentError(
                f"Limit {self.key!r}: {self.requests_per_minute} requests per minute allow no call "
                f"in a window of {self.window_s} s; make the window longer"
            )
        if self.tokens_per_minute is not None and self.tokens_in_window < 1:
            raise InvalidArgumentError(
                f"Limit {self.key!r}: {self.tokens_per_minute} tokens per minute allow no token "
                f"in a window of {self.window_s} s; make the window longer"
            )

    @property
    def requests_in_window(self) -> int:
        """Calls that may start in one window (0 when unlimited)."""
        if self.requests_per_minute is None:
            return 0
        return math.floor(self.requests_per_minute * self.window_s / 60.0 + 1e-9)

    @property
    def tokens_in_window(self) -> int:
        """Tokens that may be spent in one window (0 when unlimited)."""
        if self.tokens_per_minute is None:
            return 0
        return math.floor(self.tokens_per_minute * self.window_s / 60.0 + 1e-9)

    @property
    def rated(self) -> bool:
        """Whether the limit counts requests or tokens (not only concurrency)."""
        return self.requests_per_minute is not None or self.tokens_per_minute is not None

    def covers(self, definition_name: str, provider: str, model_name: str) -> bool:
        """Whether a ``Runtime``-wide limit covers a call by this definition to this model.

        Args:
            definition_name: The calling agent's definition name.
            provider: The model's provider (``gen_ai.provider.name``).
            model_name: The model's name.

        Returns:
            True when the key is ``model:`` that name (or ``provider/name``) or
                ``agent:`` that definition's name.
        """
        if self.key.startswith(MODEL_PREFIX):
            wanted = self.key[len(MODEL_PREFIX) :]
            return wanted in (model_name, f"{provider}/{model_name}")
        return self.key == f"{AGENT_PREFIX}{definition_name}"


def check_limits(owner: str, limits: object, *, runtime_wide: bool) -> tuple[Limit, ...]:
    """The limits as a tuple, checked.

    Args:
        owner: Who was given them (for the error's message).
        limits: What was given: a list of ``Limit``.
        runtime_wide: Whether keys must say what they cover (``model:`` or ``agent:``).

    Returns:
        The limits, in order.

    Raises:
        ArgumentTypeError: ``limits`` is not a list of ``Limit``.
        InvalidArgumentError: Two limits share a key, or a runtime-wide key covers nothing.
    """
    if isinstance(limits, (str, bytes, Limit)) or not isinstance(limits, (list, tuple, set, frozenset)):
        raise ArgumentTypeError(f"{owner}: limits must be a list of Limit, got {type(limits).__name__}")
    checked = tuple(limits)
    seen: set[str] = set()
    for limit in checked:
        if not isinstance(limit, Limit):
            raise ArgumentTypeError(f"{owner}: limits must be a list of Limit, got a {type(limit).__name__}")
        if limit.key in seen:
            raise InvalidArgumentError(f"{owner}: two limits share the key {limit.key!r}")
        seen.add(limit.key)
        if runtime_wide and not limit.key.startswith((MODEL_PREFIX, AGENT_PREFIX)):
            raise InvalidArgumentError(
                f"{owner}: limit key {limit.key!r} covers no call: start it with 'model:' or 'agent:' "
                f"(or give the limit to an AgentDefinition)"
            )
    return checked


#: ``charge(tokens)``: counts a reply's input + output tokens toward the token limits.
Charge = Callable[[int], Awaitable[None]]
#: ``on_wait(limit_key, seconds)``: told of each wait for a limit, with how long it lasted.
OnWait = Callable[[str, float], None]
#: ``estimate()``: the tokens to reserve for a call before it starts (asked only under a token limit).
Estimate = Callable[[], int]


def estimate_input_tokens(messages: Sequence[dict[str, object]]) -> int:
    """A rough count of the input tokens of a conversation: its JSON's characters over four.

    Args:
        messages: The messages the model will be sent.

    Returns:
        The estimate (an int >= 0); providers' tokenizers differ, so it is only a reservation.
    """
    return sum(len(json.dumps(m, default=str)) for m in messages) // 4


class Admission(Protocol):
    """What an actor asks before each model attempt (the fleet's ``Limiter.admission``)."""

    def __call__(
        self,
        definition_name: str,
        own: Sequence[Limit],
        provider: str,
        model_name: str,
        agent: StreamId,
        on_wait: OnWait,
        estimate: Estimate | None = None,
    ) -> AbstractAsyncContextManager[Charge]:
        """Wait until the limits covering the call have room; hold them while the call runs.

        Args:
            definition_name: The calling agent's definition name.
            own: The definition's limits.
            provider: The model's provider.
            model_name: The model's name.
            agent: The calling agent's stream.
            on_wait: Told of each wait.
            estimate: The tokens to reserve before the call (None: nothing reserved).

        Returns:
            A context manager: entered when the call may start, left when it
                ended; it gives ``charge`` for the reply's tokens.
        """
        ...
