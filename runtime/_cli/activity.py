"""What an agent did, for people: its model steps, or for a function agent its calls.

A function agent (its body calls tools itself, with no model) takes no model
steps, so its steps stay 0 however much it did: ``durably show``, ``durably
agents`` and the console's pages count its journaled calls instead, all through
these functions so they say the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durably._reading.describe import AgentDescription


def calls_made(info: AgentDescription) -> tuple[int, int]:
    """``(calls, done)``: the journaled calls the agent started and how many of them completed."""
    calls = info.state.ledger.values() if info.state is not None else ()
    return len(calls), sum(bool(c.get("done")) for c in calls)


def counts_calls(info: AgentDescription) -> bool:
    """Whether what the agent did is counted in calls, not model steps: its body calls tools
    itself with no model response (a function agent), so its steps stay 0."""
    return info.steps == 0 and calls_made(info)[0] > 0


def steps_line(info: AgentDescription) -> tuple[str, str]:
    """``(name, value)`` of what the agent did, as ``show`` prints it: ``("steps", "9")`` for its
    model responses, or for a function agent ``("calls", "8 (8 done)")``."""
    if counts_calls(info):
        calls, done = calls_made(info)
        return ("calls", f"{calls} ({done} done)")
    return ("steps", str(info.steps))


def steps_cell(info: AgentDescription) -> str:
    """A steps column's cell (``agents``, the console's list): what ``steps_line`` says in one
    cell, ``"9"`` or a function agent's ``"8 calls (8 done)"``."""
    if counts_calls(info):
        calls, done = calls_made(info)
        return f"{calls} calls ({done} done)"
    return str(info.steps)
