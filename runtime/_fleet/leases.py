"""Which runtime runs which agent: leases, taken in the store before an agent runs and renewed while it does.

With several workers on one store (``Runtime.serve`` on many machines), a
worker runs an agent only under a lease acquired in the store, never on a
promise of one: each activation gets its own ``LeaseClaim`` (see
``durably._journal.claim``), whose token fences every append and snapshot it
makes, so a paused or stale worker is refused by the store itself (fencing
tokens, as in Kleppmann's "How to do distributed locking"). A crashed worker's
leases expire, or are taken at once when its process is known dead, and its
agents are resumed elsewhere. Stores without ``CAP_LEASES`` run without them:
every claim succeeds, and such a store must have a single worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from durably._fleet.owner import LeaseHolder, Liveness, holder_liveness, new_identity
from durably._fleet.single_flight import KeyedLock
from durably._journal.claim import LeaseClaim
from durably.errors import LeaseLoss
from durably.storage._errors import StoreError
from durably.storage._spi import (
    Lease,
    LeaseRenewStore,
    LeaseStore,
    Store,
    StreamId,
    supports_lease_renew,
    supports_leases,
)

if TYPE_CHECKING:
    from durably._fleet.workers import Heartbeats

log = logging.getLogger("durably.leases")

#: Acquire attempts of one claim that found the lease free again by the time its holder was read.
_RACES = 4
#: Lease renewals sent at once.
_RENEWALS = 16


class LeaseKeeper:
    """The leases one runtime holds, one ``LeaseClaim`` per live activation.

    ``store``: the runtime's store; ``worker_id``: the name the embedder chose
    (the owner string adds this process's incarnation, see ``durably._fleet.owner``);
    ``ttl``: seconds a lease lasts unless renewed (renewed every ``ttl / 3``).
    """

    def __init__(self, store: Store, worker_id: str, ttl: float) -> None:
        self.store = store
        self.identity = new_identity(worker_id, self)
        self.owner = str(self.identity)
        self.ttl = ttl
        self._leases: LeaseStore | None = store if supports_leases(store) else None
        self._held: dict[StreamId, LeaseClaim] = {}  # the current claim of each stream leased here
        # Held from a claim's acquire until the claim is in ``_held``: the lease this owner was
        # granted is then either known here or not granted yet (see ``_give_back``).
        self._claiming = KeyedLock()
        # The fleet's heartbeats (set by the runtime): a holder whose heartbeat stopped is dead on any host.
        self.heartbeats: Heartbeats | None = None
        #: Called with the stream and the dead holder's lease when a claim took it over (telemetry).
        self.on_takeover: Callable[[StreamId, Lease], None] = lambda stream, holder: None
        #: Called with the stream when one of this keeper's claims is first found lost (telemetry).
        self.on_lost: Callable[[StreamId], None] = lambda stream: None
        #: Awaited with a claim about to be given back, while its lease is still held and renewed:
        #: the snapshot writer ends what it writes under it (its pages have no fence).
        self.before_release: Callable[[LeaseClaim], Awaitable[None]] = _nothing_in_flight

    @property
    def enabled(self) -> bool:
        """Whether the store has leases (``CAP_LEASES``); without them every claim succeeds."""
        return self._leases is not None

    async def claim_or_holder(self, stream: StreamId, *, wait: float = 0.0) -> tuple[LeaseClaim | None, Lease | None]:
        """Take the lease of ``stream`` in the store for a new activation.

        Returns ``(claim, None)`` once the store granted the lease; ``(None, holder)``
        when another live owner holds it, ``holder`` being the lease the refusal
        read (None if it could not be read), so a caller naming the holder needs
        no second read of it. Without lease support the claim holds no lease and
        always succeeds.

        A lease whose holder is dead (a process of this host that is gone, or a
        previous incarnation of this one: see ``durably._fleet.owner``) is taken
        at once: its exact lease (owner and token) is released, a no-op if it
        changed meanwhile, then acquired as usual, so of several runtimes that
        see the same dead holder the store lets exactly one win. ``wait``: seconds
        to keep trying while a live holder keeps it (for its lease to lapse or be
        released); 0 answers at once.

        Raises ``StoreError`` from the store (``StoreUnavailableError``, ``StoreClosedError``).
        """
        leases = self._leases
        if leases is None:
            return LeaseClaim(stream, None, self.ttl, time.monotonic()), None
        deadline = time.monotonic() + wait
        races = 0
        dead_holder: Lease | None = None  # a dead holder's lease this claim released, to be taken over
        while True:
            claim = await self._claim_once(leases, stream)
            if claim is not None:
                if dead_holder is not None:
                    self.on_takeover(stream, dead_holder)
                return claim, None
            holder = await leases.get_lease(stream)
            if holder is None:
                races += 1  # released or lapsed between the two reads: ask again
                if races >= _RACES:
                    return None, None
                continue
            if races < _RACES and await self.is_dead(holder):
                races += 1
                log.info(
                    "lease of %s held by %s, dead (process gone or heartbeat stopped): taken over", stream, holder.owner
                )
                await leases.release_lease(holder)
                dead_holder = holder
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None, holder
            await anyio.sleep(min(left, self.ttl / 10, max(holder.expires_at - time.time(), 0.0) + 0.01))

    async def _claim_once(self, leases: LeaseStore, stream: StreamId) -> LeaseClaim | None:
        """One acquire for a new claim of ``stream``: the claim, already in ``_held`` when the
        stream's claiming lock is let go (see ``_give_back``), or None when refused."""
        asked = time.monotonic()
        async with self._claiming.hold(stream):
            lease = await self._acquire(leases, stream)
            if lease is None:
                return None
            claim = LeaseClaim(stream, lease, self.ttl, asked, self.on_lost)
            self._held[stream] = claim
            return claim

    async def is_dead(self, holder: Lease) -> bool:
        """Whether ``holder``'s owner is dead: a gone process of this host, or a worker anywhere
        whose heartbeat stopped (``durably._fleet.workers``). Raises ``StoreError`` from the
        heartbeat read."""
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
        if info.liveness is not Liveness.DEAD and await self.is_dead(lease):
            return replace(info, liveness=Liveness.DEAD)
        return info

    async def holder(self, stream: StreamId) -> Lease | None:
        """The live lease of ``stream`` (whoever holds it), or None."""
        return None if self._leases is None else await self._leases.get_lease(stream)

    async def release(self, claim: LeaseClaim) -> None:
        """Give back exactly the lease ``claim`` acquired (its owner and token).

        A no-op when the claim is no longer this stream's current one here (a
        newer activation claimed it since, or the renewal loop found it lost), or
        without leases; in the store too, a lease that changed hands meanwhile is
        left as it is (``release_lease`` is exact), and so is one that a new claim of
        this runtime holds by then (see ``_give_back``).
        Waits first for ``before_release`` (shielded), the lease renewed meanwhile.
        Never raises: a failed release is logged at WARNING (the lease expires anyway).
        """
        if self._held.get(claim.stream) is not claim:
            return
        with anyio.CancelScope(shield=True):
            await self.before_release(claim)
        if self._held.get(claim.stream) is not claim:
            return  # lost while the writer finished, or released by a concurrent call
        del self._held[claim.stream]
        if claim.lease is None or self._leases is None:
            return
        with anyio.CancelScope(shield=True):
            await self._give_back(self._leases, claim.lease)

    async def release_all(self) -> None:
        """Give up every lease held (a drain); never raises (failures are logged)."""
        for claim in list(self._held.values()):
            await self.release(claim)

    async def renew_forever(self, on_lost: Callable[[LeaseClaim, Lease | None], None]) -> None:
        """Renew every held lease each ``ttl / 3`` seconds; ``on_lost(claim, holder)`` for a
        claim whose lease is not ours any more: another owner (``holder``, None if unknown)
        took it, or it came back under a new token (it lapsed meanwhile). Run it in the
        runtime's task group; it never raises for a store error (logged, tried next round).

        On a store with ``CAP_LEASE_RENEW`` a round is one ``renew_leases`` call for every
        held lease: with a thousand agents sharing the loop and the store connection, a
        thousand separate renewals queued behind the agents' writes took longer than the
        ttl, and the leases lapsed. The leases that call did not renew (lost, or lapsed),
        and every lease on other stores, are renewed one by one through ``acquire_lease``,
        which tells another holder from a new token, up to ``_RENEWALS`` at once.

        Rounds start every ``ttl / 3`` whatever a round took, and a round does not wait for
        the renewals of the one before: a claim whose renewal is still in flight is skipped,
        the others are renewed on time (one request stuck in the store's retries must not
        let every other lease of this runtime lapse)."""
        leases = self._leases
        if leases is None:
            return
        together = leases if supports_lease_renew(leases) else None
        limiter = anyio.CapacityLimiter(_RENEWALS)
        in_flight: set[LeaseClaim] = set()

        async def renew(claim: LeaseClaim) -> None:
            try:
                async with limiter:
                    await self._renew(leases, claim, on_lost)
            finally:
                in_flight.discard(claim)

        async def round_(claims: list[LeaseClaim], tg: anyio.abc.TaskGroup) -> None:
            left = claims if together is None else await self._renew_together(together, claims)
            in_flight.difference_update(set(claims).difference(left))  # renewed, or released meanwhile
            for claim in left:
                tg.start_soon(renew, claim)

        async with anyio.create_task_group() as tg:
            while True:
                started = time.monotonic()
                claims = [claim for claim in self._held.values() if claim not in in_flight]
                if claims:
                    in_flight.update(claims)
                    tg.start_soon(round_, claims, tg)
                await anyio.sleep(max(0.0, started + self.ttl / 3 - time.monotonic()))

    async def _renew_together(self, leases: LeaseRenewStore, claims: list[LeaseClaim]) -> list[LeaseClaim]:
        """Renew the leases of ``claims`` in one ``renew_leases`` call; the claims still held
        here whose lease it did not renew, for ``_renew`` to settle one by one (all of them
        when the call failed: logged, and the per-lease path tries each). A batch only
        renews a lease still ours under the same token and unexpired, never grants one, so
        a claim released meanwhile has nothing to give back."""
        asked = time.monotonic()
        try:
            renewed = await leases.renew_leases(
                self.owner, self.ttl, [claim.lease for claim in claims if claim.lease is not None]
            )
        except Exception as exc:
            log.warning("%d leases not renewed together this round, renewing one by one: %s", len(claims), exc)
            return claims
        by_stream = {lease.stream: lease for lease in renewed}
        left: list[LeaseClaim] = []
        for claim in claims:
            lease = by_stream.get(claim.stream)
            if lease is None or claim.lease is None or lease.token != claim.lease.token:
                left.append(claim)
            elif self._held.get(claim.stream) is claim:
                claim.renewed(lease, asked)
        return [claim for claim in left if self._held.get(claim.stream) is claim]

    async def _renew(
        self, leases: LeaseStore, claim: LeaseClaim, on_lost: Callable[[LeaseClaim, Lease | None], None]
    ) -> None:
        asked = time.monotonic()
        try:
            lease = await leases.acquire_lease(claim.stream, self.owner, self.ttl)
        except Exception as exc:
            log.warning("lease of %s not renewed this time: %s", claim.stream, exc)
            claim.renewal_failed(exc)
            return
        if self._held.get(claim.stream) is not claim:
            # Released (or claimed anew) while we renewed: an acquire that reached the store
            # after the release took the lease again, and no claim here would renew or release it.
            if lease is not None:
                await self._give_back(leases, lease)
            return
        holder = None
        if lease is None:
            # Refused: another owner held it then. Who holds it now (None: released meanwhile,
            # so it lapsed and is free; the read failing leaves the holder unnamed).
            try:
                holder = await leases.get_lease(claim.stream)
                cause: LeaseLoss = "taken" if holder is not None else "lapsed"
            except Exception:
                holder, cause = None, "taken"
            claim.lose(holder, cause=cause)
        else:
            claim.renewed(lease, asked)  # a new token: lost as lapsed
            if claim.lost is None:
                return
        # Lost: another owner holds it, or it lapsed and came back to us under a new
        # token, which nobody here uses: it is given back.
        if self._held.get(claim.stream) is claim:
            del self._held[claim.stream]
        if lease is not None:
            await self._give_back(leases, lease)
        on_lost(claim, holder)

    async def _give_back(self, leases: LeaseStore, lease: Lease) -> None:
        """Release ``lease``, this owner's and no longer in ``_held`` (a claim released, or a
        lapsed lease a renewal was granted again), unless a new claim here holds the stream
        by now. Such a claim, made by this owner while the lease was live, was renewed in
        place by the store: it holds this very owner and token, so releasing it would end
        the new activation's lease (and if it holds another token, this one is not live).
        Under the stream's claiming lock, so a claim whose acquire is in flight is
        registered first (or has not reached the store yet, and then gets the next token).
        Never raises (logged)."""
        async with self._claiming.hold(lease.stream):
            if lease.stream in self._held:
                return
            try:
                await leases.release_lease(lease)
            except Exception as exc:
                log.warning("lease of %s not released (it will expire): %s", lease.stream, exc)


async def _nothing_in_flight(claim: LeaseClaim) -> None:
    """``LeaseKeeper.before_release`` of a keeper with no snapshot writer: nothing to wait for."""
