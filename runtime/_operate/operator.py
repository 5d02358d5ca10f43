"""The operator part of ``Runtime``: approve, extend_budget, retry, send and cancel.

These are the commands a human or an API gives an agent from outside, from
any process on the same store. Each but ``retry`` checks its arguments here
and hands a ``commands.Command`` to ``dispatch``, which takes it to the
agent's live actor in this runtime or straight to its journal; ``retry``
appends its ``retried`` records and resumes the agent. ``Operator`` is handed
the runtime's ``Activations`` (who runs what here), nothing else. ``dispatch``
and ``retry_failed`` are imported when first called: a runtime that only runs
agents never loads them (import time). The contracts are on the ``Runtime``
methods of the same names, which delegate here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durably._figures import check_bool, check_figure
from durably._loop import commands as cmd
from durably.errors import AgentFencedError, ArgumentTypeError, InvalidArgumentError, InvalidCommandError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.handle import AgentHandle
    from durably._operate.placement import CommandResult


class Operator:
    """Commands an agent from outside (see the module docstring)."""

    def __init__(self, activations: Activations) -> None:
        self.activations = activations

    async def approve(
        self,
        agent_id: str,
        approval_id: str,
        *,
        approved: bool = True,
        by: str = "",
        note: str = "",
        result: Any = cmd.NO_RESULT,
    ) -> CommandResult:
        """``Runtime.approve``."""
        check_bool("Runtime.approve", "approved", approved)
        return await self._command(
            agent_id, cmd.Decide(approval_id=approval_id, approved=approved, by=by, note=note, result=result)
        )

    async def extend_budget(
        self, agent_id: str, *, steps: int = 0, tokens: int = 0, cost_usd: float = 0.0
    ) -> CommandResult:
        """``Runtime.extend_budget``."""
        for name, value, integer in (("steps", steps, True), ("tokens", tokens, True), ("cost_usd", cost_usd, False)):
            try:
                check_figure("budget extension", name, value, integer=integer, optional=False)
            except ValueError as exc:
                raise InvalidCommandError(str(exc)) from None
        return await self._command(agent_id, cmd.ExtendBudget(steps=steps, tokens=tokens, cost_usd=cost_usd))

    async def retry(self, agent_id: str) -> AgentHandle | None:
        """``Runtime.retry``."""
        from durably._operate.retry_failed import RETRY_APPEND_ATTEMPTS, retry_entries

        await self.activations.refuse_thread(agent_id)
        for _ in range(RETRY_APPEND_ATTEMPTS):
            journal = await self.activations.restore_journal(agent_id)
            definition = self.activations.definitions.get(journal.state.definition.get("name", ""))
            try:
                await journal.append(*retry_entries(journal.state, definition, self.activations.worker_id))
            except AgentFencedError:
                continue  # another writer got there first: decide again from what it wrote
            # Without its definition here (the command line), a serving worker runs it.
            return await self.activations.resume(agent_id) if definition is not None else None
        raise AgentFencedError(self.activations.stream(agent_id), journal.state.last_seq, None)

    async def send(self, agent_id: str, content: str, *, role: str = "user") -> CommandResult:
        """``Runtime.send``."""
        if not isinstance(content, str):
            raise ArgumentTypeError(f"Runtime.send: content must be a str, got {type(content).__name__} {content!r}")
        if role not in cmd.SEND_ROLES:
            raise InvalidArgumentError(f"Runtime.send: role must be one of {', '.join(cmd.SEND_ROLES)}, got {role!r}")
        return await self._command(agent_id, cmd.SendMessage(content=content, role=role))

    async def cancel(self, agent_id: str, reason: str | None = "") -> CommandResult:
        """``Runtime.cancel``."""
        if reason is not None and not isinstance(reason, str):
            raise ArgumentTypeError(
                f"Runtime.cancel: reason must be a str or None, got {type(reason).__name__} {reason!r}"
            )
        return await self._command(agent_id, cmd.Cancel(reason=reason or ""))

    async def _command(self, agent_id: str, command: cmd.Command) -> CommandResult:
        """Apply ``command``; the state after it and where the agent runs now (see ``dispatch``)."""
        from durably._operate import dispatch

        return await dispatch.submit(self.activations, agent_id, command)
