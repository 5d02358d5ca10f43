"""Typed errors of the LangGraph bridge, all ``DurablyError`` subclasses."""

from __future__ import annotations

from durably.storage.errors import DurablyError


class CheckpointValueError(DurablyError):
    """A stored channel value or pending write could not be rebuilt exactly.

    Raised instead of handing LangGraph a ``None`` or a raw dict: the value's
    class is unknown here (not importable, or blocked by the serializer's
    allowlist), its bytes do not decode, or a delta's base is missing.
    Attributes: ``thread_id``, ``checkpoint_ns``, ``checkpoint_id`` (str or None),
    ``channel`` (the channel name), ``reason`` (str).
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None, channel: str, reason: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.channel = channel
        self.reason = reason
        where = f"thread {thread_id!r}" + (f" ns {checkpoint_ns!r}" if checkpoint_ns else "")
        if checkpoint_id:
            where += f" checkpoint {checkpoint_id}"
        super().__init__(f"channel {channel!r} of {where} cannot be loaded: {reason}")


class InvalidThreadIdError(DurablyError, ValueError):
    """A ``thread_id`` durably cannot use as a stream id (empty, over 200
    characters, or holding NUL), or a config without ``configurable.thread_id``."""


class SyncCallOnLoopError(DurablyError, RuntimeError):
    """A synchronous ``DurablySaver`` method was called on the event loop thread
    the saver runs on: it would block the loop it needs, so it fails at once.
    Use the async method (``aget_tuple``, ``graph.ainvoke``...) there."""


class ForeignLoopError(DurablyError, RuntimeError):
    """An async ``DurablySaver`` method was awaited on another event loop than
    the one it opened its store on (store connections belong to one loop)."""


class InvalidPruneStrategyError(DurablyError, ValueError):
    """``prune`` was given a strategy other than ``keep_latest`` or ``delete``."""
