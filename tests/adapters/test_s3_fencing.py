"""Store-enforced fencing in the S3 adapter (``s3_fencing``) against moto's S3 server on 127.0.0.1.

Holders, takers and operators are independent store instances on one bucket
prefix, like processes. Each has its own fixed clock (as in
``test_s3_leases``), so a test says exactly whose view of a lease has run out:
a paused holder whose clock still says "mine" while another worker has taken
the lease over is the case the conditional write itself must refuse, with no
read before it. The server serialises conditional writes the way S3 documents
them (``tests/support/s3_server.py``).
"""

from __future__ import annotations

import secrets
import uuid

import pytest
from s3_server import BUCKET, Fault, S3TestServer

from durably.adapters.s3 import S3Store
from durably.adapters.s3._batch import HEADER_SIZE, Batch, BatchHeader
from durably.adapters.s3._keys import StreamKeys
from durably.adapters.s3._retry import RetryPolicy
from durably.storage import AppendRequest, ConflictError, FencedError, StreamId

FAST = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.05, deadline=15)
STREAM = StreamId("ns", "agent")
T0 = 1_800_000_000.0
TTL = 30.0
LATER = T0 + 10 * TTL  # every lease taken at T0 has run out, skew allowance included


class Clock:
    """A settable clock in unix seconds for one store's lease logic."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(server: S3TestServer, prefix: str, clock: Clock) -> S3Store:
    store = S3Store(server.url(prefix), retry=FAST)
    store._leases.clock = clock  # fixed time instead of time.time: exact expiry, no sleeping
    return store


@pytest.fixture
def prefix() -> str:
    return f"fence-{uuid.uuid4().hex[:12]}"


async def read_pairs(store: S3Store, stream: StreamId = STREAM) -> list[tuple[int, bytes]]:
    return [(r.seq, r.data) async for r in store.read(stream)]


def methods(server: S3TestServer) -> list[str]:
    return [r.method + (" list" if "list-type=2" in r.query else "") for r in server.requests]


def object_header(server: S3TestServer, store: S3Store, seq: int) -> BatchHeader:
    key = StreamKeys(store.options.prefix, STREAM).batch(seq)
    return BatchHeader.decode(server.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()[:HEADER_SIZE])


async def test_a_paused_holder_is_refused_by_the_conditional_write_even_at_the_right_seq(s3_server, prefix) -> None:
    holder_clock, taker_clock = Clock(), Clock()
    async with make(s3_server, prefix, holder_clock) as holder, make(s3_server, prefix, taker_clock) as taker:
        old = await holder.acquire_lease(STREAM, "holder", TTL)
        assert await holder.append(STREAM, 0, [b"a1"], fence=old.token) == 1
        taker_clock.now = LATER  # the holder is paused: by its own clock its lease is still live
        new = await taker.acquire_lease(STREAM, "taker", TTL)
        assert new is not None and new.token == old.token + 1
        marker = object_header(s3_server, taker, 2)
        assert marker.is_marker and marker.level == new.token, "the takeover took the key of the next append"

        s3_server.requests.clear()
        with pytest.raises(FencedError) as refused:
            await holder.append(STREAM, 1, [b"stale"], fence=old.token)
        assert methods(s3_server) == ["PUT", "GET"], "refused by the conditional PUT (412, read back), no read first"
        assert refused.value.fence == old.token and refused.value.stream == STREAM
        assert await taker.last_seq(STREAM) == 1 and await read_pairs(taker) == [(1, b"a1")], "nothing written"

        s3_server.requests.clear()
        assert await taker.append(STREAM, 1, [b"b2"], fence=new.token) == 2
        assert methods(s3_server) == ["PUT"], "the new holder replaces its own marker: still one PUT per append"
        with pytest.raises(FencedError):
            await holder.append(STREAM, 2, [b"stale at the new end"], fence=old.token)
        with pytest.raises(FencedError):
            await holder.put_snapshot(STREAM, 2, b"stale state", fence=old.token)
        assert await read_pairs(holder) == [(1, b"a1"), (2, b"b2")]
        assert await holder.get_snapshot(STREAM) is None


async def test_a_stale_batch_that_landed_before_the_marker_is_kept(s3_server, prefix) -> None:
    holder_clock, taker_clock = Clock(), Clock(LATER)
    async with make(s3_server, prefix, holder_clock) as holder, make(s3_server, prefix, taker_clock) as taker:
        old = await holder.acquire_lease(STREAM, "holder", TTL)
        assert await holder.append(STREAM, 0, [b"a1"], fence=old.token) == 1
        key = StreamKeys(holder.options.prefix, STREAM).batch(2)
        token = secrets.token_bytes(16)
        landed = Batch(2, 2, 2, token, (b"a2: written before the takeover",), old.token).encode()

        def stale_put_lands_first() -> None:  # the holder's PUT reaches S3 just before the marker's
            s3_server.client().put_object(Bucket=BUCKET, Key=key, Body=landed, IfNoneMatch="*")

        race = s3_server.inject(Fault("PUT", "/r/", "stall_after", before=stale_put_lands_first))
        new = await taker.acquire_lease(STREAM, "taker", TTL)
        assert race.hits == 1 and new is not None
        assert object_header(s3_server, taker, 3).is_marker, "the marker went after the batch that came first"
        assert await taker.last_seq(STREAM) == 2
        assert await taker.append(STREAM, 2, [b"b3"], fence=new.token) == 3
        assert await read_pairs(taker) == [(1, b"a1"), (2, b"a2: written before the takeover"), (3, b"b3")]
        with pytest.raises(FencedError):
            await holder.append(STREAM, 3, [b"stale"], fence=old.token)
        with pytest.raises(ConflictError):  # its own view is stale too: a conflict, then fenced on re-read
            await holder.append(STREAM, 1, [b"stale"], fence=old.token)
        assert await taker.last_seq(STREAM) == 3


async def test_one_fenced_request_fails_alone_in_a_group_commit(s3_server, prefix) -> None:
    held, stale, free = (StreamId("ns", name) for name in ("held", "stale", "free"))
    holder_clock, taker_clock = Clock(), Clock(LATER)
    async with make(s3_server, prefix, holder_clock) as holder, make(s3_server, prefix, taker_clock) as taker:
        mine = await holder.acquire_lease(held, "holder", TTL)
        old = await holder.acquire_lease(stale, "holder", TTL)
        first = await holder.append_batch(
            [
                AppendRequest(held, 0, [b"h1"], fence=mine.token),
                AppendRequest(stale, 0, [b"s1"], fence=old.token),
                AppendRequest(free, 0, [b"f1"]),
            ]
        )
        assert first == [1, 1, 1]
        new = await taker.acquire_lease(stale, "taker", TTL)
        assert new is not None
        s3_server.requests.clear()
        results = await holder.append_batch(
            [
                AppendRequest(held, 1, [b"h2"], fence=mine.token),
                AppendRequest(stale, 1, [b"s2"], fence=old.token),
                AppendRequest(free, 1, [b"f2"]),
                AppendRequest(held, 2, [b"h3"], fence=mine.token),
            ]
        )
        assert results[0] == 2 and results[2] == 2 and results[3] == 3, results
        assert isinstance(results[1], FencedError) and results[1].fence == old.token, results
        assert methods(s3_server).count("PUT") == 4 and "GET list" not in methods(s3_server), (
            "no reads before the writes: the fenced one was refused by its PUT"
        )
        assert await read_pairs(taker, stale) == [(1, b"s1")]
        assert await read_pairs(taker, held) == [(1, b"h1"), (2, b"h2"), (3, b"h3")]


async def test_purge_and_restart_fence_the_old_incarnation(s3_server, prefix) -> None:
    old_clock = Clock()
    async with (
        make(s3_server, prefix, old_clock) as old_run,
        make(s3_server, prefix, Clock()) as operator,
        make(s3_server, prefix, Clock()) as new_run,
    ):
        old = await old_run.acquire_lease(STREAM, "old-run", TTL)
        assert await old_run.append(STREAM, 0, [b"old 1", b"old 2"], fence=old.token) == 2
        await old_run.put_snapshot(STREAM, 2, b"old state@2", fence=old.token)

        await operator.delete_stream(STREAM)
        new = await new_run.acquire_lease(STREAM, "new-run", TTL)
        assert new is not None and new.token > old.token, "a purge keeps the token counting"
        assert await new_run.append(STREAM, 0, [b"new 1", b"new 2"], fence=new.token) == 2
        await new_run.put_snapshot(STREAM, 2, b"new state@2", fence=new.token)

        old_clock.now = T0 + TTL  # the old run wakes up after its lease ran out, at the seq the new run reached
        with pytest.raises(FencedError):
            await old_run.append(STREAM, 2, [b"old 3: the purged run's tool result"], fence=old.token)
        with pytest.raises(FencedError):
            await old_run.put_snapshot(STREAM, 2, b"old state@2 again", fence=old.token)
        with pytest.raises(FencedError):
            await old_run.append(STREAM, 0, [b"old from scratch"], fence=old.token)

        async with make(s3_server, prefix, Clock()) as restorer:  # a fresh process restores the new run
            assert await read_pairs(restorer) == [(1, b"new 1"), (2, b"new 2")]
            snapshot = await restorer.get_snapshot(STREAM)
            assert snapshot is not None and (snapshot.seq, snapshot.data) == (2, b"new state@2")
        assert await new_run.append(STREAM, 2, [b"new 3"], fence=new.token) == 3


async def test_a_purged_holder_cannot_bring_its_stream_back(s3_server, prefix) -> None:
    old_clock = Clock()
    async with make(s3_server, prefix, old_clock) as old_run, make(s3_server, prefix, Clock()) as operator:
        old = await old_run.acquire_lease(STREAM, "old-run", TTL)
        assert await old_run.append(STREAM, 0, [b"old 1"], fence=old.token) == 1
        await operator.delete_stream(STREAM)
        old_clock.now = T0 + TTL
        with pytest.raises(FencedError):
            await old_run.append(STREAM, 1, [b"old 2"], fence=old.token)
        with pytest.raises(FencedError):
            await old_run.append(STREAM, 0, [b"old again"], fence=old.token)
        assert await operator.last_seq(STREAM) == 0
        assert [s async for s in operator.list_streams("ns")] == [], "no trace: not listed again"


async def test_an_expired_or_released_token_nobody_retook_still_appends(s3_server, prefix) -> None:
    lapsed_stream, released_stream = StreamId("ns", "lapsed"), StreamId("ns", "released")
    clock = Clock()
    async with make(s3_server, prefix, clock) as holder, make(s3_server, prefix, Clock(LATER)) as other:
        lapsed = await holder.acquire_lease(lapsed_stream, "holder", TTL)
        released = await holder.acquire_lease(released_stream, "holder", TTL)
        assert await holder.append(lapsed_stream, 0, [b"1"], fence=lapsed.token) == 1
        await holder.release_lease(released)
        clock.now = LATER
        assert await other.get_lease(lapsed_stream) is None, "expired for everyone"
        assert await holder.append(lapsed_stream, 1, [b"2 late"], fence=lapsed.token) == 2
        await holder.put_snapshot(lapsed_stream, 2, b"late state", fence=lapsed.token)
        assert await other.append(released_stream, 0, [b"after release"], fence=released.token) == 1, (
            "another store instance of the same holder: checked against the lease object, accepted"
        )
        assert await read_pairs(other, lapsed_stream) == [(1, b"1"), (2, b"2 late")]


async def test_an_unfenced_append_after_a_takeover_goes_after_the_marker(s3_server, prefix) -> None:
    async with (
        make(s3_server, prefix, Clock()) as holder,
        make(s3_server, prefix, Clock(LATER)) as taker,
        make(s3_server, prefix, Clock()) as operator,
    ):
        old = await holder.acquire_lease(STREAM, "holder", TTL)
        assert await holder.append(STREAM, 0, [b"a1"], fence=old.token) == 1
        assert await operator.last_seq(STREAM) == 1
        new = await taker.acquire_lease(STREAM, "taker", TTL)
        assert await operator.append(STREAM, 1, [b"approved"]) == 2, "an operator's command is not fenced"
        header = object_header(s3_server, operator, 2)
        assert not header.is_marker and header.level == new.token, "it took the marker's key and level"
        with pytest.raises(FencedError):
            await holder.append(STREAM, 1, [b"stale"], fence=old.token)
        with pytest.raises(FencedError):
            await holder.append(STREAM, 2, [b"stale"], fence=old.token)
        with pytest.raises(ConflictError) as conflict:
            await taker.append(STREAM, 1, [b"b"], fence=new.token)
        assert not isinstance(conflict.value, FencedError) and conflict.value.actual_seq == 2
        assert await taker.append(STREAM, 2, [b"b3"], fence=new.token) == 3
        assert await read_pairs(taker) == [(1, b"a1"), (2, b"approved"), (3, b"b3")]


async def test_a_lost_answer_to_the_marker_put_is_read_back(s3_server, prefix) -> None:
    async with make(s3_server, prefix, Clock()) as holder, make(s3_server, prefix, Clock(LATER)) as taker:
        old = await holder.acquire_lease(STREAM, "holder", TTL)
        assert await holder.append(STREAM, 0, [b"a1"], fence=old.token) == 1
        dropped = s3_server.inject(Fault("PUT", "/r/", "drop_after"))
        new = await taker.acquire_lease(STREAM, "taker", TTL)
        assert dropped.hits == 1 and new is not None
        assert object_header(s3_server, taker, 2).level == new.token
        with pytest.raises(FencedError):
            await holder.append(STREAM, 1, [b"stale"], fence=old.token)
        assert await taker.append(STREAM, 1, [b"b2"], fence=new.token) == 2
        assert await read_pairs(holder) == [(1, b"a1"), (2, b"b2")]


async def test_a_renewal_places_no_marker_and_a_fenced_step_is_one_put(s3_server, prefix) -> None:
    clock = Clock()
    async with make(s3_server, prefix, clock) as holder:
        lease = await holder.acquire_lease(STREAM, "holder", TTL)
        s3_server.requests.clear()
        assert await holder.append(STREAM, 0, [b"1"], fence=lease.token) == 1
        assert methods(s3_server) == ["PUT", "PUT"], "index entry, then the batch over the holder's own marker"
        clock.now += TTL / 2
        s3_server.requests.clear()
        renewed = await holder.acquire_lease(STREAM, "holder", TTL)
        assert renewed.token == lease.token
        assert methods(s3_server) == ["GET", "PUT"], "a renewal is the lease swap alone"
        s3_server.requests.clear()
        last = 1
        for n in range(5):
            last = await holder.append(STREAM, last, [f"step {n}".encode()], fence=lease.token)
        assert methods(s3_server) == ["PUT"] * 5, "one conditional PUT per fenced step, no read"
