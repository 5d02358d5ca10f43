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
                             its seq range, the writer's token and its level (the
                             fencing token it was written under); or a takeover
                             marker holding the key of the next append (s3_fencing)
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
  descending names) and read its 56-byte header with a ranged GET. Two
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
  stored seq, so they differ from every earlier version), then overwrites
  each batch wholly <= through with its tombstone: the same key, a header and
  no records. Only batches above the previous mark are listed and rewritten.
* **Fencing after compaction.** A deleted batch would free its key, and a
  writer whose view predates the compaction could create it again and
  believe it appended. Compaction therefore never frees a key: a tombstone
  keeps it taken, so that writer's conditional PUT gets 412 like any other
  conflict, and an append is one PUT with no read of the mark. A fleet that
  compacts must not mix this adapter with builds whose compaction deletes
  covered batches (and reads the mark after every append): their compaction
  frees keys that this one does not check.
  ``delete_stream`` frees every key of a stream but its lease object; it must
  not race its writers.
* **Fencing tokens** (``CAP_LEASES`` enforced, see ``s3_fencing``). One PUT
  can only be conditional on its own key, so the lease token goes into the
  journal: each batch records the token it was written under, and a grant of
  a new token takes the key of the stream's next append with a takeover
  marker before ``acquire_lease`` returns. A stale holder's append then finds
  its key taken and a newer token there: ``FencedError``, decided by the
  conditional PUT, no read before it. The new holder's first append replaces
  its marker (``If-Match``): one PUT per append stays one PUT.
* ``open()`` checks that the server honours ``If-None-Match`` (a probe object
  created twice must get 412) and refuses one that does not.

Batching
--------
``append_batch`` (the group commit of ``durably.storage._group_commit``) sends the
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
A purge frees the stream's keys, so a holder whose lease is still live by its
own clock when its stream is purged and restarted is not fenced by a key (see
"Limits" in ``s3_fencing``); one whose lease ran out is.

Modules
-------
``S3Store`` (here: lifecycle, purge and listing, blobs and leases; appends,
``last_seq`` and the read loop in its mixin ``s3_journal``, snapshots and
compaction in its mixin ``s3_snapshotting``) is the SPI surface; it delegates
to ``s3_requests`` (retried requests, the client), ``s3_put_batch`` (writing
a batch object exactly once), ``s3_fencing`` (levels, takeover markers, the
known ends and held leases that let an append skip reads), ``s3_window`` (read windows), ``s3_compaction``
(the compaction mark, trimming, deleting batches), ``s3_snapshots``,
``s3_blobs``, ``s3_streams`` (listing and purge) and ``s3_leases``; keys,
batch objects, retries, multipart uploads and URL options are in ``s3_keys``,
``s3_batch``, ``s3_retry``, ``s3_upload`` and ``s3_options``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import AsyncExitStack
from typing import Any

import anyio
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError

from durably.storage._base import StoreBase
from durably.storage._spi import BlobDeleteStore, Lease, LeaseStore, StreamId, check_blob, check_blob_digests
from durably.storage._url_redaction import redact_url

from . import _blobs as s3_blobs
from . import _streams as s3_streams
from ._compaction import S3Compaction
from ._fencing import HeldLeases, KnownHeads
from ._journal import S3Journal
from ._keys import StreamKeys
from ._leases import S3Leases
from ._options import S3Options
from ._requests import S3Requests, new_session
from ._retry import unavailable
from ._snapshotting import S3Snapshotting


