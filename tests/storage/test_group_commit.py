"""GroupCommitter (storage/_group_commit.py) against the sqlite and memory adapters.

A wrapper store counts ``append_batch`` calls and can hold a call open until
the test releases it, so which appends share a batch is decided by the test,
never by timing. Like every store doing I/O (and unlike the memory adapter
alone) it lets the event loop run during a call.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from durably.adapters.memory import MemoryStore
from durably.adapters.sqlite import SQLiteStore
from durably.storage._errors import ConflictError, InvalidRequestError, StoreUnavailableError
from durably.storage._group_commit import GroupCommitter
from durably.storage._spi import AppendRequest, StreamId


class CountingStore:
    """Delegates to ``inner``; records every ``append_batch`` call's streams.

    ``hold`` (an ``anyio.Event``) keeps the first call waiting until set, with
    ``entered`` set once that call has started; ``holds`` maps a later call
    number (1-based) to an event it waits for. ``callers`` holds the id of the
    task that made each call. ``fail_on`` maps a call number to an exception
    raised instead of delegating.
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls: list[list[StreamId]] = []
        self.callers: list[int] = []
        self.hold: anyio.Event | None = None
        self.holds: dict[int, anyio.Event] = {}
        self.entered = anyio.Event()
        self.fail_on: dict[int, BaseException] = {}

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        self.calls.append([r.stream for r in requests])
        self.callers.append(anyio.get_current_task().id)
        number = len(self.calls)
        await anyio.lowlevel.checkpoint()  # a store's I/O lets other tasks run (and queue)
        if number == 1:
            self.entered.set()
            if self.hold is not None:
                await self.hold.wait()
        if number in self.holds:
            await self.holds[number].wait()
        if number in self.fail_on:
            raise self.fail_on[number]
        return await self.inner.append_batch(requests)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request, tmp_path):
    inner = MemoryStore() if request.param == "memory" else SQLiteStore(f"sqlite:///{tmp_path / 'journal.db'}")
    async with inner:
        yield CountingStore(inner)


def streams(count: int) -> list[StreamId]:
    return [StreamId("gc", f"agent-{i:03d}") for i in range(count)]


async def held_first_batch(
    store: CountingStore, committer: GroupCommitter, jobs: list[tuple[StreamId, int, list[bytes]]]
) -> list[int | BaseException]:
    """Run ``jobs`` concurrently; return each one's seq or exception, in job order.

    The first job's batch is held open in the store until every other job is
    queued behind it, so the calls are exactly: ``[job 0]``, then the rest in
    batches of at most ``max_batch``.
    """
    store.hold = anyio.Event()
    outcomes: list[int | BaseException | None] = [None] * len(jobs)

    async def one(index: int) -> None:
        stream, expected, records = jobs[index]
        try:
            outcomes[index] = await committer.append(stream, expected, records)
        except Exception as exc:  # collected for the assertions
            outcomes[index] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        await store.entered.wait()
        for index in range(1, len(jobs)):
            tg.start_soon(one, index)
        await anyio.wait_all_tasks_blocked()  # every other append is queued, waiting for the lock
        store.hold.set()
    return outcomes  # type: ignore[return-value]


async def run_all(
    committer: GroupCommitter, jobs: list[tuple[StreamId, int, list[bytes]]]
) -> list[int | BaseException]:
    """Run every append concurrently, no holding; outcomes in job order."""
    outcomes: list[int | BaseException | None] = [None] * len(jobs)

    async def one(index: int) -> None:
        stream, expected, records = jobs[index]
        try:
            outcomes[index] = await committer.append(stream, expected, records)
        except Exception as exc:
            outcomes[index] = exc

    async with anyio.create_task_group() as tg:
        for index in range(len(jobs)):
            tg.start_soon(one, index)
    return outcomes  # type: ignore[return-value]


