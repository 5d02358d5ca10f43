"""Compaction of the S3 adapter: the compaction mark, trimming, and tombstones for covered batches.

``delete_records(through)`` (after ``S3Store`` checked that a snapshot
covers ``through``) raises the stream's compaction mark
``data/N/A/compacted`` = ``{"through": C, "generation": g}`` by
compare-and-swap, trims the batch holding ``through + 1`` (or the newest
one), then overwrites each batch wholly <= ``through`` with its tombstone:
the same key, a batch header with no records (``Batch.tombstone``). A key
is never freed, so a stale writer's conditional PUT of a compacted batch
key still gets 412: appends need no read of the mark (one PUT per append,
no GET). Readers restart at the mark. Why this order
and what it guards against: "Compaction" and "Fencing after compaction" in
the ``durably.adapters.s3`` module docstring.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import anyio
from botocore.exceptions import ClientError

from durably.storage._errors import CorruptRecordError, StoreUnavailableError

from ._batch import Batch
from ._keys import StreamKeys, seq_from_name
from ._requests import S3Requests
from ._retry import RetryPolicy, retrying


class _Lost(Exception):
    """A read-modify-write lost a race (412); read again."""


class S3Compaction:
    """The compaction mark and record deletion of one bucket, through ``requests``.

    In: ``requests`` (the adapter's retried S3 requests) and ``policy`` (the
    retry policy that also bounds re-deciding a lost compare-and-swap).
    Methods raise ``StoreUnavailableError`` when S3 stays unreachable or a
    compare-and-swap keeps losing to concurrent writers.
    """

    def __init__(self, requests: S3Requests, policy: RetryPolicy) -> None:
        self._s3 = requests
        self._policy = policy

    async def compacted_through(self, keys: StreamKeys) -> int:
        """The stream's compaction mark (0 when never compacted): one GET."""
        found = await self._s3.get(keys.compacted)
        return 0 if found is None else _mark_through(found[0], keys.compacted)

    async def compact(self, keys: StreamKeys, through_seq: int) -> None:
        """Drop the records <= ``through_seq`` (>= 1): raise the mark, trim the holder, tombstone the rest.

        The caller has checked that a snapshot at or after ``through_seq`` exists.
        Only the batches above the previous mark are listed: those at or below
        it are tombstones already (or, written by a build before tombstones,
        deleted). A compaction interrupted after raising the mark leaves the
        batches it did not reach whole; their keys stay taken, which is what
        fences, and ``delete_stream`` removes their bytes.
        """
        previous = await self._raise_compaction_mark(keys, through_seq)
        token: str | None = None
        above: int | None = None  # first seq of the batch listed just before (the next higher one)
        while True:
            names, token = await self._s3.list_page(keys.batches, start_after=keys.batch(through_seq + 2), token=token)
            covered: list[tuple[str, int, int]] = []  # key, first seq, last seq of batches wholly <= through
            done = False
            for name in names:
                first = seq_from_name(name)
                done = first <= previous  # this one holds the previous mark's next seq, or lies below it
                if above is None:
                    if first != through_seq + 1:
                        await self._trim(name, through_seq)  # holds through+1, or is the newest: keep, trimmed
                elif not (done and above == previous + 1):  # else wholly <= the previous mark: a tombstone already
                    covered.append((name, first, above - 1))
                above = first
                if done:
                    break  # below it, every batch is a tombstone already
            await self._tombstone(covered)
            if done or token is None:
                return

    async def _tombstone(self, covered: list[tuple[str, int, int]]) -> None:
        """Overwrite each ``(key, first, last)`` batch with its tombstone, concurrently (the store's limiter bounds it).

        Unconditional: a batch wholly below the mark has no other writer, and
        its tombstone is the same whoever writes it.
        """

        async def put(key: str, first: int, last: int) -> None:
            await self._s3.call("put_object", Key=key, Body=Batch.tombstone(first, last).encode())

        async with anyio.create_task_group() as group:
            for key, first, last in covered:
                group.start_soon(put, key, first, last)

    async def _raise_compaction_mark(self, keys: StreamKeys, through_seq: int) -> int:
        """Raise the compaction mark to ``through_seq`` (never lower it), by compare-and-swap.

        Returns the mark before (``through_seq`` itself when it was already there or higher:
        then there is nothing left to do below it)."""
        before = [0]

        async def attempt() -> None:
            found = await self._s3.get(keys.compacted)
            current = json.loads(found[0]) if found else {"through": 0, "generation": 0}
            before[0] = min(current["through"], through_seq)
            if current["through"] >= through_seq:
                return
            body = json.dumps(
                {"through": through_seq, "generation": current["generation"] + 1, "writer": secrets.token_hex(8)}
            ).encode()
            condition = {"IfMatch": found[1]} if found else {"IfNoneMatch": "*"}
            try:
                await self._s3.call("put_object", Key=keys.compacted, Body=body, expect=(404, 412), **condition)
            except ClientError:
                raise _Lost() from None

        await self._retry_lost(attempt, "the compaction mark")
        return before[0]

    async def _trim(self, key: str, through_seq: int) -> None:
        """Rewrite the batch at ``key`` without its records <= ``through_seq`` (If-Match on the version read)."""

        async def attempt() -> None:
            found = await self._s3.get(key)
            if found is None:
                return
            batch = Batch.decode(found[0])
            if batch.records_from > through_seq:
                return
            try:
                await self._s3.call(
                    "put_object", Key=key, Body=batch.trimmed(through_seq).encode(), IfMatch=found[1], expect=(404, 412)
                )
            except ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                    raise _Lost() from None

        await self._retry_lost(attempt, f"trimming {key}")

    async def _retry_lost(self, attempt: Any, what: str) -> None:
        try:
            async for state in retrying(self._policy, lambda exc: isinstance(exc, _Lost)):
                with state:
                    await attempt()
        except _Lost:
            raise StoreUnavailableError(f"{what} kept changing under a concurrent writer") from None


def _mark_through(data: bytes, key: str) -> int:
    """The ``through`` seq of a compaction mark's bytes. Raises ``CorruptRecordError``
    for bytes no durably build wrote (a foreign object at the mark's key)."""
    try:
        through = json.loads(data)["through"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(f"foreign object at the compaction mark {key!r}: {exc}") from None
    if type(through) is not int or through < 0:
        raise CorruptRecordError(f"foreign object at the compaction mark {key!r}: through={through!r}")
    return through
