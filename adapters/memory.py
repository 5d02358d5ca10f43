"""The in-memory adapter: ``memory://name``. For tests and examples, not for durability.

Stores with the same name in one process share their data, so closing and
reopening ``memory://x`` behaves like reopening a database. ``memory://``
without a name is private to its instance.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from dataclasses import dataclass, field

from durably.storage._base import StoreBase
from durably.storage._errors import (
    BlobNotFoundError,
    ConflictError,
    FencedError,
    InvalidRequestError,
    InvalidStoreURLError,
    UnsafeCompactionError,
)
from durably.storage._spi import (
    CAP_SINGLE_PROCESS,
    AppendRequest,
    BlobDeleteStore,
    IndexedStream,
    IndexEntry,
    IndexStore,
    Lease,
    LeaseRenewStore,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_append,
    check_blob,
    check_blob_digests,
    check_fence,
    check_lease,
    check_lease_renewal,
)
from durably.storage._urls import parse_store_url

__all__ = ["MemoryStore"]


@dataclass
class _Stream:
    last_seq: int = 0
    records: dict[int, bytes] = field(default_factory=dict)
    snapshots: dict[int, bytes] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    index: IndexEntry | None = None  # CAP_STATUS_INDEX: set in the same step as the records


_shared: dict[str, dict[StreamId, _Stream]] = {}
# Leases live apart from the streams so that a lease never makes a stream exist.
# A released or expired lease stays here with its token, the floor of the next one.
_shared_leases: dict[str, dict[StreamId, Lease]] = {}


class MemoryStore(StoreBase, BlobDeleteStore, LeaseRenewStore, IndexStore):
    """A ``Store`` held in a dict, for tests and examples: nothing survives the process.

    Stores opened on the same ``memory://name`` in one process share their data,
    so closing and reopening one behaves like reopening a database;
    ``memory://`` is private to its instance. It declares ``CAP_SINGLE_PROCESS``
    (another process sees another store) and implements blobs, leases and the
    status index. Each method runs without an ``await`` between its check and
    its write, so it is atomic on the event loop. Every method raises
    ``StoreClosedError`` outside the open window, as the SPI says.

    Args:
        url: ``memory://`` (private to this instance) or ``memory://name``
            (shared by name within the process). The scheme is not checked, so
            subclasses can register schemes of their own: ``x://name`` is
            ``memory://name``.

    Raises:
        InvalidStoreURLError: The URL has a path or a query option, or its
            scheme is not followed by ``//``.
    """

    #: Its data lives in this process's memory: another process sees another store.
    capabilities = frozenset({CAP_SINGLE_PROCESS})  # + the protocols above, by StoreBase

    def __init__(self, url: str = "memory://") -> None:
        super().__init__()
        parsed = parse_store_url(url, None, {})  # any scheme (subclasses register theirs); no options
        if parsed.path not in ("", "/"):
            raise InvalidStoreURLError(f"expected memory:// or memory://name, got {parsed.url!r}", url=parsed.url)
        name = parsed.netloc
        self._name = name
        self._streams: dict[StreamId, _Stream] = _shared.setdefault(name, {}) if name else {}
        self._leases: dict[StreamId, Lease] = _shared_leases.setdefault(name, {}) if name else {}

    def _location(self) -> str:
        return f"memory://{self._name}"

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches in one step: the SPI's group commit.

        Each request is applied in order (a repeated stream's later request sees
        the earlier one's records) with its status index entry, if it has one.
        "Durable" here means until the process ends.

        Args:
            requests: One ``AppendRequest`` per stream batch.

        Returns:
            One entry per request, in order: the stream's new last seq, or a
                ``ConflictError`` (returned, not raised) when its expected seq was stale.

        Raises:
            InvalidRequestError: A malformed request (``check_append``), before anything is written.
            StoreClosedError: The store is not open.
        """
        self._check_open()
        for request in requests:
            check_append(request)
        results: list[int | Exception] = []
        for request in requests:
            stream = self._streams.get(request.stream)
            actual = stream.last_seq if stream else 0
            if request.fence is not None and not self._fence_holds(request.stream, request.fence):
                results.append(FencedError(request.stream, request.expected_seq, actual, fence=request.fence))
                continue
            if actual != request.expected_seq:
                results.append(ConflictError(request.stream, request.expected_seq, actual))
                continue
            stream = stream or self._streams.setdefault(request.stream, _Stream())
            for offset, data in enumerate(request.records, start=1):
                stream.records[actual + offset] = data
            stream.last_seq = actual + len(request.records)
            if request.index is not None:
                stream.index = request.index
            results.append(stream.last_seq)
        return results

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to ``stream``; it never decreases, also after compaction.

        Args:
            stream: The stream to look at.

        Returns:
            The last seq, or 0 for an unknown stream.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        return found.last_seq if found else 0

    async def read(
        self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512
    ) -> AsyncGenerator[StoredRecord, None]:
        """Yield the stored records of ``stream`` with seq > ``after_seq``, in seq order.

        The records are already in memory, so there are no pages: the walk
        starts at ``after_seq`` and costs the records read, not the stream's length.

        Args:
            stream: The stream to read.
            after_seq: Yield only records after this seq (0: from the start).
            page_size: Accepted for the SPI and ignored.

        Yields:
            Each ``StoredRecord`` not deleted by compaction; nothing for an unknown stream.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return
        # Seqs are gapless up to last_seq and compaction removes a prefix, so walking
        # seqs from after_seq costs the records read, not the stream's length.
        seq = after_seq
        while seq < found.last_seq:
            seq += 1
            data = found.records.get(seq)
            if data is not None:
                yield StoredRecord(seq, data)

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        """Store a snapshot covering records 1..``seq``, replacing one at the same seq.

        Args:
            stream: The stream the snapshot belongs to.
            seq: The last record folded into it, 1..``last_seq(stream)``.
            data: The encoded snapshot frame (copied).
            fence: The writer's lease token, checked as ``AppendRequest.fence``; None: no check.

        Raises:
            FencedError: ``fence`` is no longer the stream's lease; nothing stored.
            InvalidRequestError: ``seq`` is < 1 or > the stream's last seq (also for an unknown stream),
                or ``fence`` is malformed.
            StoreClosedError: The store is not open.
        """
        self._check_open()
        check_fence(fence)
        if fence is not None and not self._fence_holds(stream, fence):
            last = self._streams[stream].last_seq if stream in self._streams else 0
            raise FencedError(stream, last, last, fence=fence)
        found = self._streams.get(stream)
        if seq < 1 or found is None or seq > found.last_seq:
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        found.snapshots[seq] = bytes(data)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        """The snapshot of ``stream`` with the highest seq <= ``at_or_before``.

        Looks only at the stream's snapshots, never its records.

        Args:
            stream: The stream to look at.
            at_or_before: The highest seq wanted (None: the latest snapshot).

        Returns:
            The snapshot, or None when there is none (or the stream is unknown).

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return None
        seqs = [s for s in found.snapshots if at_or_before is None or s <= at_or_before]
        if not seqs:
            return None
        best = max(seqs)
        return StoredSnapshot(best, found.snapshots[best])

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """Delete the snapshots of ``stream`` with seq < ``before_seq``, always keeping the latest.

        Args:
            stream: The stream to prune (unknown: no-op).
            before_seq: Snapshots below this seq go.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        if found is None or not found.snapshots:
            return
        latest = max(found.snapshots)
        for seq in [s for s in found.snapshots if s < before_seq and s != latest]:
            del found.snapshots[seq]

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """Compaction: delete the records of ``stream`` with seq <= ``through_seq``.

        ``last_seq`` is unchanged. An unknown stream has nothing to delete: no-op.

        Args:
            stream: The stream to compact.
            through_seq: The last seq to delete.

        Raises:
            UnsafeCompactionError: No snapshot exists at a seq >= ``through_seq``
                (restore still needs everything after the latest snapshot).
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return
        if not any(s >= through_seq for s in found.snapshots):
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
        for seq in [s for s in found.records if s <= through_seq]:
            del found.records[seq]

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        """Yield the streams of ``namespace`` whose agent id starts with ``prefix``, sorted by agent id.

        A stream that holds only blobs is listed too.

        Args:
            namespace: The one namespace to list; other namespaces are never yielded.
            prefix: The agent id prefix ("": every stream).

        Yields:
            Each matching ``StreamId``.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        for stream in sorted(s for s in self._streams if s.namespace == namespace and s.agent_id.startswith(prefix)):
            yield stream

    async def delete_stream(self, stream: StreamId) -> None:
        """Purge ``stream``: its records, snapshots, blobs, index entry and last seq, and end its lease.

        Afterwards the stream is unknown (last seq 0) and may be started anew.
        The lease's fencing token is kept (not its owner's name), so the next
        lease of the stream id gets a greater token. An unknown stream is not an error.

        Args:
            stream: The stream to purge.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        self._streams.pop(stream, None)
        # The lease ends, but its token stays as the floor of the next one: a holder
        # from before the purge must never outrank a new one (tokens never decrease).
        held = self._leases.get(stream)
        if held is not None:
            self._leases[stream] = Lease(stream, "", held.token, 0.0)  # the owner's name goes with the stream

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """Store ``data`` as a blob of ``stream`` (``CAP_BLOBS``); it is purged with the stream.

        Args:
            stream: The stream the blob belongs to (it need not have records).
            data: The blob's bytes (copied).

        Returns:
            The SHA-256 hex digest of ``data``, its key for ``get_blob``.

        Raises:
            StoreClosedError: The store is not open.
            InvalidRequestError: When ``data`` is not ``bytes`` (``check_blob``).
        """
        self._check_open()
        check_blob(stream, data)
        digest = hashlib.sha256(data).hexdigest()
        self._streams.setdefault(stream, _Stream()).blobs[digest] = bytes(data)
        return digest

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        """The bytes of a blob of ``stream`` (``CAP_BLOBS``).

        Args:
            stream: The stream the blob belongs to.
            digest: The SHA-256 hex digest ``put_blob`` returned.

        Returns:
            The blob's bytes.

        Raises:
            BlobNotFoundError: The stream has no blob with that digest (any other string included).
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        if found is None or digest not in found.blobs:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        return found.blobs[digest]

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        """Delete the named blobs of ``stream`` (``CAP_BLOB_DELETE``); a missing one is skipped.

        Args:
            stream: The stream whose blobs to delete.
            digests: The digests ``put_blob`` returned.

        Raises:
            InvalidRequestError: Malformed arguments (``check_blob_digests``).
            StoreClosedError: The store is not open.
        """
        self._check_open()
        names = check_blob_digests(stream, digests)
        found = self._streams.get(stream)
        if found is not None:
            for digest in names:
                found.blobs.pop(digest, None)

    # -- status index (CAP_STATUS_INDEX) -----------------------------------------
    # Entries sit on the stream's own entry, changed with its records in one step
    # of the event loop: as atomic as the appends. A listing walks the namespace
    # (this store is for tests; its cost follows the namespace, not the index).

    async def list_index(
        self, namespace: str, statuses: Collection[str] | None = None, *, page_size: int = 512
    ) -> AsyncIterator[IndexedStream]:
        """Yield the streams of ``namespace`` whose index entry's status is in ``statuses``.

        As ``IndexStore.list_index``: a stream with records but no entry is
        yielded too (with ``entry`` None), whatever ``statuses`` says; a stream
        with only blobs never is. Unlike a real index this walks the whole
        namespace (the store is for tests), in insertion order.

        Args:
            namespace: The one namespace to list.
            statuses: The statuses wanted (None: every status).
            page_size: Accepted for the SPI and ignored.

        Yields:
            An ``IndexedStream`` per matching stream.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        wanted = None if statuses is None else frozenset(statuses)
        found = [
            IndexedStream(stream, held.index)
            for stream, held in self._streams.items()
            if stream.namespace == namespace
            and held.last_seq > 0
            and (held.index is None or wanted is None or held.index.status in wanted)
        ]
        for row in found:
            yield row

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """The status index entry of ``stream`` (``IndexStore.get_index``).

        Args:
            stream: The stream to look at.

        Returns:
            Its entry, or None (an unknown stream, or one without an entry).

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        return found.index if found is not None else None

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """Set or remove the entry of ``stream`` if its last seq is still ``at_seq`` (``IndexStore.put_index``).

        The check and the write are one step of the event loop, so an append in
        between is impossible: a stale entry never overwrites a newer one.

        Args:
            stream: The stream whose entry to set.
            entry: The new entry (None: remove it).
            at_seq: The last seq the entry was computed from.

        Returns:
            True if written; False when the stream is unknown, has no records or
                its last seq is not ``at_seq``.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        found = self._streams.get(stream)
        if found is None or found.last_seq == 0 or found.last_seq != at_seq:
            return False
        found.index = entry
        return True

    # -- leases (CAP_LEASES) ----------------------------------------------------
    # No await between the check and the write in these methods, so each is atomic
    # on the event loop: of racing tasks exactly one takes a free lease.

    def _fence_holds(self, stream: StreamId, fence: int) -> bool:
        """Whether an append or snapshot with ``fence`` may change ``stream`` (see ``AppendRequest.fence``)."""
        held = self._leases.get(stream)
        return held is not None and held.token == fence and held.owner != ""  # "" marks a lease ended by a purge

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take or renew the lease of ``stream`` for ``owner`` (``LeaseStore.acquire_lease``).

        A free, released or expired lease is taken with the previous token + 1
        (also by its former owner); an unexpired one of ``owner`` is renewed
        with the same token. The clock is this process's ``time.time()``.
        Leases are kept apart from the streams: one never makes a stream exist.

        Args:
            stream: The stream to lease.
            owner: The worker's name, a non-empty str.
            ttl: How long the lease lasts, in seconds (finite, > 0).

        Returns:
            The lease held now (``expires_at``: now + ``ttl``, unix seconds), or
                None when another owner holds an unexpired one.

        Raises:
            InvalidRequestError: ``owner`` is not a non-empty str or ``ttl`` not
                a finite number > 0 (``check_lease``).
            StoreClosedError: The store is not open.
        """
        self._check_open()
        check_lease(owner, ttl)
        now = time.time()
        held = self._leases.get(stream)
        if held is not None and held.expires_at > now:
            if held.owner != owner:
                return None
            token = held.token  # a renewal
        else:
            token = (held.token if held is not None else 0) + 1
        lease = Lease(stream, owner, token, now + ttl)
        self._leases[stream] = lease
        return lease

    async def renew_leases(self, owner: str, ttl: float, leases: Collection[Lease]) -> list[Lease]:
        """Renew each of ``leases`` still ``owner``'s under its token and unexpired (``LeaseRenewStore.renew_leases``).

        No await between the checks and the writes: atomic on the event loop.

        Args:
            owner: The worker's name, a non-empty str; every lease's owner.
            ttl: How long each renewed lease lasts, in seconds (finite, > 0).
            leases: The leases to renew, one per stream.

        Returns:
            The leases renewed (same token, ``expires_at`` now + ``ttl``).

        Raises:
            InvalidRequestError: A malformed call (``check_lease_renewal``).
            StoreClosedError: The store is not open.
        """
        self._check_open()
        wanted = check_lease_renewal(owner, ttl, leases)
        now = time.time()
        renewed: list[Lease] = []
        for lease in wanted:
            held = self._leases.get(lease.stream)
            if held is not None and held.owner == owner and held.token == lease.token and held.expires_at > now:
                fresh = Lease(held.stream, owner, held.token, now + ttl)
                self._leases[lease.stream] = fresh
                renewed.append(fresh)
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        """End ``lease`` if its owner still holds it with its token; otherwise no-op.

        The token stays as the floor of the next lease of the stream.

        Args:
            lease: The lease ``acquire_lease`` returned.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        held = self._leases.get(lease.stream)
        if held is not None and held.owner == lease.owner and held.token == lease.token:
            self._leases[lease.stream] = Lease(held.stream, held.owner, held.token, 0.0)

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """The unexpired lease of ``stream`` (``LeaseStore.get_lease``).

        Args:
            stream: The stream to look at.

        Returns:
            The lease, or None when nobody holds an unexpired one.

        Raises:
            StoreClosedError: The store is not open.
        """
        self._check_open()
        held = self._leases.get(stream)
        return held if held is not None and held.expires_at > time.time() else None
