"""When ``serve()`` wakes for a timer, and which sleeping agents a scan may resume.

A sleeping agent's status index entry carries its ``wake_at``
(``durably._loop.timers``). A scan lists the sleeping entries with the
runnable ones and keeps only those that are due (``due_only``): an agent
sleeping past now is never restored, leased or appended to. The times of
the others go to the runtime's ``WakeClock``, as do the timers its own
agents set when they park; between two scans ``serve()`` waits until the
earliest of them (or the poll interval, or a change notification), so a
timer fires on time however long the poll interval is.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio

from durably._loop.state import SLEEPING
from durably.storage._spi import IndexedStream


class WakeClock:
    """The earliest timer this runtime knows of (unix seconds, or None).

    ``note`` is called with each timer seen (a scan's sleeping entries, an
    agent parking here); ``reset`` at the start of each scan, which sees them
    all again. ``wait`` returns when the earliest time comes, or an earlier
    one is noted.
    """

    def __init__(self) -> None:
        self.earliest: float | None = None
        self._sooner = anyio.Event()

    def note(self, wake_at: float | None) -> None:
        """Remember ``wake_at`` if it is the earliest so far (None: nothing)."""
        if wake_at is None or (self.earliest is not None and wake_at >= self.earliest):
            return
        self.earliest = wake_at
        self._sooner.set()
        self._sooner = anyio.Event()

    def reset(self) -> None:
        """Forget every time: a scan is about to see them again."""
        self.earliest = None

    async def wait(self, longest: float) -> None:
        """Sleep ``longest`` seconds at most, less when the earliest timer comes sooner (also one noted meanwhile)."""
        deadline = time.monotonic() + longest
        while True:
            sooner = self._sooner
            left = deadline - time.monotonic()
            if self.earliest is not None:
                left = min(left, self.earliest - time.time())
            if left <= 0:
                return
            with anyio.move_on_after(left):
                await sooner.wait()


async def due_only(rows: AsyncIterator[IndexedStream], clock: WakeClock) -> AsyncIterator[IndexedStream]:
    """``rows`` without the sleeping entries whose time has not come (their times go to ``clock``)."""
    now = time.time()
    async for row in rows:
        entry = row.entry
        if entry is not None and entry.status == SLEEPING and entry.wake_at is not None and entry.wake_at > now:
            clock.note(entry.wake_at)
            continue
        yield row
