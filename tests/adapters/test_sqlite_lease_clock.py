"""The SQLite adapter reads its lease clock inside the lease transaction, write lock held.

A lease statement waits in the process's lease queue, then for SQLite's write lock
(another process may be writing). Read before that wait, "now" is stale by then:
a lease of this owner that expired during the wait looked unexpired, so
``renew_leases`` renewed it (the batch promises never to revive an expired lease)
and ``acquire_lease`` renewed it in place under its old token instead of taking it
anew. The wait is made deterministic here: the store's clock moves past the lease's
expiry when the lease transaction begins, as it would while the call waited.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from durably.adapters.sqlite import _leases
from durably.storage import Lease, StreamId, open_store

STREAM = StreamId("default", "a1")
TTL = 10.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The lease module's ``time.time()``: the one value in the returned list, set by the test."""
    now = [1_000_000.0]
    monkeypatch.setattr(_leases, "time", SimpleNamespace(time=lambda: now[0]))
    return now


def waiting_store(url: str, clock: list[float], waited: list[float]) -> Any:
    """The SQLite store of ``url`` whose next lease transaction begins after ``waited[0]`` seconds."""
    base = type(open_store(url))

    class Waiting(base):  # type: ignore[valid-type, misc]
        async def _commit_leases(self, batch: list[Any]) -> None:
            clock[0] += waited.pop() if waited else 0.0  # the wait for the write lock
            await super()._commit_leases(batch)

    return Waiting(url)


async def held_then_waited(url: str, clock: list[float], waited: list[float]) -> tuple[Any, Lease]:
    store = waiting_store(url, clock, waited)
    await store.open()
    lease = await store.acquire_lease(STREAM, "worker-a", TTL)
    assert lease is not None
    waited.append(TTL + 1.0)  # the next call's wait outlasts the lease
    return store, lease


async def test_a_batch_renews_no_lease_that_expired_while_it_waited_for_the_write_lock(tmp_path, clock) -> None:
    waited: list[float] = []
    store, lease = await held_then_waited(f"sqlite:///{tmp_path}/a.db", clock, waited)
    try:
        renewed = await store.renew_leases("worker-a", TTL, [lease])
        assert renewed == [], f"a lease expired before the batch ran was renewed: {renewed}"
        assert await store.get_lease(STREAM) is None, "the expired lease was revived"
        taken = await store.acquire_lease(STREAM, "worker-b", TTL)
        assert taken is not None and taken.token == lease.token + 1
    finally:
        await store.close()


async def test_an_acquire_takes_anew_a_lease_of_its_owner_that_expired_while_it_waited(tmp_path, clock) -> None:
    waited: list[float] = []
    store, lease = await held_then_waited(f"sqlite:///{tmp_path}/a.db", clock, waited)
    try:
        again = await store.acquire_lease(STREAM, "worker-a", TTL)
        assert again is not None
        assert again.token == lease.token + 1, f"an expired lease was renewed in place under its old token: {again}"
        assert again.expires_at == clock[0] + TTL, "the new lease runs from when the statement ran"
    finally:
        await store.close()
