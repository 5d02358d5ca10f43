"""Which runtime runs which agent: leases, taken before an agent runs and renewed while it does.

With several workers on one store (``Runtime.serve`` on many machines), a
worker resumes only agents whose lease it can take, so live agents are not
taken from each other; a crashed worker's leases expire and its agents are
resumed elsewhere. Leases are advisory (a paused worker may outlive its lease):
what keeps a stale worker from acting twice is still the expected seq of every
append (leases with fencing, as in Kleppmann's "How to do distributed locking").
Stores without ``CAP_LEASES`` run without them: every claim succeeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio

from durably._fleet.owner import LeaseHolder, Liveness, holder_liveness, new_identity
from durably.storage._errors import StoreError
from durably.storage._spi import Lease, LeaseStore, Store, StreamId, supports_leases

if TYPE_CHECKING:
    from durably._fleet.workers import Heartbeats

log = logging.getLogger("durably.leases")


class LeaseKeeper:
    """The leases one runtime holds. ``owner``: this runtime's unique name;
    ``ttl``: seconds a lease lasts unless renewed (renewed every ``ttl / 3``)."""

    def __init__(self, store: Store, worker_id: str, ttl: float) -> None:
        self.store = store
        self.identity = new_identity(worker_id, self)
        self.owner = str(self.identity)
        self.ttl = ttl
        self._leases: LeaseStore | None = store if supports_leases(store) else None
        self._held: dict[StreamId, Lease] = {}
        self._wanted: set[StreamId] = set()  # run here, lease to be taken once it lapses
        # The fleet's heartbeats (set by the runtime): a holder whose heartbeat stopped is dead on any host.
        self.heartbeats: Heartbeats | None = None
        #: Called with the stream and the dead holder's lease when a claim took it over (telemetry).
        self.on_takeover: Callable[[StreamId, Lease], None] = lambda stream, holder: None

    @property
    def enabled(self) -> bool:
        """Whether the store has leases (``CAP_LEASES``); without them every claim succeeds."""
        return self._leases is not None

    async def claim(self, stream: StreamId, *, force: bool = False) -> Lease | None:
        """Take the lease of ``stream``; None when another live owner holds it (see ``claim_or_holder``)."""
        return (await self.claim_or_holder(stream, force=force))[0]

    async def claim_or_holder(self, stream: StreamId, *, force: bool = False) -> tuple[Lease | None, Lease | None]:
        """Take the lease of ``stream``: ``(lease, None)``; or ``(None, holder)`` when another live
        owner holds it, ``holder`` being the lease the refusal read (None if it was not read), so a
        caller naming the holder needs no second read of it.

        A lease whose holder is dead (a process of this host that is gone, or a
        previous incarnation of this one: see ``durably._fleet.owner``) is taken
        at once: its exact lease (owner and token) is released, a no-op if it
        changed meanwhile, then acquired as usual, so of several runtimes that
        see the same dead holder the store lets exactly one win. ``force``
        claims whoever holds it (an operator's decision): the claim succeeds and
        the lease is taken over as soon as it lapses. Without lease support,
        claims always succeed. The returned lease has token 0 when it is not
        (yet) held in the store.
        """
        placeholder = Lease(stream, self.owner, 0, float("inf"))
        leases = self._leases
        if leases is None:
            return placeholder, None
        lease = await self._acquire(leases, stream)
        if lease is None:
            holder = await leases.get_lease(stream)
            if holder is not None and await self._dead(holder):
                log.info(
                    "lease of %s held by %s, dead (process gone or heartbeat stopped): taken over", stream, holder.owner
                )
                await leases.release_lease(holder)
                lease = await self._acquire(leases, stream)
                if lease is None:
                    return None, None  # another runtime took it over first
                self.on_takeover(stream, holder)
            elif force or holder is None:
                self._wanted.add(stream)  # taken over by the renewal loop once it lapses
                return placeholder, None
            else:
                return None, holder
        self._held[stream] = lease
        return lease, None

    async def _dead(self, holder: Lease) -> bool:
        """Whether ``holder``'s owner is dead: a gone process of this host, or a worker anywhere
        whose heartbeat stopped (``durably._fleet.workers``)."""
        if holder_liveness(holder.owner) is Liveness.DEAD:
            return True
        return self.heartbeats is not None and await self.heartbeats.silent(holder.owner)

    async def _acquire(self, leases: LeaseStore, stream: StreamId) -> Lease | None:
        """``acquire_lease`` for a claim. Cancelled, it may have been granted all the same (the
        SQLite adapter runs the lease statements queued meanwhile in one transaction, also those
        of waiters cancelled since), and a lease nobody here tracks is neither renewed nor
        released: other runtimes could not take the agent until it lapsed. So one of ours that
        is not held here is given back before the cancellation goes on."""
        try:
            return await leases.acquire_lease(stream, self.owner, self.ttl)
        except anyio.get_cancelled_exc_class():
            if stream not in self._held:
                with anyio.CancelScope(shield=True):
                    try:
                        granted = await leases.get_lease(stream)
                        if granted is not None and granted.owner == self.owner:
                            await leases.release_lease(granted)
                    except StoreError as exc:
                        log.warning(
                            "lease of %s not released after a cancelled claim (it will expire): %s", stream, exc
                        )
            raise

    async def holder_info(self, stream: StreamId) -> LeaseHolder | None:
        """Who holds ``stream``'s lease, until when, and whether that holder is alive; None if nobody."""
        lease = await self.holder(stream)
        if lease is None:
            return None
        info = LeaseHolder.of(lease)
        if info.liveness is not Liveness.DEAD and await self._dead(lease):
            return replace(info, liveness=Liveness.DEAD)
        return info

    async def holder(self, stream: StreamId) -> Lease | None:
        """The live lease of ``stream`` (whoever holds it), or None."""
        return None if self._leases is None else await self._leases.get_lease(stream)

    async def release(self, stream: StreamId) -> None:
        """Give up the lease of ``stream`` if held; errors are logged (it expires anyway)."""
        self._wanted.discard(stream)
        lease = self._held.pop(stream, None)
        if lease is None or self._leases is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._leases.release_lease(lease)
            except StoreError as exc:
                log.warning("lease of %s not released (it will expire): %s", stream, exc)

    async def release_all(self) -> None:
        """Give up every lease held or wanted (a drain); errors are logged."""
        self._wanted.clear()
        for stream in list(self._held):
            await self.release(stream)

    async def renew_forever(self, on_lost: Callable[[StreamId, Lease | None], None]) -> None:
        """Renew every held lease each ``ttl / 3`` seconds; ``on_lost(stream, holder)``
        for one that another owner (``holder``, None if unknown) took meanwhile.
        Run it in the runtime's task group."""
        leases = self._leases
        if leases is None:
            return
        while True:
            await anyio.sleep(self.ttl / 3)
            for stream in list(self._wanted):
                try:
                    lease = await leases.acquire_lease(stream, self.owner, self.ttl)
                except StoreError:
                    continue
                if lease is not None and stream in self._wanted:
                    self._wanted.discard(stream)
                    self._held[stream] = lease
            for stream in list(self._held):
                try:
                    lease = await leases.acquire_lease(stream, self.owner, self.ttl)
                except StoreError as exc:
                    log.warning("lease of %s not renewed this time: %s", stream, exc)
                    continue
                if stream not in self._held:
                    continue  # released while we renewed
                if lease is None:
                    # Someone took it after it expired: that worker owns the agent now.
                    self._held.pop(stream, None)
                    try:
                        holder = await leases.get_lease(stream)
                    except StoreError:
                        holder = None
                    on_lost(stream, holder)
                else:
                    # A new token means it lapsed and came back to us; anyone who
                    # acted meanwhile moved the seq, and our next append finds out.
                    self._held[stream] = lease
