"""One lease renewal that hangs in the store does not hold up the renewals of the runtime's other leases.

A runtime renews every lease it holds each third of the ttl. When one renewal is slow
(a store request retried for seconds, a lock held elsewhere), the others must still go
out on time: were each round to wait for its slowest renewal, one stuck request would let
every other lease of the runtime lapse while its agents are running, and they would all
stop with their leases lost. Driven by a hook in a real SQLite store: the renewals of one
stream block until the test lets them go, never by sleeps in the store.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from durably._fleet.leases import LeaseKeeper
from durably.storage import StreamId, open_store

pytestmark = pytest.mark.anyio

STUCK, MOVING = StreamId("default", "stuck"), StreamId("default", "moving")


async def test_a_stuck_renewal_does_not_hold_up_the_other_leases(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    let_go = anyio.Event()
    stuck = anyio.Event()
    acquired: dict[StreamId, int] = {STUCK: 0, MOVING: 0}
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            lease = await super().acquire_lease(stream, owner, ttl)
            acquired[stream] += 1
            if stream == STUCK and acquired[stream] > 1:  # its claim went through; its renewals hang
                stuck.set()
                await let_go.wait()
            return lease

    async with Hooked(url) as store, anyio.create_task_group() as tg:
        keeper = LeaseKeeper(store, "worker", ttl=1.5)  # rounds every 0.5 s
        for stream in (STUCK, MOVING):
            claim, _ = await keeper.claim_or_holder(stream)
            assert claim is not None
        tg.start_soon(keeper.renew_forever, lambda claim, holder: None)
        with anyio.fail_after(30):
            await stuck.wait()
            renewed_before = acquired[MOVING]
            while acquired[MOVING] < renewed_before + 3:  # three more rounds while STUCK's renewal hangs
                await anyio.sleep(0.05)
        let_go.set()
        tg.cancel_scope.cancel()
