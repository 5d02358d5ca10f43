"""The operator side of ``Runtime``: approve, extend_budget, retry, send and cancel.

These are the commands a human or an API gives an agent from outside, from
any process on the same store. Each but ``retry`` checks its arguments here
and hands a ``commands.Command`` to ``dispatch``, which takes it to the
agent's live actor in this runtime or straight to its journal; ``retry``
appends its ``retried`` records and resumes the agent. They are separate from
``runtime`` (one idea per module): ``Runtime`` inherits this mixin, as it does
``Inspection``, and provides ``stream()``, ``worker_id``, its definitions,
``_restore_journal`` and ``_resume``. ``dispatch`` and ``retry`` are imported
when first called: a runtime that only runs agents never loads them (import time).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from durably._figures import check_bool, check_figure
from durably._loop import commands as cmd
from durably.errors import AgentFencedError, ArgumentTypeError, InvalidArgumentError, InvalidCommandError

if TYPE_CHECKING:
    from durably._fleet.handle import AgentHandle
    from durably._host import RuntimeHost
    from durably._journal.writer import AgentJournal
    from durably._loop.agent import AgentDefinition
    from durably._operate.placement import CommandResult
    from durably.storage._spi import StreamId


class OperatorCommands:
    """Methods of ``Runtime`` that command an agent from outside (see the module docstring)."""

    if TYPE_CHECKING:  # the host's (Runtime), declared for the type checker
        worker_id: str
        _definitions: dict[str, AgentDefinition]

        def stream(self, agent_id: str) -> StreamId: ...

        async def _restore_journal(self, agent_id: str) -> AgentJournal: ...

        async def _resume(
            self,
            agent_id: str,
            *,
            force: bool = False,
            seen: Any = ...,
            gather: Callable[[], Awaitable[None]] | None = None,
        ) -> AgentHandle | None: ...

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
        """Decide an open approval; a parked agent then resumes here if its definition is registered.

        For a call whose outcome is unknown (policy ``ask``) the three answers
        are: ``approved=True`` runs it again, ``approved=False`` skips it (the
        model is told it did not happen), and ``result=...`` says it happened:
        that value is journaled as the call's result and the call never runs
        again.

        Args:
            agent_id: The agent in this runtime's namespace.
            approval_id: The open approval to decide.
            approved: Run the call (True) or skip it (False).
            by: Who decided, recorded with the decision.
            note: Why, recorded with the decision.
            result: The call's result, for a call that happened (JSON-like data,
                or any value the journal stores exactly); the default means none.

        Returns:
            The state after the decision as a ``CommandResult`` whose
                ``placement`` says truthfully whether and where the agent runs now
                (here, in another live runtime, after a remote holder's lease lapses,
                or not yet: a ``durably.Placement`` whose ``where`` is a
                ``durably.Where``); every command returns one.

        Raises:
            ArgumentTypeError: ``approved`` is not a bool (a ``TypeError``: ``"no"``
                would be truthy); nothing is journaled.
            ApprovalAlreadyDecidedError: The approval was decided already,
                perhaps a moment ago by another process.
            InvalidCommandError: An unknown approval, a finished agent, or a
                result with ``approved=False``.
            UnencodableValueError: A result that cannot be stored (the message
                gives its field path).
            AgentNotFoundError: The agent has no records.
        """
        check_bool("Runtime.approve", "approved", approved)
        return await self._command(
            agent_id, cmd.Decide(approval_id=approval_id, approved=approved, by=by, note=note, result=result)
        )

    async def extend_budget(
        self, agent_id: str, *, steps: int = 0, tokens: int = 0, cost_usd: float = 0.0
    ) -> CommandResult:
        """Raise a suspended (or running) agent's limits; a suspended one resumes.

        Each figure is added to the limit of that name; a limit that is None
        (unlimited) stays so.

        Args:
            agent_id: The agent in this runtime's namespace.
            steps: Model responses to add to the ``steps`` limit.
            tokens: Tokens to add to the ``tokens`` limit.
            cost_usd: US dollars to add to the ``cost_usd`` limit.

        Returns:
            A ``CommandResult`` (as ``approve``).

        Raises:
            InvalidCommandError: A figure that is not finite and >= 0 (a NaN
                limit would never bite), nothing to extend (the agent has no
                limit on the figures given), or the agent is finished, failed or
                cancelled.
            AgentNotFoundError: The agent has no records.
        """
        for name, value, integer in (("steps", steps, True), ("tokens", tokens, True), ("cost_usd", cost_usd, False)):
            try:
                check_figure("budget extension", name, value, integer=integer, optional=False)
            except ValueError as exc:
                raise InvalidCommandError(str(exc)) from None
        return await self._command(agent_id, cmd.ExtendBudget(steps=steps, tokens=tokens, cost_usd=cost_usd))

    async def retry(self, agent_id: str) -> AgentHandle | None:
        """Resume a ``failed`` agent from its journal, once its cause is fixed.

        Appends a ``retried`` record (the status is running again) and resumes
        the agent here: a model error is retried from the step that failed; a
        call whose outcome is unknown under the ``fail`` policy becomes an
        approval request (re-run, skip, or "it happened" with a result). A call
        whose result could not be stored is never run again: the model is told
        so. Without its definition registered here (``durably retry``), the
        agent is made runnable for a worker that has it (``serve``), and every
        call whose outcome is unknown becomes a question.

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            The live activation's handle; None when the agent now waits for an
                approval, or when its definition is not registered here.

        Raises:
            InvalidCommandError: The agent is not failed.
            AgentNotFoundError: The agent has no records.
            AgentFencedError: Other writers appended first on every one of a
                few attempts.
            DurablyError: What ``resume`` raises.
        """
        from durably._operate.retry_failed import RETRY_APPEND_ATTEMPTS, retry_entries

        for _ in range(RETRY_APPEND_ATTEMPTS):
            journal = await self._restore_journal(agent_id)
            definition = self._definitions.get(journal.state.definition.get("name", ""))
            try:
                await journal.append(*retry_entries(journal.state, definition, self.worker_id))
            except AgentFencedError:
                continue  # another writer got there first: decide again from what it wrote
            # Without its definition here (the command line), a serving worker runs it.
            return await self._resume(agent_id) if definition is not None else None
        raise AgentFencedError(self.stream(agent_id), journal.state.last_seq, None)

    async def send(self, agent_id: str, content: str, *, role: str = "user") -> CommandResult:
        """Add a message to the agent's conversation (seen by its next model call).

        Args:
            agent_id: The agent in this runtime's namespace.
            content: The message's text.
            role: The message's role in the conversation: ``user`` or
                ``system`` (an instruction).

        Returns:
            A ``CommandResult`` (as ``approve``).

        Raises:
            ArgumentTypeError: ``content`` is not a str (a ``TypeError``);
                nothing is journaled.
            InvalidArgumentError: ``role`` is not ``user`` or ``system`` (a
                ``ValueError``); nothing is journaled.
            InvalidCommandError: The agent is finished, failed or cancelled.
            AgentNotFoundError: The agent has no records.
        """
        if not isinstance(content, str):
            raise ArgumentTypeError(f"Runtime.send: content must be a str, got {type(content).__name__} {content!r}")
        if role not in cmd.SEND_ROLES:
            raise InvalidArgumentError(f"Runtime.send: role must be one of {', '.join(cmd.SEND_ROLES)}, got {role!r}")
        return await self._command(agent_id, cmd.SendMessage(content=content, role=role))

    async def cancel(self, agent_id: str, reason: str | None = "") -> CommandResult:
        """Stop the agent for good (after its current step).

        Args:
            agent_id: The agent in this runtime's namespace.
            reason: Why, recorded with the ``cancelled`` record (None: no reason, as ``""``).

        Returns:
            A ``CommandResult`` (as ``approve``).

        Raises:
            ArgumentTypeError: ``reason`` is neither a str nor None (a
                ``TypeError``); nothing is journaled.
            InvalidCommandError: The agent is already finished, failed or
                cancelled.
            AgentNotFoundError: The agent has no records.
        """
        if reason is not None and not isinstance(reason, str):
            raise ArgumentTypeError(
                f"Runtime.cancel: reason must be a str or None, got {type(reason).__name__} {reason!r}"
            )
        return await self._command(agent_id, cmd.Cancel(reason=reason or ""))

    async def _command(self, agent_id: str, command: cmd.Command) -> CommandResult:
        """Apply ``command``; the state after it and where the agent runs now (see ``dispatch``)."""
        from durably._operate import dispatch

        return await dispatch.submit(cast("RuntimeHost", self), agent_id, command)  # self is the mixin's host
