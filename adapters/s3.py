"""The S3 adapter: ``s3://bucket/prefix?endpoint_url=...&region=...&path_style=1``.

Journals, snapshots and blobs live in one S3 bucket (or on any S3-compatible
server that honours conditional writes, which ``open()`` checks), so runtime
processes on many machines can share agents. The URL parameters are in ``s3_options``;
credentials come from botocore's normal chain.

Key layout
----------
Under ``prefix`` (``N`` and ``A`` are the escaped namespace and agent id, see
``s3_keys``; ``{s}`` is a seq written *descending*, ``10**20 - 1 - s`` in 20
digits, so the highest seq is listed first)::

    streams/N/A              index entry: makes the stream listable (list_streams)
    data/N/A/r/{first}       one record batch = one append (s3_batch): its frames,
                             its seq range and the writer's token
    data/N/A/s/{seq}         snapshot at seq (multipart above multipart_threshold)
    data/N/A/b/{sha256}      blob, content-addressed
    data/N/A/compacted       compaction mark {"through": C, "generation": g}
    data/N/A/lease           the stream's lease (CAP_LEASES): owner, token, expiry (s3_leases)
    probe/{random}           written and deleted by open(): the conditional-write check

Why this layout:

* **Append = ``PUT data/N/A/r/{expected+1}`` with ``If-None-Match: *``.** Of
  writers racing for the same expected seq, S3 lets exactly one create the
  key; the others get 412 and so ``ConflictError``. A batch is one object, so
  its N records are visible all together or not at all.
* Conditional creation alone cannot tell a stale or made-up expected seq that
  falls *inside* a batch or beyond the end (its key is free). So an expected
  seq is only used directly when it is this store's latest known batch end
  (the end of its own last append, or of a ``last_seq``/``read`` that reached
  the end: batch ends never stop being batch ends); otherwise ``last_seq`` is
  checked first and a mismatch is a ``ConflictError`` without any write.
* **last_seq**: list ``r/`` with ``MaxKeys=1`` (the newest batch, thanks to
  descending names) and read its 48-byte header with a ranged GET. Two
  requests, whatever the history's length. Compaction never deletes the
  newest batch (it trims its records away instead), so that object is the
  marker that keeps ``last_seq`` from going back once every record is deleted.
* **Restore** never lists the history: the latest snapshot (at or before X)
  is one list call (``StartAfter`` = the name of X + 1, ``MaxKeys=1``), and
  reading after seq P pages forward window by window: a window is one list
  call for the first seqs in (P, P + page_size] (``StartAfter`` = the name
  of P + page_size + 1, stopping at the first name <= P) and concurrent GETs
  of those batches. The first window also takes the batch holding P + 1 when
  P is not a batch end (the next name in the same listing) and reads the
  compaction mark alongside, so a read from below the mark restarts at it. The
  stream ends when the seq after the last batch falls inside a listed window
  (batches are contiguous, so a following batch would have been listed):
  a restore whose tail fits one window costs two list calls.
* **Compaction** (``delete_records(through)``) first raises the compaction
  mark (read-modify-write with ``If-Match``/``If-None-Match``; the mark holds
  its seq and a generation, so an ETag never repeats), then rewrites the batch
  holding ``through + 1`` (or the newest one) without its records <= through
  (``If-Match`` on the version read: the trimmed bytes carry the new first
  stored seq, so they differ from every earlier version), then deletes the
  batches wholly <= through with ``DeleteObjects``.
* **Fencing after compaction.** A deleted batch frees its key, so a writer
  whose view predates a compaction could create it again. Every append
  therefore reads the compaction mark after its PUT succeeded: a first seq at
  or below the mark can only be such a stale writer, whose object is deleted
  again and who gets ``ConflictError``. (Readers never look below the mark,
  so they do not see it; the mark is raised before the deletions.) This costs
  one small GET per append, which is cheaper than leaving a tombstone PUT per
  compacted batch.
* ``open()`` checks that the server honours ``If-None-Match`` (a probe object
  created twice must get 412) and refuses one that does not.

Batching
--------
``append_batch`` (the group commit of ``durably.storage.journal``) sends the
PUTs of different streams concurrently in an anyio task group, bounded by
``concurrency`` requests in flight (an ``anyio.CapacityLimiter`` that every
request of the store shares, sized like botocore's connection pool). S3 has
no multi-object write, so the group costs one PUT per stream, but one round
trip of latency for the whole group, not one each. Requests of the same
stream run in order, as the SPI requires (a later one sees the earlier).
Putting several streams into one object would save PUTs but make a stream's
journal depend on other streams' objects and break per-stream conditional
writes, so it was not chosen.

Faults
------
Retries: tenacity, see ``s3_retry`` (botocore's own retries are off, because
they neither retry 409 ConditionalRequestConflict nor know how to resolve an
ambiguous conditional PUT). Throttling, 5xx, 409 and dropped connections are
retried with capped exponential backoff; a timeout or exhausted retries
surface as ``StoreUnavailableError``. An append whose outcome is unknown (any
transient failure of its PUT: the request may have been applied) is resolved
by reading the key back before anything is reported: the batch carries a
random writer token, so "our object", "another writer's object" and "no
object" are told apart; only "no object" is re-sent. A 412 is reported as
``ConflictError`` only after the same read-back shows it was not our own
earlier attempt (an HTTP client may re-send a PUT on a dropped keep-alive
connection by itself).

Nothing blocks the event loop: the client is aiobotocore's, made in ``open()``
under an ``AsyncExitStack`` and closed in ``close()``; botocore's JSON models
are loaded in a worker thread first.

Limits: ``delete_stream`` must not race writers of that stream (a writer that
still holds a pre-purge view could recreate part of it); stop the agent first.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import BotoCoreError, ClientError

from durably.storage.base import StoreBase
from durably.storage.errors import (
    BlobNotFoundError,
    ConflictError,
    CorruptRecordError,
    DurablyError,
    InvalidRequestError,
    StoreUnavailableError,
    UnsafeCompactionError,
)
from durably.storage.spi import (
    CAP_BLOBS, CAP_LEASES, AppendRequest, Lease, StoredRecord, StoredSnapshot, StreamId, check_append,
)

from .s3_batch import HEADER_SIZE, TOKEN_SIZE, Batch, BatchHeader
from .s3_keys import MAX_SEQ, StreamKeys, decode_segment, encode_segment, index_prefix, seq_from_name
from .s3_leases import S3Leases
from .s3_options import S3Options
from .s3_retry import call_with_retries, is_precondition_failed, is_transient, retrying, unavailable
from .s3_upload import upload

_DIGEST = re.compile(r"[0-9a-f]{64}")
_KNOWN_ENDS_MAX = 65_536  # streams whose latest batch end this store remembers (LRU)
_DELETE_CHUNK = 1000  # S3's DeleteObjects limit


class _Taken(Exception):
    """The batch key holds another writer's object."""


