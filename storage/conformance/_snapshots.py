"""Checks of snapshots: at-or-before lookup, overwrite, seq validation, pruning, size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durably.storage._errors import InvalidRequestError

from ._harness import StoreHarness, expect_raises, payloads, sid, snapshot_seq


class SnapshotChecks(StoreHarness):
    """Promises of ``put_snapshot``, ``get_snapshot`` and ``delete_snapshots``."""

    @pytest.mark.anyio
    async def test_no_snapshot_is_none(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("plain")
            assert await store.get_snapshot(sid("unknown")) is None
            await store.append(stream, 0, payloads("r", 3))
            assert await store.get_snapshot(stream) is None
            assert await store.get_snapshot(stream, 3) is None

    @pytest.mark.anyio
    async def test_snapshot_at_or_before(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("snaps")
            await store.append(stream, 0, payloads("r", 12))
            for seq in (6, 3, 9):  # written out of order on purpose
                await store.put_snapshot(stream, seq, f"state@{seq}".encode())
            cases = {None: 9, 100: 9, 12: 9, 9: 9, 8: 6, 7: 6, 6: 6, 5: 3, 3: 3, 2: None, 1: None, 0: None}
            for at_or_before, expected in cases.items():
                snapshot = await store.get_snapshot(stream, at_or_before)
                assert snapshot_seq(snapshot) == expected, (
                    f"get_snapshot(at_or_before={at_or_before}) is the highest snapshot <= it: "
                    f"want {expected}, got {snapshot_seq(snapshot)}"
                )
                if snapshot is not None:
                    assert snapshot.data == f"state@{expected}".encode()

    @pytest.mark.anyio
    async def test_snapshots_are_per_stream(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            one, two = sid("one"), sid("two")
            await store.append(one, 0, payloads("r", 5))
            await store.append(two, 0, payloads("r", 5))
            await store.put_snapshot(one, 4, b"one@4")
            assert await store.get_snapshot(two) is None
            await store.put_snapshot(two, 2, b"two@2")
            assert getattr(await store.get_snapshot(one), "data", None) == b"one@4"
            assert getattr(await store.get_snapshot(two), "data", None) == b"two@2"

    @pytest.mark.anyio
    async def test_put_snapshot_overwrites_same_seq(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("overwrite")
            await store.append(stream, 0, payloads("r", 4))
            await store.put_snapshot(stream, 4, b"first")
            await store.put_snapshot(stream, 4, b"second")
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and (snapshot.seq, snapshot.data) == (4, b"second")

    @pytest.mark.anyio
    async def test_put_snapshot_validates_seq(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("validate")
            await expect_raises(
                InvalidRequestError,
                lambda: store.put_snapshot(sid("unknown"), 1, b"s"),
                "snapshot of an unknown stream",
            )
            await store.append(stream, 0, payloads("r", 3))
            for seq in (0, -1, 4, 50):
                await expect_raises(
                    InvalidRequestError,
                    lambda: store.put_snapshot(stream, seq, b"s"),
                    f"put_snapshot at seq {seq} on a stream at seq 3 (valid: 1..3)",
                )
            assert await store.get_snapshot(stream) is None, "a rejected snapshot is not stored"
            await store.put_snapshot(stream, 3, b"ok")
            assert snapshot_seq(await store.get_snapshot(stream)) == 3

    @pytest.mark.anyio
    async def test_very_large_snapshot(self, tmp_path: Path) -> None:
        state = os.urandom(self.large_size)
        async with self.opened(tmp_path) as store:
            stream = sid("large-snapshot")
            await store.append(stream, 0, [b"r"])
            await store.put_snapshot(stream, 1, state)
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and snapshot.seq == 1 and snapshot.data == state, (
                f"a {self.large_size}-byte snapshot round-trips"
            )

    @pytest.mark.anyio
    async def test_delete_snapshots_keeps_the_latest(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("prune")
            await store.append(stream, 0, payloads("r", 10))
            for seq in (2, 4, 6, 8):
                await store.put_snapshot(stream, seq, f"s{seq}".encode())
            await store.delete_snapshots(stream, 5)
            assert snapshot_seq(await store.get_snapshot(stream, 5)) is None, "snapshots below before_seq are gone"
            assert snapshot_seq(await store.get_snapshot(stream, 7)) == 6, "snapshots at or above before_seq stay"
            assert snapshot_seq(await store.get_snapshot(stream)) == 8
            await store.delete_snapshots(stream, 100)
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and (snapshot.seq, snapshot.data) == (8, b"s8"), (
                "delete_snapshots never deletes the latest snapshot"
            )
            assert snapshot_seq(await store.get_snapshot(stream, 7)) is None
            await store.delete_snapshots(sid("unknown"), 10)  # not an error
