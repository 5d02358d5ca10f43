"""Ids of a run's tool calls and approvals, derived from the model's ``tool_call_id``.

A model may reuse a ``tool_call_id`` in a later step (Pydantic AI's ``TestModel``
names every call of a tool alike), and ``Run.call`` wants ids unique in the run:
the n-th use of the same base id in an activation gets ``#n`` appended. The body
replays in the same order, so the ids are the same on every activation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from weakref import WeakKeyDictionary

__all__ = ["unique_id"]

_seen: WeakKeyDictionary[Any, Counter[str]] = WeakKeyDictionary()


def unique_id(run: Any, base: str) -> str:
    """``base`` the first time ``run`` asks for it, then ``base#2``, ``base#3``..."""
    counts = _seen.setdefault(run, Counter())
    counts[base] += 1
    return base if counts[base] == 1 else f"{base}#{counts[base]}"
