"""Checks of appends: atomic batches, gapless seqs, expected-seq conflicts, malformed requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from durably.storage._errors import ConflictError, InvalidRequestError
from durably.storage._spi import AppendRequest

from ._harness import StoreHarness, expect_raises, list_all, numbered, payloads, read_pairs, sid


class AppendChecks(StoreHarness):
    """Append promises of ``Store.append`` and ``Store.append_batch``."""

    @pytest.mark.anyio
    async def test_append_assigns_gapless_seqs_from_one(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("gapless")
            first, second, third = payloads("a", 3), payloads("a", 1, start=4), payloads("a", 5, start=5)
            assert await store.append(stream, 0, first) == 3, "append to a new stream returns its last seq"
            assert await store.append(stream, 3, second) == 4
            assert await store.append(stream, 4, third) == 9
            assert await store.last_seq(stream) == 9
            assert await read_pairs(store, stream) == numbered(first + second + third), (
                "records come back gapless from seq 1, in append order, byte for byte"
            )

    @pytest.mark.anyio
    async def test_records_are_stored_byte_for_byte(self, tmp_path: Path) -> None:
        odd = [b"", b"\x00", bytes(range(256)), b"\xff" * 1000, "ünïcode".encode()]
        async with self.opened(tmp_path) as store:
            stream = sid("bytes")
            assert await store.append(stream, 0, odd) == len(odd)
            assert await read_pairs(store, stream) == numbered(odd), "empty, NUL and binary payloads round-trip"

    @pytest.mark.anyio
    async def test_stale_expected_seq_conflicts_and_writes_nothing(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("stale")
            await store.append(stream, 0, payloads("ok", 3))
            for expected in (0, 1, 2, 4, 100):
                try:
                    await store.append(stream, expected, [b"intruder"])
                except ConflictError as conflict:
                    assert conflict.stream == stream
                    assert conflict.expected_seq == expected
                    assert conflict.actual_seq in (None, 3), "ConflictError.actual_seq is the real last seq or None"
                else:
                    pytest.fail(f"append with expected_seq {expected} on a stream at seq 3 must raise ConflictError")
            assert await store.last_seq(stream) == 3, "a rejected append changes nothing"
            assert await read_pairs(store, stream) == numbered(payloads("ok", 3))

    @pytest.mark.anyio
    async def test_unknown_stream_expects_zero(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("new")
            await expect_raises(
                ConflictError, lambda: store.append(stream, 1, [b"x"]), "expected_seq 1 on an unknown stream"
            )
            assert await store.last_seq(stream) == 0
            assert await read_pairs(store, stream) == []
            assert stream not in await list_all(store), "a rejected first append does not create the stream"

    @pytest.mark.anyio
    async def test_append_batch_mixes_conflicts_and_successes(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            a, b, c = sid("mix-a"), sid("mix-b"), sid("mix-c")
            await store.append(b, 0, payloads("b", 2))
            results = await store.append_batch(
                [
                    AppendRequest(a, 0, payloads("a", 2)),
                    AppendRequest(b, 1, [b"stale"]),  # b is at 2: conflict
                    AppendRequest(c, 0, payloads("c", 3)),
                    AppendRequest(c, 5, [b"ahead"]),  # c is at 3 after the request above: conflict
                ]
            )
            assert len(results) == 4, "append_batch returns one result per request"
            assert results[0] == 2 and results[2] == 3, f"successful requests return their new last seq: {results}"
            for index in (1, 3):
                assert isinstance(results[index], ConflictError), (
                    f"a stale request's conflict is returned, not raised: result {index} is {results[index]!r}"
                )
            assert await read_pairs(store, a) == numbered(payloads("a", 2))
            assert await read_pairs(store, b) == numbered(payloads("b", 2)), "the conflicting request wrote nothing"
            assert await read_pairs(store, c) == numbered(payloads("c", 3))

    @pytest.mark.anyio
    async def test_append_batch_repeated_stream_sees_earlier_request(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("repeat")
            results = await store.append_batch(
                [
                    AppendRequest(stream, 0, payloads("r", 2)),
                    AppendRequest(stream, 2, payloads("r", 1, start=3)),
                    AppendRequest(stream, 0, [b"late"]),  # stale by now
                ]
            )
            assert results[:2] == [2, 3], f"a later request for the same stream follows the earlier one: {results}"
            assert isinstance(results[2], ConflictError), (
                f"a third request with expected_seq 0 conflicts: {results[2]!r}"
            )
            assert await read_pairs(store, stream) == numbered(payloads("r", 3))

    @pytest.mark.anyio
    async def test_malformed_appends_raise_invalid_request_and_write_nothing(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream, bystander = sid("malformed"), sid("bystander")
            # Malformed on purpose: the records are not all bytes, whatever the signature says.
            cases: dict[str, tuple[int, list[Any]]] = {
                "an empty batch": (0, []),
                "a negative expected_seq": (-1, [b"x"]),
                "a str record": (0, ["text"]),
                "a None record": (0, [b"ok", None]),
                "an int record": (0, [7]),
            }
            for what, (expected, records) in cases.items():
                await expect_raises(
                    InvalidRequestError, lambda: store.append(stream, expected, records), f"append with {what}"
                )
                await expect_raises(
                    InvalidRequestError,
                    lambda: store.append_batch(
                        [AppendRequest(bystander, 0, [b"valid"]), AppendRequest(stream, expected, records)]
                    ),
                    f"append_batch holding {what}",
                )
            assert await store.last_seq(stream) == 0
            assert await store.last_seq(bystander) == 0, (
                "a malformed request is rejected before any I/O: the valid request beside it is not written either"
            )
