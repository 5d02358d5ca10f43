"""How a command reaches an agent, and what the caller is told.

A command (approve, extend, send, cancel) goes to the agent's live actor in
this runtime if there is one (its mailbox: the actor is the stream's single
writer), else straight to the journal: restore, translate against the state
(``commands.to_record``), append with the expected seq, and on a conflict
re-read and translate again (a racing command is re-validated, never
overruled: ``commands.rebase``). The caller gets a ``CommandResult``: the
state after the command and, truthfully, where the agent runs now
(``placement``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from durably._fleet import wakeups
from durably._fleet.handle import AgentHandle
from durably._loop import commands as cmd
from durably._loop.actor import _Requeue
from durably._loop.state import RUNNING
from durably._operate import placement
from durably._operate.placement import CommandResult
from durably.errors import AgentFencedError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations

_COMMAND_RETRIES = 8  # expected-seq retries for a command racing another writer


async def submit(activations: Activations, agent_id: str, command: cmd.Command) -> CommandResult:
    """Apply ``command`` to ``agent_id`` through ``runtime``; errors as the ``Runtime`` command methods."""
    actor = activations.live.get(agent_id)
    if actor is not None and not actor.done.is_set():
        try:
            await actor.mailbox.send(command)
            await command.done.wait()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            command.finish(_Requeue())
        if not isinstance(command.error, _Requeue):
            if command.error is not None:
                raise command.error
            return CommandResult.of(actor.state, placement.live_here(actor.state, AgentHandle(actor)))
    # No live actor here: the journal is the agent. Append with the expected seq;
    # if another writer got there first, re-read and decide again.
    await activations.refuse_thread(agent_id)  # an operator's command: one more read is cheap
    for _ in range(_COMMAND_RETRIES):
        journal = await activations.restore_journal(agent_id)
        was_parked = journal.state.parked
        entry = cmd.to_record(journal.state, command)
        try:
            await journal.append(entry)
        except AgentFencedError:
            continue
        where = await placement.place(activations, journal.state, was_parked=was_parked)
        if was_parked and where.where is not placement.Where.HERE and journal.state.status == RUNNING:
            await wakeups.publish(activations.store, journal.stream)  # a serve() elsewhere resumes it now
        return CommandResult.of(journal.state, where)
    raise AgentFencedError(activations.stream(agent_id), journal.state.last_seq, None)
