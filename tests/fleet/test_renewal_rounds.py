"""One lease renewal that hangs in the store does not hold up the renewals of the runtime's other leases.

A runtime renews every lease it holds each third of the ttl. When one renewal is slow
(a store request retried for seconds, a lock held elsewhere), the others must still go
out on time: were each round to wait for its slowest renewal, one stuck request would let
every other lease of the runtime lapse while its agents are running, and they would all
stop with their leases lost. Driven by a hook in a real SQLite store: the renewals of one
stream block until the test lets them go, never by sleeps in the store. Lease by lease
(a store without ``renew_leases``) and together (the stuck lease is one the batch did
not renew, so it is settled alone through ``acquire_lease``, where it hangs).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from durably._fleet.leases import LeaseKeeper
from durably.storage import CAP_LEASE_RENEW, StreamId, open_store

pytestmark = pytest.mark.anyio

STUCK, MOVING = StreamId("default", "stuck"), StreamId("default", "moving")


@pytest.mark.parametrize("together", [False, True], ids=["one-by-one", "together"])
async def test_a_stuck_renewal_does_not_hold_up_the_other_leases(tmp_path: Any, together: bool) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    let_go = anyio.Event()
    stuck = anyio.Event()
    renewed: dict[StreamId, int] = {STUCK: 0, MOVING: 0}
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            lease = await super().acquire_lease(stream, owner, ttl)
            renewed[stream] += 1
            if stream == STUCK and renewed[stream] > 1:  # its claim went through; its renewals hang
                stuck.set()
                await let_go.wait()
            return lease

        async def renew_leases(self, owner: str, ttl: float, leases: Any) -> Any:
            # STUCK is never renewed together: the keeper settles it alone, through acquire_lease.
            done = [lease for lease in await super().renew_leases(owner, ttl, leases) if lease.stream != STUCK]
            for lease in done:
                renewed[lease.stream] += 1
            return done

    if not together:
        Hooked.capabilities = Hooked.capabilities - {CAP_LEASE_RENEW}

    async with Hooked(url) as store, anyio.create_task_group() as tg:
        keeper = LeaseKeeper(store, "worker", ttl=1.5)  # rounds every 0.5 s
        for stream in (STUCK, MOVING):
            claim, _ = await keeper.claim_or_holder(stream)
            assert claim is not None
        tg.start_soon(keeper.renew_forever, lambda claim, holder: None)
        with anyio.fail_after(30):
            await stuck.wait()
            renewed_before = renewed[MOVING]
            while renewed[MOVING] < renewed_before + 3:  # three more rounds while STUCK's renewal hangs
                await anyio.sleep(0.05)
        let_go.set()
        tg.cancel_scope.cancel()
