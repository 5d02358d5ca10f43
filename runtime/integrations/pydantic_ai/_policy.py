"""What a resumed run does with a Pydantic AI tool call whose outcome is unknown."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from durably._tools.tool import OnUnknownOutcome, Reconciler
from durably.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["ToolPolicy", "tool_policies"]


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """The unknown-outcome policy of one tool: the tool was started and no result was journaled.

    Attributes:
        on_unknown_outcome: ``ask`` (the default: an approval decides), ``reconcile``
            (``reconcile`` says whether it happened), ``retry`` (run it again with the
            same idempotency key) or ``fail`` (the run fails).
        reconcile: The async hook the ``reconcile`` policy asks, given the call's
            ``durably.ToolContext``; it returns ``durably.Reconciled(result)`` when
            the call happened, None when it did not.

    Raises:
        InvalidArgumentError: An unknown policy, or ``reconcile`` without a hook.
    """

    on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.ASK
    reconcile: Reconciler | None = None

    def __post_init__(self) -> None:
        try:
            policy = OnUnknownOutcome(self.on_unknown_outcome)
        except ValueError:
            valid = ", ".join(repr(p.value) for p in OnUnknownOutcome)
            raise InvalidArgumentError(
                f"unknown on_unknown_outcome {self.on_unknown_outcome!r}; expected one of {valid}"
            ) from None
        object.__setattr__(self, "on_unknown_outcome", policy)
        if policy is OnUnknownOutcome.RECONCILE and self.reconcile is None:
            raise InvalidArgumentError("the reconcile policy needs a reconcile hook")


def tool_policies(tools: Mapping[str, ToolPolicy | OnUnknownOutcome | str] | None) -> dict[str, ToolPolicy]:
    """``tools`` with every value made a ``ToolPolicy`` (a bare policy name needs no hook).

    Raises:
        ArgumentTypeError: ``tools`` is not a mapping of tool names to policies.
        InvalidArgumentError: A policy that is not one of durably's.
    """
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        raise ArgumentTypeError(f"tools must map tool names to policies, got {type(tools).__name__}")
    policies: dict[str, ToolPolicy] = {}
    for name, value in tools.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"tools: a tool name must be a str, got {type(name).__name__}")
        if isinstance(value, ToolPolicy):
            policies[name] = value
        elif isinstance(value, str):
            policies[name] = ToolPolicy(value)
        else:
            raise ArgumentTypeError(
                f"tools[{name!r}] must be a ToolPolicy or a policy name, got {type(value).__name__}"
            )
    return policies
