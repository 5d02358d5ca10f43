"""An operator's rewrite of a stream (reencrypt, purge, a sweep's purge) runs under the stream's lease.

A worker inside a tool call holds the result of an effect that already
happened; if a rewrite moved the stream under it, its next append would be
refused and that result thrown away (the agent resumes to an intent without a
result: an "unknown outcome" after no crash at all, or the effect run twice).
So a rewrite first takes the stream's lease, as a worker would: while a live
worker holds it the rewrite does not happen (the caller skips the stream, waits
and tries again, or refuses); once taken, no worker can resume the agent until
the rewrite is done, every write of the rewrite carries the lease's fencing
token (a store that enforces fences refuses it if the lease passed on
meanwhile), and the lease is given back at the end. A lease whose holder is
dead (a gone process of this host, or a worker anywhere whose heartbeat
stopped: the runtime's lease keeper decides, as for a worker's claim) is taken
at once.

The rewrite's owner string is its own (a fresh identity per ``Upkeep``), never
the runtime's: an agent this same runtime runs holds the lease under the
runtime's owner, and a rewrite must not "renew" that lease and write under it.
On a store without leases there is nothing to take: the caller checks the
activations of its own runtime, the only workers such a store may have.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

from durably._fleet.owner import new_identity
from durably.errors import AgentLeasedError
from durably.storage._errors import StoreError
from durably.storage._spi import Lease, Store, StreamId, supports_leases

log = logging.getLogger("durably.upkeep")


class RewriteLeases:
    """Takes streams' leases for operator rewrites, under an owner of its own.

    ``store``: the store; ``worker_id``: the runtime's name (the owner string
    says it is that runtime's upkeep); ``ttl``: seconds a rewrite's lease lasts
    (a rewrite that outlives it is fenced, never silently wins); ``is_dead``:
    whether a holder is dead (``LeaseKeeper.is_dead``).
    """

    def __init__(self, store: Store, worker_id: str, ttl: float, is_dead: Callable[[Lease], Awaitable[bool]]) -> None:
        self.store = store
        self.identity = new_identity(f"{worker_id} upkeep", self)  # alive as long as this object is
        self.owner = str(self.identity)
        self.ttl = ttl
        self.is_dead = is_dead

    @asynccontextmanager
    async def held(self, stream: StreamId) -> AsyncIterator[Lease | None]:
        """Hold ``stream``'s lease for the block: yields the lease (its ``token`` is the fence of
        the block's writes), or None on a store without leases.

        Raises ``AgentLeasedError`` (naming the holder and its expiry) when a live
        holder keeps it; nothing is held then. ``StoreError`` from the store. The
        lease is released when the block ends (a failed release is logged: it expires).
        """
        if not supports_leases(self.store):
            yield None
            return
        lease = await self._take(stream)
        try:
            yield lease
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.store.release_lease(lease)
                except StoreError as exc:
                    log.warning("lease of %s not released after a rewrite (it will expire): %s", stream, exc)

    async def _take(self, stream: StreamId) -> Lease:
        assert supports_leases(self.store)
        store = self.store
        for _ in range(3):  # a holder that releases or dies between our two reads: look again
            lease = await store.acquire_lease(stream, self.owner, self.ttl)
            if lease is not None:
                return lease
            holder = await store.get_lease(stream)
            if holder is None:
                continue
            if not await self.is_dead(holder):
                raise AgentLeasedError(stream.agent_id, holder.owner, holder.expires_at)
            log.info("lease of %s held by %s, dead: taken for a rewrite", stream, holder.owner)
            await store.release_lease(holder)
        raise AgentLeasedError(stream.agent_id, None, None)