class _Lost(Exception):
    """A read-modify-write lost a race (412); read again."""


class _DeleteIncomplete(Exception):
    """DeleteObjects reported keys it could not delete (retried like a transient error)."""


@dataclass(slots=True)
class _Window:
    """One read window: its batches and whether the stream ends with them, or where to restart."""

    batches: list[Batch] = field(default_factory=list)
    complete: bool = False
    restart_at: int | None = None
    vanished: int = 0


_shared_loader: Any = None  # botocore's data loader, once its JSON models are read: pure, cached data


def _load_botocore_data(session: AioSession) -> None:
    """Read botocore's JSON models into the session's loader cache (run in a worker thread)."""
    loader = session.get_component("data_loader")
    loader.load_service_model("s3", "service-2")
    loader.load_service_model("s3", "endpoint-rule-set-1")
    for name in ("endpoints", "partitions", "_retry", "sdk-default-configuration"):
        loader.load_data(name)
    session.get_scoped_config()


async def _new_session() -> AioSession:
    """An aiobotocore session whose file reads happen off the event loop.

    The first one reads botocore's models in a worker thread; later ones share
    that loader (``register_component("data_loader", ...)``, botocore's way to
    share model data between sessions) and read only the small config files.
    """
    global _shared_loader
    session = get_session()
    if _shared_loader is not None:
        session.register_component("data_loader", _shared_loader)
        await anyio.to_thread.run_sync(session.get_scoped_config)
    else:
        await anyio.to_thread.run_sync(_load_botocore_data, session)
        _shared_loader = session.get_component("data_loader")
    return session


