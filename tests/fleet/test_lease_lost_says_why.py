"""``AgentLeaseLostError`` says how the lease was lost, from what the runtime already knows.

Another owner holds it (named), it lapsed and nobody holds it, it may have lapsed by
this process's clock, or it did so after a renewal failed (the store's error quoted).
Each case is made with a memory store and two lease keepers; the renewal is called
once by hand (no renewal loop runs), and a lease "lapses" by waiting past its ttl.
"""

from __future__ import annotations

import anyio
import pytest

from durably._fleet.leases import LeaseKeeper
from durably._journal.claim import LeaseClaim
from durably.errors import AgentLeaseLostError
from durably.storage._errors import StoreUnavailableError
from durably.storage._registry import open_store
from durably.storage._spi import Lease, StreamId

STREAM = StreamId("default", "a1")
TTL = 0.05


def ignore(claim: LeaseClaim, holder: Lease | None) -> None:
    """``on_lost`` of a renewal called by hand: the claim itself holds the error."""


async def claimed(keeper: LeaseKeeper) -> LeaseClaim:
    claim, holder = await keeper.claim_or_holder(STREAM)
    assert claim is not None and holder is None
    return claim


async def renew(keeper: LeaseKeeper, claim: LeaseClaim) -> None:
    assert keeper._leases is not None
    await keeper._renew(keeper._leases, claim, ignore)


def lost(claim: LeaseClaim) -> AgentLeaseLostError:
    with pytest.raises(AgentLeaseLostError) as caught:
        claim.check()
    return caught.value


async def test_a_lease_another_owner_took_names_that_owner() -> None:
    async with open_store("memory://lost-taken") as store:
        here, there = LeaseKeeper(store, "here", TTL), LeaseKeeper(store, "there", 30.0)
        claim = await claimed(here)
        await anyio.sleep(TTL * 2)  # lapsed in the store
        taken = await claimed(there)
        await renew(here, claim)
        error = lost(claim)
    assert error.cause == "taken" and error.owner == there.owner and error.agent_id == "a1"
    assert f"run by {there.owner} (lease until " in str(error), str(error)
    assert taken.lost is None


async def test_a_lease_that_lapsed_and_is_free_says_nobody_holds_it() -> None:
    async with open_store("memory://lost-lapsed") as store:
        here = LeaseKeeper(store, "here", TTL)
        claim = await claimed(here)
        await anyio.sleep(TTL * 2)
        await renew(here, claim)  # granted again under a new token: lost, and given back
        error = lost(claim)
        assert await store.get_lease(STREAM) is None
    assert error.cause == "lapsed" and error.owner is None
    assert "lapsed, and no runtime holds it now" in str(error), str(error)
    assert "run by" not in str(error)


async def test_a_lease_past_its_ttl_by_the_clock_says_it_may_have_lapsed() -> None:
    async with open_store("memory://lost-clock") as store:
        claim = await claimed(LeaseKeeper(store, "here", TTL))
        await anyio.sleep(TTL * 2)  # as a process paused past its lease finds on waking
        error = lost(claim)
    assert error.cause == "expired" and error.renewal_error is None
    assert "may have lapsed by this process's clock" in str(error), str(error)
    assert "run by" not in str(error)


async def test_a_lease_lapsed_after_a_failed_renewal_quotes_the_store_error() -> None:
    async with open_store("memory://lost-renewal") as store:
        here = LeaseKeeper(store, "here", TTL)
        claim = await claimed(here)

        async def refused(stream: StreamId, owner: str, ttl: float) -> Lease | None:
            raise StoreUnavailableError("the database is down for maintenance")

        store.acquire_lease = refused  # type: ignore[method-assign]
        await renew(here, claim)  # logged; the claim is still live until the clock says otherwise
        await anyio.sleep(TTL * 2)
        error = lost(claim)
    assert error.cause == "renewal_failed"
    assert "the database is down for maintenance" in str(error) and "renewing it failed" in str(error), str(error)


async def test_a_renewal_that_succeeds_again_forgets_the_failure() -> None:
    async with open_store("memory://lost-recovered") as store:
        here = LeaseKeeper(store, "here", TTL)
        claim = await claimed(here)
        claim.renewal_failed(StoreUnavailableError("a blip"))
        await renew(here, claim)
        await anyio.sleep(TTL * 2)
        error = lost(claim)
    assert error.cause == "expired" and "a blip" not in str(error)
