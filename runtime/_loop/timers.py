"""Durable timers: an agent parks until a time, and any worker wakes it once the time has come.

A timer is two records. ``timer_set`` (``wake_at``) parks the agent: its
status becomes ``sleeping``, its activation ends, its lease is given back, no
process holds it and nothing of it stays in memory. The status index entry
written in the same commit carries ``wake_at``, so ``serve()`` finds the due
timers in the index and sleeps until the earliest one, never restoring an
agent before its time. ``timer_fired`` wakes it: appended once, by the worker
whose lease and expected seq the store accepts, in the same append as that
activation's ``resumed`` record; a worker that crashed before it leaves the
agent sleeping (and due), one that crashed after leaves it running. Either
way the next worker runs the agent on from its journal, and the timer fires
exactly once.

A tool parks its agent by returning ``Sleep``; the runtime parks a new agent
with ``Runtime.start(..., not_before=...)``. Anything else that owns an
``AgentJournal`` parks it with ``park_until(journal, wake_at)``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from durably._loop.state import SLEEPING, AgentState
from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.schemas._records import Kind

if TYPE_CHECKING:
    from durably._journal.writer import AgentJournal


# The latest wake time a timer may name: the first second of the year 9999 (UTC).
# Any later one is either a mistake or past what a ``datetime`` can show, and a
# ``timer_set`` naming it would be a record no one can read as a date.
LATEST_WAKE_AT = datetime(9999, 1, 1, tzinfo=UTC).timestamp()


def wake_time(owner: str, seconds: float | None = None, until: datetime | None = None) -> float:
    """The unix time ``seconds`` from now, or the time ``until`` names; exactly one of them.

    Raises ``InvalidArgumentError`` for a negative, NaN or infinite ``seconds``, both or neither
    given, a naive ``until`` (no tzinfo: which zone it means is a guess), or a wake time later than
    ``LATEST_WAKE_AT`` (9999-01-01T00:00:00Z; an int too large for a float included);
    ``ArgumentTypeError`` for a ``seconds`` that is not a number or an ``until`` that is not a
    ``datetime``. ``owner`` names the caller in the message.
    """
    if (seconds is None) == (until is None):
        raise InvalidArgumentError(f"{owner}: give seconds or until, exactly one")
    if until is not None:
        if not isinstance(until, datetime):
            raise ArgumentTypeError(f"{owner}: until must be a datetime, got {type(until).__name__}")
        if until.tzinfo is None or until.utcoffset() is None:
            raise InvalidArgumentError(
                f"{owner}: until must be an aware datetime (e.g. datetime.now(UTC)), got the naive {until.isoformat()}"
            )
        try:
            at = until.timestamp()
        except (OverflowError, ValueError) as exc:  # an offset pushing it past datetime's range
            raise InvalidArgumentError(f"{owner}: until {until.isoformat()} is out of range") from exc
        return _bounded(owner, at, f"until {until.isoformat()}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ArgumentTypeError(f"{owner}: seconds must be a number, got {type(seconds).__name__}")
    try:
        finite = math.isfinite(seconds)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite or seconds < 0:
        shown = repr(seconds) if finite or isinstance(seconds, float) else "an int too large for a float"
        raise InvalidArgumentError(f"{owner}: seconds must be finite and not negative, got {shown}")
    return _bounded(owner, time.time() + seconds, f"seconds {seconds!r}")


def _bounded(owner: str, at: float, given: str) -> float:
    """``at``, when it is no later than ``LATEST_WAKE_AT``; else ``InvalidArgumentError``."""
    if at > LATEST_WAKE_AT:
        raise InvalidArgumentError(f"{owner}: {given} wakes after 9999-01-01T00:00:00Z, the latest wake time allowed")
    return at


@dataclass(frozen=True, init=False)
class Sleep:
    """A tool's return value that parks its agent until a time (a durable timer).

    ``Sleep(seconds)`` or ``Sleep(until=aware_datetime)``; ``result`` is the
    tool's result the model reads once the agent wakes (None by default). The
    wake time is fixed when the ``Sleep`` is made, so a worker that resumes the
    agent later waits only what is left.

    Attributes:
        seconds: How long to sleep from now (not kept: ``wake_at`` is).
        until: An aware ``datetime`` to sleep until (not kept: ``wake_at`` is).
        wake_at: When the agent wakes, unix seconds.
        result: The tool's result, journaled with the timer.

    Raises:
        InvalidArgumentError: ``seconds`` negative, NaN or infinite; a naive
            ``until``; a wake time after 9999-01-01T00:00:00Z; both or neither given.
        ArgumentTypeError: ``seconds`` not a number, ``until`` not a ``datetime``.
    """

    wake_at: float
    result: Any

    def __init__(self, seconds: float | None = None, *, until: datetime | None = None, result: Any = None) -> None:
        object.__setattr__(self, "wake_at", wake_time("Sleep", seconds, until))
        object.__setattr__(self, "result", result)


def timer_entry(wake_at: float, call_id: str | None = None) -> tuple[str, dict[str, Any]]:
    """The ``timer_set`` record parking an agent until ``wake_at`` (set by the tool call ``call_id``)."""
    data: dict[str, Any] = {"wake_at": wake_at}
    if call_id is not None:
        data["call_id"] = call_id
    return Kind.TIMER_SET, data


def due(state: AgentState, now: float | None = None) -> bool:
    """True when ``state`` sleeps on a timer whose time has come (at ``now``, default the clock)."""
    return state.status == SLEEPING and (state.wake_at or 0.0) <= (time.time() if now is None else now)


def fired_entry(state: AgentState) -> tuple[str, dict[str, Any]]:
    """The ``timer_fired`` record waking ``state`` (which sleeps: see ``due``)."""
    return Kind.TIMER_FIRED, {"wake_at": state.wake_at or 0.0}


async def park_until(journal: AgentJournal, wake_at: float) -> None:
    """Park the agent of ``journal`` until ``wake_at`` (unix seconds): one ``timer_set`` append.

    The caller's activation should end after it: the agent is ``sleeping`` and
    a worker resumes it once the time has come. Raises what ``AgentJournal.append`` raises.
    """
    await journal.append(timer_entry(wake_at))