async def test_fifty_streams_share_few_batches_and_get_their_seqs(store: CountingStore) -> None:
    committer = GroupCommitter(store)
    ids = streams(50)
    jobs = [(s, 0, [f"{s.agent_id}-{n}".encode() for n in range(1 + i % 3)]) for i, s in enumerate(ids)]
    outcomes = await held_first_batch(store, committer, jobs)
    assert outcomes == [1 + i % 3 for i in range(50)]
    assert len(store.calls) == 2, "the 49 appends queued behind the first batch share one call"
    assert sorted(s for call in store.calls for s in call) == ids
    assert committer.batches == len(store.calls)
    for i, s in enumerate(ids):
        assert [r.data async for r in store.read(s)] == [f"{s.agent_id}-{n}".encode() for n in range(1 + i % 3)]

    # A second round continues every stream from its returned seq.
    second = await run_all(committer, [(s, 1 + i % 3, [b"next"]) for i, s in enumerate(ids)])
    assert second == [2 + i % 3 for i in range(50)]
    assert len(store.calls) < 50


async def test_a_conflict_fails_only_its_own_append(store: CountingStore) -> None:
    committer = GroupCommitter(store)
    ids = streams(10)
    await committer.append(ids[3], 0, [b"first"])
    jobs = [(s, 0, [b"x"]) for s in ids]  # ids[3] is already at 1: stale
    outcomes = await held_first_batch(store, committer, jobs)
    conflict = outcomes[3]
    assert isinstance(conflict, ConflictError)
    assert (conflict.stream, conflict.expected_seq, conflict.actual_seq) == (ids[3], 0, 1)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [1] * 9
    assert [r.data async for r in store.read(ids[3])] == [b"first"]


async def test_same_stream_twice_in_one_batch(store: CountingStore) -> None:
    committer = GroupCommitter(store)
    s = streams(1)[0]
    jobs = [(streams(2)[1], 0, [b"lead"]), (s, 0, [b"a", b"b"]), (s, 2, [b"c"]), (s, 2, [b"stale"])]
    outcomes = await held_first_batch(store, committer, jobs)
    assert outcomes[:3] == [1, 2, 3]
    assert isinstance(outcomes[3], ConflictError) and outcomes[3].actual_seq == 3
    assert [r.data async for r in store.read(s)] == [b"a", b"b", b"c"]


async def test_store_unavailable_reaches_every_waiter_of_the_batch(store: CountingStore) -> None:
    committer = GroupCommitter(store)
    store.fail_on[2] = StoreUnavailableError("disk on fire")
    ids = streams(20)
    outcomes = await held_first_batch(store, committer, [(s, 0, [b"x"]) for s in ids])
    assert store.calls == [ids[:1], ids[1:]]
    assert outcomes[0] == 1
    for s, outcome in zip(ids[1:], outcomes[1:], strict=True):
        assert isinstance(outcome, StoreUnavailableError) and "disk on fire" in str(outcome)
        assert await store.last_seq(s) == 0  # nothing of the failed batch was written
    # The committer keeps working after a failed batch.
    assert await committer.append(ids[-1], await store.last_seq(ids[-1]), [b"again"]) >= 1


async def test_an_untyped_adapter_error_becomes_store_unavailable(store: CountingStore) -> None:
    committer = GroupCommitter(store)
    store.fail_on[1] = RuntimeError("adapter bug")
    with pytest.raises(StoreUnavailableError) as caught:
        await committer.append(streams(1)[0], 0, [b"x"])
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_a_malformed_append_fails_alone(store: CountingStore) -> None:
    committer = GroupCommitter(store)
    with pytest.raises(InvalidRequestError):
        await committer.append(streams(1)[0], 0, [])
    with pytest.raises(InvalidRequestError):
        await committer.append(streams(1)[0], -1, [b"x"])
    assert store.calls == []  # rejected before it could join (and poison) a batch
    jobs = [(s, 0, [b"x"]) for s in streams(5)] + [(StreamId("gc", "bad"), 0, ["not bytes"])]
    outcomes = await run_all(committer, jobs)  # type: ignore[arg-type]
    assert outcomes[:5] == [1] * 5
    assert isinstance(outcomes[5], InvalidRequestError)


