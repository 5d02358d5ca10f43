"""A store whose lease traffic can be cut: one worker partitioned from the store's leases.

``lease_partitionable(url)`` builds the adapter ``url`` names, subclassed so
that, once ``cut`` is set, its ``acquire_lease`` and ``renew_leases`` raise ``StoreUnavailableError``:
the worker using it cannot renew, as a worker behind a network partition or
paused past its lease, while its appends still reach the store (where the
fencing token decides). Everything else is the real adapter.
"""

from __future__ import annotations

from typing import Any

from durably.storage import StoreUnavailableError, open_store


def lease_partitionable(url: str) -> Any:
    """The store for ``url`` (not opened), with a ``cut`` flag that fails its lease renewals."""
    base = type(open_store(url))

    class LeasePartitioned(base):  # type: ignore[valid-type, misc]
        cut = False

        async def acquire_lease(self, stream, owner, ttl):
            if self.cut:
                raise StoreUnavailableError("lease traffic cut by the test (a partitioned worker)")
            return await super().acquire_lease(stream, owner, ttl)

        async def renew_leases(self, owner, ttl, leases):
            if self.cut:
                raise StoreUnavailableError("lease traffic cut by the test (a partitioned worker)")
            return await super().renew_leases(owner, ttl, leases)

    return LeasePartitioned(url)
