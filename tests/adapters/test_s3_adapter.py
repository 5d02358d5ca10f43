"""The S3 adapter against a real S3-compatible HTTP server: moto's, on 127.0.0.1, started and stopped here.

Race tests are honest because the test server serialises conditional writes
the way S3 documents them (``tests/support/s3_server.py`` runs moto's check-and-store
of every mutating request under one lock; unpatched, moto lets two writers
both win about once in 2,000 races of 8). The races below are then real
concurrent HTTP requests from independent store instances, like processes.

Faults are injected by the server (real 503 SlowDown / 409 / 500 responses,
stalls past the client's read timeout, connections closed after the request
was applied), so aiohttp, botocore and the adapter's retries all take part.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
import zlib

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from retry_controllers import count_controllers
from s3_server import BUCKET, Fault, S3TestServer

from durably.adapters.s3 import S3Store
from durably.adapters.s3._batch import HEADER_SIZE, Batch, BatchHeader
from durably.adapters.s3._keys import StreamKeys, decode_segment, encode_segment, seq_from_name, seq_name
from durably.adapters.s3._options import MIN_PART_SIZE, S3Options
from durably.adapters.s3._retry import RetryPolicy
from durably.storage import (
    AppendRequest,
    ConflictError,
    CorruptRecordError,
    StoreUnavailableError,
    StreamId,
    open_store,
)
from durably.storage.conformance import StoreConformance

FAST = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.05, deadline=15)
STREAM = StreamId("ns", "agent")


def fresh_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def make(server: S3TestServer, prefix: str | None = None, **overrides) -> S3Store:
    overrides.setdefault("retry", FAST)
    return S3Store(server.url(prefix or fresh_prefix()), **overrides)


@pytest.fixture
async def store(s3_server):
    async with make(s3_server) as opened:
        yield opened


async def read_pairs(store, stream, after=0, page_size=512):
    return [(r.seq, r.data) async for r in store.read(stream, after, page_size=page_size)]


def batch_objects(server: S3TestServer, store: S3Store, stream: StreamId) -> list[str]:
    keys = StreamKeys(store.options.prefix, stream)
    listed = server.client().list_objects_v2(Bucket=BUCKET, Prefix=keys.batches)
    return [item["Key"] for item in listed.get("Contents", [])]


# --------------------------------------------------------------------------- the conformance kit


class TestS3Conformance(StoreConformance):
    """Every promise of the SPI, as the public kit checks it, on the local S3.

    Multipart threshold and part size are S3's minimum (5 MiB), so the kit's
    5 MiB snapshot and blob go through multipart upload.
    """

    @pytest.fixture(autouse=True)
    def _local_s3(self, s3_server) -> None:
        self.server = s3_server

    def _prefix(self, tmp_path) -> str:
        return hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]

    def make_store(self, tmp_path):
        return make(self.server, self._prefix(tmp_path), multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)

    def store_url(self, tmp_path):
        return self.server.url(
            self._prefix(tmp_path),
            multipart_threshold=MIN_PART_SIZE,
            part_size=MIN_PART_SIZE,
            max_attempts=5,
            deadline=15,
        )

    async def stored_bytes(self, tmp_path):
        def fetch() -> bytes:
            client, chunks = self.server.client(), []
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=self._prefix(tmp_path)):
                for item in page.get("Contents", []):
                    chunks.append(client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read())
            return b"\x00".join(chunks)

        return await anyio.to_thread.run_sync(fetch)

    def backend_server(self, tmp_path):
        return _KillableS3(self.server)

    @contextlib.asynccontextmanager
    async def outage(self, tmp_path):
        # Every request answers 500 InternalError until the outage ends: the retries run out.
        for method in ("GET", "HEAD", "PUT", "POST", "DELETE"):
            self.server.inject(Fault(method, "", "internal", times=1 << 30))
        try:
            yield
        finally:
            self.server.clear_faults()


class _KillableS3:
    """The local S3 as the kit's ``ServerControl``: killed (connections dropped, port closed), then revived."""

    def __init__(self, server) -> None:
        self.server = server

    async def kill(self) -> None:
        await anyio.to_thread.run_sync(self.server.kill)

    async def restart(self) -> None:
        await anyio.to_thread.run_sync(self.server.revive)


