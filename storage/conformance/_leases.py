"""Checks of the optional lease capability (``CAP_LEASES``): one live worker per stream.

Expiry is checked with short ttls (``LeaseChecks.lease_short_ttl``) and a
sleep past them; every "still held" assertion uses a long ttl (``LONG_TTL``),
so a slow machine can make a check slower but never make it fail. Tokens are
checked to increase, not to increase by exactly one: the SPI promises "greater
than any before".
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from durably.storage._errors import InvalidRequestError, StoreClosedError
from durably.storage._spi import CAP_LEASES, Lease, LeaseStore, StreamId

from ._harness import StoreHarness, expect_raises, list_all, sid

#: A ttl (seconds) that outlives any check: the lease is still held when asserted.
LONG_TTL = 60.0
#: Seconds the store's clock may differ from this process's in ``expires_at``.
CLOCK_SKEW = 5.0
#: The lease methods a store declaring ``CAP_LEASES`` has.
LEASE_METHODS = ("acquire_lease", "release_lease", "get_lease")


def _same(lease: Lease | None, expected: Lease) -> bool:
    """Whether ``lease`` is ``expected`` (``expires_at`` within a millisecond: a backend may round it)."""
    return (
        lease is not None
        and (lease.stream, lease.owner, lease.token) == (expected.stream, expected.owner, expected.token)
        and abs(lease.expires_at - expected.expires_at) < 1e-3
    )


class LeaseChecks(StoreHarness):
    """Promises of ``acquire_lease``/``release_lease``/``get_lease``; skipped unless the store declares ``CAP_LEASES``."""

    #: Ttl (seconds) of the leases the checks wait out to see them expire. Raise it
    #: when your backend's clock is coarse (e.g. whole seconds); each such wait
    #: lasts 1.5 times this plus 50 ms.
    lease_short_ttl: float = 0.2

    async def _wait_out_short_ttl(self) -> None:
        """Sleep until a lease taken with ``lease_short_ttl`` before the call has surely expired."""
        await anyio.sleep(self.lease_short_ttl * 1.5 + 0.05)

    def require_leases(self, tmp_path: Path) -> LeaseStore:
        """Skip unless the adapter declares ``CAP_LEASES`` (read without opening a store); the store, unopened.

        Args:
            tmp_path: The test's location.

        Returns:
            ``make_store(tmp_path)``, not opened, typed as a ``LeaseStore``.
        """
        return self.leases_of(self.make_store(tmp_path))

    @asynccontextmanager
    async def opened_leases(self, tmp_path: Path) -> AsyncIterator[LeaseStore]:
        """``opened(tmp_path)``, as a ``LeaseStore`` (skipped unless the store declares ``CAP_LEASES``).

        Args:
            tmp_path: The test's location.

        Yields:
            The open store, typed as a ``LeaseStore``.
        """
        async with self.opened(tmp_path) as store:
            yield self.leases_of(store)

    async def _take_lease(self, store: LeaseStore, stream: StreamId, owner: str, ttl: float = LONG_TTL) -> Lease:
        """``acquire_lease`` that must succeed; returns the lease, checked to be well formed."""
        lease = await store.acquire_lease(stream, owner, ttl)
        assert lease is not None, f"{owner!r} could not acquire the lease of {stream}, which nobody else holds"
        assert (lease.stream, lease.owner) == (stream, owner), f"the lease names its stream and owner: {lease}"
        assert isinstance(lease.token, int), f"a fencing token is an int: {lease.token!r}"
        return lease

    @pytest.mark.anyio
    async def test_lease_methods_exist_and_need_an_open_store(self, tmp_path: Path) -> None:
        store = self.require_leases(tmp_path)
        missing = [name for name in LEASE_METHODS if not callable(getattr(store, name, None))]
        assert not missing, f"a store declaring {CAP_LEASES!r} has the LeaseStore methods; missing: {missing}"
        stream = sid("closed-lease")
        calls = {
            "acquire_lease": lambda: store.acquire_lease(stream, "w", LONG_TTL),
            "release_lease": lambda: store.release_lease(Lease(stream, "w", 1, time.time() + LONG_TTL)),
            "get_lease": lambda: store.get_lease(stream),
        }
        for name, call in calls.items():
            await expect_raises(StoreClosedError, call, f"{name} before open()")
        await store.open()
        await self._take_lease(store, stream, "w")
        await store.close()
        for name, call in calls.items():
            await expect_raises(StoreClosedError, call, f"{name} after close()")

    @pytest.mark.anyio
    async def test_lease_acquire_renew_and_expire(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            stream = sid("lease")
            before = time.time()
            first = await self._take_lease(store, stream, "worker-a")
            after = time.time()
            assert before + LONG_TTL - CLOCK_SKEW <= first.expires_at <= after + LONG_TTL + CLOCK_SKEW, (
                f"expires_at is unix seconds (now + ttl): {first.expires_at} for ttl {LONG_TTL} at {before}"
            )
            assert await store.acquire_lease(stream, "worker-b", LONG_TTL) is None, (
                "another owner's live lease is refused"
            )
            renewed = await self._take_lease(store, stream, "worker-a", 2 * LONG_TTL)
            assert renewed.token == first.token, "a renewal by the same owner keeps the token"
            assert renewed.expires_at > first.expires_at, "a renewal moves expires_at"
            assert _same(await store.get_lease(stream), renewed), "get_lease shows the renewed lease"

            brief = sid("brief-lease")
            short = await self._take_lease(store, brief, "worker-a", self.lease_short_ttl)
            await self._wait_out_short_ttl()
            assert await store.get_lease(brief) is None, (
                f"a lease is gone once its ttl ({self.lease_short_ttl} s) has passed"
            )
            taken = await self._take_lease(store, brief, "worker-b")
            assert taken.token > short.token, "taking over an expired lease gives a greater token"
            assert await store.acquire_lease(brief, "worker-a", LONG_TTL) is None, "the former owner is now refused"

    @pytest.mark.anyio
    async def test_lease_reacquired_after_expiry_by_its_owner_gets_a_new_token(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            stream = sid("lapsed")
            lapsed = await self._take_lease(store, stream, "worker-a", self.lease_short_ttl)
            await self._wait_out_short_ttl()
            again = await self._take_lease(store, stream, "worker-a")
            assert again.token > lapsed.token, (
                "an expired lease is taken anew, with a greater token, even by its former owner "
                "(someone may have acted on its expiry)"
            )

    @pytest.mark.anyio
    async def test_lease_tokens_increase_across_owners_and_releases(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            stream = sid("tokens")
            tokens: list[int] = []
            for owner in ("a", "b", "a", "c", "c"):
                lease = await self._take_lease(store, stream, owner)
                tokens.append(lease.token)
                await store.release_lease(lease)
                assert await store.get_lease(stream) is None, f"released by {owner!r}: no lease"
            assert tokens == sorted(set(tokens)), (
                f"every new holder gets a greater token, also the same owner after release: {tokens}"
            )

    @pytest.mark.anyio
    async def test_lease_release_needs_owner_and_token(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            stream = sid("release")
            await store.release_lease(Lease(stream, "nobody", 1, time.time() + LONG_TTL))  # no lease at all: no-op
            old = await self._take_lease(store, stream, "a")
            await store.release_lease(old)
            current = await self._take_lease(store, stream, "a")
            await store.release_lease(old)
            assert _same(await store.get_lease(stream), current), "releasing with a stale token is a no-op"
            await store.release_lease(Lease(stream, "b", current.token, current.expires_at))
            assert _same(await store.get_lease(stream), current), "releasing another owner's lease is a no-op"
            await store.release_lease(current)
            assert await store.get_lease(stream) is None, "the holder's release ends the lease"
            await store.release_lease(current)  # twice: no-op, no error

            lapsed = await self._take_lease(store, sid("release-lapsed"), "a", self.lease_short_ttl)
            await self._wait_out_short_ttl()
            successor = await self._take_lease(store, lapsed.stream, "b")
            await store.release_lease(lapsed)
            assert _same(await store.get_lease(lapsed.stream), successor), (
                "a stale holder's release leaves the successor's lease"
            )

    @pytest.mark.anyio
    async def test_get_lease(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            stream = sid("get")
            assert await store.get_lease(stream) is None, "no lease of a stream nobody leased"
            lease = await self._take_lease(store, stream, "a")
            assert _same(await store.get_lease(stream), lease), f"get_lease returns the lease held: {lease}"
            assert await store.acquire_lease(stream, "b", LONG_TTL) is None
            assert _same(await store.get_lease(stream), lease), "a refused acquire changes nothing"

    async def _lease_race(self, stores: list[LeaseStore], stream: StreamId, round_no: int) -> Lease:
        """``race_tasks`` tasks with distinct owners acquire the lease at once: exactly one wins."""
        won: list[Lease] = []
        refused: list[str] = []
        start = anyio.Event()

        async def racer(task: int) -> None:
            owner = f"round{round_no}-task{task}"
            await start.wait()
            lease = await stores[task % len(stores)].acquire_lease(stream, owner, LONG_TTL)
            if lease is None:
                refused.append(owner)
            else:
                assert lease.owner == owner, f"{owner!r} got a lease naming {lease.owner!r}"
                won.append(lease)

        async with anyio.create_task_group() as group:
            for task in range(self.race_tasks):
                group.start_soon(racer, task)
            await anyio.sleep(0)
            start.set()
        assert len(won) == 1, (
            f"round {round_no}: {self.race_tasks} owners raced for the lease of {stream}; "
            f"exactly one may get it, {len(won)} did: {won}"
        )
        assert len(refused) == self.race_tasks - 1
        (winner,) = won
        assert _same(await stores[0].get_lease(stream), winner), "the winner's lease is the one stored"
        return winner

    async def _lease_race_rounds(self, stores: list[LeaseStore]) -> None:
        """Race for a lease never taken, one just released and one just expired; tokens increase."""
        stream = sid("lease-race")
        free = await self._lease_race(stores, stream, 0)
        await stores[0].release_lease(free)
        released = await self._lease_race(stores, stream, 1)
        assert released.token > free.token
        await stores[0].release_lease(released)
        lapsing = await self._take_lease(stores[0], stream, "lapsing", self.lease_short_ttl)
        await self._wait_out_short_ttl()
        expired = await self._lease_race(stores, stream, 2)
        assert expired.token > lapsing.token > released.token

    @pytest.mark.anyio
    async def test_racing_for_a_lease_exactly_one_wins(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            await self._lease_race_rounds([store])

    @pytest.mark.anyio
    async def test_racing_for_a_lease_across_two_instances(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        self.require_concurrent_instances()
        async with self.opened_leases(tmp_path) as first, self.opened_leases(tmp_path) as second:
            await self._lease_race_rounds([first, second])
            held = await self._take_lease(first, sid("seen-by-both"), "a")
            assert _same(await second.get_lease(held.stream), held), (
                "a lease taken on one instance is seen on the other"
            )
            assert await second.acquire_lease(held.stream, "b", LONG_TTL) is None

    @pytest.mark.anyio
    async def test_lease_survives_reopen(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        stream = sid("durable-lease")
        async with self.opened_leases(tmp_path) as store:
            held = await self._take_lease(store, stream, "a")
        async with self.opened_leases(tmp_path) as store:
            assert _same(await store.get_lease(stream), held), "an unexpired lease is still held after close and reopen"
            assert await store.acquire_lease(stream, "b", LONG_TTL) is None, "and still refused to others"
            renewed = await self._take_lease(store, stream, "a")
            assert renewed.token == held.token, "its owner renews it, keeping the token"
            await store.release_lease(renewed)
        async with self.opened_leases(tmp_path) as store:
            assert await store.get_lease(stream) is None, "a release survives reopen"
            assert (await self._take_lease(store, stream, "b")).token > held.token, "so does the token sequence"

    @pytest.mark.anyio
    async def test_leases_are_per_stream_and_namespace(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            held = await self._take_lease(store, sid("isolated"), "a")
            neighbours = [sid("isolated-2"), sid("ISOLATED"), StreamId("conformance-other", "isolated")]
            others = [await self._take_lease(store, stream, "b") for stream in neighbours]
            assert _same(await store.get_lease(held.stream), held), "other streams' leases leave this one alone"
            for lease in others:
                await store.release_lease(lease)
            assert _same(await store.get_lease(held.stream), held), "releasing other streams' leases leaves this one"
            await store.release_lease(Lease(neighbours[2], held.owner, held.token, held.expires_at))
            assert _same(await store.get_lease(held.stream), held), "a release names its stream, namespace included"

    @pytest.mark.anyio
    async def test_lease_invalid_arguments(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            stream = sid("invalid-lease")
            for ttl in (0, 0.0, -1.0):
                await expect_raises(InvalidRequestError, lambda: store.acquire_lease(stream, "a", ttl), f"ttl {ttl}")
            await expect_raises(
                InvalidRequestError, lambda: store.acquire_lease(stream, "", LONG_TTL), "an empty owner"
            )
            assert await store.get_lease(stream) is None, "a refused request takes no lease"
            assert await store.last_seq(stream) == 0

    @pytest.mark.anyio
    async def test_leases_are_not_streams_and_go_with_delete_stream(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        async with self.opened_leases(tmp_path) as store:
            journal, bare = sid("leased-journal"), sid("leased-only")
            await store.append(journal, 0, [b"r"])
            await self._take_lease(store, journal, "a")
            await self._take_lease(store, bare, "a")
            assert await list_all(store) == [journal], "a lease does not make a stream appear in list_streams"
            assert await store.last_seq(bare) == 0, "a lease alone leaves the stream unknown"
            await store.delete_stream(journal)
            assert await store.get_lease(journal) is None, "delete_stream removes the stream's lease"
            assert await store.acquire_lease(journal, "b", LONG_TTL) is not None, "and another owner can take one"
            await store.delete_stream(bare)
            assert await store.get_lease(bare) is None, "delete_stream removes the lease of a stream with no records"
            assert await list_all(store) == []

    @pytest.mark.anyio
    async def test_lease_tokens_never_decrease_across_purge(self, tmp_path: Path) -> None:
        self.require_leases(tmp_path)
        stream = sid("purged-lease")
        async with self.opened_leases(tmp_path) as store:
            await store.append(stream, 0, [b"r"])
            released = await self._take_lease(store, stream, "a")
            await store.release_lease(released)
            held = await self._take_lease(store, stream, "b")
            await store.delete_stream(stream)
            assert await store.get_lease(stream) is None, "delete_stream ends the stream's lease"
            reborn = await self._take_lease(store, stream, "c")
            assert reborn.token > held.token > released.token, (
                "fencing tokens never decrease for a stream id, purge included: a holder from before the purge "
                f"(token {held.token}) must not outrank the new one (token {reborn.token})"
            )
            await store.delete_stream(stream)
        async with self.opened_leases(tmp_path) as store:
            again = await self._take_lease(store, stream, "d")
            assert again.token > reborn.token, f"also after a purge and a reopen: {again.token} after {reborn.token}"
