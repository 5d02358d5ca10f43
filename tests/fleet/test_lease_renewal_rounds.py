"""A runtime renews all its leases in one store call per round, and still finds the lost ones.

With a thousand agents in one process, a thousand ``acquire_lease`` calls a round
queued behind the agents' writes and the leases lapsed under load. On a store with
``CAP_LEASE_RENEW`` the keeper sends one ``renew_leases`` for every held lease; only
the leases it did not renew go through ``acquire_lease``, which tells a lease another
owner took from one that lapsed and came back under a new token: both are reported
lost, exactly as before. Counted on the real adapters (SQLite file, PostgreSQL server),
subclassed to count their calls.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from durably._fleet.leases import LeaseKeeper
from durably._journal.claim import LeaseClaim
from durably.storage import Lease, StreamId, open_store

HELD = 40
TTL = 300.0  # rounds every 100 s: the test sees exactly one


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").url())
    return f"sqlite:///{tmp_path}/agents.db"


def counting(url: str, calls: dict[str, int]) -> Any:
    """The real store for ``url`` (not opened), subclassed to count its lease calls in ``calls``."""
    return counting_class(url, calls)(url)


def counting_class(url: str, calls: dict[str, int]) -> Any:
    """The class of ``counting``'s store, to subclass further."""
    base = type(open_store(url))

    class Counting(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            calls["acquire_lease"] = calls.get("acquire_lease", 0) + 1
            return await super().acquire_lease(stream, owner, ttl)

        async def renew_leases(self, owner: str, ttl: float, leases: Any) -> Any:
            calls["renew_leases"] = calls.get("renew_leases", 0) + 1
            calls["renewed_asked"] = calls.get("renewed_asked", 0) + len(leases)
            return await super().renew_leases(owner, ttl, leases)

    return Counting


async def test_a_round_renews_every_held_lease_in_one_call_and_reports_the_lost_ones(url: str) -> None:
    calls: dict[str, int] = {}
    lost: list[tuple[LeaseClaim, Lease | None]] = []
    async with counting(url, calls) as store, anyio.create_task_group() as tg:
        keeper = LeaseKeeper(store, "worker", ttl=TTL)
        claims: list[LeaseClaim] = []
        for i in range(HELD):
            claim, _ = await keeper.claim_or_holder(StreamId("default", f"agent-{i}"))
            assert claim is not None and claim.lease is not None
            claims.append(claim)
        taken, lapsed = claims[3], claims[7]
        assert taken.lease is not None and lapsed.lease is not None
        # Another owner takes one lease (as after this runtime's pause past its ttl); another
        # one ends with nobody taking it, so this owner's next acquire gets a new token.
        await store.release_lease(taken.lease)
        assert await store.acquire_lease(taken.stream, "other-worker", TTL) is not None
        await store.release_lease(lapsed.lease)
        calls.clear()

        tg.start_soon(keeper.renew_forever, lambda claim, holder: lost.append((claim, holder)))
        with anyio.fail_after(60):
            while len(lost) < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()

    assert calls.get("renew_leases") == 1, f"one renew_leases call for the round's {HELD} leases: {calls}"
    assert calls.get("renewed_asked") == HELD, f"the call names every held lease: {calls}"
    assert calls.get("acquire_lease") == 2, f"only the two leases the batch left go one by one: {calls}"
    by_claim = {id(claim): holder for claim, holder in lost}
    assert set(by_claim) == {id(taken), id(lapsed)}, "exactly the taken and the lapsed lease are lost"
    holder = by_claim[id(taken)]
    assert holder is not None and holder.owner == "other-worker", f"the new holder is named: {holder}"
    assert taken.lost is not None and lapsed.lost is not None
    for claim in claims:
        if claim not in (taken, lapsed):
            claim.check()  # renewed: still live, not lost
            assert keeper._held.get(claim.stream) is claim


async def test_a_failed_batch_falls_back_to_renewing_one_by_one(tmp_path: Any) -> None:
    calls: dict[str, int] = {}
    url = f"sqlite:///{tmp_path}/agents.db"

    class Failing(counting_class(url, calls)):  # type: ignore[misc]
        async def renew_leases(self, owner: str, ttl: float, leases: Any) -> Any:
            from durably.storage import StoreUnavailableError

            calls["renew_leases"] = calls.get("renew_leases", 0) + 1
            raise StoreUnavailableError("the batch failed (injected)")

    async with Failing(url) as store, anyio.create_task_group() as tg:
        keeper = LeaseKeeper(store, "worker", ttl=TTL)
        claims = []
        for i in range(5):
            claim, _ = await keeper.claim_or_holder(StreamId("default", f"agent-{i}"))
            assert claim is not None
            claims.append(claim)
        calls.clear()
        tg.start_soon(keeper.renew_forever, lambda claim, holder: pytest.fail(f"{claim.stream} reported lost"))
        with anyio.fail_after(60):
            while calls.get("acquire_lease", 0) < len(claims):
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert calls == {"renew_leases": 1, "acquire_lease": len(claims)}, calls
    for claim in claims:
        claim.check()
