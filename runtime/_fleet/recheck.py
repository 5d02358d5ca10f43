"""A scan's second look at a listed row, just before it claims the stream.

A scan lists the runnable rows up front and works through them for seconds;
meanwhile other workers resume, run and finish many of those agents. Claiming
one of them anyway costs a lease acquire, a full restore and a release, to
find it finished. One point read of its status index entry right before the
claim costs far less, and skips it.

Skipping on the entry is as safe as the listing itself: an entry that makes a
stream runnable is written before its records, so an entry that says "not
runnable" never hides a record that made it runnable (that record's entry
would be there already, and its wake-up brings a later scan).
"""

from __future__ import annotations

import time

from durably._fleet.timers import WakeClock
from durably._loop.state import NEEDS_MIGRATION, RUNNING, SLEEPING
from durably.storage._spi import IndexedStream, IndexStore

#: The statuses a scan lists (``durably._journal.status_index.runnable_rows``).
_RUNNABLE = frozenset({RUNNING, NEEDS_MIGRATION, SLEEPING})


async def still_runnable(index: IndexStore, row: IndexedStream, clock: WakeClock) -> IndexedStream | None:
    """``row`` with its entry as stored now; None when that entry says the stream may not run now.

    A stream without an entry (any more) is kept, with entry None, for its
    journal to tell, as a listing would. A sleeping entry whose time has not
    come gives its time to ``clock`` and is dropped.
    Raises what ``index.get_index`` raises (``StoreUnavailableError``, ``StoreClosedError``).
    """
    entry = await index.get_index(row.stream)
    if entry is None:
        return IndexedStream(row.stream, None)
    if entry.status not in _RUNNABLE:
        return None
    if entry.status == SLEEPING and entry.wake_at is not None and entry.wake_at > time.time():
        clock.note(entry.wake_at)
        return None
    return row if entry == row.entry else IndexedStream(row.stream, entry)
