"""Checks of the optional batch renewal of leases (``CAP_LEASE_RENEW``): ``renew_leases``.

A batch renews only what ``acquire_lease`` would renew in place (the owner's
unexpired lease under the same token) and never grants: a lease that was
released, expired, re-taken or taken by another owner is left as it is. Every
"still held" assertion uses a long ttl; expiry uses ``lease_short_ttl``, as
the lease checks do.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from durably.storage._errors import InvalidRequestError, StoreClosedError
from durably.storage._spi import CAP_LEASE_RENEW, Lease, LeaseRenewStore, Store, supports_lease_renew

from ._harness import expect_raises, sid
from ._leases import LONG_TTL, LeaseChecks, _same


class LeaseRenewChecks(LeaseChecks):
    """Promises of ``renew_leases``; skipped unless the store declares ``CAP_LEASE_RENEW`` (and ``CAP_LEASES``)."""

    def lease_renew_of(self, store: Store) -> LeaseRenewStore:
        """``store`` as a ``LeaseRenewStore``; skips the current check unless it declares ``CAP_LEASE_RENEW``.

        Args:
            store: The store under test.

        Returns:
            The same store, typed as a ``LeaseRenewStore``.
        """
        leases = self.leases_of(store)
        if supports_lease_renew(leases):
            return leases
        self._skip_undeclared(leases, CAP_LEASE_RENEW)

    @pytest.mark.anyio
    async def test_lease_renew_method_exists_and_needs_an_open_store(self, tmp_path: Path) -> None:
        store = self.lease_renew_of(self.make_store(tmp_path))
        assert callable(getattr(store, "renew_leases", None)), (
            f"a store declaring {CAP_LEASE_RENEW!r} has LeaseRenewStore.renew_leases"
        )
        lease = Lease(sid("closed-renew"), "w", 1, time.time() + LONG_TTL)
        await expect_raises(StoreClosedError, lambda: store.renew_leases("w", LONG_TTL, [lease]), "before open()")
        await store.open()
        await store.close()
        await expect_raises(StoreClosedError, lambda: store.renew_leases("w", LONG_TTL, [lease]), "after close()")

    @pytest.mark.anyio
    async def test_lease_renew_keeps_tokens_and_moves_expiry(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.lease_renew_of(opened)
            held = [await self._take_lease(store, sid(f"renew-{i}"), "worker-a", LONG_TTL) for i in range(5)]
            assert await store.renew_leases("worker-a", LONG_TTL, []) == [], "renewing no lease renews none"
            renewed = await store.renew_leases("worker-a", 2 * LONG_TTL, held)
            assert sorted(lease.stream for lease in renewed) == sorted(lease.stream for lease in held), (
                f"every lease the owner holds is renewed: {renewed}"
            )
            by_stream = {lease.stream: lease for lease in renewed}
            for lease in held:
                fresh = by_stream[lease.stream]
                assert (fresh.owner, fresh.token) == (lease.owner, lease.token), (
                    f"a renewal keeps owner and token: {lease} -> {fresh}"
                )
                assert fresh.expires_at > lease.expires_at, f"a renewal moves expires_at: {lease} -> {fresh}"
                assert _same(await store.get_lease(lease.stream), fresh), "get_lease shows the renewed lease"
            again = await store.renew_leases("worker-a", 2 * LONG_TTL, renewed)
            assert len(again) == len(held), "renewing twice renews (a retried call is safe)"
            other = await store.acquire_lease(held[0].stream, "worker-b", LONG_TTL)
            assert other is None, "a renewed lease is still refused to another owner"

    @pytest.mark.anyio
    async def test_lease_renew_refuses_what_is_not_the_owners(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.lease_renew_of(opened)
            kept = await self._take_lease(store, sid("renew-kept"), "a")
            foreign = await self._take_lease(store, sid("renew-foreign"), "b")
            released = await self._take_lease(store, sid("renew-released"), "a")
            await store.release_lease(released)
            stale = await self._take_lease(store, sid("renew-stale"), "a")
            await store.release_lease(stale)
            current = await self._take_lease(store, stale.stream, "a")
            assert current.token > stale.token
            lapsed = await self._take_lease(store, sid("renew-lapsed"), "a", self.lease_short_ttl)
            retaken = await self._take_lease(store, sid("renew-retaken"), "a", self.lease_short_ttl)
            await self._wait_out_short_ttl()
            successor = await self._take_lease(store, retaken.stream, "b")
            unknown = Lease(sid("renew-never-leased"), "a", 1, time.time() + LONG_TTL)
            asked = [kept, Lease(foreign.stream, "a", foreign.token, foreign.expires_at), released, stale, lapsed]
            renewed = await store.renew_leases("a", LONG_TTL, [*asked, retaken, unknown])
            assert [lease.stream for lease in renewed] == [kept.stream], (
                "only the owner's unexpired lease under the same token is renewed; not another owner's, "
                f"a released one, an old token, an expired one, one re-taken by another owner, nor none: {renewed}"
            )
            assert _same(await store.get_lease(foreign.stream), foreign), "another owner's lease is untouched"
            assert await store.get_lease(released.stream) is None, "a released lease is not revived"
            assert _same(await store.get_lease(current.stream), current), "the current grant is untouched"
            assert await store.get_lease(lapsed.stream) is None, "an expired lease is not revived"
            assert _same(await store.get_lease(retaken.stream), successor), "the successor's lease is untouched"
            assert await store.get_lease(unknown.stream) is None, "a batch never grants a lease"
            again = await self._take_lease(store, lapsed.stream, "a")
            assert again.token > lapsed.token, "an expired lease left by a batch is taken anew with a greater token"

    @pytest.mark.anyio
    async def test_lease_renew_invalid_arguments(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.lease_renew_of(opened)
            stream = sid("renew-invalid")
            lease = await self._take_lease(store, stream, "a", LONG_TTL)
            bad: list[tuple[str, object, object, object]] = [
                ("an empty owner", "", LONG_TTL, [lease]),
                ("ttl 0", "a", 0.0, [lease]),
                ("a negative ttl", "a", -1.0, [lease]),
                ("a lone Lease", "a", LONG_TTL, lease),
                ("a str", "a", LONG_TTL, "leases"),
                ("not a Lease", "a", LONG_TTL, [stream]),
                ("another owner's lease", "a", LONG_TTL, [Lease(stream, "b", lease.token, lease.expires_at)]),
                ("a str token", "a", LONG_TTL, [Lease(stream, "a", str(lease.token), lease.expires_at)]),  # type: ignore[arg-type]  # the misuse checked
                ("a stream named twice", "a", LONG_TTL, [lease, lease]),
                ("token 0", "a", LONG_TTL, [Lease(stream, "a", 0, lease.expires_at)]),
                ("a token past 2**63-1", "a", LONG_TTL, [Lease(stream, "a", 2**63, lease.expires_at)]),
            ]
            for what, owner, ttl, leases in bad:
                await expect_raises(
                    InvalidRequestError,
                    lambda owner=owner, ttl=ttl, leases=leases: store.renew_leases(owner, ttl, leases),  # type: ignore[misc]  # the misuse checked
                    what,
                )
            assert _same(await store.get_lease(stream), lease), "a refused call changes no lease"
