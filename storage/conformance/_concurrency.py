"""Checks of optimistic concurrency under real races: exactly one writer wins each seq.

Many tasks append to one stream at once with the same expected seq, as two
workers resuming the same agent would. The store must accept exactly one and
return ``ConflictError`` to the rest, keep every accepted batch whole and
contiguous, and never leave a gap. With ``concurrent_instances`` the racers are
split across two open stores of the same location, like two processes.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from durably.storage._errors import ConflictError
from durably.storage._spi import Store

from ._harness import StoreHarness, read_pairs, sid

#: Rounds of the exactly-one-wins race; each round races for the next seq.
RACE_ROUNDS = 3
#: Batches each writer commits in the retrying race.
BATCHES_PER_WRITER = 2


class ConcurrencyChecks(StoreHarness):
    """Racing appenders on one stream, within one store and across two."""

    async def _race_rounds(self, stores: list[Store]) -> None:
        stream = sid("race")
        for round_no in range(RACE_ROUNDS):
            expected = round_no * 2
            winners: list[int] = []
            conflicts: list[int] = []
            start = anyio.Event()

            async def racer(task: int, expected: int, start: anyio.Event) -> None:
                store = stores[task % len(stores)]
                await start.wait()
                try:
                    await store.append(stream, expected, [f"t{task}:a".encode(), f"t{task}:b".encode()])
                except ConflictError:
                    conflicts.append(task)
                else:
                    winners.append(task)

            async with anyio.create_task_group() as group:
                for task in range(self.race_tasks):
                    group.start_soon(racer, task, expected, start)
                await anyio.sleep(0)
                start.set()

            assert len(winners) == 1, (
                f"round {round_no}: {self.race_tasks} tasks appended with expected_seq {expected}; "
                f"exactly one may win, {len(winners)} did ({len(conflicts)} got ConflictError)"
            )
            assert len(conflicts) == self.race_tasks - 1
            (winner,) = winners
            records = await read_pairs(stores[0], stream)
            assert records[-2:] == [(expected + 1, f"t{winner}:a".encode()), (expected + 2, f"t{winner}:b".encode())], (
                f"round {round_no}: the winner's batch is stored whole at seqs {expected + 1}..{expected + 2}"
            )
        assert await stores[0].last_seq(stream) == RACE_ROUNDS * 2

    @pytest.mark.anyio
    async def test_racing_appends_exactly_one_wins_each_seq(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            await self._race_rounds([store])

    @pytest.mark.anyio
    async def test_racing_appends_across_two_instances(self, tmp_path: Path) -> None:
        self.require_concurrent_instances()
        async with self.opened(tmp_path) as first, self.opened(tmp_path) as second:
            await self._race_rounds([first, second])

    @pytest.mark.anyio
    async def test_racing_writers_with_retries_leave_no_gap(self, tmp_path: Path) -> None:
        """Each writer retries on conflict until its batches are in: all land, whole, gapless."""
        stream = sid("retry-race")

        async def writer(store: Store, task: int) -> None:
            for batch in range(BATCHES_PER_WRITER):
                records = [f"w{task}.{batch}.{part}".encode() for part in range(3)]
                expected = await store.last_seq(stream)
                while True:
                    try:
                        await store.append(stream, expected, records)
                        break
                    except ConflictError as conflict:
                        # actual_seq may be None; then re-read, as a real writer would.
                        expected = (
                            conflict.actual_seq if conflict.actual_seq is not None else await store.last_seq(stream)
                        )

        async with self.opened(tmp_path) as store:
            async with anyio.create_task_group() as group:
                for task in range(self.race_tasks):
                    group.start_soon(writer, store, task)
            records = await read_pairs(store, stream)
            total = self.race_tasks * BATCHES_PER_WRITER * 3
            assert [seq for seq, _ in records] == list(range(1, total + 1)), "every acknowledged record, no gap"
            assert await store.last_seq(stream) == total
            batches = [records[i : i + 3] for i in range(0, total, 3)]
            for batch in batches:
                names = [data.decode().rsplit(".", 1) for _, data in batch]
                assert [n[0] for n in names] == [names[0][0]] * 3 and [n[1] for n in names] == ["0", "1", "2"], (
                    f"a batch is stored whole and in order, never interleaved with another: {batch}"
                )
            expected_names = {f"w{t}.{b}" for t in range(self.race_tasks) for b in range(BATCHES_PER_WRITER)}
            assert sorted(b[0][1].decode().rsplit(".", 1)[0] for b in batches) == sorted(expected_names), (
                "each acknowledged batch is stored exactly once"
            )
