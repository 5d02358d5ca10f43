"""Agents no registered definition may run: said once per worker, at WARNING.

An agent whose recorded definition changed under a definition with policy
``stop`` is held as ``needs_migration`` (``durably._upkeep.migrate``). A
serving worker meets it at every scan (the status index keeps listing it, so
that a deploy of a definition that accepts it resumes it); the log must say
so once, not at every poll, and again only if the reason changes (another
deploy) or the agent ran in between.
"""

from __future__ import annotations

import logging

log = logging.getLogger("durably.serve")


class BlockedAgents:
    """The agents this worker found blocked, each with the reason it last logged."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def found(self, agent_id: str, reason: str) -> None:
        """Log ``agent_id`` as blocked at WARNING, unless it was already logged with ``reason``."""
        if self._reasons.get(agent_id) == reason:
            return
        self._reasons[agent_id] = reason
        log.warning("agent %s is blocked (status needs_migration), no worker may run it: %s", agent_id, reason)

    def runnable(self, agent_id: str) -> None:
        """``agent_id`` runs again: a later block is logged anew."""
        self._reasons.pop(agent_id, None)
