"""A renewal racing a release: the lease the renewal took again for a claim released
meanwhile is given back, not left in the store for nobody to renew or release.

The race is driven by a hook in the real adapter (a subclass), never by sleeps: the
renewal round's acquire reaches the store only after the activation's release did. Run
both ways a round renews: lease by lease (``acquire_lease``, a store without
``CAP_LEASE_RENEW``) and in one ``renew_leases`` call, which never takes a released
lease again.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from durably._fleet.leases import LeaseKeeper
from durably.storage import CAP_LEASE_RENEW, StreamId, open_store

STREAM = StreamId("default", "renew-after-release")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").url())
    return f"sqlite:///{tmp_path}/agents.db"


@pytest.mark.parametrize("together", [False, True], ids=["one-by-one", "together"])
async def test_a_renewal_that_lands_after_the_claim_was_released_gives_the_lease_back(url: str, together: bool) -> None:
    renewing, released, renewed = anyio.Event(), anyio.Event(), anyio.Event()
    acquires = releases = 0
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            nonlocal acquires
            acquires += 1
            if acquires == 2:  # the renewal round's: held back until the release is done
                return await held_back(super().acquire_lease(stream, owner, ttl))
            return await super().acquire_lease(stream, owner, ttl)

        async def renew_leases(self, owner: str, ttl: float, leases: Any) -> Any:
            return await held_back(super().renew_leases(owner, ttl, leases))

        async def release_lease(self, lease: Any) -> None:
            nonlocal releases
            await super().release_lease(lease)
            releases += 1

    async def held_back(call: Any) -> Any:
        renewing.set()
        await released.wait()
        result = await call
        renewed.set()
        return result

    if not together:  # as a store without the capability: the round goes lease by lease
        Hooked.capabilities = Hooked.capabilities - {CAP_LEASE_RENEW}

    async with Hooked(url) as store:
        keeper = LeaseKeeper(store, "worker", ttl=30.0)
        claim, _ = await keeper.claim_or_holder(STREAM)
        assert claim is not None
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(keeper.renew_forever, lambda claim, holder: None)
                await renewing.wait()
                await keeper.release(claim)  # the activation ended: its lease is given back
                assert await store.get_lease(STREAM) is None
                released.set()
                await renewed.wait()
                # The renewal handles what the store answered: lease by lease it took the
                # lease again, and gives it back (the activation's release was the first);
                # a batch renewed nothing, and there is nothing to give back.
                while not together and releases < 2:
                    await anyio.sleep(0.01)
                for _ in range(50):
                    await anyio.sleep(0)
                held = await store.get_lease(STREAM)
                tg.cancel_scope.cancel()
        assert held is None, f"the released agent's lease is held by {held} with no claim to renew or release it"
        assert acquires == (1 if together else 2), "a batch that renewed nothing leaves a released claim alone"
        # Another runtime can take the agent at once.
        other = LeaseKeeper(store, "other", ttl=30.0)
        taken, holder = await other.claim_or_holder(STREAM)
        assert taken is not None, f"refused: held by {holder}"