# --------------------------------------------------------------------------- pure parts


@given(st.text(min_size=0, max_size=12), st.text(min_size=0, max_size=12))
def test_segment_code_preserves_order_prefixes_and_is_key_safe(a: str, b: str) -> None:
    a, b = a.replace("\x00", ""), b.replace("\x00", "")
    ea, eb = encode_segment(a), encode_segment(b)
    assert decode_segment(ea) == a
    assert (a < b) == (ea < eb), "listing order of keys is the order of the ids"
    assert b.startswith(a) == eb.startswith(ea), "an id prefix is a key prefix, and only then"
    assert "/" not in ea and ea not in (".", "..") and all(ord(c) > 0x20 for c in ea)


def test_seq_names_sort_descending() -> None:
    names = [seq_name(seq) for seq in (0, 1, 9, 10, 2**63)]
    assert names == sorted(names, reverse=True)
    assert [seq_from_name(n) for n in names] == [0, 1, 9, 10, 2**63]


def test_batch_object_round_trip_trim_and_corruption() -> None:
    batch = Batch(4, 6, 4, b"t" * 16, (b"a", b"", b"c" * 300))
    data = batch.encode()
    assert Batch.decode(data) == batch
    assert BatchHeader.decode(data[:HEADER_SIZE]).last_seq == 6
    old = b"dyB1" + data[4:48] + data[56:]  # a batch written before levels: a 48-byte header, read as level 0
    old = old[:-4] + zlib.crc32(old[:-4]).to_bytes(4, "big")
    assert Batch.decode(old).records == batch.records and BatchHeader.decode(old[:HEADER_SIZE]).level == 0
    marker = Batch.marker(7, 3, b"m" * 16)
    header = BatchHeader.decode(marker.encode()[:HEADER_SIZE])
    assert header.is_marker and (header.last_seq, header.level, header.count) == (6, 3, 0)
    trimmed = batch.trimmed(5)
    assert (trimmed.records_from, trimmed.records, list(trimmed.seqs())) == (6, (b"c" * 300,), [6])
    assert Batch.decode(trimmed.encode()) == trimmed and trimmed.encode() != data, "a trimmed version has new bytes"
    assert batch.trimmed(6).records == () and batch.trimmed(1) == batch
    with pytest.raises(CorruptRecordError):
        Batch.decode(data[:-1] + bytes([data[-1] ^ 1]))


def test_url_options_and_registration() -> None:
    options = S3Options.from_url("s3://bkt/a/b/?endpoint_url=http://h:1&region=eu-west-1&path_style=1&deadline=3")
    assert (options.bucket, options.prefix, options.endpoint_url, options.region, options.path_style) == (
        "bkt",
        "a/b/",
        "http://h:1",
        "eu-west-1",
        True,
    )
    assert options.retry.deadline == 3 and S3Options.from_url("s3://bkt").prefix == ""
    for bad in ("s3:///nobucket", "s3://bkt?color=red", "s3://bkt?part_size=1", "s3://bkt?path_style=maybe"):
        with pytest.raises(ValueError):
            S3Options.from_url(bad)
    assert isinstance(open_store("s3://bkt/p?region=us-east-1"), S3Store), "registered under durably.stores"


# --------------------------------------------------------------------------- open / close


