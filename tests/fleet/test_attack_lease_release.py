"""A renewal racing a release: the lease the renewal took again for a claim released
meanwhile is given back, not left in the store for nobody to renew or release.

The race is driven by a hook in the real adapter (a subclass), never by sleeps: the
renewal round's acquire reaches the store only after the activation's release did.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from durably._fleet.leases import LeaseKeeper
from durably.storage import StreamId, open_store

STREAM = StreamId("default", "renew-after-release")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").url())
    return f"sqlite:///{tmp_path}/agents.db"


async def test_a_renewal_that_lands_after_the_claim_was_released_gives_the_lease_back(url: str) -> None:
    renewing, released, renewed, gave_back = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
    acquires = 0
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            nonlocal acquires
            acquires += 1
            if acquires == 2:  # the renewal round's: held back until the release is done
                renewing.set()
                await released.wait()
                lease = await super().acquire_lease(stream, owner, ttl)
                renewed.set()
                return lease
            return await super().acquire_lease(stream, owner, ttl)

        async def release_lease(self, lease: Any) -> None:
            await super().release_lease(lease)
            if renewed.is_set():  # a release after the renewal's acquire: the renewal gave its lease back
                gave_back.set()

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
                await gave_back.wait()  # the renewal handled what the store answered (the store's own thread)
                held = await store.get_lease(STREAM)
                tg.cancel_scope.cancel()
        assert held is None, f"the released agent's lease is held by {held} with no claim to renew or release it"
        # Another runtime can take the agent at once.
        other = LeaseKeeper(store, "other", ttl=30.0)
        taken, holder = await other.claim_or_holder(STREAM)
        assert taken is not None, f"refused: held by {holder}"
