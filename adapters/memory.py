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
from durably.storage._errors import BlobNotFoundError, ConflictError, InvalidRequestError, InvalidStoreURLError, UnsafeCompactionError
from durably.storage._urls import parse_store_url
from durably.storage._spi import (
    CAP_SINGLE_PROCESS,
    AppendRequest,
    BlobStore,
    IndexedStream,
    IndexEntry,
    IndexStore,
    Lease,
    LeaseStore,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_append,
    check_lease,
)


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


class MemoryStore(StoreBase, BlobStore, LeaseStore, IndexStore):
    """A ``Store`` held in a dict. ``url``: ``memory://`` or ``memory://name`` (shared by name).

    Raises ``InvalidStoreURLError`` for another scheme, a path or a query option.
    """

    #: Its data lives in this process's memory: another process sees another store.
    capabilities = frozenset({CAP_SINGLE_PROCESS})  # + the protocols above, by StoreBase

    def __init__(self, url: str = "memory://") -> None:
        super().__init__()
        parsed = parse_store_url(url, None, {})  # any scheme (subclasses register theirs); no options
        if parsed.path not in ("", "/"):
            raise InvalidStoreURLError(f"expected memory:// or memory://name, got {url!r}", url=url)
        name = parsed.netloc
        self._name = name
        self._streams: dict[StreamId, _Stream] = _shared.setdefault(name, {}) if name else {}
        self._leases: dict[StreamId, Lease] = _shared_leases.setdefault(name, {}) if name else {}

    def _location(self) -> str:
        return f"memory://{self._name}"

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        self._check_open()
        for request in requests:
            check_append(request)
        results: list[int | Exception] = []
        for request in requests:
            stream = self._streams.get(request.stream)
            actual = stream.last_seq if stream else 0
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
        self._check_open()
        found = self._streams.get(stream)
        return found.last_seq if found else 0

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncGenerator[StoredRecord, None]:
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

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes) -> None:
        self._check_open()
        found = self._streams.get(stream)
        if seq < 1 or found is None or seq > found.last_seq:
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        found.snapshots[seq] = bytes(data)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
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
        self._check_open()
        found = self._streams.get(stream)
        if found is None or not found.snapshots:
            return
        latest = max(found.snapshots)
        for seq in [s for s in found.snapshots if s < before_seq and s != latest]:
            del found.snapshots[seq]

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return
        if not any(s >= through_seq for s in found.snapshots):
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
        for seq in [s for s in found.records if s <= through_seq]:
            del found.records[seq]

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        self._check_open()
        for stream in sorted(s for s in self._streams if s.namespace == namespace and s.agent_id.startswith(prefix)):
            yield stream

    async def delete_stream(self, stream: StreamId) -> None:
        self._check_open()
        self._streams.pop(stream, None)
        # The lease ends, but its token stays as the floor of the next one: a holder
        # from before the purge must never outrank a new one (tokens never decrease).
        held = self._leases.get(stream)
        if held is not None:
            self._leases[stream] = Lease(stream, "", held.token, 0.0)  # the owner's name goes with the stream

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        self._check_open()
        digest = hashlib.sha256(data).hexdigest()
        self._streams.setdefault(stream, _Stream()).blobs[digest] = bytes(data)
        return digest

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        self._check_open()
        found = self._streams.get(stream)
        if found is None or digest not in found.blobs:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        return found.blobs[digest]

    # -- status index (CAP_STATUS_INDEX) -----------------------------------------
    # Entries sit on the stream's own entry, changed with its records in one step
    # of the event loop: as atomic as the appends. A listing walks the namespace
    # (this store is for tests; its cost follows the namespace, not the index).

    async def list_index(self, namespace: str, statuses: Collection[str] | None = None, *,
                         page_size: int = 512) -> AsyncIterator[IndexedStream]:
        """See ``IndexStore.list_index``. Raises ``StoreClosedError``."""
        self._check_open()
        wanted = None if statuses is None else frozenset(statuses)
        found = [IndexedStream(stream, held.index) for stream, held in self._streams.items()
                 if stream.namespace == namespace and held.last_seq > 0
                 and (held.index is None or wanted is None or held.index.status in wanted)]
        for row in found:
            yield row

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """See ``IndexStore.get_index``. Raises ``StoreClosedError``."""
        self._check_open()
        found = self._streams.get(stream)
        return found.index if found is not None else None

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """See ``IndexStore.put_index``. Raises ``StoreClosedError``."""
        self._check_open()
        found = self._streams.get(stream)
        if found is None or found.last_seq == 0 or found.last_seq != at_seq:
            return False
        found.index = entry
        return True

    # -- leases (CAP_LEASES) ----------------------------------------------------
    # No await between the check and the write in these methods, so each is atomic
    # on the event loop: of racing tasks exactly one takes a free lease.

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take or renew ``stream``'s lease for ``owner`` for ``ttl`` seconds (``time.time()`` clock).

        Returns the lease held now, or None when another owner holds an unexpired
        one. A free, released or expired lease is taken with the previous token
        + 1 (also by its former owner); an unexpired one of ``owner`` is renewed
        with the same token. Raises ``InvalidRequestError`` unless ``owner`` is a
        non-empty str and ``ttl`` a finite number > 0; ``StoreClosedError``.
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

    async def release_lease(self, lease: Lease) -> None:
        """End ``lease`` if its owner still holds it with its token; otherwise no-op. Raises ``StoreClosedError``."""
        self._check_open()
        held = self._leases.get(lease.stream)
        if held is not None and held.owner == lease.owner and held.token == lease.token:
            self._leases[lease.stream] = Lease(held.stream, held.owner, held.token, 0.0)

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """The unexpired lease of ``stream``, or None. Raises ``StoreClosedError``."""
        self._check_open()
        held = self._leases.get(stream)
        return held if held is not None and held.expires_at > time.time() else None