async def test_open_fails_cleanly_without_bucket_or_server(s3_server) -> None:
    missing = S3Store(s3_server.url(fresh_prefix()).replace(BUCKET, "no-such-bucket"), retry=FAST)
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        await missing.open()
    created = S3Store(s3_server.url("p", create_bucket=1).replace(BUCKET, "made-on-open"), retry=FAST)
    async with created:
        assert await created.append(STREAM, 0, [b"x"]) == 1
    with socket_bound() as port:  # a port nobody listens on
        dead = S3Store(
            f"s3://{BUCKET}/p?endpoint_url=http://127.0.0.1:{port}&path_style=1&region=us-east-1",
            retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.01),
        )
        with pytest.raises(StoreUnavailableError):
            await dead.open()


async def test_open_refuses_a_server_without_conditional_writes(s3_server) -> None:
    s3_server.inject(Fault("PUT", "/probe/", "ignore_conditions", times=2))
    with pytest.raises(StoreUnavailableError, match="If-None-Match"):
        await make(s3_server).open()


class socket_bound:
    """A bound, not listening, TCP port on 127.0.0.1: connections to it are refused."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- races


async def test_independent_writers_race_exactly_one_wins(s3_server) -> None:
    """8 store instances (separate caches, like processes) race for each seq: one winner, whole batch."""
    prefix, writers, rounds = fresh_prefix(), 8, 6
    stores = [make(s3_server, prefix) for _ in range(writers)]
    for s in stores:
        await s.open()
    try:
        for round_no in range(rounds):
            expected = round_no * 2
            for s in stores:
                assert await s.last_seq(STREAM) == expected
            outcomes: dict[int, object] = {}

            async def race(n: int) -> None:
                try:
                    outcomes[n] = await stores[n].append(STREAM, expected, [f"{n}a".encode(), f"{n}b".encode()])
                except ConflictError as exc:
                    outcomes[n] = exc

            async with anyio.create_task_group() as group:
                for n in range(writers):
                    group.start_soon(race, n)
            winners = [n for n, o in outcomes.items() if o == expected + 2]
            assert len(winners) == 1, f"round {round_no}: {outcomes}"
            losers = [o for o in outcomes.values() if isinstance(o, ConflictError)]
            assert len(losers) == writers - 1 and {e.actual_seq for e in losers} <= {expected + 2}
            tail = await read_pairs(stores[0], STREAM, expected)
            assert tail == [(expected + 1, f"{winners[0]}a".encode()), (expected + 2, f"{winners[0]}b".encode())]
    finally:
        for s in stores:
            await s.close()
    assert len(batch_objects(s3_server, stores[0], STREAM)) == rounds, "one object per acknowledged append"


async def test_stale_writer_is_fenced_even_after_compaction(s3_server) -> None:
    """A writer that slept through a takeover and a compaction of its next key cannot append.

    Compaction keeps every key taken (a tombstone where the batch was), so the
    stale writer's one conditional PUT fails like any other conflict; no read of
    the compaction mark is needed on the append path.
    """
    prefix = fresh_prefix()
    async with make(s3_server, prefix) as stale, make(s3_server, prefix) as taker:
        assert await stale.append(STREAM, 0, [b"old-1", b"old-2"]) == 2  # stale now trusts "2 is the end"
        assert await taker.last_seq(STREAM) == 2
        assert await taker.append(STREAM, 2, [b"new-3"]) == 3
        assert await taker.append(STREAM, 3, [b"new-4"]) == 4
        await taker.put_snapshot(STREAM, 4, b"state@4")
        await taker.delete_records(STREAM, 4)  # the batch at seq 3 becomes a tombstone: its key stays taken
        with pytest.raises(ConflictError) as caught:
            await stale.append(STREAM, 2, [b"zombie"])
        assert caught.value.actual_seq == 4
        assert await taker.last_seq(STREAM) == 4
        assert await read_pairs(taker, STREAM) == []
        assert await taker.append(STREAM, 4, [b"new-5"]) == 5
        assert await read_pairs(stale, STREAM) == [(5, b"new-5")], "the zombie's batch left nothing behind"
        keys = StreamKeys(taker.options.prefix, STREAM)
        assert sorted(batch_objects(s3_server, taker, STREAM)) == sorted(keys.batch(s) for s in (1, 3, 4, 5))
        for first, last in ((1, 2), (3, 3), (4, 4)):  # two tombstones and the trimmed newest-at-compaction
            body = s3_server.client().get_object(Bucket=BUCKET, Key=keys.batch(first))["Body"].read()
            batch = Batch.decode(body)
            assert (batch.first_seq, batch.last_seq, batch.records) == (first, last, ()), "no record bytes kept"


async def test_compaction_rewrites_only_what_the_previous_mark_left(s3_server, store) -> None:
    """Each compaction lists and rewrites the batches above the previous mark, not the whole history."""
    for seq in range(12):
        await store.append(STREAM, seq, [f"r{seq + 1}".encode()])
    await store.put_snapshot(STREAM, 6, b"state@6")
    await store.delete_records(STREAM, 6)
    await store.put_snapshot(STREAM, 10, b"state@10")
    s3_server.requests.clear()
    await store.delete_records(STREAM, 10)
    rewritten = sorted(seq_from_name(r.path) for r in s3_server.requests if r.method == "PUT" and "/r/" in r.path)
    assert rewritten == [7, 8, 9, 10], "7..10 tombstoned; 11 starts after the mark; nothing at or below 6 again"
    assert await read_pairs(store, STREAM) == [(11, b"r11"), (12, b"r12")]


async def test_reads_below_the_compaction_mark_never_see_a_stale_writers_batch(s3_server, store) -> None:
    """A batch object below the mark (an older build's stale writer recreating a key that build's
    compaction freed) is never read; ``delete_stream`` removes it.

    Before tombstones, the next compaction deleted such a leftover; now a
    compaction lists only above the previous mark (below it, keys hold
    tombstones), so the leftover stays, unread, until the stream is purged.
    """
    for seq in range(10):
        await store.append(STREAM, seq, [f"r{seq + 1}".encode()])
    await store.put_snapshot(STREAM, 8, b"state@8")
    await store.delete_records(STREAM, 8)
    zombie = Batch(3, 3, 3, b"Z" * 16, (b"zombie",)).encode()
    key = StreamKeys(store.options.prefix, STREAM).batch(3)
    s3_server.client().put_object(Bucket=BUCKET, Key=key, Body=zombie)
    for after in (0, 2, 3, 5, 8):
        for page_size in (1, 4, 512):
            assert await read_pairs(store, STREAM, after, page_size) == [(9, b"r9"), (10, b"r10")], (after, page_size)
    assert await store.last_seq(STREAM) == 10
    await store.put_snapshot(STREAM, 10, b"state@10")
    await store.delete_records(STREAM, 9)
    assert await read_pairs(store, STREAM) == [(10, b"r10")]
    await store.delete_stream(STREAM)
    assert key not in batch_objects(s3_server, store, STREAM), "a purge removes the leftover"


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("kind", ["slowdown", "conflict", "internal"])
async def test_transient_errors_on_append_are_retried(s3_server, store, kind) -> None:
    await store.append(STREAM, 0, [b"one"])
    fault = s3_server.inject(Fault("PUT", "/r/", kind, times=2))
    assert await store.append(STREAM, 1, [b"two", b"three"]) == 3
    assert fault.hits == 2
    assert await read_pairs(store, STREAM) == [(1, b"one"), (2, b"two"), (3, b"three")]
    assert len(batch_objects(s3_server, store, STREAM)) == 2


async def test_requests_go_through_the_shared_retry_helper(s3_server, store, monkeypatch) -> None:
    """The helper itself is tested in tests/storage/test_retried.py; here, only that the adapter uses it."""
    built = count_controllers(monkeypatch)
    for seq in range(2):
        assert await store.append(STREAM, seq, [b"r%d" % seq]) == seq + 1
    assert await store.last_seq(STREAM) == 2
    assert [seq for seq, _ in await read_pairs(store, STREAM)] == [1, 2]
    assert built == [], "a request that succeeds first time pays no retry controller"
    s3_server.inject(Fault("PUT", "/r/", "slowdown", times=1))
    assert await store.append(STREAM, 2, [b"after a slowdown"]) == 3
    assert len(built) == 1, "the failed request was retried under one controller"


async def test_dropped_connection_after_the_put_is_resolved_by_reading_back(s3_server, store) -> None:
    await store.append(STREAM, 0, [b"one"])
    keys = StreamKeys(store.options.prefix, STREAM)
    s3_server.requests.clear()
    fault = s3_server.inject(Fault("PUT", "/r/", "drop_after", times=2))
    assert await store.append(STREAM, 1, [b"two"]) == 2, "applied, then the answer was lost: still acknowledged"
    assert fault.hits == 2  # the HTTP client's own re-send was dropped too
    to_key = [r.method for r in s3_server.requests if r.path.endswith(keys.batch(2))]
    assert to_key[:2] == ["PUT", "PUT"] and "GET" in to_key[2:], f"read back before reporting: {to_key}"
    assert await read_pairs(store, STREAM) == [(1, b"one"), (2, b"two")], "no duplicate, no loss"
    assert await store.append(STREAM, 2, [b"three"]) == 3


async def test_timeout_after_the_put_was_applied_is_resolved_by_reading_back(s3_server) -> None:
    async with make(s3_server, read_timeout=0.3) as store:
        await store.append(STREAM, 0, [b"one"])
        fault = s3_server.inject(Fault("PUT", "/r/", "stall_after", delay=1.0))
        assert await store.append(STREAM, 1, [b"two"]) == 2
        assert fault.hits == 1
        assert await read_pairs(store, STREAM) == [(1, b"one"), (2, b"two")]
        assert len(batch_objects(s3_server, store, STREAM)) == 2


async def test_unknown_outcome_when_another_writer_won_is_a_conflict(s3_server, store) -> None:
    """Our PUT's fate is unknown and the key holds someone else's batch: ConflictError, never success."""
    await store.append(STREAM, 0, [b"one"])
    key = StreamKeys(store.options.prefix, STREAM).batch(2)
    foreign = Batch(2, 2, 2, b"F" * 16, (b"theirs",)).encode()
    s3_server.inject(
        Fault(
            "PUT",
            "/r/",
            "drop_after",
            times=2,
            before=lambda: s3_server.client().put_object(Bucket=BUCKET, Key=key, Body=foreign),
        )
    )
    with pytest.raises(ConflictError) as caught:
        await store.append(STREAM, 1, [b"mine"])
    assert caught.value.actual_seq == 2
    assert await read_pairs(store, STREAM) == [(1, b"one"), (2, b"theirs")]


async def test_exhausted_retries_and_timeouts_raise_store_unavailable(s3_server) -> None:
    prefix = fresh_prefix()
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01, deadline=10)
    async with make(s3_server, prefix) as steady, make(s3_server, prefix, retry=policy, read_timeout=0.25) as touchy:
        await steady.append(STREAM, 0, [b"one"])
        for fault in (Fault("PUT", "/r/", "slowdown", times=3), Fault("PUT", "/r/", "stall", times=3, delay=0.6)):
            s3_server.inject(fault)
            with pytest.raises(StoreUnavailableError):
                await touchy.append(STREAM, 1, [b"never"])
            s3_server.clear_faults()
        s3_server.inject(Fault("GET", "/r/", "slowdown", times=3))
        with pytest.raises(StoreUnavailableError):
            await touchy.last_seq(STREAM)
        s3_server.clear_faults()
        assert await read_pairs(steady, STREAM) == [(1, b"one")], "nothing of the failed appends was written"
        assert await touchy.append(STREAM, 1, [b"two"]) == 2, "the same expected seq works once S3 answers again"


# --------------------------------------------------------------------------- batching, blobs, cost


async def test_append_batch_sends_streams_concurrently(s3_server, store) -> None:
    streams = [StreamId("ns", f"agent-{n}") for n in range(4)]
    met = s3_server.expect_concurrent_puts(4, "/r/")
    results = await store.append_batch([AppendRequest(s, 0, [s.agent_id.encode()]) for s in streams])
    assert results == [1, 1, 1, 1]
    assert met == [True] * 4, "all four batch PUTs were in flight at once: one round trip for the group"


async def test_multipart_blob_and_snapshot(s3_server) -> None:
    async with make(s3_server, multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE) as store:
        data = os.urandom(MIN_PART_SIZE + 1024 * 1024)  # 6 MiB: two parts
        s3_server.requests.clear()
        digest = await store.put_blob(STREAM, data)
        parts = [r for r in s3_server.requests if r.method == "PUT" and "partNumber=" in r.query]
        assert len(parts) == 2
        assert await store.get_blob(STREAM, digest) == data
        await store.append(STREAM, 0, [b"r"])
        await store.put_snapshot(STREAM, 1, data)
        assert (await store.get_snapshot(STREAM)).data == data
        uploads = s3_server.client().list_multipart_uploads(Bucket=BUCKET, Prefix=store.options.prefix)
        assert not uploads.get("Uploads"), "no unfinished upload is left behind"


async def test_request_cost_of_a_step_and_of_a_restore(s3_server) -> None:
    """docs/s3.md's cost model: an append is one conditional PUT and no read; a restore reads only the tail."""
    prefix = fresh_prefix()
    async with make(s3_server, prefix) as writer:
        last = 0
        for n in range(30):
            last = await writer.append(STREAM, last, [f"r{n}".encode()])
        await writer.put_snapshot(STREAM, 27, b"state@27")
        s3_server.requests.clear()
        await writer.append(STREAM, last, [b"step"])
        assert [r.method for r in s3_server.requests] == ["PUT"]
    async with make(s3_server, prefix) as restorer:
        s3_server.requests.clear()
        snapshot = await restorer.get_snapshot(STREAM)
        tail = await read_pairs(restorer, STREAM, snapshot.seq)
        assert [seq for seq, _ in tail] == [28, 29, 30, 31]
        assert await restorer.append(STREAM, 31, [b"resumed"]) == 32, "the read taught it the end: no extra check"
        methods = [r.method for r in s3_server.requests]
        lists = [r for r in s3_server.requests if "list-type=2" in r.query]
        assert len(lists) == 2, [r.query for r in lists]  # the latest snapshot; the window after it
        assert methods.count("GET") - len(lists) == 1 + 4 + 1, "snapshot, 4 tail batches, the mark (the read's)"
        assert methods.count("PUT") == 1


async def test_corrupt_batch_object_is_reported(s3_server, store) -> None:
    await store.append(STREAM, 0, [b"one"])
    key = StreamKeys(store.options.prefix, STREAM).batch(1)
    s3_server.client().put_object(Bucket=BUCKET, Key=key, Body=b"dyB1" + b"\x00" * 60)
    with pytest.raises(CorruptRecordError):
        await read_pairs(store, STREAM)


async def test_a_foreign_key_in_the_stream_index_is_skipped_not_fatal(store, s3_server, caplog) -> None:
    from durably.adapters.s3._keys import index_prefix

    for agent in ("a1", "a2"):
        await store.append(StreamId("ns", agent), 0, [b"x"])
    foreign = index_prefix(store.options.prefix, "ns") + "a15!4"  # a truncated escape: not a key durably writes
    s3_server.client().put_object(Bucket=BUCKET, Key=foreign, Body=b"")
    with caplog.at_level("WARNING", logger="durably.adapters.s3"):
        assert [s.agent_id async for s in store.list_streams("ns")] == ["a1", "a2"]
    assert foreign in caplog.text
