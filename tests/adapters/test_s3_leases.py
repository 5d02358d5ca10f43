"""Leases of the S3 adapter (``CAP_LEASES``) against moto's S3 server on 127.0.0.1 (``tests/support/s3_server.py``).

Expiry is tested with a fixed clock handed to each store's lease logic, so a
test says exactly where "now" is relative to ``expires_at`` and the skew
allowance; one test uses the real clock with a small ttl. Races are real
concurrent HTTP requests from independent store instances (like processes),
held by the server until all of them are in flight; the server serialises
conditional writes the way S3 documents them.
"""

from __future__ import annotations

import json
import uuid

import anyio
import pytest
from s3_server import BUCKET, Fault, S3TestServer

from durably.adapters.s3 import S3Store
from durably.adapters.s3._keys import StreamKeys
from durably.adapters.s3._leases import SKEW_FRACTION, LeaseObject
from durably.adapters.s3._retry import RetryPolicy
from durably.storage import (
    CAP_LEASES,
    CorruptRecordError,
    InvalidRequestError,
    Lease,
    LeaseStore,
    StoreClosedError,
    StoreUnavailableError,
    StreamId,
)

FAST = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.05, deadline=15)
STREAM = StreamId("ns", "agent")
T0 = 1_800_000_000.0


class Clock:
    """A settable clock in unix seconds, for the lease logic of one or more stores."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(server: S3TestServer, prefix: str, clock: Clock | None = None, **overrides) -> S3Store:
    overrides.setdefault("retry", FAST)
    store = S3Store(server.url(prefix), **overrides)
    if clock is not None:
        store._leases.clock = clock  # fixed time instead of time.time: exact expiry, no sleeping
    return store


@pytest.fixture
def prefix() -> str:
    return f"lease-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lease_key(store: S3Store, stream: StreamId = STREAM) -> str:
    return StreamKeys(store.options.prefix, stream).lease


def stored_lease(server: S3TestServer, store: S3Store, stream: StreamId = STREAM) -> dict:
    body = server.client().get_object(Bucket=BUCKET, Key=lease_key(store, stream))["Body"].read()
    return json.loads(body)


# --------------------------------------------------------------------------- semantics


async def test_acquire_renew_release_and_get(s3_server, prefix, clock) -> None:
    async with make(s3_server, prefix, clock) as a, make(s3_server, prefix, clock) as b:
        assert isinstance(a, LeaseStore) and CAP_LEASES in a.capabilities
        assert await a.get_lease(STREAM) is None, "no lease before the first acquire"
        first = await a.acquire_lease(STREAM, "worker-a", ttl=10)
        assert first == Lease(STREAM, "worker-a", 1, T0 + 10)
        assert await b.acquire_lease(STREAM, "worker-b", ttl=10) is None, "held by another owner"
        assert await b.get_lease(STREAM) == first

        clock.now += 6
        renewed = await a.acquire_lease(STREAM, "worker-a", ttl=10)
        assert renewed == Lease(STREAM, "worker-a", 1, T0 + 16), "a renewal keeps the token, moves the expiry"
        assert await b.get_lease(STREAM) == renewed

        await b.release_lease(Lease(STREAM, "worker-b", 1, T0 + 16))  # not b's lease: no-op
        await a.release_lease(Lease(STREAM, "worker-a", 7, T0 + 16))  # not its token: no-op
        assert await b.get_lease(STREAM) == renewed
        await a.release_lease(renewed)
        assert await b.get_lease(STREAM) is None, "released: free at once"
        assert stored_lease(s3_server, a)["expires_at"] == 0, "release marks the object, it does not delete it"
        await a.release_lease(renewed)  # releasing twice is harmless

        taken = await b.acquire_lease(STREAM, "worker-b", ttl=5)
        assert taken == Lease(STREAM, "worker-b", 2, clock.now + 5), "a new owner gets a greater token"
        await a.release_lease(renewed)  # a's old lease: no-op, b keeps it
        assert await a.get_lease(STREAM) == taken
        assert await a.acquire_lease(STREAM, "worker-a", ttl=10) is None

        await b.release_lease(taken)
        again = await b.acquire_lease(STREAM, "worker-b", ttl=5)
        assert again is not None and again.token == 3, "taking a released lease, even one's own, increases the token"


async def test_expiry_waits_for_the_skew_allowance(s3_server, prefix, clock) -> None:
    async with make(s3_server, prefix, clock) as a, make(s3_server, prefix, clock) as b:
        ttl = 20.0
        lease = await a.acquire_lease(STREAM, "worker-a", ttl)
        allowance = ttl * SKEW_FRACTION
        clock.now = lease.expires_at + allowance  # expired by the holder's clock, still within the allowance
        assert await b.acquire_lease(STREAM, "worker-b", 5) is None
        assert await b.get_lease(STREAM) == lease, "others treat it as held until the allowance is over"
        clock.now = lease.expires_at + allowance + 0.001
        assert await b.get_lease(STREAM) is None
        taken = await b.acquire_lease(STREAM, "worker-b", 5)
        assert taken == Lease(STREAM, "worker-b", 2, clock.now + 5)
        assert await a.acquire_lease(STREAM, "worker-a", ttl) is None, "the late holder cannot renew"
        await a.release_lease(lease)
        assert await a.get_lease(STREAM) == taken, "nor release the new owner's lease"


async def test_an_owner_back_after_its_lease_ran_out_gets_a_new_token(s3_server, prefix, clock) -> None:
    async with make(s3_server, prefix, clock) as a:
        lease = await a.acquire_lease(STREAM, "worker-a", 10)
        clock.now = lease.expires_at + 10 * SKEW_FRACTION  # past expires_at, still held for others
        late = await a.acquire_lease(STREAM, "worker-a", 10)
        assert late == Lease(STREAM, "worker-a", lease.token, clock.now + 10), "still a renewal"
        clock.now = late.expires_at + 10 * SKEW_FRACTION + 0.001
        assert await a.get_lease(STREAM) is None
        again = await a.acquire_lease(STREAM, "worker-a", 10)
        assert again == Lease(STREAM, "worker-a", lease.token + 1, clock.now + 10), (
            "taken anew: others may have acted on the expiry"
        )


async def test_small_ttl_expires_on_the_real_clock(s3_server, prefix) -> None:
    async with make(s3_server, prefix) as a, make(s3_server, prefix) as b:
        lease = await a.acquire_lease(STREAM, "worker-a", ttl=0.2)
        assert lease is not None and lease.token == 1
        await anyio.sleep(0.2 * (1 + SKEW_FRACTION) + 0.1)
        assert await b.get_lease(STREAM) is None
        taken = await b.acquire_lease(STREAM, "worker-b", ttl=30)
        assert taken is not None and taken.owner == "worker-b" and taken.token == 2


async def test_tokens_only_increase_across_handovers(s3_server, prefix, clock) -> None:
    owners = [f"worker-{n}" for n in range(3)]
    stores = [make(s3_server, prefix, clock) for _ in owners]
    for store in stores:
        await store.open()
    try:
        tokens = []
        for turn in range(9):
            store, owner = stores[turn % 3], owners[turn % 3]
            lease = await store.acquire_lease(STREAM, owner, 10)
            assert lease is not None and lease.owner == owner
            renewed = await store.acquire_lease(STREAM, owner, 10)
            assert renewed.token == lease.token
            tokens.append(lease.token)
            if turn % 2:
                await store.release_lease(renewed)
            else:
                clock.now += 10 * (1 + SKEW_FRACTION) + 1  # let it expire instead
        assert tokens == list(range(1, 10))
    finally:
        for store in stores:
            await store.close()
    async with make(s3_server, prefix, clock) as reopened:
        assert (await reopened.acquire_lease(STREAM, "late", 10)).token == 10, "tokens survive reopen"


async def test_invalid_requests_and_closed_store(s3_server, prefix) -> None:
    store = make(s3_server, prefix)
    with pytest.raises(StoreClosedError):
        await store.acquire_lease(STREAM, "w", 1)
    async with store:
        for ttl in (0, -1, float("nan"), float("inf"), "10", True):
            with pytest.raises(InvalidRequestError):
                await store.acquire_lease(STREAM, "w", ttl)
        for owner in ("", None, 7):
            with pytest.raises(InvalidRequestError):
                await store.acquire_lease(STREAM, owner, 1)
        with pytest.raises(InvalidRequestError):
            await store.release_lease("not a lease")
        assert await store.get_lease(STREAM) is None, "rejected requests wrote nothing"
    with pytest.raises(StoreClosedError):
        await store.get_lease(STREAM)


async def test_a_malformed_lease_object_is_reported(s3_server, prefix) -> None:
    async with make(s3_server, prefix) as store:
        s3_server.client().put_object(Bucket=BUCKET, Key=lease_key(store), Body=b'{"owner": "x"}')
        with pytest.raises(CorruptRecordError):
            await store.get_lease(STREAM)
        with pytest.raises(CorruptRecordError):
            await store.acquire_lease(STREAM, "w", 1)


async def test_leases_are_per_stream_unlisted_and_purged_with_the_stream(s3_server, prefix, clock) -> None:
    other_agent, other_ns = StreamId("ns", "agent-2"), StreamId("ns2", "agent")
    async with make(s3_server, prefix, clock) as store, make(s3_server, f"{prefix}-elsewhere", clock) as elsewhere:
        mine = await store.acquire_lease(STREAM, "w1", 10)
        assert (await store.acquire_lease(other_agent, "w2", 10)).token == 1
        assert (await store.acquire_lease(other_ns, "w3", 10)).token == 1
        assert (await elsewhere.acquire_lease(STREAM, "w4", 10)).token == 1, "another prefix is another store"
        assert [s async for s in store.list_streams("ns")] == [], "a lease alone does not make a stream listable"
        await store.append(other_agent, 0, [b"r1"])
        assert [s async for s in store.list_streams("ns")] == [other_agent]

        await store.release_lease(mine)
        assert (await store.acquire_lease(STREAM, "w5", 10)).token == 2
        await store.delete_stream(STREAM)
        keys = StreamKeys(store.options.prefix, STREAM)
        listed = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=keys.root)
        # The lease object stays (ended, owner forgotten) for its token.
        assert [item["Key"] for item in listed.get("Contents", [])] == [keys.lease], "only the ended lease object stays"
        assert b"w5" not in s3_server.client().get_object(Bucket=BUCKET, Key=keys.lease)["Body"].read()
        assert await store.get_lease(STREAM) is None
        assert (await store.acquire_lease(STREAM, "w6", 10)).token == 3, "tokens never decrease, purge included"
        for stream, owner in ((other_agent, "w2"), (other_ns, "w3")):
            assert (await store.get_lease(stream)).owner == owner, "other streams' leases are untouched"
        assert (await elsewhere.get_lease(STREAM)).owner == "w4"


# --------------------------------------------------------------------------- races


async def test_eight_stores_race_for_a_free_lease_exactly_one_wins(s3_server, prefix, clock) -> None:
    """Independent stores (like processes) race; every PUT is in flight before any lands."""
    racers = 8
    stores = [make(s3_server, prefix, clock) for _ in range(racers)]
    for store in stores:
        await store.open()
    try:
        last_token = 0
        for round_no, how_freed in enumerate(("never held", "released", "expired")):
            met = s3_server.expect_concurrent_puts(racers, "/lease")
            outcomes: dict[int, Lease | None] = {}

            async def race(n: int) -> None:
                outcomes[n] = await stores[n].acquire_lease(STREAM, f"worker-{n}", 10)

            async with anyio.create_task_group() as group:
                for n in range(racers):
                    group.start_soon(race, n)
            assert met == [True] * racers, f"round {round_no}: all {racers} conditional PUTs were in flight at once"
            winners = {n: lease for n, lease in outcomes.items() if lease is not None}
            assert len(winners) == 1, f"{how_freed}: {outcomes}"
            ((n, lease),) = winners.items()
            assert lease.owner == f"worker-{n}" and lease.token == last_token + 1
            for store in stores:
                assert await store.get_lease(STREAM) == lease
            last_token = lease.token
            if how_freed == "never held":
                await stores[n].release_lease(lease)
            else:
                clock.now = lease.expires_at + 10 * SKEW_FRACTION + 1
    finally:
        for store in stores:
            await store.close()


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("kind", ["slowdown", "conflict", "internal"])
async def test_transient_errors_are_retried(s3_server, prefix, kind) -> None:
    async with make(s3_server, prefix) as store:
        fault = s3_server.inject(Fault("PUT", "/lease", kind, times=2))
        lease = await store.acquire_lease(STREAM, "w", 10)
        assert fault.hits == 2 and lease is not None and lease.token == 1
        s3_server.inject(Fault("GET", "/lease", kind, times=2))
        assert await store.get_lease(STREAM) == lease


async def test_a_dropped_answer_is_resolved_by_the_nonce(s3_server, prefix) -> None:
    """The PUT was applied and its answer lost (and the client's re-send too): read back, ours."""
    async with make(s3_server, prefix) as store, make(s3_server, prefix) as other:
        fault = s3_server.inject(Fault("PUT", "/lease", "drop_after", times=2))
        lease = await store.acquire_lease(STREAM, "w", 10)
        assert fault.hits == 2 and lease == await other.get_lease(STREAM)
        assert await other.acquire_lease(STREAM, "x", 10) is None
        renewal_fault = s3_server.inject(Fault("PUT", "/lease", "drop_after", times=2))
        renewed = await store.acquire_lease(STREAM, "w", 10)
        assert renewal_fault.hits == 2 and renewed.token == lease.token
        s3_server.inject(Fault("PUT", "/lease", "drop_after", times=2))
        await store.release_lease(renewed)
        assert await other.get_lease(STREAM) is None


async def test_answers_lost_until_retries_run_out_are_still_resolved(s3_server, prefix) -> None:
    async with make(s3_server, prefix) as store:
        fault = s3_server.inject(Fault("PUT", "/lease", "drop_after", times=50))
        lease = await store.acquire_lease(STREAM, "w", 10)
        assert fault.hits >= FAST.max_attempts, "every attempt lost its answer"
        assert lease is not None and await store.get_lease(STREAM) == lease, "the first attempt had landed"


async def test_a_timeout_after_the_put_was_applied(s3_server, prefix) -> None:
    async with make(s3_server, prefix, read_timeout=0.3) as store:
        fault = s3_server.inject(Fault("PUT", "/lease", "stall_after", delay=1.0))
        lease = await store.acquire_lease(STREAM, "w", 10)
        assert fault.hits == 1 and lease is not None and await store.get_lease(STREAM) == lease


async def test_unknown_outcome_when_another_worker_won(s3_server, prefix) -> None:
    """Our PUT's answer is lost and the object holds someone else's lease: not ours, None."""
    async with make(s3_server, prefix) as store:
        key = lease_key(store)
        foreign = LeaseObject("rival", 1, 4_000_000_000.0, 30.0, "f" * 32).encode()
        s3_server.inject(
            Fault(
                "PUT",
                "/lease",
                "drop_after",
                times=2,
                before=lambda: s3_server.client().put_object(Bucket=BUCKET, Key=key, Body=foreign),
            )
        )
        assert await store.acquire_lease(STREAM, "w", 10) is None
        assert (await store.get_lease(STREAM)).owner == "rival"


async def test_an_unreachable_s3_is_store_unavailable(s3_server, prefix) -> None:
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.01, deadline=10)
    async with make(s3_server, prefix, retry=policy) as store:
        s3_server.inject(Fault("GET", "/lease", "slowdown", times=2))
        with pytest.raises(StoreUnavailableError):
            await store.acquire_lease(STREAM, "w", 10)
        s3_server.clear_faults()
        s3_server.inject(Fault("PUT", "/lease", "slowdown", times=2))
        with pytest.raises(StoreUnavailableError):
            await store.acquire_lease(STREAM, "w", 10)
        s3_server.clear_faults()
        assert await store.get_lease(STREAM) is None, "nothing was written"
        assert (await store.acquire_lease(STREAM, "w", 10)).token == 1
