"""Checks with other OS processes on the same location: one store, whoever opens it.

Operators act "from any process", workers on several hosts share a store, and a
crashed worker's agents are resumed elsewhere, so a second process must see
everything the first acknowledged, write where the first reads, and race it
fairly: exactly one process wins each expected seq and each free lease. Two
instances in one process can share a connection and hide a backend that lets
one process open a file for writing; these checks use real processes
(``peer.py``). A store that declares ``CAP_SINGLE_PROCESS`` skips them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from ._harness import StoreHarness, read_pairs, sid
from ._peer import Peer, peer_process


class ProcessChecks(StoreHarness):
    """A second OS process opens, reads, appends, races for an expected seq and takes a lease."""

    @pytest.mark.anyio
    async def test_a_second_process_sees_one_store(self, tmp_path: Path) -> None:
        store_class, url = self.require_processes(tmp_path)
        stream = sid("shared")
        async with self.opened(tmp_path) as store:
            await store.append(stream, 0, [b"first", b"\x00binary\xff"])
            await store.put_snapshot(stream, 2, b"state@2")
            async with peer_process(store_class, url) as peer:
                seen = await peer.call("read", agent=stream.agent_id)
                assert seen == {"ok": [[1, b"first".hex()], [2, b"\x00binary\xff".hex()]]}, (
                    f"a second OS process reads what the first acknowledged (the first still open): {seen}"
                )
                snapshot = await peer.call("snapshot", agent=stream.agent_id)
                assert snapshot == {"ok": [2, b"state@2".hex()]}, f"and its snapshot: {snapshot}"
                assert await peer.call("list") == {"ok": [stream.agent_id]}, "and lists its stream"
                appended = await peer.call(
                    "append", agent=stream.agent_id, expected=2, records=[b"from the peer".hex()]
                )
                assert appended == {"ok": 3}, f"a second OS process appends to a stream the first has open: {appended}"
            assert await read_pairs(store, stream) == [(1, b"first"), (2, b"\x00binary\xff"), (3, b"from the peer")], (
                "the first process reads what the second acknowledged"
            )
            assert await store.append(stream, 3, [b"and continues"]) == 4

    @pytest.mark.anyio
    async def test_processes_race_for_an_expected_seq(self, tmp_path: Path) -> None:
        store_class, url = self.require_processes(tmp_path)
        stream = sid("process-race")
        async with self.opened(tmp_path) as store:
            await store.append(stream, 0, [b"seed"])
            await self._in_peers(store_class, url, self._race_appends, stream.agent_id)
            records = await read_pairs(store, stream)
            assert [seq for seq, _ in records] == list(range(1, 4)), f"one record per round, no gap: {records}"

    async def _race_appends(self, peers: list[Peer], agent: str) -> None:
        for round_no in range(2):
            expected = 1 + round_no
            answers: dict[int, dict[str, Any]] = {}

            async def racer(index: int, expected: int = expected, answers: dict[int, dict[str, Any]] = answers) -> None:
                record = f"process {index} round {round_no}".encode().hex()
                answers[index] = await peers[index].call("append", agent=agent, expected=expected, records=[record])

            async with anyio.create_task_group() as group:
                for index in range(len(peers)):
                    group.start_soon(racer, index)
            winners = [index for index, answer in answers.items() if "ok" in answer]
            others = [answer for answer in answers.values() if "ok" not in answer]
            assert len(winners) == 1, (
                f"round {round_no}: {len(peers)} OS processes appended with expected_seq {expected}; "
                f"exactly one may win, {len(winners)} did: {answers}"
            )
            assert all("conflict" in answer for answer in others), f"the losers get ConflictError: {others}"

    async def _in_peers(self, store_class: type, url: str, body: Callable[..., Awaitable[None]], *args: object) -> None:
        """Run ``body(peers, *args)`` with ``race_processes`` peers open on ``url``."""
        peers: list[Peer] = []

        async def nest(count: int) -> None:
            if count == 0:
                await body(peers, *args)
                return
            async with peer_process(store_class, url) as peer:
                peers.append(peer)
                await nest(count - 1)

        await nest(self.race_processes)

    @pytest.mark.anyio
    async def test_processes_race_for_a_lease(self, tmp_path: Path) -> None:
        store_class, url = self.require_processes(tmp_path)
        async with self.opened(tmp_path) as opened:
            store = self.leases_of(opened)
            stream = sid("process-lease")
            await self._in_peers(store_class, url, self._race_leases, stream.agent_id)
            held = await store.get_lease(stream)
            assert held is not None and held.owner.startswith("process-"), (
                f"the lease a process won is seen by another: {held}"
            )
            assert await store.acquire_lease(stream, "parent", 60.0) is None, "and refused to it"

    async def _race_leases(self, peers: list[Peer], agent: str) -> None:
        answers: dict[int, dict[str, Any]] = {}

        async def racer(index: int) -> None:
            answers[index] = await peers[index].call("acquire_lease", agent=agent, owner=f"process-{index}", ttl=60.0)

        async with anyio.create_task_group() as group:
            for index in range(len(peers)):
                group.start_soon(racer, index)
        errors = [answer for answer in answers.values() if "error" in answer]
        assert not errors, f"acquire_lease failed in a peer process: {errors}"
        winners = [answer["ok"] for answer in answers.values() if answer["ok"] is not None]
        assert len(winners) == 1, (
            f"{len(peers)} OS processes raced for a free lease; exactly one may get it, {len(winners)} did: {answers}"
        )
        seen = await peers[0].call("get_lease", agent=agent)
        assert seen == {"ok": winners[0]}, f"every process sees the winner's lease: {seen} vs {winners[0]}"
