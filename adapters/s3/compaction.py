"""Compaction of the S3 adapter: the compaction mark, trimming and deleting batches.

``delete_records(through)`` (after ``S3Store`` checked that a snapshot
covers ``through``) raises the stream's compaction mark
``data/N/A/compacted`` = ``{"through": C, "generation": g}`` by
compare-and-swap, trims the batch holding ``through + 1`` (or the newest
one), then deletes the batches wholly <= ``through``. Appends read the mark
after their PUT to fence stale writers, and readers restart at it. Why this
order and what it guards against: "Compaction" and "Fencing after
compaction" in the ``durably.adapters.s3`` module docstring.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from botocore.exceptions import ClientError

from durably.storage.errors import CorruptRecordError, StoreUnavailableError

from .batch import Batch
from .keys import StreamKeys, seq_from_name
from .requests import S3Requests
from .retry import RetryPolicy, retrying


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
        """Delete the records <= ``through_seq`` (>= 1): raise the mark, trim the holder, delete the rest.

        The caller has checked that a snapshot at or after ``through_seq`` exists.
        """
        await self._raise_compaction_mark(keys, through_seq)
        token: str | None = None
        first = True
        while True:
            names, token = await self._s3.list_page(
                keys.batches, start_after=keys.batch(through_seq + 2), token=token
            )
            if first and names:
                first = False
                holder = names.pop(0)
                if seq_from_name(holder) != through_seq + 1:
                    await self._trim(holder, through_seq)  # holds through+1, or is the newest: keep, trimmed
            await self._s3.delete_keys(names)
            if token is None:
                return

    async def _raise_compaction_mark(self, keys: StreamKeys, through_seq: int) -> None:
        """Raise the compaction mark to ``through_seq`` (never lower it), by compare-and-swap."""

        async def attempt() -> None:
            found = await self._s3.get(keys.compacted)
            current = json.loads(found[0]) if found else {"through": 0, "generation": 0}
            if current["through"] >= through_seq:
                return
            body = json.dumps({"through": through_seq, "generation": current["generation"] + 1,
                               "writer": secrets.token_hex(8)}).encode()
            condition = {"IfMatch": found[1]} if found else {"IfNoneMatch": "*"}
            try:
                await self._s3.call("put_object", Key=keys.compacted, Body=body, expect=(404, 412), **condition)
            except ClientError:
                raise _Lost() from None

        await self._retry_lost(attempt, "the compaction mark")

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
                await self._s3.call("put_object", Key=key, Body=batch.trimmed(through_seq).encode(),
                                    IfMatch=found[1], expect=(404, 412))
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
