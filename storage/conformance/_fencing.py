"""Checks of store-enforced fencing (``AppendRequest.fence``) on stores declaring ``CAP_LEASES``.

A lease alone does not stop a paused or stale holder: its next append may
still carry the right expected seq (a purged and restarted stream counts from
0 again). A store with ``CAP_LEASES`` therefore checks each append's and
snapshot's fencing token against the stream's latest lease grant in the same
atomic step as the expected seq. These checks try to break that: a holder
whose lease passed to another owner, a holder of a purged incarnation, a
fenced request inside a group commit, malformed tokens, and, with other OS
processes, stale holders appending while a new owner takes the lease over.
A store without ``CAP_LEASES`` is a single-worker store: these checks are
skipped with that reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from durably.storage._errors import ConflictError, FencedError, InvalidRequestError
from durably.storage._spi import CAP_LEASES, AppendRequest, Lease, LeaseStore, Store, StreamId

from ._harness import expect_raises, list_all, read_pairs, sid, snapshot_seq
from ._leases import LONG_TTL, LeaseChecks
from ._peer import Peer, peer_process

#: Tokens that are not tokens: each must be refused with ``InvalidRequestError`` before any I/O.
MALFORMED_FENCES: tuple[object, ...] = (0, -1, True, False, "1", 1.0, 2**63)
#: Records each stale holder process appends (at most) after the new owner's grant was asked for.
STALE_APPENDS = 200


async def expect_fenced(store: Store, stream: StreamId, expected: int, fence: int, what: str) -> FencedError:
    """Append one record with ``fence`` and fail unless the store answers ``FencedError`` naming it."""
    try:
        await store.append(stream, expected, [b"stale holder's record"], fence=fence)
    except FencedError as fenced:
        assert fenced.stream == stream and fenced.fence == fence, f"{what}: the FencedError names its stream and token"
        return fenced
    except ConflictError as conflict:
        pytest.fail(f"{what}: expected FencedError (the token is not the stream's lease), got {conflict!r}")
    pytest.fail(f"{what}: an append with a stale fencing token was accepted; it must raise FencedError")


async def expect_snapshot_fenced(store: Store, stream: StreamId, seq: int, fence: int, what: str) -> None:
    """Put a snapshot with ``fence`` and fail unless the store answers ``FencedError``."""
    try:
        await store.put_snapshot(stream, seq, b"stale holder's snapshot", fence=fence)
    except FencedError as fenced:
        assert fenced.fence == fence, f"{what}: the FencedError names the refused token"
        return
    except Exception as other:
        pytest.fail(f"{what}: expected FencedError, got {type(other).__name__}: {other}")
    pytest.fail(f"{what}: a snapshot with a stale fencing token was stored; put_snapshot must raise FencedError")


class FencingChecks(LeaseChecks):
    """Appends and snapshots carrying a fencing token; skipped for single-worker stores (no ``CAP_LEASES``)."""

    def require_fencing(self, store: Store) -> LeaseStore:
        """``store`` as a ``LeaseStore``; skips the check unless it declares ``CAP_LEASES``.

        Args:
            store: The store under test (opened or not).

        Returns:
            The same store, typed as a ``LeaseStore``.
        """
        if CAP_LEASES not in store.capabilities:
            pytest.skip(
                f"{type(store).__name__} does not declare {CAP_LEASES!r}: it is a single-worker store "
                "(no fencing to check; run one worker on it)"
            )
        return self.leases_of(store)

    async def _lease(self, store: LeaseStore, stream: StreamId, owner: str, ttl: float = LONG_TTL) -> Lease:
        lease = await store.acquire_lease(stream, owner, ttl)
        assert lease is not None, f"{owner!r} could not take the free lease of {stream}"
        return lease

    async def _taken_over(self, store: LeaseStore, stream: StreamId) -> tuple[Lease, Lease]:
        """A lease of owner "old" that lapsed (short ttl), then one of owner "new": (old, new)."""
        old = await self._lease(store, stream, "old", self.lease_short_ttl)
        await self._wait_out_short_ttl()
        new = await self._lease(store, stream, "new")
        assert new.token > old.token
        return old, new

    @pytest.mark.anyio
    async def test_fenced_append_with_the_current_token_is_accepted(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            stream = sid("fenced-ok")
            lease = await self._lease(store, stream, "holder")
            assert await store.append(stream, 0, [b"a", b"b"], fence=lease.token) == 2, (
                "an append carrying the stream's current lease token is accepted"
            )
            renewed = await self._lease(store, stream, "holder", 2 * LONG_TTL)
            assert await store.append(stream, 2, [b"c"], fence=renewed.token) == 3, "a renewal keeps the token valid"
            await store.put_snapshot(stream, 3, b"state@3", fence=lease.token)
            assert snapshot_seq(await store.get_snapshot(stream)) == 3, "a snapshot with the current token is stored"
            assert await store.append(stream, 3, [b"operator"]) == 4, (
                "an append without a fence (an operator's command) is not checked against the lease"
            )
            assert await read_pairs(store, stream) == [(1, b"a"), (2, b"b"), (3, b"c"), (4, b"operator")]

    @pytest.mark.anyio
    async def test_stale_token_is_fenced_even_when_the_seq_matches(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            stream = sid("fenced-stale")
            await store.append(stream, 0, [b"before"])
            old, new = await self._taken_over(store, stream)
            fenced = await expect_fenced(store, stream, 1, old.token, "the lease passed to another owner")
            assert fenced.actual_seq in (None, 1), f"FencedError.actual_seq is the real last seq or None: {fenced!r}"
            assert isinstance(fenced, ConflictError), "FencedError is a ConflictError"
            await expect_snapshot_fenced(store, stream, 1, old.token, "the lease passed to another owner")
            assert await store.last_seq(stream) == 1, "a fenced append writes nothing"
            assert await read_pairs(store, stream) == [(1, b"before")], "a fenced append writes nothing"
            assert await store.get_snapshot(stream) is None, "a fenced snapshot is not stored"
            await expect_fenced(store, stream, 0, old.token, "a stale token with a stale expected seq: fenced first")
            await expect_fenced(store, stream, 1, new.token + 1000, "a token never granted")
            await expect_fenced(store, sid("never-leased"), 0, old.token, "a stream nobody ever leased")
            assert await store.last_seq(sid("never-leased")) == 0 and sid("never-leased") not in await list_all(store)
            assert await store.append(stream, 1, [b"new holder"], fence=new.token) == 2, "the new holder appends"

            released = sid("fenced-released")
            first = await self._lease(store, released, "a")
            await store.release_lease(first)
            second = await self._lease(store, released, "b")
            await expect_fenced(store, released, 0, first.token, "a released lease that another owner took")
            assert await store.append(released, 0, [b"b's"], fence=second.token) == 1

    @pytest.mark.anyio
    async def test_expired_or_released_token_nobody_retook_is_still_accepted(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            lapsed_stream, released_stream = sid("fence-lapsed"), sid("fence-released")
            lapsed = await self._lease(store, lapsed_stream, "slow", self.lease_short_ttl)
            released = await self._lease(store, released_stream, "done")
            await store.release_lease(released)
            await self._wait_out_short_ttl()
            assert await store.get_lease(lapsed_stream) is None, "the short lease has expired"
            assert await store.append(lapsed_stream, 0, [b"late"], fence=lapsed.token) == 1, (
                "an expired lease nobody re-took still admits its token"
            )
            await store.put_snapshot(lapsed_stream, 1, b"late state", fence=lapsed.token)
            assert await store.append(released_stream, 0, [b"after release"], fence=released.token) == 1, (
                "a released lease nobody re-took still admits its token"
            )

    @pytest.mark.anyio
    async def test_a_fenced_request_fails_alone_in_a_group_commit(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            stale, held, free, conflicting = (sid(f"group-{name}") for name in ("stale", "held", "free", "conflict"))
            for stream in (stale, held, free, conflicting):
                await store.append(stream, 0, [b"seed"])
            old, _new = await self._taken_over(store, stale)
            mine = await self._lease(store, held, "mine")
            existing = [
                AppendRequest(stale, 1, [b"stale"], fence=old.token),
                AppendRequest(held, 1, [b"held"], fence=mine.token),
                AppendRequest(free, 1, [b"free"]),
                AppendRequest(conflicting, 0, [b"conflict"], fence=None),
            ]
            results = await store.append_batch(existing)
            assert isinstance(results[0], FencedError), f"the fenced request's result is a FencedError: {results}"
            assert results[1:3] == [2, 2], f"the other requests of the group commit succeed: {results}"
            assert isinstance(results[3], ConflictError) and not isinstance(results[3], FencedError), results
            assert await read_pairs(store, stale) == [(1, b"seed")], "the fenced request wrote nothing"
            assert await read_pairs(store, held) == [(1, b"seed"), (2, b"held")]

            newcomer, reborn = sid("group-newcomer"), sid("group-fenced-newcomer")
            fresh = await self._lease(store, newcomer, "mine")
            results = await store.append_batch(
                [
                    AppendRequest(reborn, 0, [b"never"], fence=old.token),
                    AppendRequest(newcomer, 0, [b"first"], fence=fresh.token),
                    AppendRequest(held, 2, [b"again"], fence=mine.token),
                    AppendRequest(stale, 1, [b"stale again"], fence=old.token),
                ]
            )
            assert isinstance(results[0], FencedError) and isinstance(results[3], FencedError), results
            assert results[1:3] == [1, 3], f"new and existing streams beside fenced requests succeed: {results}"
            assert await store.last_seq(reborn) == 0 and reborn not in await list_all(store), (
                "a fenced request to a new stream leaves no trace of it"
            )
            assert await read_pairs(store, stale) == [(1, b"seed")]

    @pytest.mark.anyio
    async def test_purge_and_restart_fence_the_old_incarnation(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            stream = sid("incarnations")
            old = await self._lease(store, stream, "old-run")
            await store.append(stream, 0, [b"old 1", b"old 2"], fence=old.token)
            await store.delete_stream(stream)
            await expect_fenced(store, stream, 0, old.token, "a token whose lease delete_stream ended")
            await expect_snapshot_fenced(store, stream, 1, old.token, "a token whose lease delete_stream ended")
            assert await store.last_seq(stream) == 0 and stream not in await list_all(store), (
                "the purged holder's append at seq 0 does not bring the stream back"
            )
            new = await self._lease(store, stream, "new-run")
            assert new.token > old.token
            assert await store.append(stream, 0, [b"new 1", b"new 2"], fence=new.token) == 2
            await store.put_snapshot(stream, 2, b"new state@2", fence=new.token)
            await expect_fenced(store, stream, 2, old.token, "the old incarnation at a seq the new one reached")
            await expect_snapshot_fenced(store, stream, 2, old.token, "the old incarnation's snapshot at the same seq")
            assert await read_pairs(store, stream) == [(1, b"new 1"), (2, b"new 2")], "the new run's records stay"
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and snapshot.data == b"new state@2", "the new run's snapshot stays"
            assert await store.append(stream, 2, [b"new 3"], fence=new.token) == 3

    @pytest.mark.anyio
    async def test_malformed_fences_are_refused_before_any_io(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            stream = sid("bad-fence")
            lease = await self._lease(store, stream, "holder")
            await store.append(stream, 0, [b"ok"], fence=lease.token)
            other = sid("bad-fence-2")
            for fence in MALFORMED_FENCES:
                bad: Any = fence
                calls = {
                    "append": lambda bad=bad: store.append(stream, 1, [b"x"], fence=bad),
                    "append_batch": lambda bad=bad: store.append_batch(
                        [AppendRequest(other, 0, [b"x"]), AppendRequest(stream, 1, [b"x"], fence=bad)]
                    ),
                    "put_snapshot": lambda bad=bad: store.put_snapshot(stream, 1, b"x", fence=bad),
                }
                for name, call in calls.items():
                    await expect_raises(InvalidRequestError, call, f"{name} with the malformed fence {fence!r}")
            assert await read_pairs(store, stream) == [(1, b"ok")], "a malformed fence writes nothing"
            assert await store.last_seq(other) == 0, "nor do the other requests of its batch"
            assert await store.get_snapshot(stream) is None

    @pytest.mark.anyio
    async def test_processes_stale_holders_race_a_takeover(self, tmp_path: Path) -> None:
        """Stale holder processes append under the old token while another process takes the lease over."""
        store_class, url = self.require_processes(tmp_path)
        async with self.opened(tmp_path) as opened:
            store = self.require_fencing(opened)
            stream = sid("fenced-race")
            old = await self._lease(store, stream, "old", self.lease_short_ttl)
            await store.append(stream, 0, [b"seed"], fence=old.token)
            await self._wait_out_short_ttl()  # lapsed, not retaken: the old token still works
            peers: list[Peer] = []
            async with peer_process(store_class, url) as first:
                peers.append(first)
                async with peer_process(store_class, url) as second:
                    peers.append(second)
                    async with peer_process(store_class, url) as taker:
                        outcome = await self._race_takeover(peers, taker, stream, old.token)
            records = await read_pairs(store, stream)
            grant_seen, new_seq = outcome["grant_seen"], outcome["new_seq"]
            assert [seq for seq, _ in records] == list(range(1, len(records) + 1)), "one record per seq, no gap"
            late = [(seq, data) for seq, data in records if seq > grant_seen and data.startswith(b"old")]
            assert not late, (
                f"no append under the old token lands after the new grant (last seq read after the grant: "
                f"{grant_seen}): {late[:5]}"
            )
            assert records[new_seq - 1] == (new_seq, b"new holder"), "the new holder's record is stored"

    async def _race_takeover(self, stale: list[Peer], taker: Peer, stream: StreamId, token: int) -> dict[str, int]:
        agent = stream.agent_id
        outcome: dict[str, int] = {}
        started, granted = anyio.Event(), anyio.Event()
        progress = [0]

        async def stale_holder(index: int) -> None:
            expected, after_grant = 1, 0
            # Counted from the grant, not from the start: how long the taker's acquire takes
            # (a loaded machine, a slow server) is not what this checks.
            while after_grant < STALE_APPENDS:
                was_granted = granted.is_set()
                answer = await stale[index].call(
                    "append", agent=agent, expected=expected, records=[f"old {index}".encode().hex()], fence=token
                )
                if "fenced" in answer:
                    return
                after_grant += was_granted
                if "ok" in answer:
                    expected = answer["ok"]
                    progress[0] += 1
                    if progress[0] >= 2:
                        started.set()
                else:
                    assert "conflict" in answer, f"a stale holder's append failed: {answer}"
                    expected = answer["conflict"] if answer["conflict"] is not None else expected + 1
            pytest.fail(
                f"a stale holder made {STALE_APPENDS} appends after another owner took the lease over without ever "
                f"being fenced: {outcome}"
            )

        async def take_over() -> None:
            with anyio.move_on_after(30):
                await started.wait()
            grant = await taker.call("acquire_lease", agent=agent, owner="new", ttl=LONG_TTL)
            assert grant.get("ok") is not None and grant["ok"][1] > token, f"the taker gets the lease: {grant}"
            granted.set()
            seen = await taker.call("last_seq", agent=agent)
            outcome["grant_seen"] = seen["ok"]
            appended = await taker.call(
                "append", agent=agent, expected=seen["ok"], records=[b"new holder".hex()], fence=grant["ok"][1]
            )
            assert "ok" in appended, (
                f"the new holder's append after its grant (at the last seq it read then) must win: {appended}: "
                "a conflict means a stale holder's append landed after the new grant"
            )
            outcome["new_seq"] = appended["ok"]

        async with anyio.create_task_group() as group:
            for index in range(len(stale)):
                group.start_soon(stale_holder, index)
            group.start_soon(take_over)
        return outcome