# appends and reads: adapters/s3/_journal.py; snapshots and compaction: adapters/s3/_snapshotting.py
class S3Store(S3Journal, S3Snapshotting, StoreBase, BlobDeleteStore, LeaseStore):
    """A ``Store`` in an S3 bucket; see the module docstring for layout, batching and faults.

    No I/O until ``open()``, which makes the aiobotocore client, checks the bucket (and
    creates it with ``create_bucket=1``) and checks that the server honours conditional
    writes. Every request retries transient failures (``s3_retry``: throttling, 5xx, 409,
    dropped connections).

    Errors of every data method: ``StoreUnavailableError`` when a transient failure lasts
    past ``max_attempts`` or ``deadline`` (seconds); ``InvalidRequestError`` for a stream id
    whose keys would exceed S3's key length or that is not valid UTF-8;
    ``CorruptRecordError`` for a damaged batch, lease or compaction-mark object, or a
    foreign object among a stream's keys.

    Args:
        url: ``s3://bucket/prefix?...``, parsed by ``S3Options.from_url`` (the query
            parameters are listed in ``s3_options``).
        **overrides: Keyword overrides of ``S3Options`` fields (``retry=RetryPolicy(...)``,
            ``read_timeout=...``), for tests and tuning.

    Raises:
        InvalidStoreURLError: A ``ValueError``, for a malformed URL: another scheme, no
            bucket, an unknown query parameter or a value out of range.
        StoreUnavailableError: From ``open``, when the bucket does not exist and may not be
            created, the server ignores ``If-None-Match``, or S3 cannot be reached.
    """

    def __init__(self, url: str, **overrides: Any) -> None:
        super().__init__()
        self.options = S3Options.from_url(url, **overrides)
        self._stack: AsyncExitStack | None = None
        self._s3 = S3Requests(self.options)  # client and limiter set by open()
        self._compaction = S3Compaction(self._s3, self.options.retry)
        self._known = KnownHeads()
        self._appending = 0
        self._drained: anyio.Event | None = None
        self._leases = S3Leases(self._s3.call, self._s3.get, prefix=self.options.prefix, policy=self.options.retry)
        self._held = HeldLeases(lambda: self._leases.clock())

    def _location(self) -> str:
        options = self.options
        return f"s3://{options.bucket}/{options.prefix}".rstrip("/") + (
            f" at {redact_url(options.endpoint_url)}" if options.endpoint_url else ""
        )

    # ---------------------------------------------------------------- lifecycle

    async def _open(self) -> None:
        options = self.options
        session = await new_session()
        config = AioConfig(
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=options.concurrency,
            s3={"addressing_style": "path"} if options.path_style else None,
        )
        stack = AsyncExitStack()
        try:
            self._s3.client = await stack.enter_async_context(
                session.create_client(
                    "s3", region_name=options.region, endpoint_url=options.endpoint_url, config=config
                )
            )
            self._s3.limiter = anyio.CapacityLimiter(options.concurrency)
            await self._s3.check_bucket()
            await self._s3.check_conditional_writes()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            self._s3.client = None
            if isinstance(exc, BotoCoreError):
                raise unavailable("client setup", exc) from exc
            raise
        self._stack = stack
        self._known.clear()  # facts about the bucket stay true, but a reopen is the cheap point to relearn them

    async def _close(self) -> None:
        if self._appending and self._drained is not None:
            await self._drained.wait()  # pending appends finish (and learn their outcome) first
        stack, self._stack, self._s3.client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    # ---------------------------------------------------------------- keys and known batch ends

    def _keys(self, stream: StreamId) -> StreamKeys:
        return StreamKeys(self.options.prefix, stream)

    # ---------------------------------------------------------------- purge and listing (s3_streams)

    async def delete_stream(self, stream: StreamId) -> None:
        """Purge the stream: its batches, snapshots, blobs, compaction mark and index entry; see ``Store.delete_stream``.

        ``s3_streams.delete_stream`` aborts the stream's unfinished uploads, deletes every
        object under it but the lease object, then its index entry (so an interrupted purge
        stays listed and can be redone). The lease is ended first and its object kept: fencing tokens never decrease
        for a stream id. Must not race writers of the stream (see "Limits" in the module
        docstring): stop the agent first. An unknown stream is not an error.

        Args:
            stream: The stream to purge.
        """
        self._check_open()
        await self._leases.end(stream)
        self._held.drop(stream)
        await s3_streams.delete_stream(self._s3, self._keys(stream))
        self._known.forget(stream)

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        """Yield the streams of ``namespace`` whose agent id starts with ``prefix``, sorted by agent id.

        Pages through the namespace's index entries, 1,000 per list request; escaped names
        sort like the agent ids they stand for. A stream with only blobs is listed too
        (``put_blob`` writes its index entry). An invalid namespace yields nothing.

        Args:
            namespace: The namespace to list; other namespaces' streams are never yielded.
            prefix: The agent-id prefix; ``""`` lists every stream of the namespace.

        Yields:
            Each ``StreamId``, in agent-id order.
        """
        self._check_open()
        async for stream in s3_streams.list_streams(self._s3, self.options.prefix, namespace, prefix):
            yield stream

    # ---------------------------------------------------------------- blobs (s3_blobs)

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """Store ``data`` as a blob of ``stream`` under its SHA-256 hex digest; idempotent.

        Content-addressed: one PUT of ``data/N/A/b/{sha256}``, or a multipart upload from
        ``multipart_threshold`` bytes (skipped after a HEAD when the same blob is already
        there), then a PUT of the stream's index entry, so a stream with blobs is listed.

        Args:
            stream: The stream the blob belongs to.
            data: The bytes to store.

        Returns:
            The SHA-256 hex digest of ``data`` (64 lowercase hex characters), its name for
                ``get_blob``.

        Raises:
            InvalidRequestError: When ``data`` is not ``bytes``.
        """
        self._check_open()
        check_blob(stream, data)
        return await s3_blobs.put_blob(self._s3, self.options, stream, self._keys(stream), data)

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        """The bytes of blob ``digest`` of ``stream``: one GET, checked against the digest.

        Args:
            stream: The stream the blob belongs to.
            digest: The SHA-256 hex digest ``put_blob`` returned.

        Returns:
            The blob's bytes.

        Raises:
            BlobNotFoundError: When the stream has no blob with that digest, also for a digest
                that is not 64 lowercase hex characters (it never reaches a key).
            CorruptRecordError: When the stored bytes do not hash to ``digest``.
        """
        self._check_open()
        return await s3_blobs.get_blob(self._s3, stream, self._keys(stream), digest)

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        """Delete the named blobs of ``stream``: DeleteObjects, 1,000 keys per request; a missing one is skipped.

        Args:
            stream: The stream whose blobs to delete.
            digests: The digests ``put_blob`` returned.

        Raises:
            InvalidRequestError: Malformed arguments (``check_blob_digests``).
            StoreUnavailableError: When S3 stays unreachable or keeps refusing a key.
        """
        self._check_open()
        names = check_blob_digests(stream, digests)
        keys = self._keys(stream)
        if names:
            await self._s3.delete_keys([keys.blob(digest) for digest in names])

    # ---------------------------------------------------------------- leases (s3_leases)

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take, or renew, the lease of ``stream`` for ``owner`` for ``ttl`` seconds; see ``LeaseStore.acquire_lease``.

        A compare-and-swap on the stream's lease object: one GET and one conditional PUT (one
        GET more after a lost race). Taking a free, released or expired lease, also by its
        former owner, writes the previous token + 1 and then, before returning, takes the key
        of the stream's next append with a takeover marker of that token (one list call, one
        ranged GET and one conditional PUT more; see ``s3_fencing``), from when on appends
        under older tokens are refused; a renewal while others must still treat the lease as
        held keeps the token and writes nothing else. ``expires_at`` is in unix seconds of this client's
        clock, and others treat the lease as expired only ``ttl * SKEW_FRACTION`` seconds
        after it (see ``s3_leases`` for clocks and faults).

        Args:
            stream: The stream to lease.
            owner: The worker's name, a non-empty string.
            ttl: How long the lease lasts, in seconds, finite and > 0.

        Returns:
            The lease now held by ``owner``, or None when another owner's lease is still held
                (nothing changed).

        Raises:
            InvalidRequestError: For an empty owner or a ttl that is not a finite number > 0
                (``check_lease``), before any I/O.
            StoreUnavailableError: Also when the lease object kept changing under concurrent
                writers, or the marker could not be placed; the lease may or may not be ours
                then (it runs out after ``ttl``).
        """
        self._check_open()
        taken = await self._leases.take(stream, owner, ttl)
        if taken is None:
            return None
        lease, renewal = taken
        if not renewal:
            await self._place_marker(stream, self._keys(stream), lease.token)
        self._held.hold(lease)
        return lease

    async def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up if its owner still holds it with its token; otherwise a no-op.

        A lease taken over, released or purged meanwhile is left alone. Marks the lease
        object released (``expires_at`` 0, same owner and token) with a conditional PUT
        instead of deleting it, so the next token is still greater: one GET and one PUT.

        Args:
            lease: The lease as ``acquire_lease`` returned it.

        Raises:
            InvalidRequestError: When ``lease`` is not a ``Lease``.
            StoreUnavailableError: Also when the lease object kept changing under concurrent
                writers.
        """
        self._check_open()
        if isinstance(lease, Lease):
            self._held.drop(lease.stream, lease.token)
        await self._leases.release(lease)

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """The lease of ``stream`` that others must treat as held now: one GET.

        By the skew rule of ``s3_leases``: None exactly when another owner could take the
        lease now, so a lease less than ``ttl * SKEW_FRACTION`` seconds past its
        ``expires_at`` is still returned.

        Args:
            stream: The stream to look up.

        Returns:
            The lease, or None when none is held.
        """
        self._check_open()
        return await self._leases.current(stream)
