"""Single-flight activation: at most one resume (or start) of an agent id at a time per runtime.

Inside one process several paths may want to activate the same agent at the
same moment: ``approve()`` resuming a parked agent inline, ``serve()``'s scan,
an explicit ``resume()``. Leases cannot tell them apart (they are one owner),
and the expected seq only notices after two copies have already started
running. So every activation path takes the agent id's lock first and, holding
it, looks again for a live actor: the first one spawns it, the others get its
handle (the "single flight" of Go's ``golang.org/x/sync/singleflight``).
Across runtimes the lease decides, and the expected seq fences whatever slips by.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import anyio


class KeyedLock:
    """One ``anyio.Lock`` per key, alive only while someone holds or waits for it.

    ``async with locks.hold(key):`` serialises the code for that key; different
    keys never wait for each other. Memory stays bounded by the keys in use.
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the body; cancellation while waiting is safe."""
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def held(self, key: Hashable) -> bool:
        """True while someone holds or waits for ``key``."""
        return key in self._locks
