"""The tool-call ids already in an agent's conversation, kept up to date without a rescan per step.

A new model answer's call ids must not repeat one in the conversation (providers refuse a
conversation that does). Scanning every message for them costs a step time that grows with
the conversation; this set scans each message once. Messages are only appended, inserted
(tool results, which carry no calls) or compacted away. Compaction never adds ids, so a set
that keeps the ids of compacted calls is a superset of the conversation's: a provider's id
that matches a compacted call gets a generated one, and ids stay unique either way.
"""

from __future__ import annotations

from typing import Any


class ConversationCallIds:
    """The call ids of the assistant messages of one ``messages`` list, scanned incrementally."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] | None = None
        self._scanned = 0
        self._ids: set[Any] = set()

    def of(self, messages: list[dict[str, Any]]) -> set[Any]:
        """Every call id of ``messages`` (and possibly of messages compacted out of it).

        In: the state's conversation (the same list object from step to step). Out: the set,
        owned by this object (read it, never change it). A new list object (another state,
        a restore) or a shorter one is scanned whole.
        """
        if messages is not self._messages or len(messages) < self._scanned:
            self._messages, self._scanned, self._ids = messages, 0, set()
        # An insert before the scanned end shifts messages right: none is skipped, some are seen twice.
        for message in messages[self._scanned :]:
            for call in message.get("tool_calls") or ():
                self._ids.add(call.get("id"))
        self._scanned = len(messages)
        return self._ids