class S3Store(StoreBase):
    """A ``Store`` in an S3 bucket; see the module docstring for layout, batching and faults.

    In: ``url`` (``s3://bucket/prefix?...``, parsed by ``S3Options.from_url``)
    and optional keyword overrides of ``S3Options`` fields (``retry=RetryPolicy(...)``,
    ``read_timeout=...``) for tests and tuning. Raises ``ValueError`` for a
    malformed URL. No I/O until ``open()``.
    """

    capabilities = frozenset({CAP_BLOBS, CAP_LEASES})

    def __init__(self, url: str, **overrides: Any) -> None:
        super().__init__()
        self.options = S3Options.from_url(url, **overrides)
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._known_ends: OrderedDict[StreamId, int] = OrderedDict()
        self._appending = 0
        self._drained: anyio.Event | None = None
        self._leases = S3Leases(self._call, self._get, prefix=self.options.prefix, policy=self.options.retry)

    # ---------------------------------------------------------------- lifecycle

    async def _open(self) -> None:
        options = self.options
        session = await _new_session()
        config = AioConfig(
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=options.concurrency,
            s3={"addressing_style": "path"} if options.path_style else None,
        )
        stack = AsyncExitStack()
        try:
            self._client = await stack.enter_async_context(
                session.create_client(
                    "s3", region_name=options.region, endpoint_url=options.endpoint_url, config=config
                )
            )
            self._limiter = anyio.CapacityLimiter(options.concurrency)
            await self._check_bucket()
            await self._check_conditional_writes()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            self._client = None
            if isinstance(exc, BotoCoreError):
                raise unavailable("client setup", exc) from exc
            raise
        self._stack = stack
        self._known_ends.clear()  # facts about the bucket stay true, but a reopen is the cheap point to relearn them

    async def _close(self) -> None:
        if self._appending and self._drained is not None:
            await self._drained.wait()  # pending appends finish (and learn their outcome) first
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _check_bucket(self) -> None:
        try:
            await self._call("head_bucket", expect=(404,))
        except ClientError:
            if not self.options.create_bucket:
                raise StoreUnavailableError(f"S3 bucket {self.options.bucket!r} does not exist") from None
            params: dict[str, Any] = {}
            region = self._client.meta.region_name
            if region and region != "us-east-1":
                params["CreateBucketConfiguration"] = {"LocationConstraint": region}
            try:
                await self._call("create_bucket", expect=(409,), **params)
            except ClientError:
                pass  # created meanwhile by another process

    async def _check_conditional_writes(self) -> None:
        """Refuse a server that ignores ``If-None-Match: *`` (it would let two writers win one seq).

        Three small requests per ``open()``: create a probe object, try to
        create it again (must be 412), delete it. AWS S3 honours the header
        since August 2024; some S3-compatible servers do not, or only in newer versions.
        """
        key = f"{self.options.prefix}probe/{secrets.token_hex(8)}"
        await self._call("put_object", Key=key, Body=b"probe", IfNoneMatch="*")
        try:
            await self._call("put_object", Key=key, Body=b"probe again", IfNoneMatch="*", expect=(412,))
        except ClientError:
            pass  # 412: the server keeps the promise the whole layout relies on
        else:
            raise StoreUnavailableError(
                f"{self.options.endpoint_url or 'the S3 endpoint'} ignores If-None-Match on PutObject: "
                "it cannot keep two writers from both appending; use a server with conditional writes"
            )
        finally:
            with anyio.CancelScope(shield=True):
                await self._call("delete_object", Key=key)

    # ---------------------------------------------------------------- requests

    async def _call(self, operation: str, /, *, expect: tuple[int, ...] = (), **params: Any) -> dict[str, Any]:
        """One S3 request on this bucket, retried (see ``s3_retry.call_with_retries``)."""
        method = getattr(self._client, operation)
        assert self._limiter is not None

        async def attempt() -> dict[str, Any]:
            async with self._limiter:
                return await method(Bucket=self.options.bucket, **params)

        return await call_with_retries(self.options.retry, operation, attempt, expect=expect)

    async def _get(self, key: str, *, byte_range: str | None = None) -> tuple[bytes, str] | None:
        """GET ``key`` (optionally a ``bytes=a-b`` range): its bytes and ETag, or None if absent."""
        extra = {"Range": byte_range} if byte_range else {}
        assert self._limiter is not None

        async def attempt() -> tuple[bytes, str] | None:
            async with self._limiter:
                try:
                    response = await self._client.get_object(Bucket=self.options.bucket, Key=key, **extra)
                except ClientError as exc:
                    if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                        return None
                    raise
                async with response["Body"] as body:
                    return await body.read(), response["ETag"]

        return await call_with_retries(self.options.retry, "GetObject", attempt)

    async def _list(
        self, prefix: str, *, start_after: str | None = None, max_keys: int = 1000, token: str | None = None
    ) -> tuple[list[str], str | None]:
        """One ListObjectsV2 page: the keys, and the continuation token when there are more."""
        params: dict[str, Any] = {"Prefix": prefix, "MaxKeys": max_keys}
        if token is not None:
            params["ContinuationToken"] = token
        elif start_after is not None:
            params["StartAfter"] = start_after
        response = await self._call("list_objects_v2", **params)
        names = [item["Key"] for item in response.get("Contents", [])]
        return names, response.get("NextContinuationToken") if response.get("IsTruncated") else None

    async def _delete_keys(self, names: Sequence[str]) -> None:
        """Delete ``names`` with DeleteObjects (1,000 per request), retrying keys S3 reports as failed."""
        for start in range(0, len(names), _DELETE_CHUNK):
            remaining = list(names[start : start + _DELETE_CHUNK])

            async def attempt() -> None:
                response = await self._call(
                    "delete_objects", Delete={"Objects": [{"Key": k} for k in remaining], "Quiet": True}
                )
                failed = {error["Key"] for error in response.get("Errors", [])}
                remaining[:] = [k for k in remaining if k in failed]
                if remaining:
                    raise _DeleteIncomplete(f"S3 could not delete {len(remaining)} keys: {response['Errors'][:3]}")

            try:
                async for state in retrying(self.options.retry, lambda e: isinstance(e, _DeleteIncomplete)):
                    with state:
                        await attempt()
            except _DeleteIncomplete as exc:
                raise StoreUnavailableError(str(exc)) from exc

    def _keys(self, stream: StreamId) -> StreamKeys:
        return StreamKeys(self.options.prefix, stream)

    def _remember_end(self, stream: StreamId, end: int) -> None:
        """Record that ``end`` is a batch end of ``stream`` (the highest one seen wins)."""
        known = self._known_ends.pop(stream, 0)
        self._known_ends[stream] = max(known, end)
        if len(self._known_ends) > _KNOWN_ENDS_MAX:
            self._known_ends.popitem(last=False)

    # ---------------------------------------------------------------- appends

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches concurrently; see ``Store.append_batch`` and "Batching" above.

        Raises ``StoreUnavailableError`` when any request's outcome stays
        unknown (the others' results are then not reported: re-read them).
        """
        self._check_open()
        keys: list[StreamKeys] = []
        for request in requests:
            check_append(request)
            if request.expected_seq + len(request.records) > MAX_SEQ:
                raise InvalidRequestError(f"seq would exceed {MAX_SEQ}")
            keys.append(self._keys(request.stream))
        by_stream: dict[StreamId, list[int]] = {}
        for index, request in enumerate(requests):
            by_stream.setdefault(request.stream, []).append(index)
        results: list[int | Exception | None] = [None] * len(requests)

        async def append_in_order(indices: list[int]) -> None:
            for position, index in enumerate(indices):
                try:
                    results[index] = await self._append_one(requests[index], keys[index])
                except ConflictError as exc:
                    results[index] = exc
                except Exception as exc:  # unknown outcome: later requests of the stream depend on it
                    for later in indices[position:]:
                        results[later] = exc
                    return

        self._appending += 1
        if self._appending == 1:
            self._drained = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                for indices in by_stream.values():
                    group.start_soon(append_in_order, indices)
        finally:
            self._appending -= 1
            if self._appending == 0 and self._drained is not None:
                self._drained.set()
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, ConflictError)]
        if failures:
            if isinstance(failures[0], StoreUnavailableError):
                raise StoreUnavailableError(
                    f"{len(failures)} of {len(requests)} appends have an unknown outcome; re-read before retrying"
                ) from failures[0]
            raise failures[0]
        return results  # type: ignore[return-value]

    async def _append_one(self, request: AppendRequest, keys: StreamKeys) -> int:
        stream, expected = request.stream, request.expected_seq
        first, last = expected + 1, expected + len(request.records)
        if expected and self._known_ends.get(stream) != expected:
            actual = await self._last_seq(stream, keys)
            if actual != expected:
                raise ConflictError(stream, expected, actual)
        if expected == 0:
            # Listable before its first record exists, never the other way round.
            await self._call("put_object", Key=keys.index, Body=json.dumps(
                {"namespace": stream.namespace, "agent_id": stream.agent_id}).encode())
        token = secrets.token_bytes(TOKEN_SIZE)
        body = Batch(first, last, first, token, tuple(request.records)).encode()
        await self._put_new_batch(stream, keys, expected, first, body, token)
        if first <= await self._compacted_through(keys):
            # Our view predated a compaction that freed this key: we are a stale writer.
            await self._call("delete_object", Key=keys.batch(first))
            raise ConflictError(stream, expected, await self._last_seq_or_none(stream, keys))
        self._remember_end(stream, last)
        return last

    async def _put_new_batch(
        self, stream: StreamId, keys: StreamKeys, expected: int, first: int, body: bytes, token: bytes
    ) -> None:
        """Create the batch object with ``If-None-Match: *``; resolve every unknown outcome by reading back.

        Returns when the object at the key is ours. Raises ``ConflictError``
        when it is another writer's, ``StoreUnavailableError`` when retries run out.
        """
        key = keys.batch(first)
        assert self._limiter is not None

        async def owner() -> bytes | None:
            found = await self._get(key, byte_range=f"bytes=0-{HEADER_SIZE - 1}")
            return None if found is None else BatchHeader.decode(found[0]).token

        async def attempt() -> None:
            try:
                async with self._limiter:
                    await self._client.put_object(Bucket=self.options.bucket, Key=key, Body=body, IfNoneMatch="*")
                return
            except ClientError as exc:
                if is_precondition_failed(exc):
                    if await owner() == token:
                        return  # an earlier attempt of ours was applied; its answer was lost
                    raise _Taken() from None
                if not is_transient(exc):
                    raise
                failure: Exception = exc
            except Exception as exc:
                if not is_transient(exc):
                    raise
                failure = exc
            # The PUT may or may not have been applied: look before deciding.
            current = await owner()
            if current == token:
                return
            if current is not None:
                raise _Taken()
            raise failure  # not applied: tenacity sends it again after a backoff

        try:
            async for state in retrying(self.options.retry):
                with state:
                    await attempt()
        except _Taken:
            raise ConflictError(stream, expected, await self._last_seq_or_none(stream, keys)) from None
        except DurablyError:
            raise
        except Exception as exc:  # a transient failure that outlasted the retries, or a final S3 error
            raise unavailable(f"PutObject {key}", exc) from exc

    async def _compacted_through(self, keys: StreamKeys) -> int:
        found = await self._get(keys.compacted)
        return 0 if found is None else int(json.loads(found[0])["through"])

    # ---------------------------------------------------------------- reading

    async def last_seq(self, stream: StreamId) -> int:
        """See ``Store.last_seq``: one list call and one 48-byte ranged GET."""
        self._check_open()
        return await self._last_seq(stream, self._keys(stream))

    async def _last_seq(self, stream: StreamId, keys: StreamKeys) -> int:
        for _ in range(3):  # the newest batch only vanishes under a concurrent purge
            names, _token = await self._list(keys.batches, max_keys=1)
            if not names:
                return 0
            found = await self._get(names[0], byte_range=f"bytes=0-{HEADER_SIZE - 1}")
            if found is not None:
                end = BatchHeader.decode(found[0]).last_seq
                self._remember_end(stream, end)
                return end
        raise StoreUnavailableError(f"the newest batch of {stream} kept vanishing (purge in progress?)")

    async def _last_seq_or_none(self, stream: StreamId, keys: StreamKeys) -> int | None:
        try:
            return await self._last_seq(stream, keys)
        except StoreUnavailableError:
            return None

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        """See ``Store.read``. A page is a window of ``page_size`` seqs: one list call, then
        its batches fetched concurrently."""
        self._check_open()
        if after_seq < 0 or page_size < 1:
            raise InvalidRequestError("after_seq must be >= 0 and page_size >= 1")
        keys = self._keys(stream)
        position, first, vanished = after_seq, True, 0
        while True:
            window = await self._window(keys, stream, position, page_size, first)
            if window.restart_at is not None:
                vanished += window.vanished
                if vanished > 3:
                    raise StoreUnavailableError(f"batches of {stream} keep vanishing while read")
                position, first = window.restart_at, True
                continue
            for batch in window.batches:
                for seq, data in zip(batch.seqs(), batch.records):
                    if seq > position:
                        yield StoredRecord(seq, data)
                position = max(position, batch.last_seq)
            first = False
            if window.complete:
                break
        if position > after_seq:
            self._remember_end(stream, position)

    async def _window(self, keys: StreamKeys, stream: StreamId, position: int, size: int, first: bool) -> "_Window":
        """The batches that start in (position, position + size], in seq order, fetched concurrently.

        ``first``: ``position`` may lie inside a batch or below the compaction
        mark, so the batch holding ``position + 1`` is included when it starts
        at or before ``position``, and the compaction mark is read (in parallel
        with the batches): if it is above ``position`` the window says to
        restart there, because below the mark only leftovers of stale writers
        may remain. Later windows start at a batch end, and their batches must
        continue it.
        Raises ``CorruptRecordError`` when the batches do not continue each other.
        """
        top = min(position + size, MAX_SEQ)
        names: list[str] = []
        below: str | None = None
        token: str | None = None
        while True:
            # Descending names: this lists first seqs <= top, highest first, down to position.
            page, token = await self._list(
                keys.batches, start_after=keys.batch(top + 1), max_keys=min(size + 1, 1000), token=token
            )
            below = next((name for name in page if seq_from_name(name) <= position), None)
            names.extend(name for name in page if seq_from_name(name) > position)
            if below is not None or token is None:
                break
        names.reverse()
        holder = first and below is not None and not (names and seq_from_name(names[0]) == position + 1)
        if holder:
            names.insert(0, below)  # the batch holding position + 1, or the newest if the stream ends before
        check_mark = first
        fetched: list[Batch | Exception | None] = [None] * len(names)
        mark: list[int] = [0]

        async def fetch(index: int) -> None:
            try:
                found = await self._get(names[index])
                fetched[index] = None if found is None else Batch.decode(found[0])
            except Exception as exc:  # kept, so the reader gets the error itself, not an ExceptionGroup
                fetched[index] = exc

        async def fetch_mark() -> None:
            try:
                mark[0] = await self._compacted_through(keys)
            except Exception as exc:
                fetched.append(exc)

        async with anyio.create_task_group() as group:
            for index in range(len(names)):
                group.start_soon(fetch, index)
            if check_mark:
                group.start_soon(fetch_mark)
        for item in fetched:
            if isinstance(item, CorruptRecordError) and item.stream is None:
                raise CorruptRecordError(str(item), stream=stream) from item
            if isinstance(item, Exception):
                raise item
        if check_mark and mark[0] > position:
            return _Window(restart_at=mark[0])  # compacted past position: read from the mark on
        if any(batch is None for batch in fetched):
            # Deleted between list and GET: a concurrent compaction (or purge). Start over above its mark.
            return _Window(restart_at=max(position, await self._compacted_through(keys)), vanished=1)
        batches: list[Batch] = [batch for batch in fetched if isinstance(batch, Batch)]
        expected = None if holder else position + 1
        for batch in batches:
            if expected is not None and batch.first_seq != expected:
                # Only a compaction that overtook this reader may leave such a gap (and stale writers'
                # leftovers below its mark): restart above the mark; anything else is damage.
                compacted = await self._compacted_through(keys)
                if compacted > position:
                    return _Window(restart_at=compacted, vanished=1)
                raise CorruptRecordError(f"batch starts at seq {batch.first_seq}, expected {expected}",
                                         stream=stream, seq=expected)
            expected = batch.last_seq + 1
        end = batches[-1].last_seq if batches else position
        # Complete when the seq after the last batch falls inside the listed range, where no batch started.
        return _Window(batches=batches, complete=end + 1 <= top)

    # ---------------------------------------------------------------- snapshots

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes) -> None:
        """See ``Store.put_snapshot``; above ``multipart_threshold`` bytes it is a multipart upload."""
        self._check_open()
        if not isinstance(data, bytes):
            raise InvalidRequestError(f"snapshot data must be bytes, got {type(data).__name__}")
        keys = self._keys(stream)
        if seq < 1 or (seq > self._known_ends.get(stream, 0) and seq > await self._last_seq(stream, keys)):
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        await upload(self._call, keys.snapshot(seq), data,
                     threshold=self.options.multipart_threshold, part_size=self.options.part_size)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        """See ``Store.get_snapshot``: one list call and one GET."""
        self._check_open()
        keys = self._keys(stream)
        if at_or_before is not None and at_or_before < 1:
            return None
        start_after = None if at_or_before is None or at_or_before >= MAX_SEQ else keys.snapshot(at_or_before + 1)
        for _ in range(8):  # a listed snapshot can be deleted before the GET; look again
            names, _token = await self._list(keys.snapshots, start_after=start_after, max_keys=1)
            if not names:
                return None
            found = await self._get(names[0])
            if found is not None:
                return StoredSnapshot(seq_from_name(names[0]), found[0])
            start_after = names[0]
        raise StoreUnavailableError(f"snapshots of {stream} keep vanishing while read")

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """See ``Store.delete_snapshots``; the latest snapshot is kept whatever ``before_seq`` says."""
        self._check_open()
        keys = self._keys(stream)
        latest, _token = await self._list(keys.snapshots, max_keys=1)
        if not latest or before_seq <= 1:
            return
        start_after = keys.snapshot(min(before_seq, MAX_SEQ + 1))
        token: str | None = None
        while True:
            names, token = await self._list(keys.snapshots, start_after=start_after, token=token)
            await self._delete_keys([name for name in names if name != latest[0]])
            if token is None:
                return

    # ---------------------------------------------------------------- compaction and purge

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """See ``Store.delete_records`` and "Compaction" in the module docstring."""
        self._check_open()
        keys = self._keys(stream)
        latest, _token = await self._list(keys.snapshots, max_keys=1)
        if not latest or seq_from_name(latest[0]) < through_seq:
            if not latest and await self._last_seq(stream, keys) == 0:
                return  # an unknown stream has nothing to compact
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
        if through_seq < 1:
            return
        await self._raise_compaction_mark(keys, through_seq)
        token: str | None = None
        first = True
        while True:
            names, token = await self._list(keys.batches, start_after=keys.batch(through_seq + 2), token=token)
            if first and names:
                first = False
                holder = names.pop(0)
                if seq_from_name(holder) != through_seq + 1:
                    await self._trim(holder, through_seq)  # holds through+1, or is the newest: keep, trimmed
            await self._delete_keys(names)
            if token is None:
                return

    async def _raise_compaction_mark(self, keys: StreamKeys, through_seq: int) -> None:
        """Raise the compaction mark to ``through_seq`` (never lower it), by compare-and-swap."""

        async def attempt() -> None:
            found = await self._get(keys.compacted)
            current = json.loads(found[0]) if found else {"through": 0, "generation": 0}
            if current["through"] >= through_seq:
                return
            body = json.dumps({"through": through_seq, "generation": current["generation"] + 1,
                               "writer": secrets.token_hex(8)}).encode()
            condition = {"IfMatch": found[1]} if found else {"IfNoneMatch": "*"}
            try:
                await self._call("put_object", Key=keys.compacted, Body=body, expect=(404, 412), **condition)
            except ClientError:
                raise _Lost() from None

        await self._retry_lost(attempt, "the compaction mark")

    async def _trim(self, key: str, through_seq: int) -> None:
        """Rewrite the batch at ``key`` without its records <= ``through_seq`` (If-Match on the version read)."""

        async def attempt() -> None:
            found = await self._get(key)
            if found is None:
                return
            batch = Batch.decode(found[0])
            if batch.records_from > through_seq:
                return
            try:
                await self._call("put_object", Key=key, Body=batch.trimmed(through_seq).encode(),
                                 IfMatch=found[1], expect=(404, 412))
            except ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                    raise _Lost() from None

        await self._retry_lost(attempt, f"trimming {key}")

    async def _retry_lost(self, attempt: Any, what: str) -> None:
        try:
            async for state in retrying(self.options.retry, lambda exc: isinstance(exc, _Lost)):
                with state:
                    await attempt()
        except _Lost:
            raise StoreUnavailableError(f"{what} kept changing under a concurrent writer") from None

    async def delete_stream(self, stream: StreamId) -> None:
        """See ``Store.delete_stream``: aborts its unfinished uploads, deletes every object
        under it, then its index entry (so an interrupted purge stays listed and can be redone)."""
        self._check_open()
        keys = self._keys(stream)
        markers: dict[str, str] = {}
        while True:
            uploads = await self._call("list_multipart_uploads", Prefix=keys.root, **markers)
            for item in uploads.get("Uploads", []):
                try:
                    await self._call(
                        "abort_multipart_upload", Key=item["Key"], UploadId=item["UploadId"], expect=(404,)
                    )
                except ClientError:
                    pass  # finished or aborted meanwhile
            if not uploads.get("IsTruncated"):
                break
            markers = {"KeyMarker": uploads["NextKeyMarker"], "UploadIdMarker": uploads["NextUploadIdMarker"]}
        while True:
            names, _token = await self._list(keys.root)
            if not names:
                break
            await self._delete_keys(names)
        await self._call("delete_object", Key=keys.index)
        self._known_ends.pop(stream, None)

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        """See ``Store.list_streams``: pages through the index entries of ``namespace``, 1,000 per request."""
        self._check_open()
        if not isinstance(namespace, str) or not namespace or "/" in namespace or "\x00" in namespace:
            return
        base = index_prefix(self.options.prefix, namespace)
        token: str | None = None
        while True:
            names, token = await self._list(base + encode_segment(prefix), token=token)
            for name in names:
                yield StreamId(namespace, decode_segment(name[len(base) :]))
            if token is None:
                return

    # ---------------------------------------------------------------- blobs

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """See ``Store.put_blob``: content-addressed by SHA-256, multipart above ``multipart_threshold``."""
        self._check_open()
        if not isinstance(data, bytes):
            raise InvalidRequestError(f"blob data must be bytes, got {type(data).__name__}")
        keys = self._keys(stream)
        digest = hashlib.sha256(data).hexdigest()
        key = keys.blob(digest)
        if len(data) >= self.options.multipart_threshold:
            try:  # content-addressed: the same digest is the same bytes, so skip a large re-upload
                head = await self._call("head_object", Key=key, expect=(404,))
                if head.get("ContentLength") == len(data):
                    return digest
            except ClientError:
                pass
        await upload(
            self._call, key, data, threshold=self.options.multipart_threshold, part_size=self.options.part_size
        )
        await self._call("put_object", Key=keys.index, Body=json.dumps(
            {"namespace": stream.namespace, "agent_id": stream.agent_id}).encode())
        return digest

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        """See ``Store.get_blob``. Raises ``BlobNotFoundError``, or ``CorruptRecordError`` when
        the stored bytes do not hash to ``digest``."""
        self._check_open()
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise BlobNotFoundError(f"no blob {digest!r} in {stream}")
        found = await self._get(self._keys(stream).blob(digest))
        if found is None:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        if hashlib.sha256(found[0]).hexdigest() != digest:
            raise CorruptRecordError(f"blob {digest} does not match its digest", stream=stream)
        return found[0]

    # ---------------------------------------------------------------- leases (s3_leases)

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """See ``LeaseStore.acquire_lease`` and ``s3_leases`` (clocks, skew allowance, faults)."""
        self._check_open()
        return await self._leases.acquire(stream, owner, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """See ``LeaseStore.release_lease``: marks the lease object released, never deletes it."""
        self._check_open()
        await self._leases.release(lease)

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """See ``LeaseStore.get_lease`` and ``s3_leases``: one GET."""
        self._check_open()
        return await self._leases.current(stream)