async def test_a_cancelled_leader_does_not_strand_its_batch(store: CountingStore) -> None:
    # The leader of a batch holding other tasks' appends is cancelled mid-commit:
    # the batch is shielded, so it completes, its own append included.
    committer = GroupCommitter(store)
    first, *ids = streams(6)
    store.hold, store.holds[2] = anyio.Event(), anyio.Event()
    scopes: dict[int, tuple[anyio.CancelScope, StreamId]] = {}
    outcomes: dict[StreamId, int] = {}

    async def append(s: StreamId) -> None:
        with anyio.CancelScope() as scope:
            scopes[anyio.get_current_task().id] = (scope, s)
            outcomes[s] = await committer.append(s, 0, [b"f"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(append, first)
        await store.entered.wait()  # the first batch is in the store
        for s in ids:
            tg.start_soon(append, s)
        await anyio.wait_all_tasks_blocked()
        store.hold.set()
        with anyio.fail_after(10):
            while len(store.calls) < 2:  # the second batch, every other append, reaches the store
                await anyio.sleep(0.005)
        await anyio.wait_all_tasks_blocked()
        assert store.calls[1] == ids
        scope, leader = scopes[store.callers[1]]
        scope.cancel()  # its leader's caller goes away mid-commit
        await anyio.wait_all_tasks_blocked()
        store.holds[2].set()
    assert {s: o for s, o in outcomes.items() if s != leader} == {s: 1 for s in [first, *ids] if s != leader}
    # The leader's batch was already handed to the store: it completed (shielded).
    assert await store.last_seq(leader) == 1


async def test_a_cancelled_lone_leader_does_not_strand_those_queued_behind_it(store: CountingStore) -> None:
    # A lone append takes the fast path (no lock, no shield): cancelled mid-commit,
    # its own outcome is unknown to it, but the appends queued meanwhile still commit.
    committer = GroupCommitter(store)
    ids = streams(6)
    store.hold = anyio.Event()
    leader_scope = anyio.CancelScope()
    outcomes: dict[StreamId, int] = {}

    async def leader() -> None:
        with leader_scope:
            await committer.append(ids[0], 0, [b"leader"])

    async def follower(s: StreamId) -> None:
        outcomes[s] = await committer.append(s, 0, [b"f"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        await store.entered.wait()  # the leader's batch is in the store
        for s in ids[1:]:
            tg.start_soon(follower, s)
        await anyio.wait_all_tasks_blocked()
        leader_scope.cancel()  # the leader's caller goes away mid-commit
        await anyio.wait_all_tasks_blocked()
        store.hold.set()
    assert store.calls[0] == [ids[0]]
    assert store.calls[1] == ids[1:], "the appends queued behind the leader share the next batch"
    assert outcomes == {s: 1 for s in ids[1:]}
    assert await committer.append(ids[0], await store.last_seq(ids[0]), [b"again"]) >= 1


async def test_a_cancelled_waiter_is_withdrawn_and_others_still_commit(store: CountingStore) -> None:
    committer = GroupCommitter(store, max_batch=1)
    lead, doomed, other = streams(3)
    store.hold = anyio.Event()
    doomed_scope = anyio.CancelScope()
    results: dict[str, int] = {}

    async def append(name: str, s: StreamId) -> None:
        results[name] = await committer.append(s, 0, [name.encode()])

    async def doomed_task() -> None:
        with doomed_scope:
            await append("doomed", doomed)

    async with anyio.create_task_group() as tg:
        tg.start_soon(append, "lead", lead)
        await store.entered.wait()
        tg.start_soon(doomed_task)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(append, "other", other)
        await anyio.wait_all_tasks_blocked()
        doomed_scope.cancel()  # gives up while waiting for the lock, before any leader took it
        await anyio.wait_all_tasks_blocked()
        store.hold.set()
    assert results == {"lead": 1, "other": 1}
    assert await store.last_seq(doomed) == 0, "a withdrawn append must never be written later"
    assert all(doomed not in call for call in store.calls)
    assert await committer.append(doomed, 0, [b"retry"]) == 1  # the retry does not meet a ghost


async def test_more_appends_than_max_batch(store: CountingStore) -> None:
    committer = GroupCommitter(store, max_batch=4)
    ids = streams(13)
    outcomes = await held_first_batch(store, committer, [(s, 0, [b"x"]) for s in ids])
    assert outcomes == [1] * 13
    assert [len(call) for call in store.calls] == [1, 4, 4, 4]
    assert sorted(s for call in store.calls for s in call) == ids
